package lite

import (
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// Defaults of Options (RocketMQ's BrokerConfig).
const (
	// DefaultMaxSubscriptions is maxLiteSubscriptionCount.
	DefaultMaxSubscriptions = 100000
	// DefaultMaxClientEvents is maxClientEventCount.
	DefaultMaxClientEvents = 100
	// DefaultClientTimeout is liteSubscriptionCheckTimeoutMills: a client
	// whose subscriptions were not refreshed for that long is dropped.
	DefaultClientTimeout = 3 * time.Minute
	// QuotaBuffer is what the proxy adds to a group's
	// lite.sub.client.quota before it refuses a request's set
	// (ClientProcessor.validateLiteSubscriptionQuota).
	QuotaBuffer = 300
	// DefaultClientQuota is lite.sub.client.quota's default.
	DefaultClientQuota = 2000
)

// Refusals.
var (
	// ErrSubscriptionQuota: the broker's active subscriptions, or the
	// request's set beyond the group's quota (+ QuotaBuffer).
	ErrSubscriptionQuota = errors.New("lite: the lite subscription quota is exceeded")
	// ErrStaleHandle: the ack or change of invisibility names a delivery
	// that is no longer in flight (acked, or delivered again since).
	ErrStaleHandle = errors.New("lite: the delivery is no longer in flight")
	// ErrUnknownClient: Pop of a client that holds no subscription (never
	// synced, or dropped).
	ErrUnknownClient = errors.New("lite: the client has no lite subscription")
)

// Action is a SyncLiteSubscription action (rmqpb.LiteSubscriptionAction).
type Action int

// The actions, numbered as on the wire.
const (
	PartialAdd Action = iota
	PartialRemove
	CompleteAdd
	CompleteRemove
)

// Policy is an OffsetOption's policy (rmqpb.OffsetOption_Policy).
type Policy int

// The policies, numbered as on the wire.
const (
	PolicyLast Policy = iota
	PolicyMin
	PolicyMax
)

// OffsetOption says where a newly added lite topic starts: a policy, or an
// offset, or the last TailN messages. Timestamp is ignored, as RocketMQ's
// broker ignores it ("silently for now").
type OffsetOption struct {
	Set       bool // an option was given
	Policy    Policy
	HasOffset bool
	Offset    int64
	HasTailN  bool
	TailN     int64
}

// Group is a lite group's configuration (its lite.* attributes).
type Group struct {
	Name, Parent       string
	Exclusive          bool // lite.sub.model=Exclusive
	Quota              int  // lite.sub.client.quota (≤ 0: unlimited)
	MaxEvents          int  // lite.sub.client.max.event.cnt (0: Options.MaxClientEvents)
	ResetOnExclusive   bool // lite.sub.reset.offset.exclusive
	ResetOnUnsubscribe bool // lite.sub.reset.offset.unsubscribe
}

// Host is what the registry needs from the broker.
type Host interface {
	// LiteMax is the lite topic's next offset (0 when it has none).
	LiteMax(parent, lite string) int64
	// Offset is the group's committed offset of the lite topic.
	Offset(group, parent, lite string) (int64, bool)
	// Commit commits the group's offset of the lite topic.
	Commit(group, parent, lite string, offset int64) error
	// Notify wakes the client's parked receive (it has an event, or one of
	// its deliveries changed).
	Notify(client string)
	// Unsubscribed tells the client it lost the lite topic to another
	// client of an exclusive group (NotifyUnsubscribeLiteCommand).
	Unsubscribed(client, group, parent, lite string)
}

// Options bound a Registry. Zero fields take their defaults.
type Options struct {
	MaxSubscriptions int
	MaxClientEvents  int
	ClientTimeout    time.Duration
}

// subKey names a (group, lite topic); the parent is the group's.
type subKey struct{ group, lite string }

// Registry is the lite topics' messaging state. Create it with New; its
// methods are safe for concurrent use.
type Registry struct {
	host Host
	opts Options

	mu      sync.Mutex
	clients map[string]*client
	// byLite: parent → lite → group → subscribing client ids.
	byLite map[string]map[string]map[string][]string
	fifo   map[subKey]*fifo
	active int // client × lite topic subscriptions
}

// client is one subscribing client (one group, one parent).
type client struct {
	id        string
	g         Group
	set       map[string]struct{}
	events    []string // FIFO of lite topics with something to deliver
	inEvents  map[string]struct{}
	overflow  bool
	pending   map[string]struct{} // lite topics whose batch this client holds
	lastSync  time.Time
	maxEvents int
}

// fifo is a (group, lite topic)'s delivery state.
type fifo struct {
	parent     string
	inflight   bool
	start, end int64  // the batch [start, end)
	acked      uint64 // bit i: start+i acked
	popTime    int64  // ms: names the delivery
	visibleAt  int64  // ms
	attempts   int32
	suspend    bool
	owner      string
	// gen counts the changes of the record (a batch started, acked in
	// part, ended, its invisibility changed): a receive that read the lite
	// topic outside the lock commits its batch only if gen is unchanged.
	gen uint64
	// reserved: a receive is reading the lite topic outside the lock; no
	// other receive reads it meanwhile.
	reserved bool
	// missed: another receive passed over an event of the lite topic while
	// it was reserved; the reserving receive re-arms it if it found nothing.
	missed bool
}

// New returns an empty registry.
func New(host Host, opts Options) *Registry {
	if opts.MaxSubscriptions <= 0 {
		opts.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if opts.MaxClientEvents <= 0 {
		opts.MaxClientEvents = DefaultMaxClientEvents
	}
	if opts.ClientTimeout <= 0 {
		opts.ClientTimeout = DefaultClientTimeout
	}
	return &Registry{host: host, opts: opts, clients: map[string]*client{},
		byLite: map[string]map[string]map[string][]string{}, fifo: map[subKey]*fifo{}}
}

// notice is a Host call made once the lock is released.
type notice struct {
	client, group, parent, lite string
	unsub                       bool
}

func (r *Registry) flush(ns []notice) {
	for _, n := range ns {
		if n.unsub {
			r.host.Unsubscribed(n.client, n.group, n.parent, n.lite)
		} else {
			r.host.Notify(n.client)
		}
	}
}

// Sync applies a SyncLiteSubscription of client id for group g.
func (r *Registry) Sync(id string, g Group, action Action, set []string, opt OffsetOption, now time.Time) error {
	if (action == PartialAdd || action == CompleteAdd) && g.Quota > 0 && len(set) > g.Quota+QuotaBuffer {
		return ErrSubscriptionQuota
	}
	r.mu.Lock()
	var ns []notice
	err := r.syncLocked(id, g, action, set, opt, now, &ns)
	r.mu.Unlock()
	r.flush(ns)
	return err
}

func (r *Registry) syncLocked(id string, g Group, action Action, set []string, opt OffsetOption, now time.Time, ns *[]notice) error {
	c := r.clients[id]
	if c != nil && (c.g.Name != g.Name || c.g.Parent != g.Parent) {
		// The client changed its group: it starts anew.
		r.dropLocked(c, ns)
		c = nil
	}
	if action == CompleteRemove {
		if c != nil {
			r.dropLocked(c, ns)
		}
		return nil
	}
	if c == nil {
		c = &client{id: id, set: map[string]struct{}{}, inEvents: map[string]struct{}{}, pending: map[string]struct{}{}}
		r.clients[id] = c
	}
	c.g = g
	c.maxEvents = g.MaxEvents
	if c.maxEvents <= 0 {
		c.maxEvents = r.opts.MaxClientEvents
	}
	c.lastSync = now
	switch action {
	case PartialAdd:
		fresh := 0
		for _, l := range set {
			if _, ok := c.set[l]; !ok {
				fresh++
			}
		}
		if fresh > 0 && r.active+fresh > r.opts.MaxSubscriptions {
			return ErrSubscriptionQuota
		}
		for _, l := range set {
			r.addLocked(c, l, opt, true, ns)
		}
	case PartialRemove:
		for _, l := range set {
			r.removeLocked(c, l, g.ResetOnUnsubscribe)
		}
	case CompleteAdd:
		want := make(map[string]struct{}, len(set))
		for _, l := range set {
			want[l] = struct{}{}
		}
		for l := range c.set {
			if _, ok := want[l]; !ok {
				r.removeLocked(c, l, false)
			}
		}
		for _, l := range set {
			if _, ok := c.set[l]; !ok {
				r.addLocked(c, l, opt, false, ns)
			}
		}
	}
	return nil
}

// addLocked subscribes c to lite l: exclusive eviction, the offset option
// (or the end, for a group without an offset), and an event when the lite
// topic has messages past the group's offset.
func (r *Registry) addLocked(c *client, l string, opt OffsetOption, partial bool, ns *[]notice) {
	g := &c.g
	if _, ok := c.set[l]; !ok {
		if g.Exclusive {
			for _, other := range r.subscribers(g.Parent, l, g.Name) {
				if other == c.id {
					continue
				}
				if oc := r.clients[other]; oc != nil {
					r.removeLocked(oc, l, false)
					*ns = append(*ns, notice{client: other, group: g.Name, parent: g.Parent, lite: l, unsub: true})
				}
			}
			if g.ResetOnExclusive {
				r.resetLocked(g, l, 0)
			}
		}
		c.set[l] = struct{}{}
		r.active++
		groups := r.byLite[g.Parent]
		if groups == nil {
			groups = map[string]map[string][]string{}
			r.byLite[g.Parent] = groups
		}
		gs := groups[l]
		if gs == nil {
			gs = map[string][]string{}
			groups[l] = gs
		}
		gs[g.Name] = append(gs[g.Name], c.id)
	}
	top := r.host.LiteMax(g.Parent, l)
	switch {
	case partial && opt.Set:
		off := top
		switch {
		case opt.HasOffset:
			off = opt.Offset
		case opt.HasTailN:
			cur, ok := r.host.Offset(g.Name, g.Parent, l)
			if !ok {
				cur = top
			}
			off = cur - opt.TailN
		case opt.Policy == PolicyMin:
			off = 0
		}
		r.resetLocked(g, l, min(max(off, 0), top))
	default:
		if _, ok := r.host.Offset(g.Name, g.Parent, l); !ok {
			// A group new to the lite topic starts at its end
			// (PopLiteMessageProcessor.getPopOffset: "init as max").
			_ = r.host.Commit(g.Name, g.Parent, l, top)
		}
	}
	if off, _ := r.host.Offset(g.Name, g.Parent, l); top > off {
		r.eventLocked(c, l, ns)
	}
}

// resetLocked moves the group's offset of l and ends its batch in flight.
func (r *Registry) resetLocked(g *Group, l string, off int64) {
	_ = r.host.Commit(g.Name, g.Parent, l, off)
	if st := r.fifo[subKey{g.Name, l}]; st != nil {
		r.endBatchLocked(st, l)
	}
}

// endBatchLocked forgets a batch in flight.
func (r *Registry) endBatchLocked(st *fifo, l string) {
	if st.inflight {
		if oc := r.clients[st.owner]; oc != nil {
			delete(oc.pending, l)
		}
	}
	st.inflight, st.acked, st.owner = false, 0, ""
	st.gen++
}

// removeLocked unsubscribes c from l.
func (r *Registry) removeLocked(c *client, l string, reset bool) {
	if _, ok := c.set[l]; !ok {
		return
	}
	delete(c.set, l)
	r.active--
	if _, ok := c.inEvents[l]; ok {
		delete(c.inEvents, l)
		for i, e := range c.events {
			if e == l {
				c.events = append(c.events[:i], c.events[i+1:]...)
				break
			}
		}
	}
	if groups := r.byLite[c.g.Parent]; groups != nil {
		if gs := groups[l]; gs != nil {
			ids := gs[c.g.Name]
			for i, id := range ids {
				if id == c.id {
					ids = append(ids[:i], ids[i+1:]...)
					break
				}
			}
			if len(ids) == 0 {
				delete(gs, c.g.Name)
			} else {
				gs[c.g.Name] = ids
			}
			if len(gs) == 0 {
				delete(groups, l)
			}
		}
		if len(groups) == 0 {
			delete(r.byLite, c.g.Parent)
		}
	}
	k := subKey{c.g.Name, l}
	if st := r.fifo[k]; st != nil && st.owner == c.id {
		// Its batch stays in flight until its invisible time passes;
		// another subscriber takes it over then.
		delete(c.pending, l)
		if next := r.pickLocked(c.g.Parent, l, c.g.Name); next != nil {
			st.owner = next.id
			next.pending[l] = struct{}{}
		} else {
			st.owner = ""
		}
	}
	if len(r.subscribers(c.g.Parent, l, c.g.Name)) == 0 {
		if st := r.fifo[k]; st != nil && !st.inflight {
			delete(r.fifo, k)
		}
	}
	if reset {
		r.resetLocked(&c.g, l, 0)
	}
}

// subscribers are the ids of group's clients subscribed to parent's l.
func (r *Registry) subscribers(parent, l, group string) []string {
	return r.byLite[parent][l][group]
}

// pickLocked returns the client of group to give an event of l: one with
// room in its event set, from a random start (RocketMQ's
// LiteEventDispatcher), else any.
func (r *Registry) pickLocked(parent, l, group string) *client {
	ids := r.subscribers(parent, l, group)
	if len(ids) == 0 {
		return nil
	}
	start := 0
	if len(ids) > 1 {
		start = rand.IntN(len(ids))
	}
	var fallback *client
	for i := range ids {
		c := r.clients[ids[(start+i)%len(ids)]]
		if c == nil {
			continue
		}
		if _, ok := c.inEvents[l]; ok || len(c.events) < c.maxEvents {
			return c
		}
		if fallback == nil {
			fallback = c
		}
	}
	return fallback
}

// eventLocked gives c an event of l (or marks it overflowed).
func (r *Registry) eventLocked(c *client, l string, ns *[]notice) {
	if _, ok := c.inEvents[l]; ok {
		return
	}
	if len(c.events) >= c.maxEvents {
		c.overflow = true
	} else {
		c.events = append(c.events, l)
		c.inEvents[l] = struct{}{}
	}
	*ns = append(*ns, notice{client: c.id})
}

// Arrived is the store's report that parent's lite topic l grew to
// maxOffset: each subscribed group gets an event in one client.
func (r *Registry) Arrived(parent, l string, maxOffset int64) {
	r.mu.Lock()
	var ns []notice
	for group := range r.byLite[parent][l] {
		st := r.fifo[subKey{group, l}]
		if st != nil && st.inflight {
			continue // the ack or the invisible time brings it back
		}
		if c := r.pickLocked(parent, l, group); c != nil {
			r.eventLocked(c, l, &ns)
		}
	}
	r.mu.Unlock()
	r.flush(ns)
}

// Batch is what Pop read of one lite topic: N messages from Offset, for
// the Attempts-th time.
type Batch struct {
	Lite     string
	Offset   int64
	N        int
	Attempts int32
	// Read is the index of the ReadFunc call (from 0, in this Pop) that
	// read the batch; a read whose batch was not committed (the lite topic
	// changed while it was read) has no Batch.
	Read int
}

// ReadFunc reads up to max messages of parent's lite topic l from offset
// for a Pop and returns how many it took and the offset it read from (the
// store may correct an offset below its minimum).
type ReadFunc func(l string, offset int64, max int) (from int64, n int, err error)

// Pop drains client id's events: up to maxMsgs messages, FIFO per lite
// topic, each batch invisible for invisible from now. read is called
// without the registry's lock: Pop reserves the (group, lite topic) under
// the lock (no other receive reads it meanwhile), reads, and commits the
// batch under the lock only if nothing changed the lite topic's state in
// between (an ack, a change of invisibility, an unsubscription, a reset,
// the client's drop or the state's expiry); otherwise the read is dropped
// and the lite topic looked at again. It returns the batches, the
// delivery's pop time (ms) and when the earliest of the client's batches
// in flight becomes visible again (zero: none).
func (r *Registry) Pop(id string, maxMsgs int, invisible time.Duration, now time.Time, read ReadFunc) ([]Batch, int64, time.Time, error) {
	nowMs := now.UnixMilli()
	r.mu.Lock()
	c := r.clients[id]
	if c == nil {
		r.mu.Unlock()
		return nil, nowMs, time.Time{}, ErrUnknownClient
	}
	// Batches whose invisible time passed come first.
	var due []string
	for l := range c.pending {
		st := r.fifo[subKey{c.g.Name, l}]
		if st == nil || !st.inflight || st.owner != c.id {
			delete(c.pending, l)
			continue
		}
		if st.visibleAt <= nowMs {
			due = append(due, l)
		}
	}
	sort.Strings(due)
	for _, l := range due {
		if _, ok := c.inEvents[l]; !ok {
			c.events = append([]string{l}, c.events...)
			c.inEvents[l] = struct{}{}
		}
	}
	if len(c.events) == 0 && c.overflow {
		r.fullDispatchLocked(c)
	}
	var (
		out       []Batch
		ns        []notice
		err       error
		reads     int
		retries   int
		rearm     []string
		remaining = maxMsgs
	)
	for remaining > 0 && len(c.events) > 0 {
		l := c.events[0]
		c.events = c.events[1:]
		delete(c.inEvents, l)
		if _, ok := c.set[l]; !ok {
			continue
		}
		k := subKey{c.g.Name, l}
		st := r.fifo[k]
		if st == nil {
			st = &fifo{parent: c.g.Parent}
			r.fifo[k] = st
		}
		if st.reserved {
			// Another receive reads it now (RocketMQ's tryLock of the
			// (group, lite topic) fails: the event is passed over); that
			// receive re-arms it if it finds nothing.
			st.missed = true
			continue
		}
		var from int64
		attempts := int32(1)
		if st.inflight {
			if st.visibleAt > nowMs {
				continue // blocked: its ack or invisible time brings it back
			}
			from = st.start
			attempts = st.attempts
			if !st.suspend {
				attempts++
			}
		} else {
			off, ok := r.host.Offset(c.g.Name, c.g.Parent, l)
			if !ok {
				off = r.host.LiteMax(c.g.Parent, l)
				_ = r.host.Commit(c.g.Name, c.g.Parent, l, off)
			}
			from = off
		}
		st.reserved, st.missed = true, false
		gen := st.gen
		r.mu.Unlock()
		got, n, rerr := read(l, from, remaining)
		r.mu.Lock()
		st.reserved = false
		idx := reads
		reads++
		if r.clients[id] != c {
			// Dropped while it read: nothing of this read is delivered.
			c = nil
			break
		}
		_, subscribed := c.set[l]
		if r.fifo[k] != st || st.gen != gen || !subscribed {
			// The lite topic changed while it was read: look again (a
			// few times; later receives take it otherwise).
			if subscribed && retries < 4 {
				retries++
				r.requeueLocked(c, l)
			}
			continue
		}
		if rerr != nil {
			err = rerr
			r.requeueLocked(c, l)
			break
		}
		if n == 0 {
			missed := st.missed
			st.missed = false
			r.endBatchLocked(st, l)
			if missed {
				rearm = append(rearm, l) // after this receive: no second read now
			}
			continue
		}
		if got != from && !st.inflight {
			_ = r.host.Commit(c.g.Name, c.g.Parent, l, got)
		}
		if st.inflight && st.owner != c.id {
			if oc := r.clients[st.owner]; oc != nil {
				delete(oc.pending, l)
			}
		}
		*st = fifo{parent: c.g.Parent, inflight: true, start: got, end: got + int64(n), popTime: nowMs,
			visibleAt: nowMs + invisible.Milliseconds(), attempts: attempts, owner: c.id, gen: st.gen + 1}
		c.pending[l] = struct{}{}
		out = append(out, Batch{Lite: l, Offset: got, N: n, Attempts: attempts, Read: idx})
		remaining -= n
	}
	var next time.Time
	if c != nil {
		for _, l := range rearm {
			r.rearmLocked(c.g.Parent, l, c.g.Name, c, &ns)
		}
		next = r.nextVisibleLocked(c, nowMs)
	}
	r.mu.Unlock()
	r.flush(ns)
	return out, nowMs, next, err
}

// requeueLocked puts l back at the head of c's events.
func (r *Registry) requeueLocked(c *client, l string) {
	if _, ok := c.inEvents[l]; !ok {
		c.events = append([]string{l}, c.events...)
		c.inEvents[l] = struct{}{}
	}
}

// rearmLocked gives group's lite topic l an event when it has messages
// past the group's offset: to prefer (when it still subscribes), else to
// a subscriber picked as an arrival picks one.
func (r *Registry) rearmLocked(parent, l, group string, prefer *client, ns *[]notice) {
	off, _ := r.host.Offset(group, parent, l)
	if r.host.LiteMax(parent, l) <= off {
		return
	}
	c := prefer
	if c == nil || r.clients[c.id] != c || c.g.Name != group {
		c = nil
	} else if _, ok := c.set[l]; !ok {
		c = nil
	}
	if c == nil {
		c = r.pickLocked(parent, l, group)
	}
	if c != nil {
		r.eventLocked(c, l, ns)
	}
}

// fullDispatchLocked refills an overflowed client's events from its
// subscriptions with messages past the group's offset.
func (r *Registry) fullDispatchLocked(c *client) {
	c.overflow = false
	ls := make([]string, 0, len(c.set))
	for l := range c.set {
		ls = append(ls, l)
	}
	sort.Strings(ls)
	for _, l := range ls {
		if len(c.events) >= c.maxEvents {
			c.overflow = true
			return
		}
		if st := r.fifo[subKey{c.g.Name, l}]; st != nil && st.inflight {
			continue
		}
		off, _ := r.host.Offset(c.g.Name, c.g.Parent, l)
		if r.host.LiteMax(c.g.Parent, l) > off {
			c.events = append(c.events, l)
			c.inEvents[l] = struct{}{}
		}
	}
}

// nextVisibleLocked is when the earliest of c's batches in flight becomes
// visible again (zero: none).
func (r *Registry) nextVisibleLocked(c *client, nowMs int64) time.Time {
	var next int64
	for l := range c.pending {
		if st := r.fifo[subKey{c.g.Name, l}]; st != nil && st.inflight && st.visibleAt > nowMs {
			if next == 0 || st.visibleAt < next {
				next = st.visibleAt
			}
		}
	}
	if next == 0 {
		return time.Time{}
	}
	return time.UnixMilli(next)
}

// HasEvents reports whether client id has events waiting or a batch whose
// invisible time passed (a receive about to park looks again).
func (r *Registry) HasEvents(id string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.clients[id]
	if c == nil {
		return false
	}
	if len(c.events) > 0 || c.overflow {
		return true
	}
	for l := range c.pending {
		if st := r.fifo[subKey{c.g.Name, l}]; st != nil && st.inflight && st.visibleAt <= now.UnixMilli() {
			return true
		}
	}
	return false
}

// Ack acknowledges the message at offset of group's lite topic l, of the
// delivery popTime names. The group's offset moves past the acked prefix
// of the batch; once all of it is acked the lite topic is unblocked (an
// event when it has more). An offset the group committed already is
// acked (RocketMQ's broker answers it OK); another one not in flight in
// that delivery is ErrStaleHandle.
func (r *Registry) Ack(group, parent, l string, offset, popTime int64) error {
	r.mu.Lock()
	var ns []notice
	st := r.fifo[subKey{group, l}]
	if st == nil || !st.inflight || st.popTime != popTime || offset < st.start || offset >= st.end {
		err := r.staleLocked(group, parent, l, offset)
		r.mu.Unlock()
		return err
	}
	st.acked |= 1 << uint(offset-st.start)
	st.gen++
	k := int64(0)
	for st.start+k < st.end && st.acked&(1<<uint(k)) != 0 {
		k++
	}
	var err error
	if k > 0 {
		err = r.host.Commit(group, parent, l, st.start+k)
		st.start += k
		st.acked >>= uint(k)
	}
	if st.start >= st.end {
		// The lite topic is unblocked: an event at once when it has more
		// (RocketMQ's ackLite dispatches once the FIFO block is gone), to
		// the batch's owner while it still subscribes.
		owner := r.clients[st.owner]
		r.endBatchLocked(st, l)
		r.rearmLocked(parent, l, group, owner, &ns)
	}
	r.mu.Unlock()
	r.flush(ns)
	return err
}

// ChangeInvisible makes the batch holding offset of group's lite topic l
// invisible for d from now; with suspend its next delivery keeps its
// attempt count. The delivery keeps its pop time (the batch's other
// handles stay valid), as RocketMQ's processChangeInvisibleTimeForLite
// keeps it; an offset committed already is no error (nothing to change).
func (r *Registry) ChangeInvisible(group, parent, l string, offset, popTime int64, d time.Duration, suspend bool, now time.Time) error {
	r.mu.Lock()
	st := r.fifo[subKey{group, l}]
	if st == nil || !st.inflight || st.popTime != popTime || offset < st.start || offset >= st.end {
		err := r.staleLocked(group, parent, l, offset)
		r.mu.Unlock()
		return err
	}
	st.visibleAt = now.UnixMilli() + d.Milliseconds()
	st.gen++
	st.suspend = suspend
	owner := st.owner
	r.mu.Unlock()
	if owner != "" {
		r.host.Notify(owner) // its parked receive takes the new time
	}
	return nil
}

// staleLocked answers a handle not in flight: nil for an offset the
// group committed already, ErrStaleHandle otherwise.
func (r *Registry) staleLocked(group, parent, l string, offset int64) error {
	if off, ok := r.host.Offset(group, parent, l); ok && offset < off {
		return nil
	}
	return ErrStaleHandle
}

// InFlight reports whether the delivery popTime of group's lite topic l
// holds offset (a dead letter checks its handle before it forwards).
func (r *Registry) InFlight(group, l string, offset, popTime int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.fifo[subKey{group, l}]
	return st != nil && st.inflight && st.popTime == popTime && offset >= st.start && offset < st.end
}

// Drop forgets client id (COMPLETE_REMOVE, termination, connection loss):
// its events go to other subscribers, its batches in flight to them when
// their invisible time passes.
func (r *Registry) Drop(id string) {
	r.mu.Lock()
	var ns []notice
	if c := r.clients[id]; c != nil {
		r.dropLocked(c, &ns)
	}
	r.mu.Unlock()
	r.flush(ns)
}

func (r *Registry) dropLocked(c *client, ns *[]notice) {
	events := append([]string(nil), c.events...)
	ls := make([]string, 0, len(c.set))
	for l := range c.set {
		ls = append(ls, l)
	}
	sort.Strings(ls)
	for _, l := range ls {
		r.removeLocked(c, l, false)
	}
	delete(r.clients, c.id)
	for _, l := range events {
		if next := r.pickLocked(c.g.Parent, l, c.g.Name); next != nil {
			r.eventLocked(next, l, ns)
		}
	}
}

// Expire drops the clients whose subscriptions were not refreshed within
// Options.ClientTimeout before now, and the FIFO state of (group, lite
// topic)s nobody subscribes to any more whose batch is no longer in
// flight (its invisible time passed), and returns the dropped clients' ids.
func (r *Registry) Expire(now time.Time) []string {
	r.mu.Lock()
	var ns []notice
	var gone []string
	for id, c := range r.clients {
		if now.Sub(c.lastSync) > r.opts.ClientTimeout {
			gone = append(gone, id)
			r.dropLocked(c, &ns)
		}
	}
	for k, st := range r.fifo {
		if len(r.subscribers(st.parent, k.lite, k.group)) == 0 && (!st.inflight || st.visibleAt <= now.UnixMilli()) {
			if st.inflight {
				r.endBatchLocked(st, k.lite)
			}
			delete(r.fifo, k)
		}
	}
	r.mu.Unlock()
	r.flush(ns)
	return gone
}

// ForgetLite removes a deleted (expired) lite topic's FIFO state and
// subscriptions, without telling the clients (as RocketMQ's
// cleanSubscription(lmq, false)).
func (r *Registry) ForgetLite(parent, l string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for group, ids := range r.byLite[parent][l] {
		for _, id := range append([]string(nil), ids...) {
			if c := r.clients[id]; c != nil {
				r.removeLocked(c, l, false)
			}
		}
		delete(r.fifo, subKey{group, l})
	}
	for k, st := range r.fifo {
		if k.lite == l && st != nil {
			if c := r.clients[st.owner]; c != nil && c.g.Parent == parent {
				r.endBatchLocked(st, l)
				delete(r.fifo, k)
			}
		}
	}
}

// Stats are the registry's sizes.
type Stats struct {
	Clients, Subscriptions, InFlight int
}

// Stats returns the registry's sizes now.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Clients: len(r.clients), Subscriptions: r.active}
	for _, st := range r.fifo {
		if st.inflight {
			s.InFlight++
		}
	}
	return s
}

// Subscribed reports whether client id holds lite topic l.
func (r *Registry) Subscribed(id, l string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.clients[id]
	if c == nil {
		return false
	}
	_, ok := c.set[l]
	return ok
}

// MaxSubscriptions is the bound of active subscriptions in use.
func (r *Registry) MaxSubscriptions() int { return r.opts.MaxSubscriptions }
