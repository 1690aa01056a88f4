package core

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker/lite"
	"github.com/apogeemq/apogee/store"
)

// Lite topics (RocketMQ 5.5, RIP-83; docs/lite-topics.md): the parent
// topic is a topic of message.type=LITE; a message names its lite topic
// in __LITE_TOPIC and is stored once, in the parent's queue, and indexed
// by the store under (parent, lite topic) too (store.GetLite). A lite
// group (lite.bind.topic=<parent>) consumes lite topics its clients
// subscribe to one by one (SyncLiteSubscription), event-driven: the
// store's lite arrivals go to broker/lite's registry, which gives one
// client per group an event and wakes it (OnLiteNotify); the client's
// receive (PopLite) drains its events, FIFO per lite topic. Offsets of
// lite groups are the store's (CommitLiteOffset), not consumerOffset.json.
// Idle lite topics expire by their parent's lite.topic.expiration
// (liteExpiry). All of it is the master's: a slave refuses lite receives
// as it refuses POPs (the gRPC front end forwards them to the master).

// liteState is the core's lite topic state.
type liteState struct {
	reg *lite.Registry

	mu          sync.Mutex
	notify      []func(client string)
	unsubscribe []func(client, group, parent, lite string)

	getPool sync.Pool // *store.GetResult
}

// liteHost is the registry's host: the store's lite offsets and the
// core's listeners.
type liteHost struct{ c *Core }

func (h liteHost) LiteMax(parent, l string) int64 {
	_, max, _ := h.c.store.LiteOffsets(parent, l)
	return max
}

func (h liteHost) Offset(group, parent, l string) (int64, bool) {
	return h.c.store.LiteOffset(group, parent, l)
}

func (h liteHost) Commit(group, parent, l string, off int64) error {
	return h.c.store.CommitLiteOffset(group, parent, l, off)
}

func (h liteHost) Notify(client string) {
	h.c.lite.mu.Lock()
	fns := h.c.lite.notify
	h.c.lite.mu.Unlock()
	for _, fn := range fns {
		fn(client)
	}
}

func (h liteHost) Unsubscribed(client, group, parent, l string) {
	h.c.lite.mu.Lock()
	fns := h.c.lite.unsubscribe
	h.c.lite.mu.Unlock()
	for _, fn := range fns {
		fn(client, group, parent, l)
	}
}

// newLiteState returns the core's lite state (New calls it).
func newLiteState(c *Core) *liteState {
	s := &liteState{}
	s.reg = lite.New(liteHost{c}, lite.Options{MaxSubscriptions: c.opts.LiteMaxSubscriptions,
		MaxClientEvents: c.opts.LiteMaxClientEvents})
	s.getPool.New = func() any { return new(store.GetResult) }
	return s
}

// liteArrived is the store's report that a lite topic grew (OnLiteArrival).
func (c *Core) liteArrived(parent, l string, maxOffset int64) {
	if c.lite != nil {
		c.lite.reg.Arrived(parent, l, maxOffset)
	}
}

// OnLiteNotify registers fn to be told that a lite client has something
// to receive (an event, or one of its deliveries changed): the front end
// wakes the client's parked receive. fn must not block.
func (c *Core) OnLiteNotify(fn func(client string)) {
	c.lite.mu.Lock()
	defer c.lite.mu.Unlock()
	c.lite.notify = append(c.lite.notify, fn)
}

// OnLiteUnsubscribe registers fn to be told that a client lost a lite
// topic to another client of an exclusive group: the front end tells the
// client (NotifyUnsubscribeLiteCommand).
func (c *Core) OnLiteUnsubscribe(fn func(client, group, parent, lite string)) {
	c.lite.mu.Lock()
	defer c.lite.mu.Unlock()
	c.lite.unsubscribe = append(c.lite.unsubscribe, fn)
}

// LiteGroup reports whether group is a lite group (lite.bind.topic set)
// and its parent topic.
func (c *Core) LiteGroup(group string) (parent string, ok bool) {
	g := c.groups.get([]byte(group))
	if g == nil {
		return "", false
	}
	p := LiteBindTopic(*g)
	return p, p != ""
}

