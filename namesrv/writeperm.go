package namesrv

import (
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// SetWritePerm changes the write permission of every topic's queues that
// broker name hosts, as Java's name server does for WIPE_WRITE_PERM_OF_BROKER
// (205: the write bit cleared) and ADD_WRITE_PERM_OF_BROKER (327: perm set
// to read and write). It returns the number of topics changed. As in
// RocketMQ, the broker's next full registration (every 30 s) brings back
// the perms of its own topic table: to keep a broker read-only, set its
// brokerPermission (UPDATE_BROKER_CONFIG) as well.
func (r *Registry) SetWritePerm(brokerName string, write bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[brokerName]
	if g == nil {
		return 0
	}
	n := 0
	for t, qd := range g.topics {
		if write {
			qd.Perm = protocol.PermRead | protocol.PermWrite
		} else {
			if qd.Perm&protocol.PermWrite == 0 {
				continue
			}
			qd.Perm &^= protocol.PermWrite
		}
		g.topics[t] = qd
		n++
	}
	if n > 0 {
		r.gen++
	}
	return n
}

func (r *Registry) serveWritePerm(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.BrokerNameRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp.Cmd, protocol.RespSystemError, err.Error())
	}
	write := req.Code == protocol.ReqAddWritePermOfBroker
	n := int32(r.SetWritePerm(h.BrokerName, write))
	if write {
		(&protocol.AddWritePermResponse{AddTopicCount: n}).Encode(&resp.Cmd.Ext)
	} else {
		(&protocol.WipeWritePermResponse{WipeTopicCount: n}).Encode(&resp.Cmd.Ext)
	}
	r.log.Info("namesrv: write permission of a broker changed", "brokerName", h.BrokerName, "write", write, "topics", n)
	return remoting.Reply
}
