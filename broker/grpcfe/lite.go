package grpcfe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/lite"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// Lite topics (RocketMQ 5.5, RIP-83; docs/lite-topics.md, docs/grpc.md):
// SyncLiteSubscription; a lite group's receives (a LitePushConsumer's), which
// drain the client's events (core.PopLite) and wait on the client when
// there are none (longpoll.Wait.Lite, woken by the core's OnLiteNotify);
// acks, changes of invisibility (with suspend) and dead letters of lite
// messages; NotifyUnsubscribeLiteCommand on the telemetry stream when an
// exclusive group's lite topic moves to another client.

// LiteCore is what the front end uses of the core's lite topics.
type LiteCore interface {
	LiteGroup(group string) (parent string, ok bool)
	CheckLiteMode(group string) error
	SyncLiteSubscription(r *core.LiteSyncRequest) error
	PopLite(r *core.LitePopRequest, res *core.LitePopResult) error
	LiteHasEvents(client string) bool
	AckLite(group, parent, lite string, offset, popTime int64) error
	ChangeInvisibleLite(group, parent, lite string, offset, popTime int64, d time.Duration, suspend bool) (int64, error)
	DeadLetterLite(group, parent, lite string, offset, popTime, commitLogOffset int64) (core.Pending, error)
	DropLiteClient(client string)
	OnLiteNotify(fn func(client string))
	OnLiteUnsubscribe(fn func(client, group, parent, lite string))
}

var _ LiteCore = (*core.Core)(nil)

// liteWire wires the core's lite reports to the server: a client with
// something to receive wakes its parked lite receive; an evicted
// subscription is told to its client.
func (s *Server) liteWire(h *longpoll.Holder[*heldCall]) {
	s.core.OnLiteNotify(func(client string) { h.Notified(client) })
	s.core.OnLiteUnsubscribe(func(client, group, parent, l string) {
		s.clients.mu.Lock()
		c := s.clients.m[client]
		s.clients.mu.Unlock()
		if c == nil {
			return
		}
		lt := l
		if err := c.push(&rmqpb.TelemetryCommand{Status: okStatus,
			Command: &rmqpb.TelemetryCommand_NotifyUnsubscribeLiteCommand{
				NotifyUnsubscribeLiteCommand: &rmqpb.NotifyUnsubscribeLiteCommand{LiteTopic: lt}}}); err != nil {
			s.log.Info("grpc: a lite client could not be told it lost a lite topic; its receives no longer see it",
				"client", client, "group", group, "liteTopic", l, "err", err)
		}
	})
}

// liteDrop forgets a lite client (termination, silence, COMPLETE_REMOVE).
func (s *Server) liteDrop(id string) {
	s.core.DropLiteClient(id)
	s.polls.Notified(id) // its parked receives answer now (core.LitePopResult.Unknown)
	s.polls.Forget(id)
}