// liteGroup checks that group is a lite group bound to parent, a LITE
// topic, and may consume, as RocketMQ's proxy (validateLiteMode,
// validateLiteBindTopic) and broker (PopLiteMessageProcessor's pre-checks)
// do, and returns its lite configuration.
func (c *Core) liteGroup(group, parent string) (lite.Group, error) {
	g := c.groups.get([]byte(group))
	if g == nil {
		return lite.Group{}, newError(ReasonSubscriptionGroupNotExist, "subscription group ["+group+"] not exist")
	}
	bind := LiteBindTopic(*g)
	if bind == "" {
		return lite.Group{}, newError(ReasonLiteGroupMode, "regular group cannot use LITE mode: "+group)
	}
	if bind != parent {
		return lite.Group{}, newError(ReasonLiteBindTopic, fmt.Sprintf("lite group %s is expected to bind topic %s, but actual is %s", group, bind, parent))
	}
	t := c.topics.get([]byte(parent))
	if t == nil {
		return lite.Group{}, newError(ReasonTopicNotExist, "topic["+parent+"] not exist, apply first please!")
	}
	if !isLiteParent(t) {
		return lite.Group{}, newError(ReasonLiteBindTopic, "the topic ["+parent+"] message type not match: it is not a LITE topic")
	}
	if !t.readable() {
		return lite.Group{}, newError(ReasonTopicPermission, "the topic["+parent+"] peeking message is forbidden")
	}
	if !g.ConsumeEnable {
		return lite.Group{}, newError(ReasonGroupConsumeDisabled, "Consumer group is not allowed to consume: "+group)
	}
	out := lite.Group{Name: group, Parent: parent, Exclusive: g.Attributes[attrLiteSubModel] == "Exclusive",
		Quota: int(LiteClientQuota(*g)), ResetOnExclusive: g.Attributes[attrLiteResetExclusive] == "true",
		ResetOnUnsubscribe: g.Attributes[attrLiteResetUnsubscribe] == "true"}
	if n, err := strconv.Atoi(g.Attributes[attrLiteMaxEvents]); err == nil {
		out.MaxEvents = n
	}
	return out, nil
}

// CheckLiteMode refuses a lite group in a receive that is not a lite one
// (ReasonLiteGroupMode, RocketMQ's "lite group must use LITE mode").
func (c *Core) CheckLiteMode(group string) error {
	if _, ok := c.LiteGroup(group); ok {
		return newError(ReasonLiteGroupMode, "lite group must use LITE mode: "+group)
	}
	return nil
}

// LiteSyncRequest is a SyncLiteSubscription.
type LiteSyncRequest struct {
	Client, Group, Parent string
	Action                lite.Action
	Lites                 []string
	Offset                lite.OffsetOption
}

// SyncLiteSubscription applies a client's lite subscription change
// (broker/lite's four actions, quotas and exclusive eviction).
func (c *Core) SyncLiteSubscription(r *LiteSyncRequest) error {
	if c.slave.Load() {
		return errSlavePop
	}
	g, err := c.liteGroup(r.Group, r.Parent)
	if err != nil {
		return err
	}
	if r.Action == lite.PartialAdd || r.Action == lite.CompleteAdd || r.Action == lite.PartialRemove {
		for _, l := range r.Lites {
			if err := CheckLiteTopic(l); err != nil {
				return err
			}
		}
	}
	if err := c.lite.reg.Sync(r.Client, g, r.Action, r.Lites, r.Offset, time.Now()); err != nil {
		if errors.Is(err, lite.ErrSubscriptionQuota) {
			return newError(ReasonLiteSubscriptionQuotaExceeded, fmt.Sprintf(
				"lite subscription quota exceeded: the broker holds at most %d lite subscriptions, a request at most the group's lite.sub.client.quota (%d) + %d",
				c.lite.maxSubscriptions(), g.Quota, lite.QuotaBuffer))
		}
		return err
	}
	return nil
}

