package protocol

// RocketMQ 5.3's user and ACL management request codes (admin → broker).
// The header names the user (username) or the subject ("User:name"); the
// body of a create or update is a UserInfo or an AclInfo (package acl
// reads and writes them).
const (
	ReqAuthCreateUser int32 = 3001
	ReqAuthUpdateUser int32 = 3002
	ReqAuthDeleteUser int32 = 3003
	ReqAuthGetUser    int32 = 3004
	ReqAuthListUser   int32 = 3005
	ReqAuthCreateACL  int32 = 3006
	ReqAuthUpdateACL  int32 = 3007
	ReqAuthDeleteACL  int32 = 3008
	ReqAuthGetACL     int32 = 3009
	ReqAuthListACL    int32 = 3010
)
