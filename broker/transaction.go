package broker

import (
	"errors"
	"fmt"

	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// handleEndTransaction serves END_TRANSACTION (37): it decodes the header
// and has the transaction manager end the transaction (txn.Manager.End:
// validation as RocketMQ's EndTransactionProcessor, then the committed
// message and the op record in one append, or the op record alone for a
// rollback; ending a transaction already ended stores nothing and is
// answered SUCCESS). "Unknown" (0) changes nothing: the checker will ask
// again. In sync-flush mode the answer waits for what was stored to be
// durable (answerWhenDurable).
func (b *Broker) handleEndTransaction(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.EndTransactionRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	switch h.CommitOrRollback {
	case protocol.TransactionCommitType, protocol.TransactionRollbackType:
	case protocol.TransactionNotType:
		if h.FromTransactionCheck {
			b.opts.Logger.Debug("broker: transaction check answered unknown", "producerGroup", h.ProducerGroup,
				"msgId", h.MsgID, "remark", string(req.Remark))
		}
		return remoting.Reply
	default:
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("commitOrRollback %d is none of 0, 8, 12", h.CommitOrRollback))
	}
	end, err := b.tx.End(txn.EndRequest{
		ProducerGroup: h.ProducerGroup, TranStateTableOffset: h.TranStateTableOffset, CommitLogOffset: h.CommitLogOffset,
		Commit: h.CommitOrRollback == protocol.TransactionCommitType,
	})
	if err != nil {
		code, remark := endTransactionError(err)
		return fail(resp, code, remark)
	}
	if end == 0 || !b.syncFlush {
		return remoting.Reply
	}
	a := b.acks.get(b)
	a.end, a.plain = end, true
	return b.answerWhenDurable(c, req, resp, a)
}

// endTransactionError is the code and remark of an error of txn.Manager.End:
// RocketMQ's remarks for the validation failures, putErrorCode's for the
// store's.
func endTransactionError(err error) (int32, string) {
	switch {
	case errors.Is(err, txn.ErrHalfNotFound):
		return protocol.RespSystemError, "Find prepared transaction message failed"
	case errors.Is(err, txn.ErrWrongGroup):
		return protocol.RespSystemError, "The producer group wrong"
	case errors.Is(err, txn.ErrWrongTableOffset):
		return protocol.RespSystemError, "The transaction state table offset wrong"
	case errors.Is(err, txn.ErrWrongCommitLogOffset):
		return protocol.RespSystemError, "The commit log offset wrong"
	case errors.Is(err, txn.ErrNoRealTopic):
		return protocol.RespSystemError, "the prepared transaction message has no valid REAL_TOPIC/REAL_QID"
	}
	return putErrorCode(err)
}

// registerTransactions registers END_TRANSACTION.
func (b *Broker) registerTransactions(t *handlerTable) {
	t.add(b.handleEndTransaction, protocol.ReqEndTransaction)
}