// DropLiteClient forgets a lite client (COMPLETE_REMOVE, termination,
// connection loss): its events go to the other clients of its group.
func (c *Core) DropLiteClient(client string) { c.lite.reg.Drop(client) }

// LiteHasEvents reports whether a lite client has something to receive
// now (a front end's look before it parks).
func (c *Core) LiteHasEvents(client string) bool { return c.lite.reg.HasEvents(client, time.Now()) }

// LitePopRequest is a lite receive of a client.
type LitePopRequest struct {
	Client, Group, Parent string
	MaxMsgs               int
	Invisible             time.Duration
}

// LiteMessage is one received lite message: its lite topic, its offset in
// the lite topic, its delivery attempt and its record (a copy).
type LiteMessage struct {
	Lite     string
	Offset   int64
	Attempts int32
	Record   []byte
}

// LitePopResult is what PopLite found. Reuse it across calls.
type LitePopResult struct {
	Msgs []LiteMessage
	// PopTime (ms) names the delivery (the receipt handle carries it).
	PopTime int64
	// NextVisible is when the earliest of the client's deliveries in
	// flight becomes visible again (zero: none): a parked receive's WakeAt.
	NextVisible time.Time
	// Unknown: the client holds no lite subscription (none synced yet, or
	// dropped): a parked receive woken so answers at once (its client was
	// dropped) rather than wait again.
	Unknown bool
	buf     []byte
	spans   []litePopSpan
}

// litePopSpan is a read's part of LitePopResult.buf.
type litePopSpan struct{ from, to int }

// PopLite drains a lite client's events: up to MaxMsgs messages, FIFO per
// lite topic, invisible for Invisible (RocketMQ's
// PopLiteMessageProcessor.popByClientId). Nothing found is no error.
func (c *Core) PopLite(r *LitePopRequest, res *LitePopResult) error {
	res.Msgs, res.buf, res.NextVisible, res.Unknown = res.Msgs[:0], res.buf[:0], time.Time{}, false
	if c.slave.Load() {
		return errSlavePop
	}
	if r.MaxMsgs <= 0 || r.MaxMsgs > 32 {
		return newError(ReasonInvalidParameter, fmt.Sprintf("maxMsgNums %d is not in 1..32", r.MaxMsgs))
	}
	if ms := r.Invisible.Milliseconds(); !validInvisibleTime(ms) {
		return newError(ReasonInvisibleTimeIllegal, fmt.Sprintf("invisibleTime %d ms is not in 1..%d", ms, MaxInvisibleMs))
	}
	if _, err := c.liteGroup(r.Group, r.Parent); err != nil {
		return err
	}
	gr := c.lite.getPool.Get().(*store.GetResult)
	defer c.lite.getPool.Put(gr)
	// spans[i] is what the registry's i-th read appended to buf (the
	// registry reads outside its lock and may drop a read whose lite topic
	// changed meanwhile: its bytes stay in buf, unused).
	spans := res.spans[:0]
	read := func(l string, off int64, max int) (int64, int, error) {
		start := len(res.buf)
		got, n, err := c.readLite(r.Parent, l, off, max, gr, &res.buf)
		spans = append(spans, litePopSpan{start, len(res.buf)})
		return got, n, err
	}
	batches, popTime, next, err := c.lite.reg.Pop(r.Client, r.MaxMsgs, r.Invisible, time.Now(), read)
	res.spans = spans
	res.PopTime, res.NextVisible, res.Unknown = popTime, next, errors.Is(err, lite.ErrUnknownClient)
	if res.Unknown {
		return nil
	}
	if err != nil {
		return wrapError(ReasonSystemError, "read a lite topic: "+err.Error(), err)
	}
	// The records, cut out of buf now that it no longer grows.
	for _, b := range batches {
		buf := res.buf[spans[b.Read].from:spans[b.Read].to]
		for i := 0; i < b.N && len(buf) >= 4; i++ {
			size := int(uint32(buf[0])<<24 | uint32(buf[1])<<16 | uint32(buf[2])<<8 | uint32(buf[3]))
			if size <= 0 || size > len(buf) {
				break
			}
			res.Msgs = append(res.Msgs, LiteMessage{Lite: b.Lite, Offset: b.Offset + int64(i), Attempts: b.Attempts,
				Record: buf[:size:size]})
			buf = buf[size:]
		}
	}
	return nil
}

