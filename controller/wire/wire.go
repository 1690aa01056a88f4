// Package wire is the RocketMQ 5 controller protocol as Apogee speaks it:
// the request and response codes, the typed headers (carried in a remoting
// command's extFields, as the Java classes under
// org.apache.rocketmq.remoting.protocol.header.controller are) and the JSON
// bodies (SyncStateSet, ElectMasterResponseBody, BrokerReplicasInfo). It
// encodes and decodes protocol.Command values; it holds no state and opens
// no socket. The controller (package controller) and the brokers' client
// (package controller/client) both stand on it.
//
// # Apogee's additions
//
// Everything here is what the Java controller reads and writes, plus a few
// extFields a Java peer ignores (the JSON header is a map of strings):
//
//   - CONTROLLER_NOT_LEADER answers carry leaderId and leaderAddress (the
//     leader's remoting address, when the answering node knows it), so a
//     client goes straight to the leader instead of asking every node.
//   - BROKER_HEARTBEAT answers carry the group's current state
//     (masterBrokerId, masterAddress, masterEpoch, syncStateSetEpoch in the
//     header, the SyncStateSet as body) and the leader (leaderId,
//     leaderAddress): a broker that missed a NOTIFY_BROKER_ROLE_CHANGED push
//     learns of the change within one heartbeat.
//   - CONTROLLER_ELECT_MASTER answers that chose a master outside the
//     SyncStateSet (the unclean election an option allows) carry
//     uncleanLossBytes: how far behind the best in-sync replica's last
//     reported offset the new master was.
//
// Broker ids start at 1 (RocketMQ's FIRST_BROKER_CONTROLLER_ID); 0 in a
// master id here means "no master" (Java's null).
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/apogeemq/apogee/protocol"
)

// Request codes (Java RequestCode).
const (
	ReqBrokerHeartbeat         int32 = 904 // B→controller (protocol.ReqBrokerHeartbeat)
	ReqAlterSyncStateSet       int32 = 1001
	ReqElectMaster             int32 = 1002
	ReqRegisterBroker          int32 = 1003
	ReqGetReplicaInfo          int32 = 1004
	ReqGetMetadataInfo         int32 = 1005
	ReqGetSyncStateData        int32 = 1006
	ReqGetBrokerEpochCache     int32 = 1007 // admin→broker: the broker's epoch file (EpochEntryCache)
	ReqNotifyBrokerRoleChanged int32 = 1008 // controller→B, oneway
	ReqUpdateControllerConfig  int32 = 1009 // body: Java properties (key=value lines)
	ReqGetControllerConfig     int32 = 1010 // answer body: Java properties
	ReqCleanBrokerData         int32 = 1011
	ReqGetNextBrokerID         int32 = 1012
	ReqApplyBrokerID           int32 = 1013
	// ReqJoinGroup is Apogee's own (RocketMQ's controllers have fixed
	// peers): a controller asks the group's leader to add it as a Raft
	// voter at its Raft address (docs/failover.md, "Members on any port").
	ReqJoinGroup int32 = 1900
)

// Response codes (Java ResponseCode), besides protocol's.
const (
	RespFencedMasterEpoch       int32 = 2000
	RespFencedSyncStateSetEpoch int32 = 2001
	RespInvalidMaster           int32 = 2002
	RespInvalidReplicas         int32 = 2003
	RespMasterNotAvailable      int32 = 2004
	RespInvalidRequest          int32 = 2005
	RespBrokerNotAlive          int32 = 2006
	RespNotLeader               int32 = 2007
	RespBrokerMetadataNotExist  int32 = 2008
	RespInvalidCleanBrokerData  int32 = 2009
	RespBrokerNeedToRegister    int32 = 2010
	RespMasterStillExist        int32 = 2011
	RespElectMasterFailed       int32 = 2012
	RespAlterSyncStateSetFailed int32 = 2013
	RespBrokerIDInvalid         int32 = 2014
)

// FirstBrokerID is the first broker id the controller assigns in a group.
const FirstBrokerID int64 = 1

