package broker

import (
	"net"
	"strconv"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Controller mode, the front end's part (docs/failover.md; package
// broker/ctrlmode decides the role and changes it in place with SetRole).
//
//   - NOTIFY_BROKER_ROLE_CHANGED (1008), the controller's push after an
//     election, goes to Options.ControllerNotify.
//   - GET_BROKER_EPOCH_CACHE (1007, an administrator's) is answered by
//     Options.ControllerEpochCache.
//   - A slave's master is named by FollowMaster, never by the name servers'
//     answers (Options.ControllerMode).
//   - GET_BROKER_CONFIG reports haListenPort and brokerIP2 (the Java keys):
//     a slave in controller mode learns its new master's HA address there.

// reqNotifyBrokerRoleChanged is controller/wire.ReqNotifyBrokerRoleChanged
// (the broker does not import the controller's packages).
const reqNotifyBrokerRoleChanged int32 = 1008

// reqGetBrokerEpochCache is controller/wire.ReqGetBrokerEpochCache.
const reqGetBrokerEpochCache int32 = 1007

// registerController registers GET_BROKER_EPOCH_CACHE, and
// NOTIFY_BROKER_ROLE_CHANGED when the broker runs in controller mode.
func (b *Broker) registerController(t *handlerTable) {
	t.add(noConn(b.handleEpochCache), reqGetBrokerEpochCache)
	if b.opts.ControllerNotify == nil {
		return
	}
	t.add(noConn(b.handleRoleChanged), reqNotifyBrokerRoleChanged)
}

func (b *Broker) handleRoleChanged(req *protocol.Command, resp *remoting.Response) remoting.Action {
	if err := b.opts.ControllerNotify(req); err != nil {
		resp.Cmd.Code = protocol.RespSystemError
		resp.Cmd.SetRemark(err.Error())
	}
	return remoting.Reply
}

func (b *Broker) handleEpochCache(_ *protocol.Command, resp *remoting.Response) remoting.Action {
	if b.opts.ControllerEpochCache == nil {
		resp.Cmd.Code = protocol.RespSystemError
		resp.Cmd.SetRemark("this broker is not in controller mode (enableControllerMode): it keeps no epoch file")
		return remoting.Reply
	}
	body, err := b.opts.ControllerEpochCache()
	if err != nil {
		resp.Cmd.Code = protocol.RespSystemError
		resp.Cmd.SetRemark(err.Error())
		return remoting.Reply
	}
	resp.Cmd.Body = body
	return remoting.Reply
}

// MasterAddr is a slave's master's remoting address as last known (from
// the name servers' answers, or FollowMaster); "" on a master or before
// it is known.
func (b *Broker) MasterAddr() string {
	if b.haSlave() == nil {
		return ""
	}
	b.repl.mu.Lock()
	defer b.repl.mu.Unlock()
	return b.repl.masterAddr
}

// FollowMaster points a slave at its master: remoting address addr (whose
// tables it follows) and HA address haAddr. It does nothing on a master.
func (b *Broker) FollowMaster(addr, haAddr string) {
	r := &b.repl
	s := b.haSlave()
	if s == nil {
		return
	}
	s.SetMasterAddr(haAddr)
	r.mu.Lock()
	changed := r.masterAddr != addr
	r.masterAddr = addr
	r.mu.Unlock()
	if changed {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// haConfig adds the HA listener's Java keys to a GET_BROKER_CONFIG map.
func (b *Broker) haConfig(m map[string]string) {
	addr := b.haServerAddr()
	if addr == "" {
		return
	}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if _, err := strconv.Atoi(port); err == nil {
			m["haListenPort"] = port
			m["brokerIP2"] = host
		}
	}
}
