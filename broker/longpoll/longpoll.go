package longpoll

import (
	"container/heap"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// AnyQueue is Wait.Queue for a POP over every queue of its topic.
const AnyQueue int32 = -1

// Defaults of Options.
const (
	// DefaultMaxParked bounds the requests a holder parks at once.
	DefaultMaxParked = 65536
	// DefaultMaxPerOwner bounds the requests one owner (a connection, a
	// client) has parked at once: the remoting server's default cap of
	// deferred requests per connection (remoting.DefaultMaxInFlight).
	DefaultMaxPerOwner = 4096
	// DefaultMaxPerClient bounds the requests one client (Wait.Client)
	// has parked at once, over all its connections.
	DefaultMaxPerClient = 4096
)

// Refusals of Park. The item is not taken: the caller answers it.
var (
	// ErrFull: the holder parks Options.MaxParked requests already.
	ErrFull = errors.New("longpoll: too many requests are parked")
	// ErrOwnerFull: the request's owner has Options.MaxPerOwner parked.
	ErrOwnerFull = errors.New("longpoll: too many requests of this owner are parked")
	// ErrClientFull: the request's client has Options.MaxPerClient parked.
	ErrClientFull = errors.New("longpoll: too many requests of this client are parked")
	// ErrStopped: the holder is stopped. Unlike the two above, Park has
	// answered the item through Host.Expire already.
	ErrStopped = errors.New("longpoll: stopped")
)

// Wait says what wakes a parked request.
//
// A pull (Group empty) waits for an arrival in queue Queue of Topic that
// takes the queue's max offset past Offset.
//
// A POP (Group set: a remoting POP or a gRPC receive) waits for any
// arrival in Queue of Topic (every queue of it with AnyQueue), for a revive
// event of Group on that topic and queue (Holder.Revived: a message of the
// group made visible again, or its visibility moved earlier), or for
// WakeAt, when the earliest of the group's invisible messages becomes
// visible again. Offset is not used.
type Wait struct {
	Topic  string
	Queue  int32
	Offset int64
	Group  string
	// WakeAt (POPs) is when one of the group's messages, invisible when the
	// host looked, becomes visible again; zero: none. The holder runs the
	// request then (a revive), without any periodic look.
	WakeAt time.Time
	// Ticket (POPs) is Holder.Ticket taken before the look that found
	// nothing: an arrival or revive of the topic reported since wakes the
	// request at once when it is parked (it may have come too late for the
	// look and too early for the park).
	Ticket uint64
	// Owner is the connection or client the request came on, counted
	// against Options.MaxPerOwner: any comparable value, kept while the
	// request is parked; nil counts against no owner.
	Owner any
	// Client is the client the request came from, over all its
	// connections (a gRPC client's id), counted against
	// Options.MaxPerClient apart from Owner: any comparable value, kept
	// while the request is parked; nil counts against no client.
	Client any
	// Lite marks a lite receive (RocketMQ 5.5's lite topics): it waits on
	// its Client (which must be set), not on a topic, and is woken by
	// Holder.Notified(Client) or its WakeAt; Topic and Queue are not
	// used, Group marks it as a POP. Its Ticket is compared with the
	// client's last Notified.
	Lite bool
}

// isPop reports whether w is a POP's wait.
func (w *Wait) isPop() bool { return w.Group != "" }

// Host owns the parked items. The holder calls its methods on its own
// goroutine, one at a time, never while holding its lock (package doc);
// with Options.InlineArrivals it also calls Run for woken pulls on
// Arrived's caller's goroutine (then Run must not block, and Run and
// Expire must be safe for concurrent use on different items).
type Host[T any] interface {
	// Run re-runs an item woken by an arrival, a revive event or its
	// WakeAt. It either answers it and returns false, or returns true
	// (nothing it wants is there yet) after updating w: a pull's Offset to
	// wait past, a POP's WakeAt. The holder then parks it again with its
	// original deadline, or calls Expire when that deadline has passed or
	// the holder is stopping.
	Run(item *T, w *Wait) (wait bool)
	// Expire answers an item whose deadline passed or that the holder drops
	// because it stops. w is its last Wait.
	Expire(item *T, w *Wait)
	// MaxOffset is the queue's max offset now. A queue's growth must be
	// visible here no later than the Arrived call that reports it (the
	// store's queue max is updated before its OnArrival runs): the holder
	// reads it after parking a pull, so that an arrival reported while the
	// pull was not yet (or not again) parked is not lost. It is called on
	// Park's caller's goroutine and on the holder's, never under the
	// holder's lock, and must be quick.
	MaxOffset(topic string, queue int32) int64
}

// Flusher is an optional interface of a Host that queues its answers
// rather than sending each at once: after the Host calls it makes on a
// goroutine in one go (a round of the loop: its runs and expiries; the
// inline runs of one Arrived; Park's Expire once the holder is stopped;
// Stop's drain), the holder calls Flush on that same goroutine, never
// under its lock. Flush must send at least what those calls queued; it may
// run on several goroutines at once.
type Flusher interface {
	Flush()
}

// MaxInline bounds Options.InlineArrivals.
const MaxInline = 16

// Options bound a Holder. Zero fields take their defaults.
type Options struct {
	// InlineArrivals is how many of the pulls an Arrived wakes it runs
	// itself, on its caller's goroutine (the store's dispatcher), instead
	// of handing them to the holder's goroutine: the hand-off (a goroutine
	// wake-up, often a thread's) costs more than a pull that finds the
	// message just dispatched. Only when the holder is started, the loop
	// has no round in progress and no woken item waits for it; the rest go
	// to the loop. POPs and lite receives always go to the loop (a POP may
	// store a dead letter, which may wait for the dispatcher). 0 (the
	// default): none; at most MaxInline. A host that sets it accepts
	// Run's calls on that goroutine (Host).
	InlineArrivals int
	// MaxParked bounds the items parked at once (woken ones not yet
	// answered included); Park refuses more with ErrFull. Default
	// DefaultMaxParked.
	MaxParked int
	// MaxPerOwner bounds the items one Wait.Owner has parked at once; Park
	// refuses more with ErrOwnerFull. Default DefaultMaxPerOwner.
	MaxPerOwner int
	// MaxPerClient bounds the items one Wait.Client has parked at once;
	// Park refuses more with ErrClientFull. Default DefaultMaxPerClient.
	MaxPerClient int
}

// Counts are a holder's counters since New.
type Counts struct {
	Parked    int64 // items accepted by Park
	Woken     int64 // wakes by an arrival (each wake counts; see Reparked)
	Revived   int64 // wakes by a revive event or a WakeAt (POPs)
	Reparked  int64 // woken items parked again because Run asked to wait
	Expired   int64 // items handed to Expire: deadline passed, holder stopping or stopped
	Cancelled int64 // items taken back by Cancel
	Refused   int64 // Parks refused with ErrFull, ErrOwnerFull or ErrClientFull
	Inline    int64 // of the woken, those run on Arrived's caller's goroutine (Options.InlineArrivals)
	Held      int   // items parked now and not yet answered (being run included)
}

// Stats are a holder's counters: of every item, and of the POPs among them
// (Wait.Group set); the pulls' are the difference.
type Stats struct {
	Counts
	Pops Counts
}

// Handle names a parked item for Cancel.
type Handle[T any] struct {
	e   *entry[T]
	gen uint64
}

// Holder parks items by what wakes them and by deadline. Create it with
// New; its methods are safe for concurrent use.
type Holder[T any] struct {
	host    Host[T]
	flusher Flusher // host's, or nil
	opts    Options
	pool    sync.Pool // *entry[T]
	wake    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup

	startOnce, stopOnce sync.Once

	// seq counts the arrivals and revives reported (Ticket reads it
	// without the lock; it is written under mu).
	seq atomic.Uint64
	// busy is set (under mu) while the loop runs a round of items, and
	// cleared after it: Arrived then runs nothing inline.
	busy atomic.Bool

	mu      sync.Mutex
	topics  map[string]*topicWaits[T]
	lite    map[any]*topicWaits[T] // lite receives by client (Wait.Lite)
	heap    entryHeap[T]
	ready   []*entry[T] // woken, to be run by the loop
	owners  map[any]int // parked items per owner (absent: none)
	clients map[any]int // parked items per client (absent: none)
	held    [2]int      // parked and not yet answered: all, POPs
	gen     uint64      // last Handle generation given
	started bool
	closed  bool

	counts [2]counters // all, POPs
}

type counters struct {
	parked, woken, revived, reparked, expired, cancelled, refused, inline atomic.Int64
}

// Entry states (under Holder.mu).
const (
	stateFree    = iota // pooled, or being answered
	stateWaiting        // in its list and the heap
	stateReady          // in the ready list
	stateRunning        // taken by the loop (Run or Expire)
)

// What woke an entry.
const (
	wokeArrival = iota
	wokeRevive  // Holder.Revived
	wokeTime    // its WakeAt came
)

// entry is one parked item.
type entry[T any] struct {
	item     T
	w        Wait
	deadline time.Time
	due      time.Time // the heap's key: deadline, or WakeAt when earlier
	heapIdx  int       // index in Holder.heap; -1 when not in it
	state    uint8
	why      uint8  // what woke it last: wokeArrival, wokeRevive, wokeTime
	seq      uint64 // Holder.seq when the loop took it to run (POPs)
	gen      uint64 // the Handle generation, set by Park (under mu)
}

type topicWaits[T any] struct {
	last   uint64        // Holder.seq of the topic's last arrival or revive
	queues [][]*entry[T] // by queue id: pulls and one-queue POPs
	any    []*entry[T]   // POPs of every queue
}

// New returns a holder whose items go back to host. Start starts its
// goroutine; Stop drains it.
func New[T any](host Host[T], opts Options) *Holder[T] {
	if opts.MaxParked <= 0 {
		opts.MaxParked = DefaultMaxParked
	}
	if opts.MaxPerOwner <= 0 {
		opts.MaxPerOwner = DefaultMaxPerOwner
	}
	if opts.MaxPerClient <= 0 {
		opts.MaxPerClient = DefaultMaxPerClient
	}
	opts.InlineArrivals = min(max(opts.InlineArrivals, 0), MaxInline)
	fl, _ := host.(Flusher)
	return &Holder[T]{
		host:    host,
		flusher: fl,
		opts:    opts,
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		topics:  make(map[string]*topicWaits[T]),
		lite:    make(map[any]*topicWaits[T]),
		owners:  make(map[any]int),
		clients: make(map[any]int),
	}
}

// Start starts the goroutine that runs woken and expired items. Later
// calls do nothing.
func (h *Holder[T]) Start() {
	h.startOnce.Do(func() {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return
		}
		h.started = true
		h.wg.Add(1) // under mu: a Stop that sees started waits for the loop
		h.mu.Unlock()
		go h.loop()
	})
}

