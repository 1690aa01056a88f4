package grpcfe

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/rmqpb"
)

// Receiving: RocketMQ 5's SimpleConsumer and PushConsumer receive messages
// one by one, each invisible to the rest of the group until acked or until
// its invisible duration passes: the core's POP operations. A receive
// holds (long polling) until messages come, its long-polling timeout or
// its deadline; FIFO (the group configured consumeMessageOrderly) hands out
// a message group's messages in order, a batch at a time (broker/pop).

// Receipt handles are the front end's own (clients treat them as opaque):
// "queueId offset popTime commitLogOffset brokerName", decimal, separated
// by spaces. The pop time names the delivery (a later delivery voids the
// handle), the commit-log offset finds the message for a dead letter.

func receiptHandle(brokerName string, queueID int32, offset, popTime, commitLogOffset int64) string {
	b := make([]byte, 0, 64)
	b = strconv.AppendInt(b, int64(queueID), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, offset, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, popTime, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, commitLogOffset, 10)
	b = append(b, ' ')
	b = append(b, brokerName...)
	return string(b)
}

type receipt struct {
	queueID                          int32
	offset, popTime, commitLogOffset int64
}

func parseReceipt(h string) (receipt, error) {
	f := strings.SplitN(h, " ", 5)
	if len(f) != 5 {
		return receipt{}, badRequest(rmqpb.Code_INVALID_RECEIPT_HANDLE, "the receipt handle "+strconv.Quote(h)+" is not one this broker gave")
	}
	var v [4]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return receipt{}, badRequest(rmqpb.Code_INVALID_RECEIPT_HANDLE, "the receipt handle "+strconv.Quote(h)+" is not one this broker gave")
		}
		v[i] = n
	}
	if v[0] > 1<<16 {
		return receipt{}, badRequest(rmqpb.Code_INVALID_RECEIPT_HANDLE, "the receipt handle "+strconv.Quote(h)+" names queue "+f[0])
	}
	return receipt{queueID: int32(v[0]), offset: v[1], popTime: v[2], commitLogOffset: v[3]}, nil
}

// longPollReserve is kept of a receive's deadline to answer it in time.
const longPollReserve = 500 * time.Millisecond

// popPool recycles the POP results (their record buffers).
var popPool = sync.Pool{New: func() any { return new(core.PopResult) }}

// ReceiveMessage hands out up to batch_size messages of the topic (every
// queue of this broker) to the group, each invisible for
// invisible_duration. With none ready it is held (longpoll.go) until one
// comes (an arrival in the topic, or a message of the group visible again),
// its long_polling_timeout or the call's deadline (less a reserve to
// answer in time), at most the core's LongPollMax.
// The stream carries the delivery timestamp, the messages, then the
// status: OK with messages, MESSAGE_NOT_FOUND without.
func (s *Server) ReceiveMessage(r *rmqpb.ReceiveMessageRequest, stream rmqpb.MessagingService_ReceiveMessageServer) error {
	if fwd, err := s.forwardReceive(r, stream); fwd {
		return err
	}
	s.stats.receives.Add(1)
	ctx := stream.Context()
	st := s.receive(ctx, r, stream)
	return stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: st}})
}