// SyncLiteSubscription applies a lite push consumer's subscription change:
// its group must be a lite group bound to the request's topic.
func (s *Server) SyncLiteSubscription(ctx context.Context, r *rmqpb.SyncLiteSubscriptionRequest) (*rmqpb.SyncLiteSubscriptionResponse, error) {
	if resp, fwd, err := forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.SyncLiteSubscription,
		func(st *rmqpb.Status) *rmqpb.SyncLiteSubscriptionResponse {
			return &rmqpb.SyncLiteSubscriptionResponse{Status: st}
		}); fwd {
		return resp, err
	}
	fail := func(err error) (*rmqpb.SyncLiteSubscriptionResponse, error) {
		return &rmqpb.SyncLiteSubscriptionResponse{Status: errStatus(err)}, nil
	}
	group, topic := r.GetGroup().GetName(), r.GetTopic().GetName()
	if err := core.CheckClientGroup(group); err != nil {
		return fail(err)
	}
	if err := core.CheckClientTopic(topic); err != nil {
		return fail(err)
	}
	c, err := s.clientOf(ctx)
	if err != nil {
		return fail(err)
	}
	var action lite.Action
	switch r.GetAction() {
	case rmqpb.LiteSubscriptionAction_PARTIAL_ADD:
		action = lite.PartialAdd
	case rmqpb.LiteSubscriptionAction_PARTIAL_REMOVE:
		action = lite.PartialRemove
	case rmqpb.LiteSubscriptionAction_COMPLETE_ADD:
		action = lite.CompleteAdd
	case rmqpb.LiteSubscriptionAction_COMPLETE_REMOVE:
		action = lite.CompleteRemove
	default:
		return fail(badRequest(rmqpb.Code_BAD_REQUEST, "unknown lite subscription action "+r.GetAction().String()))
	}
	req := core.LiteSyncRequest{Client: c.id, Group: group, Parent: topic, Action: action, Lites: r.GetLiteTopicSet()}
	if o := r.GetOffsetOption(); o != nil {
		req.Offset.Set = true
		switch x := o.GetOffsetType().(type) {
		case *rmqpb.OffsetOption_Policy_:
			req.Offset.Policy = lite.Policy(x.Policy)
		case *rmqpb.OffsetOption_Offset:
			req.Offset.HasOffset, req.Offset.Offset = true, x.Offset
		case *rmqpb.OffsetOption_TailN:
			req.Offset.HasTailN, req.Offset.TailN = true, x.TailN
		default: // a timestamp: ignored, as RocketMQ's broker does
			req.Offset.Set = false
		}
	}
	if err := s.core.SyncLiteSubscription(&req); err != nil {
		return fail(err)
	}
	if action == lite.CompleteRemove {
		s.polls.Notified(c.id)
		s.polls.Forget(c.id)
	}
	return &rmqpb.SyncLiteSubscriptionResponse{Status: okStatus}, nil
}

// Lite receipt handles: "L offset popTime commitLogOffset liteTopic
// brokerName", decimal, separated by spaces (a lite topic has no space:
// core.CheckLiteTopic).
const liteHandlePrefix = "L "

func liteReceiptHandle(brokerName, l string, offset, popTime, commitLogOffset int64) string {
	b := make([]byte, 0, 64+len(l))
	b = append(b, liteHandlePrefix...)
	b = strconv.AppendInt(b, offset, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, popTime, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, commitLogOffset, 10)
	b = append(b, ' ')
	b = append(b, l...)
	b = append(b, ' ')
	b = append(b, brokerName...)
	return string(b)
}

type liteReceipt struct {
	lite                             string
	offset, popTime, commitLogOffset int64
}

// isLiteHandle reports whether h is a lite receipt handle.
func isLiteHandle(h string) bool { return strings.HasPrefix(h, liteHandlePrefix) }

// parseLiteReceipt reads a lite receipt handle and checks it against the
// request's lite_topic when the request names one.
func parseLiteReceipt(h string, want *string) (liteReceipt, error) {
	bad := badRequest(rmqpb.Code_INVALID_RECEIPT_HANDLE, "the receipt handle "+strconv.Quote(h)+" is not one this broker gave")
	f := strings.SplitN(strings.TrimPrefix(h, liteHandlePrefix), " ", 5)
	if len(f) != 5 {
		return liteReceipt{}, bad
	}
	var v [3]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return liteReceipt{}, bad
		}
		v[i] = n
	}
	if want != nil && *want != f[3] {
		return liteReceipt{}, badRequest(rmqpb.Code_INVALID_RECEIPT_HANDLE,
			"the receipt handle names lite topic "+strconv.Quote(f[3])+", the request "+strconv.Quote(*want))
	}
	return liteReceipt{lite: f[3], offset: v[0], popTime: v[1], commitLogOffset: v[2]}, nil
}

// litePool recycles lite receive results.
var litePool = sync.Pool{New: func() any { return new(core.LitePopResult) }}

// liteCall is a parked lite receive: what the holder re-runs.
type liteCall struct {
	req core.LitePopRequest
	res *core.LitePopResult
}