// Stop closes the holder and hands every parked item to Expire (on the
// holder's goroutine, or on the caller's when Start was never called). It
// returns once all of them are answered, the goroutine has exited and
// every run of Arrived's (Options.InlineArrivals) has ended.
// Later Parks go straight to Expire; later calls of Stop wait likewise.
func (h *Holder[T]) Stop() {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		started := h.started
		h.mu.Unlock()
		close(h.stop)
		if !started {
			h.drain()
		}
	})
	h.wg.Wait()
}

// Ticket returns the count of arrivals and revives reported so far: a POP
// takes it before it looks, and parks with it in Wait.Ticket. It takes no
// lock.
func (h *Holder[T]) Ticket() uint64 { return h.seq.Load() }

// Park holds item until what w names wakes it (then Host.Run) or until
// deadline (then Host.Expire). The holder owns item from now on, unless
// Park refuses it with ErrFull, ErrOwnerFull or ErrClientFull (the caller
// answers it).
// When the holder is stopped, Park calls Host.Expire at once, on the
// caller's goroutine, and returns ErrStopped. For a pull, Park reads
// Host.MaxOffset once the item is linked and wakes it when the queue is
// past w.Offset already (an arrival reported before the park); for a POP,
// an arrival or revive of w.Topic reported after w.Ticket wakes it at
// once. w.Queue must be a valid queue id of the topic (0 or more; the
// holder keeps a list per queue id up to the highest one parked), or
// AnyQueue for a POP; w.Topic and w.Group must not alias a buffer the
// caller reuses.
func (h *Holder[T]) Park(w Wait, deadline time.Time, item T) (Handle[T], error) {
	e := h.get()
	e.item, e.w, e.deadline = item, w, deadline
	k := kind(&w)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.count(k, func(c *counters) { c.expired.Add(1) })
		h.host.Expire(&e.item, &e.w)
		h.put(e)
		h.flush()
		return Handle[T]{}, ErrStopped
	}
	var err error
	switch {
	case h.held[0] >= h.opts.MaxParked:
		err = ErrFull
	case w.Owner != nil && h.owners[w.Owner] >= h.opts.MaxPerOwner:
		err = ErrOwnerFull
	case w.Client != nil && h.clients[w.Client] >= h.opts.MaxPerClient:
		err = ErrClientFull
	}
	if err != nil {
		h.mu.Unlock()
		h.count(k, func(c *counters) { c.refused.Add(1) })
		e.item = *new(T)
		h.put(e)
		return Handle[T]{}, err
	}
	h.gen++
	e.gen = h.gen
	hd := Handle[T]{e: e, gen: e.gen}
	h.acquireLocked(e)
	h.count(k, func(c *counters) { c.parked.Add(1) })
	t := h.waitsLocked(&w)
	signal := false
	if w.isPop() && t.last > w.Ticket {
		// Something happened on the topic since the POP looked.
		signal = h.readyLocked(e, wokeArrival)
	} else {
		signal = h.linkLocked(t, e)
	}
	h.mu.Unlock()
	if signal {
		h.signal()
	}
	if !w.isPop() && !w.Lite {
		// A message that arrived after the caller looked and before e was
		// linked was reported to nobody: look again. (e itself must not be
		// touched: once linked, the loop may run and reuse it.)
		h.recheck(w.Topic, w.Queue, w.Offset)
	}
	return hd, nil
}

