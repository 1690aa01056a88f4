package grpcfe

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// sendJob is the pooled working memory of one message's send.
type sendJob struct {
	o     outgoing
	topic []byte // the request's topic, for req (reused)
	req   core.SendRequest
	res   core.SendResult
}

var sendPool = sync.Pool{New: func() any { return new(sendJob) }}

// SendMessage stores each message of the request through the core (the
// same validation, routing and back-pressure as a remoting send) and
// answers an entry per message. A message with a message group goes to
// the queue the group hashes to, so that the group stays in order; others
// go round robin. In sync-flush mode the answer waits for the flush.
func (s *Server) SendMessage(ctx context.Context, r *rmqpb.SendMessageRequest) (*rmqpb.SendMessageResponse, error) {
	if resp, fwd, err := s.forwardSend(ctx, r); fwd {
		return resp, err
	}
	msgs := r.GetMessages()
	if len(msgs) == 0 {
		return &rmqpb.SendMessageResponse{Status: status(rmqpb.Code_BAD_REQUEST, "no message to send")}, nil
	}
	born := peerAddr(ctx)
	var resp *rmqpb.SendMessageResponse
	var ents []rmqpb.SendResultEntry
	if len(msgs) == 1 {
		// One message, as RocketMQ 5's SDKs send: the answer, its entry
		// and the entries slice in one allocation.
		one := new(sendAnswer)
		resp, ents = &one.resp, one.ent[:]
		resp.Entries = one.ents[:]
	} else {
		resp = &rmqpb.SendMessageResponse{Entries: make([]*rmqpb.SendResultEntry, len(msgs))}
		ents = make([]rmqpb.SendResultEntry, len(msgs))
	}
	failed := 0
	for i, m := range msgs {
		e := &ents[i]
		s.sendOne(m, born, e)
		if e.Status.Code != rmqpb.Code_OK {
			failed++
		}
		resp.Entries[i] = e
	}
	switch {
	case failed == 0:
		resp.Status = okStatus
	case len(msgs) == 1:
		resp.Status = resp.Entries[0].Status
	case failed == len(msgs):
		resp.Status = resp.Entries[0].Status
	default:
		resp.Status = status(rmqpb.Code_MULTIPLE_RESULTS, fmt.Sprintf("%d of %d messages failed", failed, len(msgs)))
	}
	return resp, nil
}

// sendAnswer is the answer to a send of one message, allocated at once.
type sendAnswer struct {
	resp rmqpb.SendMessageResponse
	ents [1]*rmqpb.SendResultEntry
	ent  [1]rmqpb.SendResultEntry
}