var codeNames = map[int32]string{
	ReqBrokerHeartbeat: "BROKER_HEARTBEAT", ReqAlterSyncStateSet: "CONTROLLER_ALTER_SYNC_STATE_SET",
	ReqElectMaster: "CONTROLLER_ELECT_MASTER", ReqRegisterBroker: "CONTROLLER_REGISTER_BROKER",
	ReqGetReplicaInfo: "CONTROLLER_GET_REPLICA_INFO", ReqGetMetadataInfo: "CONTROLLER_GET_METADATA_INFO",
	ReqGetSyncStateData: "CONTROLLER_GET_SYNC_STATE_DATA", ReqNotifyBrokerRoleChanged: "NOTIFY_BROKER_ROLE_CHANGED",
	ReqGetBrokerEpochCache: "GET_BROKER_EPOCH_CACHE", ReqUpdateControllerConfig: "UPDATE_CONTROLLER_CONFIG", ReqGetControllerConfig: "GET_CONTROLLER_CONFIG",
	ReqCleanBrokerData: "CLEAN_BROKER_DATA", ReqGetNextBrokerID: "CONTROLLER_GET_NEXT_BROKER_ID",
	ReqApplyBrokerID: "CONTROLLER_APPLY_BROKER_ID", ReqJoinGroup: "APOGEE_CONTROLLER_JOIN_GROUP",
}

var respNames = map[int32]string{
	RespFencedMasterEpoch: "CONTROLLER_FENCED_MASTER_EPOCH", RespFencedSyncStateSetEpoch: "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH",
	RespInvalidMaster: "CONTROLLER_INVALID_MASTER", RespInvalidReplicas: "CONTROLLER_INVALID_REPLICAS",
	RespMasterNotAvailable: "CONTROLLER_MASTER_NOT_AVAILABLE", RespInvalidRequest: "CONTROLLER_INVALID_REQUEST",
	RespBrokerNotAlive: "CONTROLLER_BROKER_NOT_ALIVE", RespNotLeader: "CONTROLLER_NOT_LEADER",
	RespBrokerMetadataNotExist: "CONTROLLER_BROKER_METADATA_NOT_EXIST", RespInvalidCleanBrokerData: "CONTROLLER_INVALID_CLEAN_BROKER_METADATA",
	RespBrokerNeedToRegister: "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED", RespMasterStillExist: "CONTROLLER_MASTER_STILL_EXIST",
	RespElectMasterFailed: "CONTROLLER_ELECT_MASTER_FAILED", RespAlterSyncStateSetFailed: "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED",
	RespBrokerIDInvalid: "CONTROLLER_BROKER_ID_INVALID",
}

// CodeName names a controller request code ("" if it is none).
func CodeName(code int32) string { return codeNames[code] }

// RespName names a response code: the controller's, then protocol's.
func RespName(code int32) string {
	if n, ok := respNames[code]; ok {
		return n
	}
	if n := protocol.ResponseCodeName(code); n != "" {
		return n
	}
	return strconv.Itoa(int(code))
}

// ErrBadRequest wraps every decoding failure of this package.
var ErrBadRequest = errors.New("controller wire: malformed request")

// ext is a small reader of extFields that keeps the first error.
type ext struct {
	e   *protocol.ExtFields
	err error
}

func (r *ext) str(key string, required bool) string {
	v, ok := r.e.GetString(key)
	if !ok && required && r.err == nil {
		r.err = fmt.Errorf("%w: missing %s", ErrBadRequest, key)
	}
	return v
}

// i64 reads an optional number: def when absent or "null".
func (r *ext) i64(key string, def int64, required bool) int64 {
	b, ok := r.e.Get(key)
	if !ok || string(b) == "null" || len(b) == 0 {
		if required && r.err == nil {
			r.err = fmt.Errorf("%w: missing %s", ErrBadRequest, key)
		}
		return def
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%w: %s=%q: not a number", ErrBadRequest, key, b)
	}
	return v
}

func (r *ext) i32(key string, def int32, required bool) int32 {
	v := r.i64(key, int64(def), required)
	if (v < -1<<31 || v > 1<<31-1) && r.err == nil {
		r.err = fmt.Errorf("%w: %s=%d out of range", ErrBadRequest, key, v)
	}
	return int32(v)
}