// kind is 1 for a POP's wait, 0 for a pull's: the index of its own
// counters besides the totals' (index 0).
func kind(w *Wait) int64 {
	if w.isPop() {
		return 1
	}
	return 0
}

// count applies fn to the totals and, for a POP, to the POPs' counters.
func (h *Holder[T]) count(k int64, fn func(*counters)) {
	fn(&h.counts[0])
	if k == 1 {
		fn(&h.counts[1])
	}
}

// Cancel takes a parked item back (a caller that stopped waiting: a gRPC
// call cancelled by its client). It reports true when the item was
// waiting or woken but not yet run: it is unlinked, no Host method will
// see it, and the caller answers it. False means the holder is running or
// answering it (or did already): the caller waits for that answer.
func (h *Holder[T]) Cancel(hd Handle[T]) bool {
	e := hd.e
	if e == nil {
		return false
	}
	h.mu.Lock()
	if e.gen != hd.gen || (e.state != stateWaiting && e.state != stateReady) {
		h.mu.Unlock()
		return false
	}
	if e.state == stateWaiting {
		h.unlinkLocked(e)
		heap.Remove(&h.heap, e.heapIdx)
	} else {
		i := slices.Index(h.ready, e)
		h.ready = slices.Delete(h.ready, i, i+1)
	}
	k := kind(&e.w)
	h.releaseLocked(e)
	e.state = stateFree
	h.mu.Unlock()
	h.count(k, func(c *counters) { c.cancelled.Add(1) })
	h.put(e)
	return true
}

