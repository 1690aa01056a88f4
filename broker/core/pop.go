package core

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/apogeemq/apogee/broker/pop"
	"github.com/apogeemq/apogee/filter"
)

// POP consumption (RocketMQ 5's message-granularity model): the operations
// check the topic, queue and group and call package broker/pop's Manager
// (the bookkeeping: invisibility, redelivery, receipt handles, FIFO message
// groups, dead letters, popState.json), whose Host is popHost. Receipt
// handles are the front end's to parse and build.

// MaxInvisibleMs is the longest invisible time of a pop or a change, in ms
// (pop.MaxInvisible).
const MaxInvisibleMs = int64(pop.MaxInvisible / time.Millisecond)

// PopRequest is a consumer's pop (POP_MESSAGE, 3442). Its byte slices may
// alias the front end's request buffer: Pop keeps none of them.
type PopRequest struct {
	Group, Topic []byte
	QueueID      int32 // negative: any queue
	MaxMsgs      int32 // 1..pop.MaxMessages
	// InvisibleTime (ms, 1..MaxInvisibleMs) is how long a popped message
	// stays invisible to the rest of the group.
	InvisibleTime int64
	// FromFirst starts a group new to a queue at its first message (Java's
	// ConsumeInitMode.MIN), otherwise at its last.
	FromFirst bool
	// Orderly pops FIFO: a message group's messages in order, a batch of
	// consecutive ones per answer, none while one is in flight from an
	// earlier pop (package broker/pop).
	Orderly bool
	// ExpressionType and Expression filter the messages ("" or "*": all).
	ExpressionType, Expression []byte
	// Consumer is the consumer's address, for the remark of a refusal.
	Consumer netip.AddrPort
}

// Popped is one message a pop handed out: its queue, queue offset and how
// many times it was delivered (package broker/pop's Popped).
type Popped = pop.Popped

// PopResult is a pop's outcome: pop.Result (the records, each with its
// queue, offset and delivery count; the pop time; the messages left) and
// what the answer repeats of the request. It is the caller's; PopAgain runs
// the same pop again with it.
type PopResult struct {
	pop.Result
	// Invisible is the request's invisible time; Orderly whether it popped
	// orderly.
	Invisible time.Duration
	Orderly   bool

	req pop.Request
}

// Group and Topic are the group and topic popped (the tables' strings).
func (r *PopResult) Group() string { return r.req.Group }
func (r *PopResult) Topic() string { return r.req.Topic }

// Pop hands out up to MaxMsgs messages of a topic (one queue, or any) to a
// consumer group, each invisible to the rest of the group until acked or
// until its invisible time passes (see package broker/pop). It checks the
// arguments, the topic (readable) and queue, creates the group on first
// use and compiles the filter (cached per expression). Finding nothing is
// no error: res.Msgs is empty, and the caller may hold the pop and run it
// again with PopAgain.
func (c *Core) Pop(r *PopRequest, res *PopResult) error {
	if c.slave.Load() {
		return errSlavePop
	}
	if r.MaxMsgs <= 0 || r.MaxMsgs > pop.MaxMessages {
		return newError(ReasonInvalidParameter, fmt.Sprintf("maxMsgNums %d is not in 1..%d", r.MaxMsgs, pop.MaxMessages))
	}
	if !validInvisibleTime(r.InvisibleTime) {
		return newError(ReasonInvisibleTimeIllegal, fmt.Sprintf("invisibleTime %d ms is not in 1..%d", r.InvisibleTime, MaxInvisibleMs))
	}
	t := c.topics.get(r.Topic)
	if t == nil {
		return newError(ReasonTopicNotExist, "topic["+string(r.Topic)+"] not exist, apply first please!")
	}
	if !t.readable() {
		return newError(ReasonTopicPermission, "the topic["+t.name+"] peeking message is forbidden")
	}
	if r.QueueID >= t.cfg.ReadQueueNums {
		return newError(ReasonQueueIllegal, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d] consumer:[%s]",
			r.QueueID, t.name, t.cfg.ReadQueueNums, r.Consumer))
	}
	g, err := c.groupForConsumer(r.Group, r.Consumer.Addr().Unmap())
	if err != nil {
		return err
	}
	var f filter.Filter
	if len(r.Expression) > 0 {
		if f, err = c.filters.get(r.ExpressionType, r.Expression); err != nil {
			return wrapError(ReasonSubscriptionParseFailed, "parse the consumer's subscription failed: "+err.Error(), err)
		}
	}
	res.req = pop.Request{Group: g.GroupName, Topic: t.name, QueueID: max(r.QueueID, -1), Queues: t.cfg.ReadQueueNums,
		Max: int(r.MaxMsgs), Invisible: time.Duration(r.InvisibleTime) * time.Millisecond,
		FromFirst: r.FromFirst, Orderly: r.Orderly, RetryMax: g.RetryMaxTimes}
	if tt, ok := t.msgType(); ok && tt == MessagePriority && r.QueueID < 0 && !r.Orderly {
		// RocketMQ 5.4's priority mode (RIP-80): a PRIORITY topic's
		// queues from the highest priority down, retries after the backlog
		// (or before it, for PriorityRetryFirstPercent of the pops).
		res.req.Priority, res.req.PriorityZeroHighest = true, c.opts.PriorityQueueZeroHighest
		if p := c.opts.PriorityRetryFirstPercent; p > 0 {
			n := c.priorityPops.Add(1)
			res.req.RetryFirst = n%uint64(100/p) == 0
		}
	}
	if f != nil {
		res.req.Filter = f
	}
	res.Invisible, res.Orderly = res.req.Invisible, r.Orderly
	return popError(c.features().pops.Pop(&res.req, &res.Result))
}

