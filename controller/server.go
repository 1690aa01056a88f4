package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// ServeRemoting answers brokers' and administrators' requests. Heartbeats,
// GET_METADATA_INFO and GET/UPDATE_CONTROLLER_CONFIG (config.go) are
// answered inline by every node; everything else
// needs the leader (others answer CONTROLLER_NOT_LEADER naming it) and runs
// on a goroutine of its own, since it waits for a Raft round.
func (n *Node) ServeRemoting(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	if a := n.opts.Authorize; a != nil {
		if ok, code, remark := a(c.RemoteAddr(), req); !ok {
			resp.Cmd.Code = code
			resp.Cmd.SetRemark(remark)
			return remoting.Reply
		}
	}
	switch req.Code {
	case wire.ReqBrokerHeartbeat:
		n.handleHeartbeat(c, req, resp.Cmd)
		return remoting.Reply
	case wire.ReqGetMetadataInfo:
		n.handleMetadata(resp.Cmd)
		return remoting.Reply
	case wire.ReqGetControllerConfig:
		n.handleGetConfig(resp.Cmd)
		return remoting.Reply
	case wire.ReqUpdateControllerConfig:
		n.handleUpdateConfig(req, resp.Cmd)
		return remoting.Reply
	case wire.ReqApplyBrokerID, wire.ReqGetNextBrokerID, wire.ReqRegisterBroker, wire.ReqGetReplicaInfo,
		wire.ReqAlterSyncStateSet, wire.ReqElectMaster, wire.ReqGetSyncStateData, wire.ReqCleanBrokerData, wire.ReqJoinGroup:
	default:
		resp.Cmd.Code = protocol.RespRequestCodeNotSupported
		resp.Cmd.SetRemark(fmt.Sprintf("request code %d is not a controller request", req.Code))
		return remoting.Reply
	}
	if !n.leading.Load() {
		id, addr := n.leader()
		wire.NotLeader(resp.Cmd, id, addr)
		return remoting.Reply
	}
	// The request's buffers are the connection's: copy it before the
	// handler returns.
	cp := &protocol.Command{Code: req.Code, Body: slices.Clone(req.Body)}
	cp.Ext.CopyFrom(&req.Ext)
	r := c.Defer(req)
	go func() {
		var out protocol.Command
		r.InitResponse(&out, protocol.RespSuccess)
		n.handle(cp, &out)
		if err := r.Reply(&remoting.Response{Cmd: &out}); err != nil && !errors.Is(err, remoting.ErrClosed) {
			n.log.Warn("controller: reply failed", "code", wire.CodeName(cp.Code), "err", err)
		}
	}()
	return remoting.Deferred
}

// handle answers one leader request into resp.
func (n *Node) handle(req, resp *protocol.Command) {
	var err error
	switch req.Code {
	case wire.ReqGetNextBrokerID:
		err = n.handleNextID(req, resp)
	case wire.ReqApplyBrokerID:
		err = n.handleApplyID(req, resp)
	case wire.ReqRegisterBroker:
		err = n.handleRegister(req, resp)
	case wire.ReqGetReplicaInfo:
		err = n.handleReplicaInfo(req, resp)
	case wire.ReqAlterSyncStateSet:
		err = n.handleAlter(req, resp)
	case wire.ReqElectMaster:
		err = n.handleElect(req, resp)
	case wire.ReqGetSyncStateData:
		err = n.handleSyncStateData(req, resp)
	case wire.ReqCleanBrokerData:
		err = n.handleClean(req, resp)
	case wire.ReqJoinGroup:
		err = n.handleJoin(req, resp)
	}
	switch {
	case err == nil:
	case errors.Is(err, errNotLeader):
		resp.Ext.Reset()
		resp.Body = nil
		id, addr := n.leader()
		wire.NotLeader(resp, id, addr)
	case errors.Is(err, wire.ErrBadRequest):
		resp.Code = wire.RespInvalidRequest
		resp.SetRemark(err.Error())
	default:
		resp.Code = protocol.RespSystemError
		resp.SetRemark(err.Error())
	}
}

func setResult(resp *protocol.Command, res *result) {
	resp.Code = res.Code
	if res.Remark != "" {
		resp.SetRemark(res.Remark)
	}
}

func (n *Node) handleHeartbeat(c *remoting.Conn, req, resp *protocol.Command) {
	var h wire.HeartbeatRequest
	if err := h.Decode(req); err != nil {
		resp.Code = wire.RespInvalidRequest
		resp.SetRemark(err.Error())
		return
	}
	timeout := n.opts.HeartbeatTimeout
	if h.HeartbeatTimeoutMillis > 0 {
		timeout = time.Duration(h.HeartbeatTimeoutMillis) * time.Millisecond
	}
	n.live.heartbeat(&h, c, time.Now(), timeout)
	resp.SetRemark("Heart beat success")
	if g := n.fsm.group(h.BrokerName); g != nil {
		mi := g.MasterInfo()
		mi.Encode(&resp.Ext)
		resp.Body = syncStateSetOf(g).Encode()
	}
	if id, addr := n.leader(); id != "" {
		resp.Ext.SetString("leaderId", id)
		if addr != "" {
			resp.Ext.SetString("leaderAddress", addr)
		}
	}
}