// topicLocked returns the topic's waits, made when missing (h.mu held).
func (h *Holder[T]) topicLocked(topic string) *topicWaits[T] {
	t := h.topics[topic]
	if t == nil {
		t = &topicWaits[T]{}
		h.topics[topic] = t
	}
	return t
}

// waitsLocked returns the waits w belongs to: its topic's, or for a lite
// receive its client's (made when missing; h.mu held).
func (h *Holder[T]) waitsLocked(w *Wait) *topicWaits[T] {
	if !w.Lite {
		return h.topicLocked(w.Topic)
	}
	t := h.lite[w.Client]
	if t == nil {
		t = &topicWaits[T]{}
		h.lite[w.Client] = t
	}
	return t
}

// Notified is the lite event dispatcher's report that client has
// something to receive (an event, or a delivery whose invisibility
// changed): it wakes the client's parked lite receives (Wait.Lite); it
// never calls the host and never waits for the loop.
func (h *Holder[T]) Notified(client any) {
	h.mu.Lock()
	t := h.lite[client]
	if t == nil {
		t = &topicWaits[T]{}
		h.lite[client] = t
	}
	t.last = h.seq.Add(1)
	signal := false
	for _, e := range t.any {
		heap.Remove(&h.heap, e.heapIdx)
		signal = h.readyLocked(e, wokeArrival) || signal
	}
	clear(t.any)
	t.any = t.any[:0]
	h.mu.Unlock()
	if signal {
		h.signal()
	}
}