// receiveLite serves a lite group's receive: the client's events, FIFO per
// lite topic; with none it waits on the client.
func (s *Server) receiveLite(ctx context.Context, r *rmqpb.ReceiveMessageRequest, parent string, invisible, wait time.Duration,
	stream rmqpb.MessagingService_ReceiveMessageServer) *rmqpb.Status {
	group := r.GetGroup().GetName()
	topic := r.GetMessageQueue().GetTopic().GetName()
	c, err := s.clientOf(ctx)
	if err != nil {
		return errStatus(err)
	}
	if topic != parent {
		return errStatus(badRequest(rmqpb.Code_ILLEGAL_TOPIC, fmt.Sprintf(
			"lite group %s is expected to bind topic %s, but actual is %s", group, parent, topic)))
	}
	lc := &liteCall{req: core.LitePopRequest{Client: c.id, Group: group, Parent: parent, MaxMsgs: int(r.GetBatchSize()),
		Invisible: invisible}}
	lc.res = litePool.Get().(*core.LitePopResult)
	defer litePool.Put(lc.res)
	ticket := s.polls.Ticket()
	if err := s.core.PopLite(&lc.req, lc.res); err != nil {
		return errStatus(err)
	}
	// A client with no subscription (yet: a broker restarted keeps none,
	// and the SDK's COMPLETE_ADD comes within 30 s) waits too: its sync
	// wakes it (an event), a drop answers it (runLite).
	if len(lc.res.Msgs) == 0 && wait > 0 {
		err := s.hold(ctx, longpoll.Wait{Lite: true, Group: group, Queue: longpoll.AnyQueue,
			WakeAt: lc.res.NextVisible, Ticket: ticket}, wait, &heldCall{lite: lc})
		if errors.Is(err, errHeldFull) {
			return status(rmqpb.Code_TOO_MANY_REQUESTS, "too many receives are waiting for messages")
		}
		if err != nil {
			return errStatus(err)
		}
	}
	res := lc.res
	if len(res.Msgs) == 0 {
		return status(rmqpb.Code_MESSAGE_NOT_FOUND, "no new message")
	}
	if err := stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_DeliveryTimestamp{
		DeliveryTimestamp: timestamppb.Now()}}); err != nil {
		return status(rmqpb.Code_INTERNAL_SERVER_ERROR, err.Error())
	}
	for i := range res.Msgs {
		lm := &res.Msgs[i]
		v, err := message.Decode(lm.Record, false)
		if err != nil {
			s.log.Error("grpc: a received lite record does not decode", "topic", parent, "liteTopic", lm.Lite, "offset", lm.Offset, "err", err)
			continue
		}
		d := delivery{receipt: liteReceiptHandle(s.brokerName, lm.Lite, lm.Offset, res.PopTime, v.PhysicalOffset()),
			attempt: lm.Attempts, invisible: invisible}
		m := toMessage(v, parent, s.brokerName, &d)
		if sp := m.GetSystemProperties(); sp != nil {
			lt := lm.Lite
			sp.LiteTopic = &lt
		}
		if err := stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Message{Message: m}}); err != nil {
			// The client is gone: the batch comes back after its invisible time.
			return status(rmqpb.Code_INTERNAL_SERVER_ERROR, err.Error())
		}
		s.stats.received.Add(1)
	}
	return okStatus
}

// runLite re-runs a parked lite receive (the holder's Run).
func (h pollHost) runLite(c *heldCall, w *longpoll.Wait) bool {
	lc := c.lite
	if err := h.s.core.PopLite(&lc.req, lc.res); err != nil || len(lc.res.Msgs) > 0 || lc.res.Unknown {
		c.err = err
		close(c.done)
		return false
	}
	w.WakeAt = lc.res.NextVisible
	return true
}

// ackLite acknowledges one lite message of an AckMessage.
func (s *Server) ackLite(group, topic string, e *rmqpb.AckMessageEntry) error {
	rc, err := parseLiteReceipt(e.GetReceiptHandle(), e.LiteTopic)
	if err != nil {
		return err
	}
	return s.core.AckLite(group, topic, rc.lite, rc.offset, rc.popTime)
}

// changeInvisibleLite changes a lite message's invisibility.
func (s *Server) changeInvisibleLite(r *rmqpb.ChangeInvisibleDurationRequest, group, topic string, d time.Duration) (*rmqpb.ChangeInvisibleDurationResponse, error) {
	rc, err := parseLiteReceipt(r.GetReceiptHandle(), r.LiteTopic)
	if err == nil {
		_, err = s.core.ChangeInvisibleLite(group, topic, rc.lite, rc.offset, rc.popTime, d, r.GetSuspend())
	}
	if err != nil {
		return &rmqpb.ChangeInvisibleDurationResponse{Status: errStatus(err)}, nil
	}
	return &rmqpb.ChangeInvisibleDurationResponse{Status: okStatus, ReceiptHandle: r.GetReceiptHandle()}, nil
}

