package grpcfe

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// sendJob is the pooled working memory of a SendMessage: the translation
// of the message being sent (translate appends each message's stored
// properties to o.props) and, for a request of several messages, the
// batch being built.
type sendJob struct {
	o     outgoing
	topic []byte // the core request's topic (reused)
	req   core.SendRequest
	res   core.SendResult
	// The batch: its entries, each one's properties as a span of o.props
	// (set into the entries once every message is translated: o.props may
	// move as it grows), and each one's index in the request.
	ents  []core.BatchEntry
	spans []propSpan
	idx   []int
}

type propSpan struct{ start, end int }

var sendPool = sync.Pool{New: func() any { return new(sendJob) }}

func getSendJob() *sendJob {
	j := sendPool.Get().(*sendJob)
	j.o.props = j.o.props[:0]
	return j
}

// release returns j to the pool, keeping none of the request's bytes.
func (j *sendJob) release() {
	clear(j.ents)
	j.ents, j.spans, j.idx = j.ents[:0], j.spans[:0], j.idx[:0]
	j.o.body, j.req = nil, core.SendRequest{}
	sendPool.Put(j)
}

// SendMessage stores the request's messages through the core (the same
// validation, routing and back-pressure as a remoting send) and answers an
// entry per message. A message with a message group goes to the queue the
// group hashes to, so that the group stays in order; others go round
// robin. Of a request of several messages, those that need no routing
// (NORMAL ones: no group, delivery time, priority, lite topic or
// transaction) to the first such message's topic are stored as one batch,
// in one queue, as RocketMQ's proxy stores a request of several messages
// (see sendMany). In sync-flush mode the answer waits for the flush.
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
	j := getSendJob()
	if len(msgs) == 1 {
		// One message, as RocketMQ 5's SDKs send: the answer, its entry
		// and the entries slice in one allocation.
		one := new(sendAnswer)
		resp, ents = &one.resp, one.ent[:]
		resp.Entries = one.ents[:]
		s.sendOne(j, msgs[0], born, &ents[0])
	} else {
		resp = &rmqpb.SendMessageResponse{Entries: make([]*rmqpb.SendResultEntry, len(msgs))}
		ents = make([]rmqpb.SendResultEntry, len(msgs))
		s.sendMany(j, msgs, born, ents)
	}
	j.release()
	failed := 0
	for i := range ents {
		e := &ents[i]
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
func (s *Server) sendOne(j *sendJob, m *rmqpb.Message, born netip.AddrPort, e *rmqpb.SendResultEntry) {
	s.stats.sends.Add(1)
	e.MessageId = m.GetSystemProperties().GetMessageId()
	if err := translate(m, &j.o, s.core.Options().MaxMessageSize); err != nil {
		s.sendFailed(e, errStatus(err))
		return
	}
	s.sendTranslated(j, born, e)
}

// sendMany stores the messages of a request of several and fills their
// entries. RocketMQ's proxy sends such a request to one queue as one
// batch (LocalMessageService: MessageBatch.generateFromList, one
// SEND_MESSAGE with batch set) after refusing the whole request when the
// messages' topics differ, and answers one entry for the batch; its queue
// ignores message groups, and the broker refuses a batch of delay,
// transactional or retried messages. Here every message keeps its own
// result: the messages that need no routing (outgoing.plain), to the first
// such message's topic, not to a %RETRY% topic, and together within
// MaxMessageSize of bodies, are stored as one batch (core.SendRequest's
// Entries: one core.Send, one PutBatch, one durable wait), each answered
// with its own id and queue offset, all with the same status when the
// core refuses the batch; every other message is sent alone, as by
// sendOne, in the request's order, before the batch.
func (s *Server) sendMany(j *sendJob, msgs []*rmqpb.Message, born netip.AddrPort, ents []rmqpb.SendResultEntry) {
	maxBody := s.core.Options().MaxMessageSize
	var topic string // the batch's
	var bodies int
	for i, m := range msgs {
		e := &ents[i]
		s.stats.sends.Add(1)
		e.MessageId = m.GetSystemProperties().GetMessageId()
		start := len(j.o.props)
		if err := translate(m, &j.o, maxBody); err != nil {
			s.sendFailed(e, errStatus(err))
			continue
		}
		o := &j.o
		if o.plain && !acl.IsRetryTopic(o.topic) && (len(j.idx) == 0 || o.topic == topic) && bodies+len(o.body) <= maxBody {
			topic = o.topic
			bodies += len(o.body)
			j.ents = append(j.ents, core.BatchEntry{SysFlag: o.sysFlag, BornTimestamp: o.born, Body: o.body})
			j.spans = append(j.spans, propSpan{start, len(o.props)})
			j.idx = append(j.idx, i)
			continue
		}
		// Sent alone: its properties are the tail of o.props, dropped
		// once it is stored (the core keeps none of them).
		all := o.props
		o.props = all[start:]
		s.sendTranslated(j, born, e)
		o.props = all[:start]
	}
	if len(j.ents) == 0 {
		return
	}
	for k := range j.ents {
		j.ents[k].Properties = j.o.props[j.spans[k].start:j.spans[k].end]
	}
	j.topic = append(j.topic[:0], topic...)
	j.req = core.SendRequest{
		Topic: j.topic, QueueID: -1, BornTimestamp: j.ents[0].BornTimestamp, BornHost: born,
		CheckTopicType: true, Entries: j.ents,
	}
	err := s.core.Send(&j.req, &j.res)
	if err == nil {
		if err = s.core.WaitDurable(j.res.Pending); core.ReasonOf(err) == core.ReasonFlushDiskTimeout {
			err = nil
		}
	}
	if err != nil {
		st := errStatus(err) // one status for every entry the core refused together
		for _, i := range j.idx {
			s.sendFailed(&ents[i], st)
		}
		return
	}
	for k, i := range j.idx {
		ents[i].Status, ents[i].Offset = okStatus, j.res.QueueOffset+int64(k)
	}
}

// sendFailed gives e the failure st.
func (s *Server) sendFailed(e *rmqpb.SendResultEntry, st *rmqpb.Status) {
	s.stats.sendErrors.Add(1)
	e.Status = st
}

// sendTranslated stores the message translated in j.o and fills its entry
// e (whose MessageId is set).
func (s *Server) sendTranslated(j *sendJob, born netip.AddrPort, e *rmqpb.SendResultEntry) {
	fail := func(err error) { s.sendFailed(e, errStatus(err)) }
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
			e.RecallHandle = recallHandle(j.o.topic, e.MessageId, clOff)
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
