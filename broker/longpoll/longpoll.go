package longpoll

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"
)

// Position is where a parked item waits: for an arrival in queue Queue of
// Topic that takes the queue's max offset past Offset.
type Position struct {
	Topic  string
	Queue  int32
	Offset int64
}

// Host owns the parked items. The holder calls its methods on its own
// goroutine, one at a time, never while holding its lock (package doc).
type Host[T any] interface {
	// Run re-runs an item woken by an arrival in its queue. It either
	// answers it and returns wait false, or returns wait true and the offset
	// to wait past (nothing it wants arrived yet): the holder then parks it
	// again with its original deadline, or calls Expire when that deadline
	// has passed or the holder is stopping.
	Run(item *T, at Position) (next int64, wait bool)
	// Expire answers an item whose deadline passed or that the holder drops
	// because it stops. at.Offset is the last offset the item waited past.
	Expire(item *T, at Position)
	// MaxOffset is the queue's max offset now. A queue's growth must be
	// visible here no later than the Arrived call that reports it (the
	// store's queue max is updated before its OnArrival runs): the holder
	// reads it after parking an item, so that an arrival reported while
	// the item was not yet (or not again) parked is not lost. It is called
	// on Park's caller's goroutine and on the holder's, never under the
	// holder's lock, and must be quick.
	MaxOffset(topic string, queue int32) int64
}

// Stats are a holder's counters since New.
type Stats struct {
	Parked   int64 // items accepted by Park
	Woken    int64 // items an arrival woke (each wake is counted; see Reparked)
	Reparked int64 // woken items parked again because Run asked to wait
	Expired  int64 // items handed to Expire: deadline passed, holder stopping or stopped
	Held     int   // items parked now, woken ones not yet run included
}

// Holder parks items by (topic, queue) and by deadline. Create it with New;
// its methods are safe for concurrent use.
type Holder[T any] struct {
	host Host[T]
	pool sync.Pool // *entry[T]
	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup

	startOnce, stopOnce sync.Once

	mu      sync.Mutex
	topics  map[string]*topicWaits[T]
	heap    entryHeap[T]
	ready   []*entry[T] // woken by arrivals, to be run by the loop
	started bool
	closed  bool

	parked, woken, reparked, expired atomic.Int64
}

// entry is one parked item. It is in at most one of: its queue's list and
// the heap (waiting), the ready list (woken), or neither (being run).
type entry[T any] struct {
	item     T
	pos      Position
	deadline time.Time
	heapIdx  int // index in Holder.heap; -1 when not in it
}

type topicWaits[T any] struct {
	queues [][]*entry[T] // by queue id
}

