package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// SimpleConsumer is RocketMQ 5's message-granularity consumer: Receive pops a
// batch of messages from the brokers (POP_MESSAGE), each of which stays invisible
// to the rest of the group for the invisible duration; Ack finishes one
// (ACK_MESSAGE); ChangeInvisibleDuration extends or shortens its invisibility
// (CHANGE_MESSAGE_INVISIBLETIME). A message not acked in time becomes visible
// again and is received again (ReconsumeTimes counts the earlier deliveries); after
// the group's retryMaxTimes (16) it goes to %DLQ%<group>.
//
// There is no rebalance: every consumer of the group pops from every queue, and the
// broker hands each message to one of them at a time, so several simple consumers
// share even a single queue message by message. With ReceiveOrderly, messages of
// one message group (ShardingKey) are received in order, consecutive ones together
// in one Receive (a batch, as RocketMQ's orderly pop): the next receive gets none of
// the group until those are acked.
//
// Each received message carries its receipt handle in the POP_CK property; Ack and
// ChangeInvisibleDuration use it (ChangeInvisibleDuration replaces it with the new
// one). A handle from an older delivery is refused (ErrInvalidReceipt).
//
// A SimpleConsumer sends no heartbeats and joins no group on the broker side, so any
// number of them may share a group, in one process or many. Its methods are safe for
// concurrent use, but the same *MessageExt must not be passed to two calls at once.
type SimpleConsumer struct {
	cfg    simpleConfig
	in     *instance
	topics []string
	subs   map[string]*subscription
	next   atomic.Uint32 // round robin over (topic, broker)
	closed atomic.Bool
	mu     sync.Mutex // guards release
	done   bool
}

// PropPopCK is the property holding a received message's receipt handle (the
// Java client's POP_CK).
const PropPopCK = "POP_CK"

// Defaults of the simple consumer.
const (
	// DefaultAwaitDuration is how long Receive lets a broker hold the request when
	// no message is ready (long polling).
	DefaultAwaitDuration = 5 * time.Second
	// MaxReceiveMessages is the most messages one Receive returns (the broker's
	// limit for one pop).
	MaxReceiveMessages = 32
)

// ErrInvalidReceipt: Ack or ChangeInvisibleDuration with a message that has no
// receipt handle, or whose handle the broker refused (the message was received
// again since, acked already, or the handle is not of this group).
var ErrInvalidReceipt = errors.New("client: invalid or expired receipt handle")

// SimpleConsumerOpt configures a SimpleConsumer. Every Opt and ConsumerOpt fits
// (NameServer, ConsumerGroup, Subscribe, SubscribeSQL, WithConsumeFrom,
// RequestTimeout, ...; options about rebalancing, pulling and offsets do not apply),
// plus the options below. PullConsumer-only options are refused by
// NewSimpleConsumer, and the options below by the other constructors.
type SimpleConsumerOpt interface{ applyPull(*pullConfig) }

type simpleConfig struct {
	consumerConfig
	await   time.Duration
	orderly bool
}

type simpleOpt struct {
	name string
	fn   func(*simpleConfig)
}

// applyPull reports a SimpleConsumer option given to NewPullConsumer.
func (o simpleOpt) applyPull(c *pullConfig) {
	c.client.errf("%s is a SimpleConsumer option", o.name)
}

// AwaitDuration is how long a Receive may wait on a broker for messages when none
// is ready (the broker holds the pop: long polling); 0 returns at once. Receive
// never waits past its context's deadline. Default 5 s.
func AwaitDuration(d time.Duration) SimpleConsumerOpt {
	return simpleOpt{"AwaitDuration", func(c *simpleConfig) { c.await = d }}
}

// ReceiveOrderly makes Receive pop orderly: messages of one message group
// (ShardingKey) are handed out in queue order, consecutive ones together in one
// Receive; the group's next stay invisible until those are acked (or
// dead-lettered). Messages without a sharding key are not ordered. Default off.
func ReceiveOrderly(on bool) SimpleConsumerOpt {
	return simpleOpt{"ReceiveOrderly", func(c *simpleConfig) { c.orderly = on }}
}

