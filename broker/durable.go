package broker

import (
	"sync"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// pendingAck is a request that stored messages in sync-flush mode or on a
// SYNC_MASTER and whose answer waits for them to be durable (a
// core.Pending). It is the
// core's DurableWaiter: the store's durability goroutine calls Durable
// after the sync that covers it (one sync serves every request waiting),
// and no goroutine or connection is held meanwhile.
type pendingAck struct {
	b           *Broker
	resp        remoting.Responder
	queueID     int32
	queueOffset int64
	msgID, txID []byte
	recall      []byte // a timer message's recall handle, or empty
	plain       bool   // answer with the code only (not a send: send-back, end transaction)
	// cmd is the answer, built in place so that its header fields' storage
	// is reused from one request to the next (Reply copies it out).
	cmd protocol.Command
}

// ackPool recycles pendingAcks.
type ackPool struct{ p sync.Pool }

func (a *ackPool) get(b *Broker) *pendingAck {
	if v := a.p.Get(); v != nil {
		p := v.(*pendingAck)
		p.b = b
		return p
	}
	return &pendingAck{b: b}
}

func (a *ackPool) put(p *pendingAck) {
	p.resp = remoting.Responder{}
	p.plain = false
	p.recall = p.recall[:0]
	a.p.Put(p)
}

// answerWhenDurable answers req once what p covers is durable: by waiting
// here when there is no connection to defer the answer on (a handler
// driven directly), otherwise by deferring the answer to the core's
// WhenDurable. It is the one place where the send, send-back and
// end-transaction handlers choose between the two.
func (b *Broker) answerWhenDurable(c *remoting.Conn, req *protocol.Command, resp *remoting.Response, a *pendingAck, p core.Pending) remoting.Action {
	if c == nil {
		a.fill(resp.Cmd, b.core.WaitDurable(p))
		b.acks.put(a)
		return remoting.Reply
	}
	a.resp = c.Defer(req)
	b.core.WhenDurable(p, a)
	return remoting.Deferred
}

// Durable implements core.DurableWaiter: it answers the deferred request
// and returns a to the pool.
func (a *pendingAck) Durable(err error) {
	b := a.b
	a.resp.InitResponse(&a.cmd, protocol.RespSuccess)
	a.fill(&a.cmd, err)
	_ = a.resp.Reply(&remoting.Response{Cmd: &a.cmd})
	b.acks.put(a)
}

// fill sets cmd's code, remark and send fields for a durability wait that
// returned err: SUCCESS when nil; FLUSH_DISK_TIMEOUT (10), SLAVE_NOT_AVAILABLE
// (11) or FLUSH_SLAVE_TIMEOUT (12) when the messages are stored but not as
// durable as configured (core.NotDurable: without a remark, with the send
// result's fields, as the Java broker answers; a plain answer says
// SUCCESS, the only code its callers know); the error's code and remark
// otherwise (SERVICE_NOT_AVAILABLE when the log failed or the store
// closed).
func (a *pendingAck) fill(cmd *protocol.Command, err error) {
	code, remark := protocol.RespSuccess, ""
	switch {
	case err == nil:
	case core.NotDurable(err):
		if !a.plain {
			code = core.Code(err)
		}
	default:
		code, remark = core.Code(err), core.Remark(err)
	}
	cmd.Code = code
	if remark != "" {
		cmd.SetRemark(remark)
	}
	if !a.plain && (code == protocol.RespSuccess || core.NotDurable(err)) {
		setSendResponse(&cmd.Ext, a.msgID, a.queueID, a.queueOffset, a.txID, a.recall)
	}
}