// sendOne stores one message and fills its entry e.
func (s *Server) sendOne(m *rmqpb.Message, born netip.AddrPort, e *rmqpb.SendResultEntry) {
	s.stats.sends.Add(1)
	j := sendPool.Get().(*sendJob)
	defer func() {
		j.o.body, j.req.Body, j.req.Properties, j.req.Topic = nil, nil, nil, nil
		sendPool.Put(j)
	}()
	id := m.GetSystemProperties().GetMessageId()
	e.MessageId = id
	fail := func(err error) {
		s.stats.sendErrors.Add(1)
		e.Status = errStatus(err)
	}
	maxBody := s.core.Options().MaxMessageSize
	if err := translate(m, &j.o, maxBody); err != nil {
		fail(err)
		return
	}
	// The core keeps no byte slice of a request (core.SendRequest): the
	// topic's bytes are the job's, reused.
	j.topic = append(j.topic[:0], j.o.topic...)
	j.req = core.SendRequest{
		Topic: j.topic, QueueID: -1, SysFlag: j.o.sysFlag, BornTimestamp: j.o.born,
		Properties: j.o.props, Body: j.o.body, BornHost: born,
		CheckTopicType: true, // RocketMQ's proxy: enableTopicMessageTypeCheck is on by default
	}
	if j.o.group != "" {
		cfg, err := s.core.RouteTopic(j.o.topic, true, born)
		if err != nil {
			fail(err)
			return
		}
		if cfg.WriteQueueNums > 0 {
			h := message.JavaHashCodeBytes([]byte(j.o.group))
			if h < 0 {
				h = -h
				if h < 0 {
					h = 0
				}
			}
			j.req.QueueID = h % cfg.WriteQueueNums
		}
	}
	if err := s.core.Send(&j.req, &j.res); err != nil {
		fail(err)
		return
	}
	if err := s.core.WaitDurable(j.res.Pending); err != nil && core.ReasonOf(err) != core.ReasonFlushDiskTimeout {
		fail(err)
		return
	}
	e.Status, e.Offset = okStatus, j.res.QueueOffset
	if j.o.typ == rmqpb.MessageType_TRANSACTION {
		msgID := string(j.res.MsgID)
		if k := strings.IndexByte(msgID, ','); k >= 0 {
			msgID = msgID[:k]
		}
		_, clOff, err := message.ParseOffsetMsgID(msgID)
		if err != nil {
			e.Offset = 0
			fail(fmt.Errorf("grpcfe: the half message's id %q: %w", msgID, err))
			return
		}
		e.TransactionId = transactionID(clOff, j.res.QueueOffset)
	}
	if j.o.timer {
		msgID := string(j.res.MsgID)
		if _, clOff, err := message.ParseOffsetMsgID(msgID); err == nil {
			e.RecallHandle = recallHandle(j.o.topic, id, clOff)
		}
	}
}

// transactionID is the id of a transaction the protocol carries (send
// result, check, EndTransaction): the half message's commit-log offset and
// half-queue offset, which ending it needs.
func transactionID(commitLogOffset, queueOffset int64) string {
	return strconv.FormatInt(commitLogOffset, 16) + "-" + strconv.FormatInt(queueOffset, 16)
}

// parseTransactionID undoes transactionID.
func parseTransactionID(s string) (commitLogOffset, queueOffset int64, ok bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	c, err1 := strconv.ParseInt(a, 16, 64)
	q, err2 := strconv.ParseInt(b, 16, 64)
	return c, q, err1 == nil && err2 == nil && c >= 0 && q >= 0
}

// EndTransaction commits or rolls back a transactional message (its
// producer group is its topic: see translate).
func (s *Server) EndTransaction(ctx context.Context, r *rmqpb.EndTransactionRequest) (*rmqpb.EndTransactionResponse, error) {
	if resp, fwd, err := s.forwardEndTransaction(ctx, r); fwd {
		return resp, err
	}
	topic := r.GetTopic().GetName()
	if err := core.CheckClientTopic(topic); err != nil {
		return &rmqpb.EndTransactionResponse{Status: errStatus(err)}, nil
	}
	clOff, qOff, ok := parseTransactionID(r.GetTransactionId())
	if !ok {
		return &rmqpb.EndTransactionResponse{Status: status(rmqpb.Code_INVALID_TRANSACTION_ID,
			"transaction id "+strconv.Quote(r.GetTransactionId())+" is not one this broker gave")}, nil
	}
	var kind int32
	switch r.GetResolution() {
	case rmqpb.TransactionResolution_COMMIT:
		kind = protocol.TransactionCommitType
	case rmqpb.TransactionResolution_ROLLBACK:
		kind = protocol.TransactionRollbackType
	default:
		kind = protocol.TransactionNotType
	}
	p, err := s.core.EndTransaction(&core.EndTransactionRequest{
		ProducerGroup: topic, TranStateTableOffset: qOff, CommitLogOffset: clOff, CommitOrRollback: kind,
		FromTransactionCheck: r.GetSource() == rmqpb.TransactionSource_SOURCE_SERVER_CHECK, MsgID: r.GetMessageId(),
	})
	if err == nil {
		if err = s.core.WaitDurable(p); core.ReasonOf(err) == core.ReasonFlushDiskTimeout {
			err = nil
		}
	}
	return &rmqpb.EndTransactionResponse{Status: errStatus(err)}, nil
}