// NewSimpleConsumer creates a simple consumer. ConsumerGroup, at least one
// Subscribe and a name server are required. WithConsumeFrom decides where a group
// new to a queue starts: ConsumeFromFirstOffset at the queue's first message,
// otherwise (the default, and for ConsumeFromTimestamp) at its last message.
func NewSimpleConsumer(opts ...SimpleConsumerOpt) (*SimpleConsumer, error) {
	pc := defaultPullConfig()
	sc := simpleConfig{await: DefaultAwaitDuration}
	for _, o := range opts {
		switch o := o.(type) {
		case simpleOpt:
			o.fn(&sc)
		case pullOpt:
			pc.client.errf("a PullConsumer option (AutoCommit, MaxPollRecords) was given to NewSimpleConsumer")
		case nil:
			pc.client.errf("nil option")
		default:
			o.applyPull(&pc)
		}
	}
	pc.consumerConfig.validate(true)
	if sc.await < 0 {
		pc.client.errf("AwaitDuration must not be negative")
	}
	if pc.model != Clustering {
		pc.client.errf("a SimpleConsumer consumes in clustering mode only")
	}
	if err := pc.client.err(); err != nil {
		return nil, err
	}
	sc.consumerConfig = pc.consumerConfig
	in, err := acquireInstance(&sc.client)
	if err != nil {
		return nil, err
	}
	s := &SimpleConsumer{cfg: sc, in: in, subs: map[string]*subscription{}}
	for i := range sc.subs {
		sub := sc.subs[i]
		s.subs[sub.topic] = &sub
		s.topics = append(s.topics, sub.topic)
	}
	in.addInterest(s.topics...)
	return s, nil
}

// Receive returns up to max messages (1..32) that no other consumer of the group
// holds, each invisible to the group for invisible (at least 1 ms). It asks the
// subscribed topics' brokers in turn, and when none has a message ready, lets one
// of them hold the request for up to AwaitDuration (or until ctx ends); it then
// returns an empty slice and no error.
func (s *SimpleConsumer) Receive(ctx context.Context, max int, invisible time.Duration) ([]*MessageExt, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if max <= 0 || max > MaxReceiveMessages {
		return nil, fmt.Errorf("%w: Receive of %d messages (1..%d)", ErrConfig, max, MaxReceiveMessages)
	}
	if invisible < time.Millisecond {
		return nil, fmt.Errorf("%w: invisible duration %v is under 1 ms", ErrConfig, invisible)
	}
	targets, err := s.targets(ctx)
	if err != nil {
		return nil, err
	}
	start := int(s.next.Add(1))
	var lastErr error
	for i := range targets {
		t := targets[(start+i)%len(targets)]
		msgs, err := s.pop(ctx, t, max, invisible, 0)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		if len(msgs) > 0 {
			return msgs, nil
		}
	}
	if lastErr != nil && len(targets) == 1 {
		return nil, lastErr
	}
	await := s.cfg.await
	if dl, ok := ctx.Deadline(); ok {
		await = min(await, time.Until(dl)-s.cfg.client.requestTimeout/2)
	}
	if await < 10*time.Millisecond {
		return []*MessageExt{}, nil
	}
	msgs, err := s.pop(ctx, targets[start%len(targets)], max, invisible, await)
	if err != nil {
		return nil, err
	}
	if msgs == nil {
		msgs = []*MessageExt{}
	}
	return msgs, nil
}

// popTarget is one broker of one subscribed topic.
type popTarget struct {
	topic, broker string
}

// targets lists (topic, broker) pairs with readable queues, sorted.
func (s *SimpleConsumer) targets(ctx context.Context) ([]popTarget, error) {
	var out []popTarget
	var lastErr error
	for _, topic := range s.topics {
		r, err := s.in.route(ctx, topic)
		if err != nil {
			lastErr = err
			continue
		}
		seen := map[string]bool{}
		for _, q := range r.subscribe {
			if !seen[q.BrokerName] {
				seen[q.BrokerName] = true
				out = append(out, popTarget{topic, q.BrokerName})
			}
		}
	}
	if len(out) == 0 {
		if lastErr != nil {
			return nil, lastErr
		}
		return nil, fmt.Errorf("%w: no readable queue for %v", ErrNoRoute, s.topics)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].broker < out[j].broker
	})
	return out, nil
}

