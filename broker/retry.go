package broker

import (
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// handleSendBack serves CONSUMER_SEND_MSG_BACK (36) (core.SendBack: the
// message goes to the group's retry topic through a delay level or its
// retry policy, or to its DLQ). The answer is a bare SUCCESS; in
// sync-flush mode it waits for what was stored (answerWhenDurable).
func (b *Broker) handleSendBack(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ConsumerSendMsgBackRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	p, err := b.core.SendBack(&core.SendBackRequest{Group: h.Group, Offset: h.Offset, DelayLevel: h.DelayLevel,
		MaxReconsumeTimes: h.MaxReconsumeTimes, HasMaxReconsumeTimes: h.HasMaxReconsumeTimes})
	return b.answerPlain(c, req, resp, p, err)
}

// handleEndTransaction serves END_TRANSACTION (37) (core.EndTransaction:
// the committed message and the op record in one append, or the op record
// alone for a rollback; "unknown" changes nothing). The answer is a bare
// SUCCESS; in sync-flush mode it waits for what was stored.
func (b *Broker) handleEndTransaction(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.EndTransactionRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	p, err := b.core.EndTransaction(&core.EndTransactionRequest{ProducerGroup: h.ProducerGroup,
		TranStateTableOffset: h.TranStateTableOffset, CommitLogOffset: h.CommitLogOffset,
		CommitOrRollback: h.CommitOrRollback, FromTransactionCheck: h.FromTransactionCheck,
		MsgID: h.MsgID, Remark: string(req.Remark)})
	return b.answerPlain(c, req, resp, p, err)
}

// answerPlain answers an operation whose success carries nothing but the
// code: at once, or once p is durable.
func (b *Broker) answerPlain(c *remoting.Conn, req *protocol.Command, resp *remoting.Response, p core.Pending, err error) remoting.Action {
	if err != nil {
		return fail(resp, err)
	}
	if !p.Waiting() {
		return remoting.Reply
	}
	a := b.acks.get(b)
	a.plain = true
	return b.answerWhenDurable(c, req, resp, a, p)
}

// registerRetry registers CONSUMER_SEND_MSG_BACK.
func (b *Broker) registerRetry(t *handlerTable) {
	t.add(b.handleSendBack, protocol.ReqConsumerSendMsgBack)
}

// registerTransactions registers END_TRANSACTION.
func (b *Broker) registerTransactions(t *handlerTable) {
	t.add(b.handleEndTransaction, protocol.ReqEndTransaction)
}