func (n *Node) handleMetadata(resp *protocol.Command) {
	id, addr := n.leader()
	m := wire.Metadata{Group: n.opts.Group, LeaderID: id, LeaderAddress: addr, IsLeader: n.leading.Load(),
		Peers: n.Members()}
	m.Encode(&resp.Ext)
}

func (n *Node) handleNextID(req, resp *protocol.Command) error {
	var r wire.BrokerIDRequest
	if err := r.Decode(req); err != nil {
		return err
	}
	if err := n.verifyLeader(); err != nil {
		return err
	}
	next := wire.FirstBrokerID
	if g := n.fsm.group(r.BrokerName); g != nil {
		next = g.NextID
	}
	resp.Ext.SetString("clusterName", r.ClusterName)
	resp.Ext.SetString("brokerName", r.BrokerName)
	resp.Ext.SetInt("nextBrokerId", next)
	return nil
}

func (n *Node) handleApplyID(req, resp *protocol.Command) error {
	var r wire.BrokerIDRequest
	if err := r.Decode(req); err != nil {
		return err
	}
	addr, _, _ := cutSemicolon(r.CheckCode)
	res, err := n.propose(&command{Op: opApplyID, Cluster: r.ClusterName, Broker: r.BrokerName, ID: r.AppliedID,
		Addr: addr, CheckCode: r.CheckCode}, false)
	if err != nil {
		return err
	}
	setResult(resp, res)
	resp.Ext.SetString("clusterName", r.ClusterName)
	resp.Ext.SetString("brokerName", r.BrokerName)
	return nil
}