// pop sends one POP_MESSAGE to a broker, held for up to poll.
func (s *SimpleConsumer) pop(ctx context.Context, t popTarget, max int, invisible, poll time.Duration) ([]*MessageExt, error) {
	addr := s.in.masterAddr(t.broker)
	if addr == "" {
		return nil, fmt.Errorf("%w: no address of broker %s", ErrNoRoute, t.broker)
	}
	sub := s.subs[t.topic]
	h := protocol.PopMessageRequest{
		ConsumerGroup: []byte(s.cfg.group), Topic: []byte(t.topic), QueueID: -1, MaxMsgNums: int32(max),
		InvisibleTime: invisible.Milliseconds(), PollTime: poll.Milliseconds(), BornTime: time.Now().UnixMilli(),
		InitMode: 1, Order: s.cfg.orderly,
	}
	if s.cfg.from == ConsumeFromFirstOffset {
		h.InitMode = 0
	}
	if sub != nil && sub.expr != "" && sub.expr != "*" {
		h.Exp = []byte(sub.expr)
		h.ExpType = []byte("TAG")
		if sub.sql {
			h.ExpType = []byte("SQL92")
		}
	}
	req := s.in.newRequest(protocol.ReqPopMessage)
	h.Encode(&req.Ext)
	resp, err := s.in.invoke(ctx, addr, req, poll+s.cfg.client.requestTimeout)
	if err != nil {
		return nil, fmt.Errorf("client: pop %s from %s: %w", t.topic, t.broker, err)
	}
	switch resp.Code {
	case protocol.RespSuccess:
	case protocol.RespPullNotFound, protocol.RespPollingTimeout, protocol.RespNoMessage:
		return nil, nil
	default:
		return nil, fmt.Errorf("client: pop %s from %s: %w", t.topic, t.broker, brokerError(addr, resp))
	}
	var rh protocol.PopMessageResponse
	if err := rh.Decode(&resp.Ext); err != nil {
		return nil, fmt.Errorf("client: pop %s from %s: %w", t.topic, t.broker, err)
	}
	starts := parseStartOffsets(string(rh.StartOffsetInfo))
	var msgs []*MessageExt
	err = message.ForEachRecord(resp.Body, false, func(v message.View) error {
		mq := MessageQueue{Topic: t.topic, BrokerName: t.broker, QueueID: v.QueueID()}
		m, derr := decodeMessage(v, mq)
		if derr != nil {
			s.in.log.Warn("client: message body does not inflate; delivered as stored", "queue", mq, "offset", v.QueueOffset(), "err", derr)
		}
		if sub != nil && !sub.sql && !sub.matchTag(m.Tags) {
			// A broker that does not filter (or filters by hash code only): the
			// message is not for us; ack it so it does not come back.
			x := handleOf(rh.PopTime, rh.InvisibleTime, rh.ReviveQid, starts, t.broker, v)
			_ = s.ack(ctx, addr, t.topic, v.QueueID(), v.QueueOffset(), x)
			return nil
		}
		m.Properties[PropPopCK] = handleOf(rh.PopTime, rh.InvisibleTime, rh.ReviveQid, starts, t.broker, v)
		msgs = append(msgs, m)
		return nil
	})
	if err != nil {
		s.in.log.Warn("client: malformed pop body", "topic", t.topic, "broker", t.broker, "err", err)
	}
	return msgs, nil
}

// parseStartOffsets reads startOffsetInfo ("0 queueId offset" joined by ';') into
// queue id → start offset; malformed parts are skipped.
func parseStartOffsets(s string) map[int32]int64 {
	out := map[int32]int64{}
	for _, part := range strings.Split(s, ";") {
		f := strings.Fields(part)
		if len(f) != 3 {
			continue
		}
		q, err1 := strconv.ParseInt(f[1], 10, 32)
		off, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil {
			out[int32(q)] = off
		}
	}
	return out
}

// handleOf builds a message's receipt handle as the Java client does.
func handleOf(popTime, invisible int64, reviveQid int32, starts map[int32]int64, broker string, v message.View) string {
	x := protocol.ExtraInfo{CkQueueOffset: starts[v.QueueID()], PopTime: popTime, InvisibleTime: invisible,
		ReviveQid: reviveQid, Retry: isRetryTopic(string(v.Topic())), BrokerName: []byte(broker),
		QueueID: v.QueueID(), QueueOffset: v.QueueOffset()}
	return string(protocol.AppendExtraInfo(nil, &x))
}

// receipt returns m's queue, parsed handle and broker address.
func (s *SimpleConsumer) receipt(m *MessageExt) (MessageQueue, protocol.ExtraInfo, string, error) {
	if m == nil || m.Queue == nil {
		return MessageQueue{}, protocol.ExtraInfo{}, "", fmt.Errorf("%w: message without a queue", ErrInvalidReceipt)
	}
	h := m.Properties[PropPopCK]
	if h == "" {
		return MessageQueue{}, protocol.ExtraInfo{}, "", fmt.Errorf("%w: message without %s", ErrInvalidReceipt, PropPopCK)
	}
	x, err := protocol.ParseExtraInfo([]byte(h))
	if err != nil {
		return MessageQueue{}, protocol.ExtraInfo{}, "", fmt.Errorf("%w: %w", ErrInvalidReceipt, err)
	}
	addr := s.in.masterAddr(m.Queue.BrokerName)
	if addr == "" {
		return MessageQueue{}, protocol.ExtraInfo{}, "", fmt.Errorf("%w: no address of broker %s", ErrNoRoute, m.Queue.BrokerName)
	}
	return *m.Queue, x, addr, nil
}