func (r *ext) boolean(key string) bool {
	b, ok := r.e.Get(key)
	if !ok {
		return false
	}
	v, err := strconv.ParseBool(string(b))
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%w: %s=%q: not a boolean", ErrBadRequest, key, b)
	}
	return v
}

func setID(e *protocol.ExtFields, key string, id int64) {
	if id > 0 {
		e.SetInt(key, id)
	}
}

// HeartbeatRequest is BROKER_HEARTBEAT's header (Java
// BrokerHeartbeatRequestHeader): a broker's liveness and the figures the
// election policy sorts candidates by.
type HeartbeatRequest struct {
	ClusterName, BrokerName, BrokerAddr string
	BrokerID                            int64
	// Epoch is the last epoch in the broker's epoch file; MaxOffset its
	// commit log's end; ConfirmOffset what it knows to be replicated (-1
	// unknown).
	Epoch                    int32
	MaxOffset, ConfirmOffset int64
	// HeartbeatTimeoutMillis overrides the controller's heartbeat timeout
	// for this broker (0: the controller's).
	HeartbeatTimeoutMillis int64
	// ElectionPriority: lower wins among equal (epoch, offset); 0 means
	// none (Java's Integer.MAX_VALUE).
	ElectionPriority int32
}

// Encode writes h into cmd as a BROKER_HEARTBEAT request.
func (h *HeartbeatRequest) Encode(cmd *protocol.Command) {
	cmd.InitRequest(ReqBrokerHeartbeat, 0)
	e := &cmd.Ext
	e.SetString("clusterName", h.ClusterName)
	e.SetString("brokerName", h.BrokerName)
	e.SetString("brokerAddr", h.BrokerAddr)
	e.SetInt("brokerId", h.BrokerID)
	e.SetInt("epoch", int64(h.Epoch))
	e.SetInt("maxOffset", h.MaxOffset)
	e.SetInt("confirmOffset", h.ConfirmOffset)
	if h.HeartbeatTimeoutMillis > 0 {
		e.SetInt("heartbeatTimeoutMills", h.HeartbeatTimeoutMillis)
	}
	if h.ElectionPriority != 0 {
		e.SetInt("electionPriority", int64(h.ElectionPriority))
	}
}

// Decode reads h from a BROKER_HEARTBEAT request.
func (h *HeartbeatRequest) Decode(cmd *protocol.Command) error {
	r := ext{e: &cmd.Ext}
	*h = HeartbeatRequest{
		ClusterName: r.str("clusterName", true), BrokerName: r.str("brokerName", true),
		BrokerAddr: r.str("brokerAddr", true), BrokerID: r.i64("brokerId", 0, true),
		Epoch: r.i32("epoch", -1, false), MaxOffset: r.i64("maxOffset", -1, false),
		ConfirmOffset: r.i64("confirmOffset", -1, false), HeartbeatTimeoutMillis: r.i64("heartbeatTimeoutMills", 0, false),
		ElectionPriority: r.i32("electionPriority", 0, false),
	}
	if r.err == nil && h.BrokerID <= 0 {
		r.err = fmt.Errorf("%w: heartbeat with broker id %d", ErrBadRequest, h.BrokerID)
	}
	return r.err
}

// JoinRequest is APOGEE_CONTROLLER_JOIN_GROUP's header: the joining
// controller's id and the Raft address its peers reach it at. The answer
// (success) carries the group's members as "peers" (FormatPeers' form).
type JoinRequest struct {
	ID, RaftAddress string
}

// Encode writes j into cmd as a join request.
func (j *JoinRequest) Encode(cmd *protocol.Command) {
	cmd.InitRequest(ReqJoinGroup, 0)
	cmd.Ext.SetString("id", j.ID)
	cmd.Ext.SetString("raftAddress", j.RaftAddress)
}

// Decode reads j from a join request.
func (j *JoinRequest) Decode(cmd *protocol.Command) error {
	r := ext{e: &cmd.Ext}
	*j = JoinRequest{ID: r.str("id", true), RaftAddress: r.str("raftAddress", true)}
	if r.err != nil {
		return r.err
	}
	if j.ID == "" {
		return fmt.Errorf("%w: join with an empty id", ErrBadRequest)
	}
	if _, port, err := net.SplitHostPort(j.RaftAddress); err != nil || port == "0" {
		return fmt.Errorf("%w: join with raftAddress %q: want the host:port peers dial", ErrBadRequest, j.RaftAddress)
	}
	return nil
}

