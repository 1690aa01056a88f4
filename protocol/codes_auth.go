package protocol

import "slices"

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

func init() {
	for code, name := range map[int32]string{
		ReqAuthCreateUser: "AUTH_CREATE_USER", ReqAuthUpdateUser: "AUTH_UPDATE_USER", ReqAuthDeleteUser: "AUTH_DELETE_USER",
		ReqAuthGetUser: "AUTH_GET_USER", ReqAuthListUser: "AUTH_LIST_USER", ReqAuthCreateACL: "AUTH_CREATE_ACL",
		ReqAuthUpdateACL: "AUTH_UPDATE_ACL", ReqAuthDeleteACL: "AUTH_DELETE_ACL", ReqAuthGetACL: "AUTH_GET_ACL",
		ReqAuthListACL: "AUTH_LIST_ACL",
	} {
		requestCodeNames[code] = name
	}
}

// RequestCodes returns every request code the package names
// (RequestCodeName), in ascending order.
func RequestCodes() []int32 {
	codes := make([]int32, 0, len(requestCodeNames))
	for c := range requestCodeNames {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return codes
}