func (s *Server) receive(ctx context.Context, r *rmqpb.ReceiveMessageRequest, stream rmqpb.MessagingService_ReceiveMessageServer) *rmqpb.Status {
	group := r.GetGroup().GetName()
	topic := r.GetMessageQueue().GetTopic().GetName()
	if err := core.CheckClientGroup(group); err != nil {
		return errStatus(err)
	}
	if err := core.CheckClientTopic(topic); err != nil {
		return errStatus(err)
	}
	batch := r.GetBatchSize()
	if batch <= 0 || batch > 32 {
		return status(rmqpb.Code_BAD_REQUEST, fmt.Sprintf("batch size %d is not in 1..32", batch))
	}
	if st, done := s.liteReceive(ctx, r, group, stream); done {
		return st
	}
	invisible := 30 * time.Second
	var renewFor *client // the client whose deliveries are renewed (renew.go)
	if r.GetAutoRenew() {
		// RocketMQ's proxy: the duration asked for is ignored; the
		// delivery is renewed while the client lives.
		invisible = s.opts.AutoRenewInvisible
		if c := s.clientLookup(ctx); c != nil {
			if err := s.renew.reserve(c, int(batch)); err != nil {
				s.warn("renew-full", "grpc: a receive refused: its client holds too many messages being renewed; "+
					"the client must ack (or lower its cache) before it receives more",
					"client", c.id, "limit", s.opts.MaxRenewPerClient)
				return status(rmqpb.Code_TOO_MANY_REQUESTS, fmt.Sprintf(
					"the client holds %d or more messages whose invisibility is being renewed: ack some first", s.opts.MaxRenewPerClient))
			}
			renewFor = c
		}
	} else if r.InvisibleDuration != nil {
		if !r.InvisibleDuration.IsValid() {
			return status(rmqpb.Code_ILLEGAL_INVISIBLE_TIME, "the invisible duration is malformed")
		}
		invisible = r.InvisibleDuration.AsDuration()
	}
	if invisible < time.Millisecond || invisible.Milliseconds() > core.MaxInvisibleMs {
		return status(rmqpb.Code_ILLEGAL_INVISIBLE_TIME, fmt.Sprintf("the invisible duration %v is not in 1ms..%v", invisible,
			time.Duration(core.MaxInvisibleMs)*time.Millisecond))
	}
	// How long to hold: the request's long polling, within the deadline.
	wait := s.core.Options().LongPollMax
	if r.LongPollingTimeout != nil {
		if !r.LongPollingTimeout.IsValid() || r.LongPollingTimeout.AsDuration() < 0 {
			return status(rmqpb.Code_ILLEGAL_POLLING_TIME, "the long polling timeout is malformed")
		}
		wait = min(wait, r.LongPollingTimeout.AsDuration())
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-longPollReserve)
	}
	typ, expr := filterOf(r.GetFilterExpression())
	cfg, err := s.core.SubscriptionGroup([]byte(group))
	orderly := err == nil && cfg.ConsumeMessageOrderly
	req := core.PopRequest{
		Group: []byte(group), Topic: []byte(topic), QueueID: -1, MaxMsgs: batch,
		InvisibleTime: invisible.Milliseconds(), Orderly: orderly,
		ExpressionType: []byte(typ), Expression: []byte(expr), Consumer: peerAddr(ctx),
	}
	s.initGroup(group, topic)
	res := popPool.Get().(*core.PopResult)
	defer popPool.Put(res)
	ticket := s.polls.Ticket() // before the look: see longpoll.Wait.Ticket
	if err := s.core.Pop(&req, res); err != nil {
		return errStatus(err)
	}
	if len(res.Msgs) == 0 && wait > 0 {
		err := s.hold(ctx, longpoll.Wait{Topic: res.Topic(), Queue: longpoll.AnyQueue, Group: res.Group(),
			WakeAt: res.NextVisibleTime(), Ticket: ticket}, wait, &heldCall{pop: res})
		if errors.Is(err, errHeldFull) {
			return status(rmqpb.Code_TOO_MANY_REQUESTS, "too many receives are waiting for messages")
		}
		if err != nil {
			return errStatus(err)
		}
	}
	if len(res.Msgs) == 0 {
		return status(rmqpb.Code_MESSAGE_NOT_FOUND, "no new message")
	}
	now := timestamppb.Now()
	if err := stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: now}}); err != nil {
		return status(rmqpb.Code_INTERNAL_SERVER_ERROR, err.Error())
	}
	topicName := res.Topic()
	for i := range res.Msgs {
		p := &res.Msgs[i]
		v, err := message.Decode(res.Record(i), false)
		if err != nil {
			s.log.Error("grpc: a received record does not decode", "topic", topicName, "queue", p.QueueID, "offset", p.Offset, "err", err)
			continue
		}
		d := delivery{receipt: receiptHandle(s.brokerName, p.QueueID, p.Offset, res.PopTime, v.PhysicalOffset()),
			attempt: p.Attempts, invisible: res.Invisible}
		m := toMessage(v, topicName, s.brokerName, &d)
		msgID := m.GetSystemProperties().GetMessageId()
		if renewFor != nil {
			s.renew.add(renewFor, group, topicName, msgID, d.receipt,
				receipt{queueID: p.QueueID, offset: p.Offset, popTime: res.PopTime, commitLogOffset: v.PhysicalOffset()},
				res.Invisible, max(p.Attempts-1, 0))
		}
		if err := stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Message{Message: m}}); err != nil {
			if renewFor != nil { // it never reached the client
				s.renew.take(renewFor, group, msgID, d.receipt)
			}
			// The client is gone: its messages come back after their
			// invisible time.
			return status(rmqpb.Code_INTERNAL_SERVER_ERROR, err.Error())
		}
		s.stats.received.Add(1)
	}
	return okStatus
}