// MasterInfo is a group's master and epochs as the controller's answers
// carry them (GET_REPLICA_INFO, REGISTER_BROKER, ELECT_MASTER,
// NOTIFY_BROKER_ROLE_CHANGED, and Apogee's heartbeat answers).
type MasterInfo struct {
	// MasterID is the master's broker id, 0 when the group has none.
	MasterID      int64
	MasterAddress string
	// MasterEpoch grows by one at every election (also one that found no
	// master); SyncStateSetEpoch at every change of the set.
	MasterEpoch, SyncStateSetEpoch int32
}

// Encode writes m's fields into e.
func (m *MasterInfo) Encode(e *protocol.ExtFields) {
	setID(e, "masterBrokerId", m.MasterID)
	if m.MasterAddress != "" {
		e.SetString("masterAddress", m.MasterAddress)
	}
	e.SetInt("masterEpoch", int64(m.MasterEpoch))
	e.SetInt("syncStateSetEpoch", int64(m.SyncStateSetEpoch))
}

// Decode reads m from e (absent fields are zero).
func (m *MasterInfo) Decode(e *protocol.ExtFields) error {
	r := ext{e: e}
	*m = MasterInfo{MasterID: max(r.i64("masterBrokerId", 0, false), 0), MasterAddress: r.str("masterAddress", false),
		MasterEpoch: r.i32("masterEpoch", 0, false), SyncStateSetEpoch: r.i32("syncStateSetEpoch", 0, false)}
	return r.err
}

// SyncStateSet is the JSON body of the same name: the in-sync replicas'
// broker ids and the set's epoch.
type SyncStateSet struct {
	Set   []int64 `json:"syncStateSet"`
	Epoch int32   `json:"syncStateSetEpoch"`
}

// Encode returns the JSON body (ids ascending).
func (s SyncStateSet) Encode() []byte {
	set := slices.Clone(s.Set)
	slices.Sort(set)
	if set == nil {
		set = []int64{}
	}
	b, _ := json.Marshal(SyncStateSet{Set: set, Epoch: s.Epoch})
	return b
}

// DecodeSyncStateSet parses a SyncStateSet body.
func DecodeSyncStateSet(body []byte) (SyncStateSet, error) {
	var s SyncStateSet
	if len(body) == 0 {
		return s, fmt.Errorf("%w: empty SyncStateSet body", ErrBadRequest)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, fmt.Errorf("%w: SyncStateSet body: %v", ErrBadRequest, err)
	}
	slices.Sort(s.Set)
	s.Set = slices.Compact(s.Set)
	return s, nil
}

// AlterSyncStateSetRequest is CONTROLLER_ALTER_SYNC_STATE_SET: the master
// (MasterID at MasterEpoch) asks to replace the set whose epoch is
// Set.Epoch with Set.Set.
type AlterSyncStateSetRequest struct {
	BrokerName  string
	MasterID    int64
	MasterEpoch int32
	Set         SyncStateSet
}

// Encode writes the request into cmd.
func (a *AlterSyncStateSetRequest) Encode(cmd *protocol.Command) {
	cmd.InitRequest(ReqAlterSyncStateSet, 0)
	cmd.Ext.SetString("brokerName", a.BrokerName)
	cmd.Ext.SetInt("masterBrokerId", a.MasterID)
	cmd.Ext.SetInt("masterEpoch", int64(a.MasterEpoch))
	cmd.Body = a.Set.Encode()
}

// Decode reads the request from cmd (its body is copied).
func (a *AlterSyncStateSetRequest) Decode(cmd *protocol.Command) error {
	r := ext{e: &cmd.Ext}
	*a = AlterSyncStateSetRequest{BrokerName: r.str("brokerName", true), MasterID: r.i64("masterBrokerId", 0, true),
		MasterEpoch: r.i32("masterEpoch", 0, true)}
	if r.err != nil {
		return r.err
	}
	var err error
	a.Set, err = DecodeSyncStateSet(cmd.Body)
	return err
}

