package core

import (
	"errors"
	"fmt"

	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/protocol"
)

// EndTransactionRequest is a producer's outcome of a transaction
// (END_TRANSACTION, 37), on its own or answering a check.
type EndTransactionRequest struct {
	ProducerGroup string
	// TranStateTableOffset and CommitLogOffset locate the half message: its
	// queue offset and its commit-log offset.
	TranStateTableOffset int64
	CommitLogOffset      int64
	// CommitOrRollback is protocol.TransactionCommitType,
	// TransactionRollbackType or TransactionNotType ("unknown": nothing
	// changes, the checker asks again).
	CommitOrRollback int32
	// FromTransactionCheck, MsgID and Remark are logged for an "unknown"
	// answer to a check.
	FromTransactionCheck bool
	MsgID, Remark        string
}

// EndTransaction ends a transaction (txn.Manager.End: validation as
// RocketMQ's EndTransactionProcessor, then the committed message and the op
// record in one append, or the op record alone for a rollback; ending a
// transaction already ended stores nothing and succeeds). In sync-flush
// mode the answer waits for the returned Pending.
func (c *Core) EndTransaction(r *EndTransactionRequest) (Pending, error) {
	if c.slave.Load() {
		return Pending{}, errSlaveEndTransaction
	}
	if e := c.gate.Load(); e != nil {
		return Pending{}, e
	}
	switch r.CommitOrRollback {
	case protocol.TransactionCommitType, protocol.TransactionRollbackType:
	case protocol.TransactionNotType:
		if r.FromTransactionCheck {
			c.opts.Logger.Debug("broker: transaction check answered unknown", "producerGroup", r.ProducerGroup,
				"msgId", r.MsgID, "remark", r.Remark)
		}
		return Pending{}, nil
	default:
		return Pending{}, newError(ReasonTransactionTypeIllegal, fmt.Sprintf("commitOrRollback %d is none of 0, 8, 12", r.CommitOrRollback))
	}
	end, err := c.features().tx.End(txn.EndRequest{
		ProducerGroup: r.ProducerGroup, TranStateTableOffset: r.TranStateTableOffset, CommitLogOffset: r.CommitLogOffset,
		Commit: r.CommitOrRollback == protocol.TransactionCommitType,
	})
	if err != nil {
		return Pending{}, endTransactionError(err)
	}
	if end == 0 || !c.waitDurable.Load() {
		return Pending{}, nil
	}
	return Pending{end: end}, nil
}

// endTransactionError is the answer to an error of txn.Manager.End:
// RocketMQ's remarks for the validation failures, storeError's for the
// store's.
func endTransactionError(err error) *Error {
	switch {
	case errors.Is(err, txn.ErrHalfNotFound):
		return wrapError(ReasonTransactionNotFound, "Find prepared transaction message failed", err)
	case errors.Is(err, txn.ErrWrongGroup):
		return wrapError(ReasonTransactionMismatch, "The producer group wrong", err)
	case errors.Is(err, txn.ErrWrongTableOffset):
		return wrapError(ReasonTransactionMismatch, "The transaction state table offset wrong", err)
	case errors.Is(err, txn.ErrWrongCommitLogOffset):
		return wrapError(ReasonTransactionMismatch, "The commit log offset wrong", err)
	case errors.Is(err, txn.ErrNoRealTopic):
		return wrapError(ReasonTransactionCorrupt, "the prepared transaction message has no valid REAL_TOPIC/REAL_QID", err)
	}
	return storeError(err)
}
