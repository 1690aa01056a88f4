package client

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Entry states in a process queue.
const (
	entPending    = 0 // pulled, not handed to a listener (or Poll) yet
	entDispatched = 1 // being consumed (or returned by Poll, not committed)
	entDone       = 2 // consumed
)

type pqEntry struct {
	m       *MessageExt
	state   uint8
	retries int32 // orderly: local reconsumes so far
}

// processQueue is the client's state of one assigned queue: the messages pulled but
// not yet consumed, in queue-offset order, the next offset to pull, and (orderly) the
// broker lock. The commit offset is the offset of the first message not consumed, or
// the next pull offset when every pulled message is consumed: offsets never advance
// past a message still being consumed.
type processQueue struct {
	mq       MessageQueue
	ctx      context.Context // ends when the queue is dropped
	cancel   context.CancelFunc
	dropped  atomic.Bool
	pullDone chan struct{} // closed when the puller exits
	space    chan struct{} // signalled when messages leave the queue

	mu            sync.Mutex
	ents          []pqEntry // ents[head:] are live; offsets increase
	head          int
	count         int // live entries not done
	bytes         int64
	nextOffset    int64
	brokerMax     int64
	dispatchedMax int64
	gen           uint64             // bumped by seek and reset; a pull started under an older gen is discarded
	pullCancel    context.CancelFunc // cancels the pull in flight (reset does)
	suggestBroker int64
	// orderly
	locked    bool
	lockedAt  time.Time
	lost      bool // the lock was lost since it was last held: re-read the offset
	consuming bool
	loopIdle  chan struct{} // closed when the orderly loop exits (nil when none ran)

	// duplicate estimate (see consumer.removeQueue)
	persisted atomic.Int64 // last offset the broker acknowledged (or the initial one)
	snapshot  int64        // persisted as of the last rebalance
	snapPrev  int64        // snapshot as of the rebalance before
}

func newProcessQueue(parent context.Context, mq MessageQueue, offset int64) *processQueue {
	ctx, cancel := context.WithCancel(parent)
	pq := &processQueue{mq: mq, ctx: ctx, cancel: cancel, nextOffset: offset, dispatchedMax: offset - 1,
		pullDone: make(chan struct{}), space: make(chan struct{}, 1)}
	pq.persisted.Store(offset)
	pq.snapshot, pq.snapPrev = offset, offset
	return pq
}

func (pq *processQueue) drop() {
	pq.dropped.Store(true)
	pq.cancel()
}

// put adds pulled messages (those above the last cached offset) and sets the next
// pull offset. A pull started before a seek (gen changed) is discarded. It returns
// the messages added.
func (pq *processQueue) put(msgs []*MessageExt, next int64, gen uint64) []*MessageExt {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if gen != pq.gen || pq.dropped.Load() {
		return nil
	}
	last := int64(-1)
	if n := len(pq.ents); n > pq.head {
		last = pq.ents[n-1].m.QueueOffset
	}
	out := msgs[:0]
	for _, m := range msgs {
		if m.QueueOffset <= last {
			continue
		}
		last = m.QueueOffset
		pq.ents = append(pq.ents, pqEntry{m: m})
		pq.count++
		pq.bytes += int64(len(m.Body))
		out = append(out, m)
	}
	pq.nextOffset = next
	return out
}

func (pq *processQueue) setNext(next int64, gen uint64) {
	pq.mu.Lock()
	if gen == pq.gen {
		pq.nextOffset = next
	}
	pq.mu.Unlock()
}

// pullState returns what the next pull needs.
func (pq *processQueue) pullState() (offset int64, gen uint64, broker int64) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.nextOffset, pq.gen, pq.suggestBroker
}

// overLimits reports whether pulling should pause (flow control).
func (pq *processQueue) overLimits(maxMsgs int, maxBytes int64, maxSpan int64) bool {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if pq.count > maxMsgs || pq.bytes > maxBytes {
		return true
	}
	if maxSpan > 0 && len(pq.ents) > pq.head {
		first := pq.ents[pq.head].m.QueueOffset
		last := pq.ents[len(pq.ents)-1].m.QueueOffset
		return last-first > maxSpan
	}
	return false
}

func (pq *processQueue) find(off int64) int {
	live := pq.ents[pq.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].m.QueueOffset >= off })
	if i < len(live) && live[i].m.QueueOffset == off {
		return pq.head + i
	}
	return -1
}