// ElectMasterRequest is CONTROLLER_ELECT_MASTER. A broker asks with its own
// id (it becomes the first master of a group that never had one); with
// Designate, an administrator asks for that broker (it must be alive and,
// unless unclean elections are on, in the SyncStateSet). BrokerID 0 is the
// controller's own trigger.
type ElectMasterRequest struct {
	ClusterName, BrokerName string
	BrokerID                int64
	Designate               bool
}

// Encode writes the request into cmd.
func (r *ElectMasterRequest) Encode(cmd *protocol.Command) {
	cmd.InitRequest(ReqElectMaster, 0)
	cmd.Ext.SetString("clusterName", r.ClusterName)
	cmd.Ext.SetString("brokerName", r.BrokerName)
	id := r.BrokerID
	if id <= 0 {
		id = -1
	}
	cmd.Ext.SetInt("brokerId", id)
	cmd.Ext.SetBool("designateElect", r.Designate)
}

// Decode reads the request from cmd.
func (r *ElectMasterRequest) Decode(cmd *protocol.Command) error {
	x := ext{e: &cmd.Ext}
	*r = ElectMasterRequest{ClusterName: x.str("clusterName", false), BrokerName: x.str("brokerName", true),
		BrokerID: max(x.i64("brokerId", -1, false), 0), Designate: x.boolean("designateElect")}
	return x.err
}

// BrokerMemberGroup is the JSON object of the same name: a group's members
// by broker id.
type BrokerMemberGroup struct {
	Cluster     string           `json:"cluster"`
	BrokerName  string           `json:"brokerName"`
	BrokerAddrs map[int64]string `json:"brokerAddrs"`
}

// ElectMasterBody is ElectMasterResponseBody.
type ElectMasterBody struct {
	BrokerMemberGroup *BrokerMemberGroup `json:"brokerMemberGroup,omitempty"`
	SyncStateSet      []int64            `json:"syncStateSet"`
}

// RegisterBrokerRequest is CONTROLLER_REGISTER_BROKER: a broker whose id
// was applied says it is up (and where).
type RegisterBrokerRequest struct {
	ClusterName, BrokerName, BrokerAddress string
	BrokerID                               int64
}

// Encode writes the request into cmd.
func (r *RegisterBrokerRequest) Encode(cmd *protocol.Command) {
	cmd.InitRequest(ReqRegisterBroker, 0)
	cmd.Ext.SetString("clusterName", r.ClusterName)
	cmd.Ext.SetString("brokerName", r.BrokerName)
	cmd.Ext.SetInt("brokerId", r.BrokerID)
	cmd.Ext.SetString("brokerAddress", r.BrokerAddress)
}

// Decode reads the request from cmd.
func (r *RegisterBrokerRequest) Decode(cmd *protocol.Command) error {
	x := ext{e: &cmd.Ext}
	*r = RegisterBrokerRequest{ClusterName: x.str("clusterName", true), BrokerName: x.str("brokerName", true),
		BrokerID: x.i64("brokerId", 0, true), BrokerAddress: x.str("brokerAddress", true)}
	return x.err
}

// BrokerIDRequest is CONTROLLER_GET_NEXT_BROKER_ID (AppliedID and
// CheckCode unused) and CONTROLLER_APPLY_BROKER_ID: a broker claims
// AppliedID in its group; CheckCode ("address;token") tells a claim of the
// same broker again from another broker's.
type BrokerIDRequest struct {
	ClusterName, BrokerName string
	AppliedID               int64
	CheckCode               string
}

// EncodeNext writes a GET_NEXT_BROKER_ID request into cmd.
func (r *BrokerIDRequest) EncodeNext(cmd *protocol.Command) {
	cmd.InitRequest(ReqGetNextBrokerID, 0)
	cmd.Ext.SetString("clusterName", r.ClusterName)
	cmd.Ext.SetString("brokerName", r.BrokerName)
}

