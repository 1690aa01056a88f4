package broker

import (
	"container/heap"
	"sync"
	"time"

	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// heldPull is a pull parked until a message arrives in its queue or its
// deadline passes. It owns its Responder and pull job; nothing in it aliases
// the request (topic is the topic entry's string, filter is immutable).
type heldPull struct {
	resp     remoting.Responder
	topic    string
	queueID  int32
	offset   int64
	maxMsgs  int
	filter   filter.Filter
	job      *pullJob
	deadline time.Time
	heapIdx  int // index in pullHolder.heap; -1 when not in it
}

// pullHolder parks long-polling pulls. It indexes them by topic and queue
// (for arrivals) and by deadline (a min-heap, for timeouts). One goroutine
// (loop) re-runs the pulls that are woken or time out and answers them, so
// neither the dispatcher (which reports arrivals) nor a connection's read
// goroutine ever waits for a held pull.
type pullHolder struct {
	b    *Broker
	pool sync.Pool // *heldPull
	wake chan struct{}

	mu     sync.Mutex
	topics map[string]*holdTopic
	heap   holdHeap
	ready  []*heldPull // woken by arrivals, to be re-run by loop
	closed bool

	cmds sync.Pool // *protocol.Command for answers (finish runs on several goroutines)
}

type holdTopic struct {
	queues [][]*heldPull // by queue id
}

func newPullHolder(b *Broker) *pullHolder {
	return &pullHolder{b: b, wake: make(chan struct{}, 1), topics: make(map[string]*holdTopic)}
}

func (h *pullHolder) get() *heldPull {
	if v := h.pool.Get(); v != nil {
		return v.(*heldPull)
	}
	return &heldPull{heapIdx: -1}
}

func (h *pullHolder) put(p *heldPull) {
	*p = heldPull{heapIdx: -1}
	h.pool.Put(p)
}

func (h *pullHolder) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// add parks p; it reports false (leaving p to the caller) once the holder
// is closed.
func (h *pullHolder) add(p *heldPull) bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	t := h.topics[p.topic]
	if t == nil {
		t = &holdTopic{}
		h.topics[p.topic] = t
	}
	for int(p.queueID) >= len(t.queues) {
		t.queues = append(t.queues, nil)
	}
	t.queues[p.queueID] = append(t.queues[p.queueID], p)
	heap.Push(&h.heap, p)
	first := p.heapIdx == 0
	h.mu.Unlock()
	if first {
		h.signal() // the loop's timer must move earlier
	}
	return true
}

// unlinkLocked removes p from its queue's list.
func (h *pullHolder) unlinkLocked(p *heldPull) {
	t := h.topics[p.topic]
	if t == nil || int(p.queueID) >= len(t.queues) {
		return
	}
	l := t.queues[p.queueID]
	for i, x := range l {
		if x == p {
			l[i] = l[len(l)-1]
			l[len(l)-1] = nil
			t.queues[p.queueID] = l[:len(l)-1]
			return
		}
	}
}

// arrived is the store's OnArrival: it wakes the pulls of (topic, queueID)
// waiting below maxOffset. It runs on the dispatcher goroutine, so it only
// moves them to the ready list.
func (h *pullHolder) arrived(topic string, queueID int32, maxOffset int64) {
	h.mu.Lock()
	t := h.topics[topic]
	if t == nil || int(queueID) >= len(t.queues) || len(t.queues[queueID]) == 0 {
		h.mu.Unlock()
		return
	}
	l := t.queues[queueID]
	kept := l[:0]
	woke := false
	for _, p := range l {
		if p.offset < maxOffset {
			heap.Remove(&h.heap, p.heapIdx)
			h.ready = append(h.ready, p)
			woke = true
		} else {
			kept = append(kept, p)
		}
	}
	clear(l[len(kept):])
	t.queues[queueID] = kept
	h.mu.Unlock()
	if woke {
		h.signal()
	}
}

// loop re-runs woken and expired pulls until the broker stops.
func (h *pullHolder) loop() {
	defer h.b.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var ready, expired []*heldPull
	for {
		select {
		case <-h.b.stop:
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
			p := heap.Pop(&h.heap).(*heldPull)
			h.unlinkLocked(p)
			expired = append(expired, p)
		}
		if len(h.heap) > 0 {
			timer.Reset(h.heap[0].deadline.Sub(now))
		} else {
			timer.Stop()
		}
		h.mu.Unlock()
		for i, p := range ready {
			h.finish(p, true)
			ready[i] = nil
		}
		for i, p := range expired {
			h.finish(p, false)
			expired[i] = nil
		}
		expired = expired[:0]
	}
}

// finish re-runs a held pull and answers it. After an arrival that brought
// nothing for it (another consumer's tag, or a race with the offset), the
// pull is parked again at the offset the scan reached, as long as its
// deadline has not passed.
func (h *pullHolder) finish(p *heldPull, woken bool) {
	b := h.b
	j := p.job
	code, hdr, remark := b.runPull(p.topic, p.queueID, p.offset, p.maxMsgs, p.filter, j)
	if woken && (code == protocol.RespPullNotFound || code == protocol.RespPullRetryImmediately) &&
		time.Now().Before(p.deadline) {
		j.res.Release()
		p.offset = hdr.NextBeginOffset
		if h.add(p) {
			return
		}
		code, hdr, remark = b.runPull(p.topic, p.queueID, p.offset, p.maxMsgs, p.filter, j)
	}
	cmd, _ := h.cmds.Get().(*protocol.Command)
	if cmd == nil {
		cmd = new(protocol.Command)
	}
	defer h.cmds.Put(cmd)
	p.resp.InitResponse(cmd, code)
	if remark != "" {
		cmd.SetRemark(remark)
	}
	hdr.Encode(&cmd.Ext)
	r := remoting.Response{Cmd: cmd}
	if code == protocol.RespSuccess {
		b.stats.pullFound.Add(1)
		b.stats.pullMessages.Add(int64(len(j.bodies)))
		r.Body, r.Release = j.bodies, j
	} else {
		j.Release()
	}
	_ = p.resp.Reply(&r) // a closed connection releases the job itself
	h.put(p)
}

// drain closes the holder and answers every held pull (the broker is
// shutting down). Later adds are refused.
func (h *pullHolder) drain() {
	h.mu.Lock()
	h.closed = true
	all := append([]*heldPull(nil), h.ready...)
	h.ready = h.ready[:0]
	for len(h.heap) > 0 {
		p := heap.Pop(&h.heap).(*heldPull)
		h.unlinkLocked(p)
		all = append(all, p)
	}
	h.mu.Unlock()
	for _, p := range all {
		h.finish(p, false)
	}
}

// count is the number of held pulls.
func (h *pullHolder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.heap) + len(h.ready)
}

// holdHeap orders held pulls by deadline (container/heap).
type holdHeap []*heldPull

func (q holdHeap) Len() int           { return len(q) }
func (q holdHeap) Less(i, j int) bool { return q[i].deadline.Before(q[j].deadline) }
func (q holdHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapIdx = i
	q[j].heapIdx = j
}
func (q *holdHeap) Push(x any) {
	p := x.(*heldPull)
	p.heapIdx = len(*q)
	*q = append(*q, p)
}
func (q *holdHeap) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	p.heapIdx = -1
	*q = old[:len(old)-1]
	return p
}