// New returns a holder whose items go back to host. Start starts its
// goroutine; Stop drains it.
func New[T any](host Host[T]) *Holder[T] {
	return &Holder[T]{
		host:   host,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		topics: make(map[string]*topicWaits[T]),
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
// returns once all of them are answered and the goroutine has exited.
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

// Park holds item at pos until an arrival takes the queue's max offset past
// pos.Offset (then Host.Run; Park itself reads Host.MaxOffset once the item
// is parked, for an arrival reported just before) or until deadline (then
// Host.Expire). The holder owns item from now on; when it is stopped, Park
// calls Host.Expire at once, on the caller's goroutine, and reports false.
// pos.Queue must be a valid queue id of the topic (0 or more; the holder
// keeps a list per queue id up to the highest one parked), and pos.Topic
// must not alias a buffer the caller reuses.
func (h *Holder[T]) Park(pos Position, deadline time.Time, item T) bool {
	e := h.get()
	e.item, e.pos, e.deadline = item, pos, deadline
	if h.park(e, true) {
		// A message that arrived after the caller looked and before e was
		// linked was reported to nobody: look again.
		h.recheck(pos)
		return true
	}
	h.expired.Add(1)
	h.host.Expire(&e.item, e.pos)
	h.put(e)
	return false
}

// park links e into its queue's list and the heap; it reports false (e
// untouched) once the holder is closed. fresh counts it as Parked,
// otherwise as Reparked.
func (h *Holder[T]) park(e *entry[T], fresh bool) bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	t := h.topics[e.pos.Topic]
	if t == nil {
		t = &topicWaits[T]{}
		h.topics[e.pos.Topic] = t
	}
	q := int(e.pos.Queue)
	for q >= len(t.queues) {
		t.queues = append(t.queues, nil)
	}
	t.queues[q] = append(t.queues[q], e)
	heap.Push(&h.heap, e)
	first := e.heapIdx == 0
	if fresh {
		h.parked.Add(1)
	} else {
		h.reparked.Add(1)
	}
	h.mu.Unlock()
	if first {
		h.signal() // the loop's timer must move earlier
	}
	return true
}

// recheck wakes the items parked in pos's queue below its max offset now
// (as an arrival report would). It must not touch the entry just parked:
// once linked, another goroutine may run it and reuse it.
func (h *Holder[T]) recheck(pos Position) {
	if m := h.host.MaxOffset(pos.Topic, pos.Queue); m > pos.Offset {
		h.Arrived(pos.Topic, pos.Queue, m)
	}
}

// Arrived is the store's arrival report: the max offset of (topic, queue)
// is now maxOffset. It wakes the items waiting there below maxOffset; it
// never calls the host and never waits for the loop.
func (h *Holder[T]) Arrived(topic string, queue int32, maxOffset int64) {
	h.mu.Lock()
	t := h.topics[topic]
	if t == nil || queue < 0 || int(queue) >= len(t.queues) || len(t.queues[queue]) == 0 {
		h.mu.Unlock()
		return
	}
	l := t.queues[queue]
	kept := l[:0]
	var woke int64
	for _, e := range l {
		if e.pos.Offset < maxOffset {
			heap.Remove(&h.heap, e.heapIdx)
			h.ready = append(h.ready, e)
			woke++
		} else {
			kept = append(kept, e)
		}
	}
	clear(l[len(kept):])
	t.queues[queue] = kept
	if woke > 0 {
		h.woken.Add(woke)
	}
	h.mu.Unlock()
	if woke > 0 {
		h.signal()
	}
}

// Stats returns the holder's counters and the number of items held now.
func (h *Holder[T]) Stats() Stats {
	h.mu.Lock()
	held := len(h.heap) + len(h.ready)
	h.mu.Unlock()
	return Stats{
		Parked:   h.parked.Load(),
		Woken:    h.woken.Load(),
		Reparked: h.reparked.Load(),
		Expired:  h.expired.Load(),
		Held:     held,
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

// put zeroes e (dropping what its item references) and pools it.
func (h *Holder[T]) put(e *entry[T]) {
	*e = entry[T]{heapIdx: -1}
	h.pool.Put(e)
}

// unlinkLocked removes e from its queue's list.
func (h *Holder[T]) unlinkLocked(e *entry[T]) {
	t := h.topics[e.pos.Topic]
	if t == nil || int(e.pos.Queue) >= len(t.queues) {
		return
	}
	l := t.queues[e.pos.Queue]
	for i, x := range l {
		if x == e {
			l[i] = l[len(l)-1]
			l[len(l)-1] = nil
			t.queues[e.pos.Queue] = l[:len(l)-1]
			return
		}
	}
}

// loop runs woken and expired items until Stop, then drains the holder.
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
		for len(h.heap) > 0 && !h.heap[0].deadline.After(now) {
			e := heap.Pop(&h.heap).(*entry[T])
			h.unlinkLocked(e)
			expired = append(expired, e)
		}
		if len(h.heap) > 0 {
			timer.Reset(h.heap[0].deadline.Sub(now))
		} else {
			timer.Stop()
		}
		h.mu.Unlock()
		for i, e := range ready {
			h.run(e)
			ready[i] = nil
		}
		for i, e := range expired {
			h.expire(e)
			expired[i] = nil
		}
		expired = expired[:0]
	}
}

// run hands a woken item to Host.Run and parks it again when Run asks to
// wait and its deadline has not passed. An arrival reported while Run ran
// found the item in no list: when Run moved the offset forward, the queue's
// max is read again. (A Run that made no progress is not woken that way, so
// that a queue whose reads stall cannot keep the loop busy; an arrival
// still wakes it.)
func (h *Holder[T]) run(e *entry[T]) {
	prev := e.pos
	next, wait := h.host.Run(&e.item, prev)
	if !wait {
		h.put(e)
		return
	}
	e.pos.Offset = next
	if time.Now().Before(e.deadline) && h.park(e, false) {
		if next > prev.Offset {
			prev.Offset = next
			h.recheck(prev)
		}
		return
	}
	h.expire(e)
}

func (h *Holder[T]) expire(e *entry[T]) {
	h.expired.Add(1)
	h.host.Expire(&e.item, e.pos)
	h.put(e)
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
	h.mu.Unlock()
	for _, e := range all {
		h.expire(e)
	}
}

// entryHeap orders entries by deadline (container/heap).
type entryHeap[T any] []*entry[T]

func (q entryHeap[T]) Len() int           { return len(q) }
func (q entryHeap[T]) Less(i, j int) bool { return q[i].deadline.Before(q[j].deadline) }
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