// AckMessage acknowledges received messages: each entry's status says
// whether its handle was still valid (INVALID_RECEIPT_HANDLE when the
// message was delivered again since, or is unknown to the group).
func (s *Server) AckMessage(ctx context.Context, r *rmqpb.AckMessageRequest) (*rmqpb.AckMessageResponse, error) {
	if resp, fwd, err := s.forwardAck(ctx, r); fwd {
		return resp, err
	}
	group, topic := r.GetGroup().GetName(), r.GetTopic().GetName()
	if err := core.CheckClientGroup(group); err != nil {
		return &rmqpb.AckMessageResponse{Status: errStatus(err)}, nil
	}
	if err := core.CheckClientTopic(topic); err != nil {
		return &rmqpb.AckMessageResponse{Status: errStatus(err)}, nil
	}
	resp := &rmqpb.AckMessageResponse{Entries: make([]*rmqpb.AckMessageResultEntry, len(r.GetEntries()))}
	failed := 0
	c := s.clientLookup(ctx)
	for i, e := range r.GetEntries() {
		var rc receipt
		var err error
		if isLiteHandle(e.GetReceiptHandle()) {
			err = s.ackLite(group, topic, e)
		} else if rc, err = parseReceipt(e.GetReceiptHandle()); err == nil {
			// A renewed delivery: stop renewing it and ack it as it is
			// now (renew.go).
			if cur, ok := s.renew.take(c, group, e.GetMessageId(), e.GetReceiptHandle()); ok {
				rc = cur
			}
			err = s.core.Ack([]byte(group), []byte(topic), rc.queueID, rc.offset, core.Receipt{QueueID: rc.queueID, PopTime: rc.popTime})
		}
		if err != nil {
			failed++
		} else {
			s.stats.acks.Add(1)
		}
		resp.Entries[i] = &rmqpb.AckMessageResultEntry{MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: errStatus(err)}
	}
	switch {
	case len(resp.Entries) == 0:
		resp.Status = status(rmqpb.Code_BAD_REQUEST, "no entry to acknowledge")
	case failed == 0:
		resp.Status = okStatus
	case len(resp.Entries) == 1:
		resp.Status = resp.Entries[0].Status
	default:
		resp.Status = status(rmqpb.Code_MULTIPLE_RESULTS, fmt.Sprintf("%d of %d acknowledgements failed", failed, len(resp.Entries)))
	}
	return resp, nil
}