// Ack tells the broker that m is consumed: it is not delivered to the group again.
// An ack with the handle of an older delivery (m was not acked in time and was
// received again since) fails with ErrInvalidReceipt; acking twice succeeds.
func (s *SimpleConsumer) Ack(ctx context.Context, m *MessageExt) error {
	if s.closed.Load() {
		return ErrClosed
	}
	mq, _, addr, err := s.receipt(m)
	if err != nil {
		return err
	}
	return s.ack(ctx, addr, mq.Topic, mq.QueueID, m.QueueOffset, m.Properties[PropPopCK])
}

func (s *SimpleConsumer) ack(ctx context.Context, addr, topic string, qid int32, offset int64, handle string) error {
	req := s.in.newRequest(protocol.ReqAckMessage)
	(&protocol.AckMessageRequest{ConsumerGroup: []byte(s.cfg.group), Topic: []byte(topic), QueueID: qid,
		ExtraInfo: []byte(handle), Offset: offset}).Encode(&req.Ext)
	resp, err := s.in.invoke(ctx, addr, req, s.cfg.client.requestTimeout)
	if err != nil {
		return fmt.Errorf("client: ack %s queue %d offset %d: %w", topic, qid, offset, err)
	}
	return receiptError("ack", topic, qid, offset, addr, resp)
}

func receiptError(op, topic string, qid int32, offset int64, addr string, resp *protocol.Command) error {
	switch resp.Code {
	case protocol.RespSuccess:
		return nil
	case protocol.RespNoMessage, protocol.RespInvalidParameter:
		return fmt.Errorf("client: %s %s queue %d offset %d: %w: %w", op, topic, qid, offset, ErrInvalidReceipt, brokerError(addr, resp))
	}
	return fmt.Errorf("client: %s %s queue %d offset %d: %w", op, topic, qid, offset, brokerError(addr, resp))
}

// ChangeInvisibleDuration makes m invisible for d (at least 1 ms) from now, and
// gives m the new receipt handle (its old one is void). Use it to keep a message
// that takes long to process, or, with a short d, to have it delivered again soon.
func (s *SimpleConsumer) ChangeInvisibleDuration(ctx context.Context, m *MessageExt, d time.Duration) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if d < time.Millisecond {
		return fmt.Errorf("%w: invisible duration %v is under 1 ms", ErrConfig, d)
	}
	mq, x, addr, err := s.receipt(m)
	if err != nil {
		return err
	}
	req := s.in.newRequest(protocol.ReqChangeMessageInvisibleTime)
	(&protocol.ChangeInvisibleTimeRequest{ConsumerGroup: []byte(s.cfg.group), Topic: []byte(mq.Topic), QueueID: mq.QueueID,
		ExtraInfo: []byte(m.Properties[PropPopCK]), Offset: m.QueueOffset, InvisibleTime: d.Milliseconds()}).Encode(&req.Ext)
	resp, err := s.in.invoke(ctx, addr, req, s.cfg.client.requestTimeout)
	if err != nil {
		return fmt.Errorf("client: change invisible time of %s queue %d offset %d: %w", mq.Topic, mq.QueueID, m.QueueOffset, err)
	}
	if err := receiptError("change invisible time of", mq.Topic, mq.QueueID, m.QueueOffset, addr, resp); err != nil {
		return err
	}
	var rh protocol.ChangeInvisibleTimeResponse
	if err := rh.Decode(&resp.Ext); err != nil {
		return fmt.Errorf("client: change invisible time of %s queue %d offset %d: %w", mq.Topic, mq.QueueID, m.QueueOffset, err)
	}
	x.PopTime, x.InvisibleTime, x.ReviveQid = rh.PopTime, rh.InvisibleTime, rh.ReviveQid
	x.CkQueueOffset, x.QueueOffset = m.QueueOffset, m.QueueOffset
	m.Properties[PropPopCK] = string(protocol.AppendExtraInfo(nil, &x))
	return nil
}

// Close stops the consumer. Messages received and not acked become visible to
// the group again when their invisible time passes. Closing twice returns
// ErrClosed.
func (s *SimpleConsumer) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.done = true
		s.in.dropInterest(s.topics...)
		s.in.release()
	}
	return nil
}
