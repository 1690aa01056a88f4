package client

import (
	"bytes"
	"context"
	"fmt"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// TransactionState is the outcome of a local transaction.
type TransactionState int

const (
	// TxUnknown leaves the half message pending; the broker asks again later
	// (CHECK_TRANSACTION_STATE).
	TxUnknown TransactionState = iota
	// TxCommit delivers the message.
	TxCommit
	// TxRollback discards it.
	TxRollback
)

func (s TransactionState) String() string {
	switch s {
	case TxCommit:
		return "COMMIT"
	case TxRollback:
		return "ROLLBACK"
	}
	return "UNKNOWN"
}

func (s TransactionState) wire() int32 {
	switch s {
	case TxCommit:
		return protocol.TransactionCommitType
	case TxRollback:
		return protocol.TransactionRollbackType
	}
	return protocol.TransactionNotType
}

// TransactionListener runs a transactional producer's local transactions.
type TransactionListener interface {
	// ExecuteLocalTransaction runs the local transaction of msg, whose half message
	// the broker has stored, and says whether to commit it.
	ExecuteLocalTransaction(ctx context.Context, msg *Message) TransactionState
	// CheckLocalTransaction answers the broker's question about a half message whose
	// outcome it does not know (TxUnknown, or a lost END_TRANSACTION). It runs on a
	// goroutine of its own (at most 16 at a time; further checks are dropped and the
	// broker asks again).
	CheckLocalTransaction(msg *MessageExt) TransactionState
}

// TransactionResult is the outcome of SendInTransaction.
type TransactionResult struct {
	SendResult
	State TransactionState
}

// SendInTransaction sends msg as a transaction half message (property TRAN_MSG,
// PGROUP = the producer group, sysflag PREPARED), runs the listener's local
// transaction once it is stored, and ends the transaction with its outcome
// (END_TRANSACTION, oneway). A failed half send returns its error and runs nothing.
// An error ending the transaction is returned with the result: the broker will check.
func (p *Producer) SendInTransaction(ctx context.Context, msg *Message) (TransactionResult, error) {
	if p.cfg.txListener == nil {
		return TransactionResult{}, ErrNotTransactional
	}
	if msg != nil && (msg.DelayLevel > 0 || !msg.DeliverAt.IsZero()) {
		return TransactionResult{}, fmt.Errorf("%w: transactional messages cannot be delayed", ErrBadMessage)
	}
	r, err := p.acceptKind(ctx, msg, nil, true, true)
	if err != nil {
		return TransactionResult{}, err
	}
	res, err := p.wait(ctx, r)
	if err != nil {
		return TransactionResult{}, err
	}
	state := p.runLocal(ctx, msg)
	out := TransactionResult{SendResult: res, State: state}
	return out, p.endTransaction(res, state)
}

func (p *Producer) runLocal(ctx context.Context, msg *Message) (state TransactionState) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("client: local transaction panicked", "panic", v)
			state = TxUnknown
		}
	}()
	return p.cfg.txListener.ExecuteLocalTransaction(ctx, msg)
}

// endTransaction sends END_TRANSACTION for a half message the producer just stored.
func (p *Producer) endTransaction(res SendResult, state TransactionState) error {
	_, clOffset, err := message.ParseOffsetMsgID(res.OffsetMsgID())
	if err != nil {
		return fmt.Errorf("client: end transaction: offset msg id %q: %w", res.OffsetMsgID(), err)
	}
	txID := res.TransactionID()
	if txID == "" {
		txID = res.MsgID()
	}
	h := protocol.EndTransactionRequest{
		ProducerGroup:        p.cfg.group,
		TranStateTableOffset: res.QueueOffset,
		CommitLogOffset:      clOffset,
		CommitOrRollback:     state.wire(),
		MsgID:                res.MsgID(),
		TransactionID:        txID,
		BrokerName:           res.Queue.BrokerName,
	}
	addr := p.in.masterAddr(res.Queue.BrokerName)
	if addr == "" {
		return fmt.Errorf("client: end transaction: %w: broker %q", ErrNoRoute, res.Queue.BrokerName)
	}
	req := p.in.newRequest(protocol.ReqEndTransaction)
	h.Encode(&req.Ext)
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.client.requestTimeout)
	defer cancel()
	cl, err := p.in.pool.Get(ctx, addr)
	if err != nil {
		return fmt.Errorf("client: end transaction: %w", err)
	}
	if err := cl.InvokeOneway(req); err != nil {
		return fmt.Errorf("client: end transaction: %w", err)
	}
	return nil
}

// checkTransaction handles CHECK_TRANSACTION_STATE on a connection's read goroutine:
// it decodes the half message and hands it to the producer of its group. Checks that
// do not decode, name no group, or name a group without a transactional producer here
// are dropped, as the official Go client does.
func (in *instance) checkTransaction(c *remoting.Conn, req *protocol.Command) {
	var h protocol.CheckTransactionStateRequest
	if err := h.Decode(&req.Ext); err != nil {
		in.log.Debug("client: bad transaction check", "err", err)
		return
	}
	// The check is answered on its own goroutine, after the read loop has
	// reused the request's buffer: the message (whose body aliases the
	// record) gets a copy.
	v, err := message.Decode(bytes.Clone(req.Body), false)
	if err != nil {
		in.log.Debug("client: transaction check body", "err", err)
		return
	}
	group, ok := v.Property(message.PropProducerGroup)
	if !ok {
		return
	}
	p := in.producerForGroup(string(group))
	if p == nil {
		return
	}
	msg, _ := decodeMessage(v, MessageQueue{})
	select {
	case p.checkSem() <- struct{}{}:
	default:
		in.log.Warn("client: too many transaction checks in progress; dropping one", "msgId", msg.MsgID)
		return
	}
	go p.answerCheck(c, h, msg)
}

var checkSlots = 16

func (p *Producer) checkSem() chan struct{} {
	p.checkOnce.Do(func() { p.checks = make(chan struct{}, checkSlots) })
	return p.checks
}

func (p *Producer) answerCheck(c *remoting.Conn, h protocol.CheckTransactionStateRequest, msg *MessageExt) {
	defer func() { <-p.checks }()
	state := TxUnknown
	func() {
		defer func() {
			if v := recover(); v != nil {
				p.log.Error("client: transaction check panicked", "panic", v)
			}
		}()
		state = p.cfg.txListener.CheckLocalTransaction(msg)
	}()
	uniq := msg.Properties[message.PropUniqKey]
	if uniq == "" {
		uniq = h.MsgID
	}
	txID := msg.Properties[message.PropTransactionID]
	if txID == "" {
		txID = h.TransactionID
	}
	if txID == "" {
		txID = uniq
	}
	e := protocol.EndTransactionRequest{
		ProducerGroup:        p.cfg.group,
		TranStateTableOffset: h.TranStateTableOffset,
		CommitLogOffset:      h.CommitLogOffset,
		CommitOrRollback:     state.wire(),
		FromTransactionCheck: true,
		MsgID:                uniq,
		TransactionID:        txID,
	}
	req := p.in.newRequest(protocol.ReqEndTransaction)
	e.Encode(&req.Ext)
	if err := c.InvokeOneway(req); err != nil {
		p.log.Debug("client: answering a transaction check", "err", err)
	}
}
