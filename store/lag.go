package store

import (
	"sync"
	"sync/atomic"

	"github.com/apogeemq/apogee/commitlog"
)

// lagGate bounds how far the dispatcher may fall behind the commit log.
//
// Put appends as fast as its callers can go, and the dispatcher (one
// goroutine) makes the messages visible. When producers outrun it for long,
// the gap grows without bound: messages stay invisible to consumers for ever
// longer, and the writers take the CPU the dispatcher would need to catch up.
// So Put waits while the dispatcher is more than limit bytes behind, until it
// is back within half of that (the hysteresis keeps waiters from waking once
// per batch). Waiting is skipped while the dispatcher cannot progress (full
// disk, unreadable record) and after Close: then nothing would wake them.
type lagGate struct {
	limit      int64 // bytes; 0 disables the gate
	log        *commitlog.Log
	dispatched *atomic.Int64

	mu      sync.Mutex
	cond    sync.Cond // on mu; broadcast when the lag falls to limit/2, on stuck and on close
	waiters atomic.Int32
	stuck   atomic.Bool // dispatch cannot make progress now
	closed  atomic.Bool
	waits   atomic.Int64 // Puts that waited, for Stats
}

func (g *lagGate) init(limit int64, log *commitlog.Log, dispatched *atomic.Int64) {
	g.limit, g.log, g.dispatched = limit, log, dispatched
	g.cond.L = &g.mu
}

// lag is how many bytes of the log are written but not dispatched.
func (g *lagGate) lag() int64 { return g.log.WrittenOffset() - g.dispatched.Load() }

// wait blocks while the lag exceeds the limit. The fast path is two atomic loads.
func (g *lagGate) wait() {
	if g.limit == 0 || g.lag() <= g.limit || g.stuck.Load() || g.closed.Load() {
		return
	}
	g.waits.Add(1)
	g.mu.Lock()
	g.waiters.Add(1)
	// The dispatcher stores its progress and then loads waiters; this side
	// adds itself to waiters and then loads the progress (in lag). With
	// sequentially consistent atomics one of them sees the other's store, so
	// a wakeup is never lost.
	for g.lag() > g.limit/2 && !g.stuck.Load() && !g.closed.Load() {
		g.cond.Wait()
	}
	g.waiters.Add(-1)
	g.mu.Unlock()
}

// progressed is called by the dispatcher after it advanced.
func (g *lagGate) progressed() {
	if g.stuck.Load() {
		g.stuck.Store(false)
	}
	if g.waiters.Load() > 0 && g.lag() <= g.limit/2 {
		g.broadcast()
	}
}

// stall records that the dispatcher cannot make progress until further
// notice (progressed ends it), and releases every waiter.
func (g *lagGate) stall() {
	g.stuck.Store(true)
	g.broadcast()
}

// close releases every waiter for good.
func (g *lagGate) close() {
	g.closed.Store(true)
	g.broadcast()
}

func (g *lagGate) broadcast() {
	g.mu.Lock()
	g.cond.Broadcast()
	g.mu.Unlock()
}