// ChangeInvisibleDuration makes a received message invisible for the
// duration given from now and answers its new receipt handle (the old one
// is void).
func (s *Server) ChangeInvisibleDuration(ctx context.Context, r *rmqpb.ChangeInvisibleDurationRequest) (*rmqpb.ChangeInvisibleDurationResponse, error) {
	if resp, fwd, err := s.forwardChangeInvisible(ctx, r); fwd {
		return resp, err
	}
	group, topic := r.GetGroup().GetName(), r.GetTopic().GetName()
	fail := func(err error) (*rmqpb.ChangeInvisibleDurationResponse, error) {
		return &rmqpb.ChangeInvisibleDurationResponse{Status: errStatus(err)}, nil
	}
	if err := core.CheckClientGroup(group); err != nil {
		return fail(err)
	}
	if err := core.CheckClientTopic(topic); err != nil {
		return fail(err)
	}
	d := r.GetInvisibleDuration()
	if d == nil || !d.IsValid() || d.AsDuration() < time.Millisecond || d.AsDuration().Milliseconds() > core.MaxInvisibleMs {
		return fail(badRequest(rmqpb.Code_ILLEGAL_INVISIBLE_TIME, "the invisible duration is missing or not in 1ms..30 days"))
	}
	if isLiteHandle(r.GetReceiptHandle()) {
		return s.changeInvisibleLite(r, group, topic, d.AsDuration())
	}
	rc, err := parseReceipt(r.GetReceiptHandle())
	if err != nil {
		return fail(err)
	}
	// A renewed delivery: the client's duration replaces the renewal
	// (renew.go), applied to the delivery as it is now.
	if cur, ok := s.renew.take(s.clientLookup(ctx), group, r.GetMessageId(), r.GetReceiptHandle()); ok {
		rc = cur
	}
	popTime, err := s.core.ChangeInvisible([]byte(group), []byte(topic), rc.queueID, rc.offset,
		core.Receipt{QueueID: rc.queueID, PopTime: rc.popTime}, d.AsDuration().Milliseconds())
	if err != nil {
		return fail(err)
	}
	return &rmqpb.ChangeInvisibleDurationResponse{Status: okStatus,
		ReceiptHandle: receiptHandle(s.brokerName, rc.queueID, rc.offset, popTime, rc.commitLogOffset)}, nil
}

// ForwardMessageToDeadLetterQueue moves a received message to the group's
// dead-letter queue (%DLQ%<group>) and acknowledges it: what a push
// consumer asks once a message failed as often as its retry policy allows.
func (s *Server) ForwardMessageToDeadLetterQueue(ctx context.Context, r *rmqpb.ForwardMessageToDeadLetterQueueRequest) (*rmqpb.ForwardMessageToDeadLetterQueueResponse, error) {
	if resp, fwd, err := s.forwardDeadLetter(ctx, r); fwd {
		return resp, err
	}
	group, topic := r.GetGroup().GetName(), r.GetTopic().GetName()
	fail := func(err error) (*rmqpb.ForwardMessageToDeadLetterQueueResponse, error) {
		return &rmqpb.ForwardMessageToDeadLetterQueueResponse{Status: errStatus(err)}, nil
	}
	if err := core.CheckClientGroup(group); err != nil {
		return fail(err)
	}
	if err := core.CheckClientTopic(topic); err != nil {
		return fail(err)
	}
	if isLiteHandle(r.GetReceiptHandle()) {
		return fail(s.deadLetterLite(r, group, topic))
	}
	rc, err := parseReceipt(r.GetReceiptHandle())
	if err != nil {
		return fail(err)
	}
	p, err := s.core.ForwardToDeadLetter(&core.ForwardRequest{Group: []byte(group), Topic: []byte(topic),
		QueueID: rc.queueID, Offset: rc.offset, Receipt: core.Receipt{QueueID: rc.queueID, PopTime: rc.popTime},
		CommitLogOffset: rc.commitLogOffset})
	if err == nil {
		err = s.core.WaitDurable(p)
	}
	return fail(err)
}

// initGroup decides where a group new to a topic's queues starts
// receiving, once per group and topic in the process: as RocketMQ's broker
// with its default isInitPopOffsetByCheckMsgInMem, at the first message of
// a queue whose first message (offset 0) is still in memory, else at the
// last message (the POP default for a new group). It commits offset 0 for
// the queues where the group has no committed offset and the core's
// QueryConsumerOffset rule gives 0 (the same rule a remoting consumer
// meets), which POP then starts from.
func (s *Server) initGroup(group, topic string) {
	k := group + "\x00" + topic
	if _, done := s.inited.Load(k); done {
		return
	}
	cfg, err := s.core.RouteTopic(topic, false, netip.AddrPort{})
	if err != nil {
		return
	}
	for q := int32(0); q < cfg.ReadQueueNums; q++ {
		if _, ok := s.core.CommittedOffset(topic, group, q); ok {
			continue
		}
		if off, err := s.core.QueryConsumerOffset([]byte(topic), []byte(group), q); err == nil && off == 0 {
			_ = s.core.UpdateConsumerOffset([]byte(topic), []byte(group), q, 0)
		}
	}
	s.inited.Store(k, struct{}{})
}