// EncodeApply writes an APPLY_BROKER_ID request into cmd.
func (r *BrokerIDRequest) EncodeApply(cmd *protocol.Command) {
	cmd.InitRequest(ReqApplyBrokerID, 0)
	cmd.Ext.SetString("clusterName", r.ClusterName)
	cmd.Ext.SetString("brokerName", r.BrokerName)
	cmd.Ext.SetInt("appliedBrokerId", r.AppliedID)
	cmd.Ext.SetString("registerCheckCode", r.CheckCode)
}

// Decode reads either request from cmd.
func (r *BrokerIDRequest) Decode(cmd *protocol.Command) error {
	x := ext{e: &cmd.Ext}
	apply := cmd.Code == ReqApplyBrokerID
	*r = BrokerIDRequest{ClusterName: x.str("clusterName", true), BrokerName: x.str("brokerName", true),
		AppliedID: x.i64("appliedBrokerId", 0, apply), CheckCode: x.str("registerCheckCode", apply)}
	if x.err == nil && apply && r.AppliedID < FirstBrokerID {
		x.err = fmt.Errorf("%w: broker id %d (ids start at %d)", ErrBadRequest, r.AppliedID, FirstBrokerID)
	}
	return x.err
}

// CleanBrokerDataRequest is CLEAN_BROKER_DATA: forget a group (IDs empty)
// or some of its replicas. Unless CleanLiving, a group with a master or a
// replica still alive is refused.
type CleanBrokerDataRequest struct {
	ClusterName, BrokerName string
	IDs                     []int64
	CleanLiving             bool
}

// Encode writes the request into cmd.
func (r *CleanBrokerDataRequest) Encode(cmd *protocol.Command) {
	cmd.InitRequest(ReqCleanBrokerData, 0)
	cmd.Ext.SetString("clusterName", r.ClusterName)
	cmd.Ext.SetString("brokerName", r.BrokerName)
	if len(r.IDs) > 0 {
		var s []byte
		for i, id := range r.IDs {
			if i > 0 {
				s = append(s, ';')
			}
			s = strconv.AppendInt(s, id, 10)
		}
		cmd.Ext.Set("brokerControllerIdsToClean", s)
	}
	cmd.Ext.SetBool("isCleanLivingBroker", r.CleanLiving)
}

// Decode reads the request from cmd.
func (r *CleanBrokerDataRequest) Decode(cmd *protocol.Command) error {
	x := ext{e: &cmd.Ext}
	*r = CleanBrokerDataRequest{ClusterName: x.str("clusterName", false), BrokerName: x.str("brokerName", true),
		CleanLiving: x.boolean("isCleanLivingBroker")}
	if ids := x.str("brokerControllerIdsToClean", false); ids != "" {
		for _, f := range splitSemicolons(ids) {
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("%w: brokerControllerIdsToClean %q", ErrBadRequest, ids)
			}
			r.IDs = append(r.IDs, id)
		}
	}
	return x.err
}