// readLite reads up to max records of parent's lite topic l from off into
// buf, correcting an offset the store no longer has as RocketMQ's
// PopLiteMessageProcessor.getMessage does, and returns the offset it read
// from and how many it read.
func (c *Core) readLite(parent, l string, off int64, max int, gr *store.GetResult, buf *[]byte) (int64, int, error) {
	if err := c.store.GetLite(parent, l, off, max, 4<<20, gr); err != nil {
		return off, 0, err
	}
	switch gr.Status {
	case store.OffsetTooSmall, store.OffsetOverflowBadly, store.MessageWasRemoving:
		gr.Release()
		off = gr.NextOffset
		if err := c.store.GetLite(parent, l, off, max, 4<<20, gr); err != nil {
			return off, 0, err
		}
	}
	defer gr.Release()
	if gr.Status != store.Found {
		return off, 0, nil
	}
	for _, v := range gr.Messages {
		*buf = append(*buf, v.Bytes()...)
	}
	return off, len(gr.Messages), nil
}

// liteHandleError maps the registry's refusal of a handle.
func liteHandleError(err error) error {
	if errors.Is(err, lite.ErrStaleHandle) {
		return newError(ReasonReceiptHandleExpired, "the receipt handle is expired: the lite message was acked or received again since")
	}
	return err
}

// AckLite acknowledges a received lite message: the group's offset of the
// lite topic moves past the acked prefix of its delivery.
func (c *Core) AckLite(group, parent, l string, offset, popTime int64) error {
	if c.slave.Load() {
		return errSlavePop
	}
	return liteHandleError(c.lite.reg.Ack(group, parent, l, offset, popTime))
}

// ChangeInvisibleLite makes a received lite message's delivery invisible
// for d from now; with suspend its next delivery keeps its attempt count
// (ChangeInvisibleDurationRequest.suspend). The delivery keeps its pop
// time, which it returns.
func (c *Core) ChangeInvisibleLite(group, parent, l string, offset, popTime int64, d time.Duration, suspend bool) (int64, error) {
	if c.slave.Load() {
		return 0, errSlavePop
	}
	if !validInvisibleTime(d.Milliseconds()) {
		return 0, newError(ReasonInvisibleTimeIllegal, fmt.Sprintf("invisibleTime %d ms is not in 1..%d", d.Milliseconds(), MaxInvisibleMs))
	}
	if err := c.lite.reg.ChangeInvisible(group, parent, l, offset, popTime, d, suspend, time.Now()); err != nil {
		return 0, liteHandleError(err)
	}
	return popTime, nil
}

// DeadLetterLite stores a copy of a received lite message (at
// commitLogOffset) in the group's %DLQ%<group> and acknowledges it: lite
// topics have no retry topic, so a message past its attempts goes there
// (as ForwardToDeadLetter does for a POP).
func (c *Core) DeadLetterLite(group, parent, l string, offset, popTime, commitLogOffset int64) (Pending, error) {
	if c.slave.Load() {
		return Pending{}, errSlavePop
	}
	if !c.lite.reg.InFlight(group, l, offset, popTime) {
		return Pending{}, liteHandleError(lite.ErrStaleHandle)
	}
	p, err := c.SendBack(&SendBackRequest{Group: group, Offset: commitLogOffset, DelayLevel: -1})
	if err != nil {
		return Pending{}, err
	}
	if err := c.AckLite(group, parent, l, offset, popTime); err != nil {
		c.releasePending(p)
		return Pending{}, err
	}
	return p, nil
}

// MaxSubscriptions is the registry's bound of active subscriptions.
func (r *liteState) maxSubscriptions() int { return r.reg.MaxSubscriptions() }

// LiteStats are the lite registry's sizes (runtime info).
func (c *Core) LiteStats() lite.Stats { return c.lite.reg.Stats() }