// PopAgain runs the pop of an earlier Pop again (a held pop looking for
// new messages), with res, that Pop's result.
func (c *Core) PopAgain(res *PopResult) error {
	return popError(c.features().pops.Pop(&res.req, &res.Result))
}

// ReviveFunc is told that messages of group in (topic, queueID) become
// visible to its pops at at: at once when at is not after now (an ack
// unblocked a FIFO message group or made room in a full queue), otherwise
// then (an invisible time was changed). It runs on the goroutine of the
// Ack or ChangeInvisible that caused it and must not block.
type ReviveFunc func(group, topic string, queueID int32, at time.Time)

// OnRevive registers fn to be told of the POP changes that make messages
// visible again sooner than a pop that found nothing could know from its
// PopResult.NextVisible (package broker/pop's OnVisible): a front end
// wakes the pops it holds for the group, or moves their wake-up time
// earlier. Listeners may be added at any time and are never removed.
//
// The listeners outlive role changes: each promotion's new POP state
// (SetRole) is given them too.
func (c *Core) OnRevive(fn ReviveFunc) {
	c.roleMu.Lock()
	defer c.roleMu.Unlock()
	vf := func(group, topic string, queue int32, at int64) {
		fn(group, topic, queue, time.UnixMilli(at))
	}
	c.revivers = append(c.revivers, vf)
	c.features().pops.OnVisible(vf)
}

// NextVisibleTime is r.NextVisible as a time: when a held pop that found
// nothing should look again for a message of its group whose invisible
// time ends; zero when none is in flight.
func (r *PopResult) NextVisibleTime() time.Time {
	if r.NextVisible == 0 {
		return time.Time{}
	}
	return time.UnixMilli(r.NextVisible)
}

// Receipt is what the operations on a popped message need of its receipt
// handle (which the front end parses): the queue it names and the pop time
// of the delivery.
type Receipt struct {
	QueueID int32
	PopTime int64
}

// Ack acknowledges a popped message (ACK_MESSAGE, 3443): it is done for the
// group. NO_MESSAGE (208) for a stale handle (the message was delivered
// again since) or a message not in flight; the ack of a message acked
// already with its handle succeeds again (acks are idempotent on every
// front end: broker/scenario's pop-ack).
func (c *Core) Ack(group, topic []byte, queueID int32, offset int64, rc Receipt) error {
	if c.slave.Load() {
		return errSlavePop
	}
	t, err := c.receiptTopic(topic, queueID, rc)
	if err != nil {
		return err
	}
	return popError(c.features().pops.Ack(string(group), t.name, queueID, offset, rc.PopTime))
}

// ChangeInvisible moves the time a popped message becomes visible again to
// invisibleMs from now (CHANGE_MESSAGE_INVISIBLETIME, 3445) and returns the
// delivery's new pop time (the old receipt handle is void); refusals as
// Ack's.
func (c *Core) ChangeInvisible(group, topic []byte, queueID int32, offset int64, rc Receipt, invisibleMs int64) (int64, error) {
	if c.slave.Load() {
		return 0, errSlavePop
	}
	if !validInvisibleTime(invisibleMs) {
		return 0, newError(ReasonInvisibleTimeIllegal, fmt.Sprintf("invisibleTime %d ms is not in 1..%d", invisibleMs, MaxInvisibleMs))
	}
	t, err := c.receiptTopic(topic, queueID, rc)
	if err != nil {
		return 0, err
	}
	popTime, err := c.features().pops.ChangeInvisible(string(group), t.name, queueID, offset, rc.PopTime,
		time.Duration(invisibleMs)*time.Millisecond)
	return popTime, popError(err)
}

// validInvisibleTime reports whether an invisible time (ms) is in
// 1..MaxInvisibleMs.
func validInvisibleTime(ms int64) bool { return ms > 0 && ms <= MaxInvisibleMs }

// receiptTopic checks the common part of Ack and ChangeInvisible: the
// topic, the queue and that the receipt handle is of that queue.
func (c *Core) receiptTopic(topic []byte, queueID int32, rc Receipt) (*topicEntry, error) {
	t := c.topics.get(topic)
	if t == nil {
		return nil, newError(ReasonTopicNotExist, "topic["+string(topic)+"] not exist, apply first please!")
	}
	if queueID < 0 || queueID >= t.cfg.ReadQueueNums {
		return nil, newError(ReasonAckQueueIllegal, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d]", queueID, t.name, t.cfg.ReadQueueNums))
	}
	if rc.QueueID != queueID {
		return nil, newError(ReasonReceiptHandleIllegal, fmt.Sprintf("the receipt handle is of queue %d, not %d", rc.QueueID, queueID))
	}
	return t, nil
}

// popError maps the POP manager's refusals: NO_MESSAGE for an ack or change
// with a stale handle or of a message not in flight, and for a change of
// one acked already (an ack of it succeeds);
// INVALID_PARAMETER for arguments out of bounds.
func popError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pop.ErrStaleHandle):
		return wrapError(ReasonReceiptHandleExpired, "the receipt handle is expired: the message was received again since", err)
	case errors.Is(err, pop.ErrNotInFlight):
		return wrapError(ReasonMessageNotInFlight, "the message is not in flight for the group", err)
	case errors.Is(err, pop.ErrAcked):
		return wrapError(ReasonMessageAcked, "the message was acked already", err)
	case errors.Is(err, pop.ErrInvalidArgument):
		return wrapError(ReasonInvalidParameter, err.Error(), err)
	}
	return wrapError(ReasonSystemError, err.Error(), err)
}