func splitSemicolons(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ';' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// Metadata is GET_METADATA_INFO's answer (Java GetMetaDataResponseHeader):
// the answering node's view of the Raft group.
type Metadata struct {
	Group         string
	LeaderID      string
	LeaderAddress string // the leader's remoting address ("" unknown)
	IsLeader      bool
	Peers         string // "id=raftAddress;..." as configured
}

// Encode writes m into e.
func (m *Metadata) Encode(e *protocol.ExtFields) {
	e.SetString("group", m.Group)
	e.SetString("controllerLeaderId", m.LeaderID)
	e.SetString("controllerLeaderAddress", m.LeaderAddress)
	e.SetBool("isLeader", m.IsLeader)
	e.SetString("peers", m.Peers)
}

// Decode reads m from e.
func (m *Metadata) Decode(e *protocol.ExtFields) error {
	x := ext{e: e}
	*m = Metadata{Group: x.str("group", false), LeaderID: x.str("controllerLeaderId", false),
		LeaderAddress: x.str("controllerLeaderAddress", false), IsLeader: x.boolean("isLeader"), Peers: x.str("peers", false)}
	return x.err
}

// NotLeader fills resp as a CONTROLLER_NOT_LEADER answer naming the leader
// when known.
func NotLeader(resp *protocol.Command, leaderID, leaderAddr string) {
	resp.Code = RespNotLeader
	if leaderID == "" {
		resp.SetRemark("this controller is not the leader, and no leader is known now")
		return
	}
	resp.Ext.SetString("leaderId", leaderID)
	if leaderAddr != "" {
		resp.Ext.SetString("leaderAddress", leaderAddr)
		resp.SetRemark(fmt.Sprintf("this controller is not the leader; the leader is %s at %s", leaderID, leaderAddr))
	} else {
		resp.SetRemark(fmt.Sprintf("this controller is not the leader; the leader is %s (its address is not known yet)", leaderID))
	}
}

// LeaderHint reads the leader a CONTROLLER_NOT_LEADER answer names.
func LeaderHint(resp *protocol.Command) (id, addr string) {
	id, _ = resp.Ext.GetString("leaderId")
	addr, _ = resp.Ext.GetString("leaderAddress")
	return id, addr
}

// ReplicaIdentity and ReplicasInfo make up BrokerReplicasInfo, the body of
// GET_SYNC_STATE_DATA's answer.
type ReplicaIdentity struct {
	BrokerName    string `json:"brokerName"`
	BrokerID      int64  `json:"brokerId"`
	BrokerAddress string `json:"brokerAddress"`
	Alive         bool   `json:"alive"`
}

// ReplicasInfo is one group's part of BrokerReplicasInfo.
type ReplicasInfo struct {
	MasterBrokerID    int64             `json:"masterBrokerId,omitempty"`
	MasterAddress     string            `json:"masterAddress,omitempty"`
	MasterEpoch       int32             `json:"masterEpoch"`
	SyncStateSetEpoch int32             `json:"syncStateSetEpoch"`
	InSyncReplicas    []ReplicaIdentity `json:"inSyncReplicas"`
	NotInSyncReplicas []ReplicaIdentity `json:"notInSyncReplicas"`
}

// BrokerReplicasInfo is the body of GET_SYNC_STATE_DATA's answer.
type BrokerReplicasInfo struct {
	ReplicasInfoTable map[string]ReplicasInfo `json:"replicasInfoTable"`
}

// RoleChange is NOTIFY_BROKER_ROLE_CHANGED: its header
// (NotifyBrokerRoleChangedRequestHeader) and its SyncStateSet body.
type RoleChange struct {
	MasterInfo
	SyncStateSet []int64
}

// Encode writes n into cmd as a (oneway) request.
func (n *RoleChange) Encode(cmd *protocol.Command) {
	cmd.InitRequest(ReqNotifyBrokerRoleChanged, 0)
	n.MasterInfo.Encode(&cmd.Ext)
	cmd.Body = SyncStateSet{Set: n.SyncStateSet, Epoch: n.SyncStateSetEpoch}.Encode()
}

// Decode reads n from a NOTIFY_BROKER_ROLE_CHANGED request.
func (n *RoleChange) Decode(cmd *protocol.Command) error {
	if err := n.MasterInfo.Decode(&cmd.Ext); err != nil {
		return err
	}
	n.SyncStateSet = nil
	if len(cmd.Body) > 0 {
		s, err := DecodeSyncStateSet(cmd.Body)
		if err != nil {
			return err
		}
		n.SyncStateSet = s.Set
	}
	return nil
}

// EpochEntry is one entry of a broker's epoch file as EpochEntryCache
// carries it: the epoch's first commit-log offset and the next epoch's
// (the last entry's EndOffset is the log's end).
type EpochEntry struct {
	Epoch       int32 `json:"epoch"`
	StartOffset int64 `json:"startOffset"`
	EndOffset   int64 `json:"endOffset"`
}

// EpochEntryCache is the body of GET_BROKER_EPOCH_CACHE's answer (Java
// EpochEntryCache): a broker's identity, its epoch entries and its
// commit log's end.
type EpochEntryCache struct {
	ClusterName string       `json:"clusterName"`
	BrokerName  string       `json:"brokerName"`
	BrokerID    int64        `json:"brokerId"`
	EpochList   []EpochEntry `json:"epochList"`
	MaxOffset   int64        `json:"maxOffset"`
}