func cutSemicolon(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ';' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// handleRegister: the broker must have applied its id; its address is
// updated if it changed; the answer names the master only while it is
// alive (RocketMQ's registerBroker), with the SyncStateSet as body.
func (n *Node) handleRegister(req, resp *protocol.Command) error {
	var r wire.RegisterBrokerRequest
	if err := r.Decode(req); err != nil {
		return err
	}
	if err := n.verifyLeader(); err != nil {
		return err
	}
	g := n.fsm.group(r.BrokerName)
	if g == nil || g.replica(r.BrokerID) == nil {
		resp.Code = wire.RespBrokerNeedToRegister
		resp.SetRemark(fmt.Sprintf("broker %s id %d has not applied for its id", r.BrokerName, r.BrokerID))
		return nil
	}
	if g.Addr(r.BrokerID) != r.BrokerAddress {
		res, err := n.propose(&command{Op: opAddress, Broker: r.BrokerName, ID: r.BrokerID, Addr: r.BrokerAddress}, false)
		if err != nil {
			return err
		}
		if res.Code != 0 {
			setResult(resp, res)
			return nil
		}
		g = res.Group
	}
	resp.Ext.SetString("clusterName", g.Cluster)
	resp.Ext.SetString("brokerName", g.Broker)
	mi := g.MasterInfo()
	if mi.MasterID != 0 && !n.maybeAlive(g.Broker, mi.MasterID, time.Now()) {
		mi.MasterID, mi.MasterAddress = 0, ""
	}
	mi.Encode(&resp.Ext)
	resp.Body = syncStateSetOf(g).Encode()
	return nil
}

func (n *Node) handleReplicaInfo(req, resp *protocol.Command) error {
	name, ok := req.Ext.GetString("brokerName")
	if !ok || name == "" {
		return fmt.Errorf("%w: missing brokerName", wire.ErrBadRequest)
	}
	if err := n.verifyLeader(); err != nil {
		return err
	}
	g := n.fsm.group(name)
	if g == nil {
		resp.Code = wire.RespBrokerMetadataNotExist
		resp.SetRemark(fmt.Sprintf("broker %s is not registered", name))
		return nil
	}
	mi := g.MasterInfo()
	mi.Encode(&resp.Ext)
	resp.Body = syncStateSetOf(g).Encode()
	return nil
}

// handleAlter checks the new members' liveness here (leader-local) and
// the rest in the state machine, at apply time.
func (n *Node) handleAlter(req, resp *protocol.Command) error {
	var r wire.AlterSyncStateSetRequest
	if err := r.Decode(req); err != nil {
		return err
	}
	if err := n.verifyLeader(); err != nil {
		return err
	}
	now := time.Now()
	c := &command{Op: opAlter, Broker: r.BrokerName, MasterID: r.MasterID, MasterEpoch: r.MasterEpoch,
		SetEpoch: r.Set.Epoch, Set: r.Set.Set}
	if g := n.fsm.group(r.BrokerName); g != nil {
		// The state machine's checks first, on a copy (a stale request is
		// answered as fenced whatever the liveness of its members), then
		// liveness; the state machine checks again when it applies.
		dry := &state{Groups: map[string]*Group{g.Broker: g.clone()}}
		if res := dry.apply(c); res.Code != 0 {
			setResult(resp, res)
			return nil
		}
		for _, id := range r.Set.Set {
			if g.replica(id) != nil && !n.maybeAlive(r.BrokerName, id, now) {
				resp.Code = wire.RespBrokerNotAlive
				resp.SetRemark(fmt.Sprintf("rejecting the SyncStateSet change of %s: replica %d is not alive", r.BrokerName, id))
				return nil
			}
		}
	}
	res, err := n.propose(c, false)
	if err != nil {
		return err
	}
	setResult(resp, res)
	if res.Code == 0 {
		resp.Ext.SetInt("newSyncStateSetEpoch", int64(res.Group.SyncStateSetEpoch))
		resp.Body = syncStateSetOf(res.Group).Encode()
		n.log.Info("controller: SyncStateSet changed", "broker", r.BrokerName, "set", res.Group.SyncStateSet,
			"epoch", res.Group.SyncStateSetEpoch)
	}
	return nil
}

func (n *Node) handleElect(req, resp *protocol.Command) error {
	var r wire.ElectMasterRequest
	if err := r.Decode(req); err != nil {
		return err
	}
	if err := n.verifyLeader(); err != nil {
		return err
	}
	out, err := n.elect(r.BrokerName, r.BrokerID, r.Designate)
	if err != nil {
		return err
	}
	resp.Code = out.code
	if out.remark != "" {
		resp.SetRemark(out.remark)
	}
	if g := out.group; g != nil {
		mi := g.MasterInfo()
		mi.Encode(&resp.Ext)
		body := wire.ElectMasterBody{SyncStateSet: g.SyncStateSet}
		if body.SyncStateSet == nil {
			body.SyncStateSet = []int64{}
		}
		if out.code == protocol.RespSuccess {
			body.BrokerMemberGroup = memberGroup(g)
		}
		resp.Body, _ = json.Marshal(body)
	}
	if out.choice.unclean {
		resp.Ext.SetInt("uncleanLossBytes", out.choice.loss)
	}
	return nil
}

func memberGroup(g *Group) *wire.BrokerMemberGroup {
	m := &wire.BrokerMemberGroup{Cluster: g.Cluster, BrokerName: g.Broker, BrokerAddrs: map[int64]string{}}
	for _, r := range g.Replicas {
		m.BrokerAddrs[r.ID] = r.Addr
	}
	return m
}

func (n *Node) handleSyncStateData(req, resp *protocol.Command) error {
	var names []string
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &names); err != nil {
			return fmt.Errorf("%w: body: want a JSON list of broker names: %v", wire.ErrBadRequest, err)
		}
	}
	if err := n.verifyLeader(); err != nil {
		return err
	}
	now := time.Now()
	out := wire.BrokerReplicasInfo{ReplicasInfoTable: map[string]wire.ReplicasInfo{}}
	for _, name := range names {
		g := n.fsm.group(name)
		if g == nil {
			continue
		}
		ri := wire.ReplicasInfo{MasterBrokerID: g.MasterID, MasterAddress: g.Addr(g.MasterID), MasterEpoch: g.MasterEpoch,
			SyncStateSetEpoch: g.SyncStateSetEpoch, InSyncReplicas: []wire.ReplicaIdentity{}, NotInSyncReplicas: []wire.ReplicaIdentity{}}
		for _, r := range g.Replicas {
			id := wire.ReplicaIdentity{BrokerName: name, BrokerID: r.ID, BrokerAddress: r.Addr, Alive: n.live.alive(name, r.ID, now)}
			if g.InSync(r.ID) {
				ri.InSyncReplicas = append(ri.InSyncReplicas, id)
			} else {
				ri.NotInSyncReplicas = append(ri.NotInSyncReplicas, id)
			}
		}
		out.ReplicasInfoTable[name] = ri
	}
	resp.Body, _ = json.Marshal(out)
	return nil
}

func (n *Node) handleClean(req, resp *protocol.Command) error {
	var r wire.CleanBrokerDataRequest
	if err := r.Decode(req); err != nil {
		return err
	}
	if err := n.verifyLeader(); err != nil {
		return err
	}
	if !r.CleanLiving {
		g := n.fsm.group(r.BrokerName)
		now := time.Now()
		if g != nil {
			ids := r.IDs
			if len(ids) == 0 {
				for _, x := range g.Replicas {
					ids = append(ids, x.ID)
				}
			}
			for _, id := range ids {
				if n.live.alive(r.BrokerName, id, now) {
					resp.Code = wire.RespInvalidCleanBrokerData
					resp.SetRemark(fmt.Sprintf("broker %s id %d is alive: not cleaned (isCleanLivingBroker=true forces it)", r.BrokerName, id))
					return nil
				}
			}
		}
	}
	res, err := n.propose(&command{Op: opClean, Broker: r.BrokerName, IDs: r.IDs}, false)
	if err != nil {
		return err
	}
	setResult(resp, res)
	if res.Code == 0 {
		n.live.forget(r.BrokerName, r.IDs)
		n.log.Info("controller: broker data cleaned", "broker", r.BrokerName, "ids", strconv.Quote(fmt.Sprint(r.IDs)))
	}
	return nil
}