// Forget drops what the holder keeps of a lite client that is gone (its
// last Notified), unless it has receives parked.
func (h *Holder[T]) Forget(client any) {
	h.mu.Lock()
	if t := h.lite[client]; t != nil && len(t.any) == 0 {
		delete(h.lite, client)
	}
	h.mu.Unlock()
}

// linkLocked puts e in its list and the heap (h.mu held) and reports
// whether the loop's timer must move earlier.
func (h *Holder[T]) linkLocked(t *topicWaits[T], e *entry[T]) bool {
	if q := e.w.Queue; q < 0 || e.w.Lite {
		t.any = append(t.any, e)
	} else {
		for int(q) >= len(t.queues) {
			t.queues = append(t.queues, nil)
		}
		t.queues[q] = append(t.queues[q], e)
	}
	e.due = e.deadline
	if e.w.isPop() && !e.w.WakeAt.IsZero() && e.w.WakeAt.Before(e.deadline) {
		e.due = e.w.WakeAt
	}
	e.state = stateWaiting
	heap.Push(&h.heap, e)
	return e.heapIdx == 0
}

// readyLocked moves e (not linked) to the ready list and counts the wake
// (h.mu held); it reports whether the loop must be signalled.
func (h *Holder[T]) readyLocked(e *entry[T], why uint8) bool {
	h.wokeLocked(e, why)
	e.state = stateReady
	h.ready = append(h.ready, e)
	return len(h.ready) == 1
}

// wokeLocked records why e was woken and counts it (h.mu held).
func (h *Holder[T]) wokeLocked(e *entry[T], why uint8) {
	e.why = why
	if why == wokeArrival {
		h.count(kind(&e.w), func(c *counters) { c.woken.Add(1) })
	} else {
		h.count(kind(&e.w), func(c *counters) { c.revived.Add(1) })
	}
}

// acquireLocked counts e as held, for the bounds and Stats (h.mu held).
func (h *Holder[T]) acquireLocked(e *entry[T]) {
	h.held[0]++
	h.held[1] += int(kind(&e.w))
	if e.w.Owner != nil {
		h.owners[e.w.Owner]++
	}
	if e.w.Client != nil {
		h.clients[e.w.Client]++
	}
}

// releaseLocked stops counting e as held (h.mu held): when the loop takes
// it to run or expire it, so that whoever sees its answer sees the counts
// without it (a Run that asks to wait counts it again).
func (h *Holder[T]) releaseLocked(e *entry[T]) {
	h.held[0]--
	h.held[1] -= int(kind(&e.w))
	if o := e.w.Owner; o != nil {
		if n := h.owners[o] - 1; n > 0 {
			h.owners[o] = n
		} else {
			delete(h.owners, o)
		}
	}
	if c := e.w.Client; c != nil {
		if n := h.clients[c] - 1; n > 0 {
			h.clients[c] = n
		} else {
			delete(h.clients, c)
		}
	}
}