// deadLetterLite moves a lite message to the group's dead-letter queue.
func (s *Server) deadLetterLite(r *rmqpb.ForwardMessageToDeadLetterQueueRequest, group, topic string) error {
	rc, err := parseLiteReceipt(r.GetReceiptHandle(), r.LiteTopic)
	if err != nil {
		return err
	}
	p, err := s.core.DeadLetterLite(group, topic, rc.lite, rc.offset, rc.popTime, rc.commitLogOffset)
	if err == nil {
		err = s.core.WaitDurable(p)
	}
	return err
}

// isLiteClient reports whether a client type is a lite consumer's.
func isLiteClient(t rmqpb.ClientType) bool {
	return t == rmqpb.ClientType_LITE_PUSH_CONSUMER || t == rmqpb.ClientType_LITE_SIMPLE_CONSUMER
}

// liteSettings adds a lite consumer's settings: its group's
// lite.sub.client.quota and the longest lite topic name, FIFO delivery.
func liteSettings(sub *rmqpb.Subscription, in *rmqpb.Settings, cfg protocol.SubscriptionGroupConfig) {
	if !isLiteClient(in.GetClientType()) {
		return
	}
	quota, size, fifo := core.LiteClientQuota(cfg), int32(core.MaxLiteTopicSize), true
	sub.LiteSubscriptionQuota, sub.MaxLiteTopicSize, sub.Fifo = &quota, &size, &fifo
}

// liteReceive serves a receive of a lite group (done), or refuses a lite
// client's receive of a regular group and a regular client's receive of a
// lite group, as RocketMQ's proxy does (validateLiteMode).
func (s *Server) liteReceive(ctx context.Context, r *rmqpb.ReceiveMessageRequest, group string,
	stream rmqpb.MessagingService_ReceiveMessageServer) (*rmqpb.Status, bool) {
	parent, liteGroup := s.core.LiteGroup(group)
	ct := rmqpb.ClientType_CLIENT_TYPE_UNSPECIFIED
	if c := s.clientLookup(ctx); c != nil {
		c.mu.Lock()
		ct = c.settings.GetClientType()
		c.mu.Unlock()
	}
	liteClient := isLiteClient(ct)
	if ct == rmqpb.ClientType_CLIENT_TYPE_UNSPECIFIED {
		// A client whose settings this front end has not seen (after a
		// failover its connection moved here, and the SDK sends its
		// settings again only when it reopens its telemetry stream, minutes
		// later): its queue says whether it is a lite consumer.
		liteClient = slices.Contains(r.GetMessageQueue().GetAcceptMessageTypes(), rmqpb.MessageType_LITE)
	}
	switch {
	case !liteGroup && !liteClient:
		return nil, false
	case !liteGroup:
		return status(rmqpb.Code_ILLEGAL_CONSUMER_GROUP, "regular group cannot use LITE mode: "+group), true
	case !liteClient:
		return errStatus(s.core.CheckLiteMode(group)), true
	}
	invisible := 30 * time.Second
	if r.InvisibleDuration != nil {
		if !r.InvisibleDuration.IsValid() {
			return status(rmqpb.Code_ILLEGAL_INVISIBLE_TIME, "the invisible duration is malformed"), true
		}
		invisible = r.InvisibleDuration.AsDuration()
	}
	if invisible < time.Millisecond || invisible.Milliseconds() > core.MaxInvisibleMs {
		return status(rmqpb.Code_ILLEGAL_INVISIBLE_TIME, fmt.Sprintf("the invisible duration %v is not in 1ms..%v", invisible,
			time.Duration(core.MaxInvisibleMs)*time.Millisecond)), true
	}
	wait := s.core.Options().LongPollMax
	if r.LongPollingTimeout != nil {
		if !r.LongPollingTimeout.IsValid() || r.LongPollingTimeout.AsDuration() < 0 {
			return status(rmqpb.Code_ILLEGAL_POLLING_TIME, "the long polling timeout is malformed"), true
		}
		wait = min(wait, r.LongPollingTimeout.AsDuration())
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-longPollReserve)
	}
	return s.receiveLite(ctx, r, parent, invisible, wait, stream), true
}