// markDispatched marks msgs as handed to consumption.
func (pq *processQueue) markDispatched(msgs []*MessageExt) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	for _, m := range msgs {
		if i := pq.find(m.QueueOffset); i >= 0 && pq.ents[i].state == entPending {
			pq.ents[i].state = entDispatched
			pq.dispatchedMax = max(pq.dispatchedMax, m.QueueOffset)
		}
	}
}

// done marks msgs consumed and returns the commit offset.
func (pq *processQueue) done(msgs []*MessageExt) int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	for _, m := range msgs {
		if i := pq.find(m.QueueOffset); i >= 0 && pq.ents[i].state != entDone {
			pq.ents[i].state = entDone
			pq.count--
			pq.bytes -= int64(len(m.Body))
		}
	}
	pq.advanceLocked()
	return pq.commitLocked()
}

func (pq *processQueue) advanceLocked() {
	for pq.head < len(pq.ents) && pq.ents[pq.head].state == entDone {
		pq.ents[pq.head] = pqEntry{}
		pq.head++
	}
	if pq.head == len(pq.ents) {
		pq.ents, pq.head = pq.ents[:0], 0
	} else if pq.head > 256 && pq.head > len(pq.ents)/2 {
		n := copy(pq.ents, pq.ents[pq.head:])
		clear(pq.ents[n:])
		pq.ents, pq.head = pq.ents[:n], 0
	}
	select {
	case pq.space <- struct{}{}:
	default:
	}
}

func (pq *processQueue) commitLocked() int64 {
	if pq.head < len(pq.ents) {
		return pq.ents[pq.head].m.QueueOffset
	}
	return pq.nextOffset
}

func (pq *processQueue) commitOffset() int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.commitLocked()
}

// take hands out up to n pending messages in queue order, from the first one not
// consumed (orderly consumption and Poll). It stops at a dispatched message.
func (pq *processQueue) take(n int) []*MessageExt {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	var out []*MessageExt
	for i := pq.head; i < len(pq.ents) && len(out) < n; i++ {
		e := &pq.ents[i]
		if e.state == entDone {
			continue
		}
		if e.state == entDispatched {
			if out == nil {
				continue // Poll: skip what was handed out already
			}
			break
		}
		e.state = entDispatched
		pq.dispatchedMax = max(pq.dispatchedMax, e.m.QueueOffset)
		out = append(out, e.m)
	}
	return out
}

// rollback returns taken messages to pending, counting a local reconsume for each,
// and returns the largest count.
func (pq *processQueue) rollback(msgs []*MessageExt) int32 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	var most int32
	for _, m := range msgs {
		if i := pq.find(m.QueueOffset); i >= 0 && pq.ents[i].state == entDispatched {
			pq.ents[i].state = entPending
			pq.ents[i].retries++
			most = max(most, pq.ents[i].retries)
		}
	}
	return most
}

// retries returns the local reconsume count of m.
func (pq *processQueue) retries(m *MessageExt) int32 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if i := pq.find(m.QueueOffset); i >= 0 {
		return pq.ents[i].retries
	}
	return 0
}

// dispatchedLive returns the messages handed out and not done (Poll's auto-commit).
func (pq *processQueue) dispatchedLive() []*MessageExt {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	var out []*MessageExt
	for i := pq.head; i < len(pq.ents); i++ {
		if pq.ents[i].state == entDispatched {
			out = append(out, pq.ents[i].m)
		}
	}
	return out
}

// reset drops every cached message and restarts pulling at offset.
func (pq *processQueue) reset(offset int64) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	clear(pq.ents)
	pq.ents, pq.head, pq.count, pq.bytes = pq.ents[:0], 0, 0, 0
	pq.nextOffset = offset
	pq.dispatchedMax = offset - 1
	pq.gen++
	if pq.pullCancel != nil {
		pq.pullCancel()
	}
	select {
	case pq.space <- struct{}{}:
	default:
	}
}

// lockValid reports whether the queue's broker lock is held and fresh (30 s).
func (pq *processQueue) lockValid(now time.Time) bool {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.locked && now.Sub(pq.lockedAt) < 30*time.Second
}

// estimatedDuplicates is the most messages this consumer consumed (or is consuming)
// of the queue that its next owner may be given again: everything handed to
// consumption at or above the offset the broker held at the previous rebalance.
func (pq *processQueue) estimatedDuplicates(base int64) int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return max(0, pq.dispatchedMax+1-base)
}

// stats returns what Lag reports.
func (pq *processQueue) stats() (cached int, bytes int64, next, brokerMax int64) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.count, pq.bytes, pq.nextOffset, pq.brokerMax
}