// takeLocked marks e as taken by the loop (h.mu held): no longer held, no
// longer cancellable.
func (h *Holder[T]) takeLocked(e *entry[T]) {
	h.releaseLocked(e)
	e.state = stateRunning
}

// recheck wakes the pulls parked in (topic, queue) below its max offset
// now (as an arrival report would).
// It runs nothing inline: it is called from Park (a connection's read
// goroutine) and after a Run (no recursion).
func (h *Holder[T]) recheck(topic string, queue int32, offset int64) {
	if m := h.host.MaxOffset(topic, queue); m > offset {
		h.arrived(topic, queue, m, 0)
	}
}

// Arrived is the store's arrival report: the max offset of (topic, queue)
// is now maxOffset. It wakes the pulls waiting there below maxOffset and
// the POPs of the queue and of the whole topic; it never waits for the
// loop. It calls the host only with Options.InlineArrivals: it then runs
// up to that many of the pulls it woke itself (Host.Run, then
// Flusher.Flush), when the holder is started and the loop idle (see
// Options), and returns once they are answered or parked again.
func (h *Holder[T]) Arrived(topic string, queue int32, maxOffset int64) {
	h.arrived(topic, queue, maxOffset, h.opts.InlineArrivals)
}

// arrived is Arrived running at most inline woken pulls itself.
func (h *Holder[T]) arrived(topic string, queue int32, maxOffset int64, inline int) {
	if queue < 0 {
		return
	}
	var run [MaxInline]*entry[T]
	n := 0
	h.mu.Lock()
	if !h.started || h.closed || len(h.ready) > 0 || h.busy.Load() {
		inline = 0
	}
	t := h.topicLocked(topic)
	t.last = h.seq.Add(1)
	signal := false
	if int(queue) < len(t.queues) && len(t.queues[queue]) > 0 {
		l := t.queues[queue]
		kept := l[:0]
		for _, e := range l {
			if e.w.isPop() || e.w.Offset < maxOffset {
				heap.Remove(&h.heap, e.heapIdx)
				if !e.w.isPop() && n < inline {
					// Taken as the loop takes what it runs: no longer
					// held, no longer cancellable.
					h.wokeLocked(e, wokeArrival)
					h.takeLocked(e)
					e.seq = t.last
					run[n] = e
					n++
					continue
				}
				signal = h.readyLocked(e, wokeArrival) || signal
			} else {
				kept = append(kept, e)
			}
		}
		clear(l[len(kept):])
		t.queues[queue] = kept
	}
	if len(t.any) > 0 {
		for _, e := range t.any {
			heap.Remove(&h.heap, e.heapIdx)
			signal = h.readyLocked(e, wokeArrival) || signal
		}
		clear(t.any)
		t.any = t.any[:0]
	}
	if n > 0 {
		// Under mu and before closed is set: Stop's Wait waits for these
		// runs (the loop's count is held, so the counter is not zero).
		h.wg.Add(1)
	}
	h.mu.Unlock()
	if signal {
		h.signal()
	}
	if n == 0 {
		return
	}
	h.counts[0].inline.Add(int64(n))
	for i := 0; i < n; i++ {
		h.run(run[i])
		run[i] = nil
	}
	h.flush()
	h.wg.Done()
}

// Revived is the POP bookkeeping's report that messages of group in
// (topic, queue) become visible to its pops at at: at once (at not after
// now: an invisible time ended early, a FIFO message group was unblocked)
// or later (an invisible time was changed). It wakes the group's POPs
// parked on that queue or on the whole topic, or moves their WakeAt
// earlier; it never calls the host and never waits for the loop.
func (h *Holder[T]) Revived(group, topic string, queue int32, at time.Time) {
	now := time.Now()
	h.mu.Lock()
	t := h.topicLocked(topic)
	t.last = h.seq.Add(1)
	signal := false
	revive := func(l []*entry[T]) []*entry[T] {
		kept := l[:0]
		for _, e := range l {
			switch {
			case e.w.Group != group:
			case !at.After(now):
				heap.Remove(&h.heap, e.heapIdx)
				signal = h.readyLocked(e, wokeRevive) || signal
				continue
			case e.w.WakeAt.IsZero() || at.Before(e.w.WakeAt):
				e.w.WakeAt = at
				if at.Before(e.due) {
					e.due = at
					heap.Fix(&h.heap, e.heapIdx)
					signal = signal || e.heapIdx == 0
				}
			}
			kept = append(kept, e)
		}
		clear(l[len(kept):])
		return kept
	}
	if queue >= 0 && int(queue) < len(t.queues) {
		t.queues[queue] = revive(t.queues[queue])
	}
	t.any = revive(t.any)
	h.mu.Unlock()
	if signal {
		h.signal()
	}
}

// Stats returns the holder's counters and the number of items held now.
func (h *Holder[T]) Stats() Stats {
	h.mu.Lock()
	all, pops := h.held[0], h.held[1]
	h.mu.Unlock()
	return Stats{Counts: h.counts[0].load(all), Pops: h.counts[1].load(pops)}
}

func (c *counters) load(held int) Counts {
	return Counts{
		Parked: c.parked.Load(), Woken: c.woken.Load(), Revived: c.revived.Load(), Reparked: c.reparked.Load(),
		Expired: c.expired.Load(), Cancelled: c.cancelled.Load(), Refused: c.refused.Load(),
		Inline: c.inline.Load(), Held: held,
	}
}

// flush calls the host's Flush, if it has one.
func (h *Holder[T]) flush() {
	if h.flusher != nil {
		h.flusher.Flush()
	}
}

func (h *Holder[T]) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *Holder[T]) get() *entry[T] {
	if v := h.pool.Get(); v != nil {
		return v.(*entry[T])
	}
	return &entry[T]{heapIdx: -1}
}

// put zeroes e (dropping what its item references) and pools it. e.gen
// and e.state are left alone: they are written under mu only (a Cancel
// with a stale Handle may read them; the state is not waiting, so such a
// Cancel reports false until a Park reuses e with a new generation).
func (h *Holder[T]) put(e *entry[T]) {
	e.item, e.w = *new(T), Wait{}
	e.deadline, e.due, e.heapIdx, e.why, e.seq = time.Time{}, time.Time{}, -1, 0, 0
	h.pool.Put(e)
}

// unlinkLocked removes e from its topic's list.
func (h *Holder[T]) unlinkLocked(e *entry[T]) {
	t := h.topics[e.w.Topic]
	if e.w.Lite {
		t = h.lite[e.w.Client]
	}
	if t == nil {
		return
	}
	var l *[]*entry[T]
	switch q := e.w.Queue; {
	case q < 0 || e.w.Lite:
		l = &t.any
	case int(q) < len(t.queues):
		l = &t.queues[q]
	default:
		return
	}
	for i, x := range *l {
		if x == e {
			(*l)[i] = (*l)[len(*l)-1]
			(*l)[len(*l)-1] = nil
			*l = (*l)[:len(*l)-1]
			return
		}
	}
}

// loop runs woken and due items until Stop, then drains the holder.
func (h *Holder[T]) loop() {
	defer h.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var ready, expired []*entry[T]
	for {
		select {
		case <-h.stop:
			timer.Stop()
			h.drain()
			return
		case <-h.wake:
		case <-timer.C:
		}
		now := time.Now()
		h.mu.Lock()
		ready = append(ready[:0], h.ready...)
		clear(h.ready)
		h.ready = h.ready[:0]
		for len(h.heap) > 0 && !h.heap[0].due.After(now) {
			e := heap.Pop(&h.heap).(*entry[T])
			h.unlinkLocked(e)
			if !e.deadline.After(now) {
				h.takeLocked(e)
				expired = append(expired, e)
				continue
			}
			h.wokeLocked(e, wokeTime) // a message is visible again
			ready = append(ready, e)
		}
		seq := h.seq.Load()
		for _, e := range ready {
			h.takeLocked(e)
			e.seq = seq
		}
		if len(h.heap) > 0 {
			timer.Reset(h.heap[0].due.Sub(now))
		} else {
			timer.Stop()
		}
		round := len(ready)+len(expired) > 0
		if round {
			h.busy.Store(true)
		}
		h.mu.Unlock()
		if !round {
			continue
		}
		for i, e := range ready {
			h.run(e)
			ready[i] = nil
		}
		for i, e := range expired {
			h.expire(e)
			expired[i] = nil
		}
		expired = expired[:0]
		h.flush()
		h.busy.Store(false)
	}
}

// run hands a woken item to Host.Run and parks it again when Run asks to
// wait and its deadline has not passed. An arrival or revive reported
// while Run ran found the item in no list: a pull whose offset Run moved
// forward reads the queue's max again; a POP is run again when its topic
// saw an event since the loop took it. (A pull Run that made no progress
// is not woken that way, so that a queue whose reads stall cannot keep the
// loop busy; an arrival still wakes it.)
func (h *Holder[T]) run(e *entry[T]) {
	prev := e.w
	if !h.host.Run(&e.item, &e.w) {
		h.done(e)
		return
	}
	now := time.Now()
	if e.why == wokeTime && !e.w.WakeAt.IsZero() && !e.w.WakeAt.After(now) {
		// Woken at its WakeAt, the POP found nothing visible and names a
		// time passed already: drop it rather than spin (events and the
		// deadline still wake it).
		e.w.WakeAt = time.Time{}
	}
	if !now.Before(e.deadline) {
		h.expire(e)
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.expire(e)
		return
	}
	k := kind(&e.w)
	h.count(k, func(c *counters) { c.reparked.Add(1) })
	h.acquireLocked(e)
	t := h.waitsLocked(&e.w)
	signal := false
	if e.w.isPop() && t.last > e.seq {
		signal = h.readyLocked(e, wokeArrival)
	} else {
		signal = h.linkLocked(t, e)
	}
	w := e.w // e may be run and reused once unlocked
	h.mu.Unlock()
	if signal {
		h.signal()
	}
	if !w.isPop() && !w.Lite && w.Offset > prev.Offset {
		h.recheck(w.Topic, w.Queue, w.Offset)
	}
}

// done forgets an item its Run or Expire answered.
func (h *Holder[T]) done(e *entry[T]) {
	h.put(e)
}

func (h *Holder[T]) expire(e *entry[T]) {
	h.count(kind(&e.w), func(c *counters) { c.expired.Add(1) })
	h.host.Expire(&e.item, &e.w)
	h.done(e)
}

// drain hands every held item to Expire; the holder is closed.
func (h *Holder[T]) drain() {
	h.mu.Lock()
	all := append([]*entry[T](nil), h.ready...)
	clear(h.ready)
	h.ready = h.ready[:0]
	for len(h.heap) > 0 {
		e := heap.Pop(&h.heap).(*entry[T])
		h.unlinkLocked(e)
		all = append(all, e)
	}
	for _, e := range all {
		h.takeLocked(e)
	}
	h.mu.Unlock()
	for _, e := range all {
		h.expire(e)
	}
	h.flush()
}

// entryHeap orders entries by due time (container/heap).
type entryHeap[T any] []*entry[T]

func (q entryHeap[T]) Len() int           { return len(q) }
func (q entryHeap[T]) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q entryHeap[T]) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapIdx = i
	q[j].heapIdx = j
}

func (q *entryHeap[T]) Push(x any) {
	e := x.(*entry[T])
	e.heapIdx = len(*q)
	*q = append(*q, e)
}

func (q *entryHeap[T]) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.heapIdx = -1
	*q = old[:len(old)-1]
	return e
}
