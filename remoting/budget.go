package remoting

import (
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DefaultReceiveBudget is the limit of SharedReceiveBudget: 128 MiB. It lets seven
// frames of the largest size (16 MiB, reserved as 16 MiB + 64 KiB), or 31 messages of
// the broker's largest size (4 MiB), arrive at once, while a flood of half-sent frames
// costs at most this much memory. Frames that fit a connection's own read buffer
// (64 KiB) never touch it.
const DefaultReceiveBudget = 128 << 20

// ReceiveBudget caps the memory that connections hold for frames larger than their
// own read buffer while those frames arrive. It is shared by every connection that
// charges it: by default every Server of the process (SharedReceiveBudget), so one
// cap covers a broker's remoting and name-server listeners together.
//
// A connection reserves, when such a frame has filled its own buffer, the size of the
// buffer class that holds the whole frame (the frame's length rounded up to a power
// of two times 64 KiB, plus 64 KiB; see bigClassSize), and releases it once the frame
// has been handled or the connection closes. It allocates that buffer in growing
// steps as the bytes arrive, so what a connection holds is within its reservation
// and within twice what it received. A reservation is all or nothing, taken while
// the connection holds nothing else of the budget, so connections never wait for
// each other while holding part of it: the budget cannot deadlock.
//
// When a reservation does not fit, the frame waits (its connection stops reading,
// and TCP pushes back on the peer) in arrival order until room is released or its
// frame deadline (Options.FrameTimeout from its first byte) passes, and then the
// connection is closed with ErrReceiveBudget. A frame larger than the whole limit is
// refused at once. Exhaustion is logged once when it starts (Warn) and once when it
// ends (Info), not per frame.
//
// Its methods are safe for concurrent use.
type ReceiveBudget struct {
	log *slog.Logger // nil: slog.Default() at the time of logging

	mu        sync.Mutex
	limit     int64 // <= 0: unlimited (reservations are still counted)
	used      int64
	peak      int64
	waiters   []*budgetWaiter // in arrival order
	exhausted bool
	since     time.Time // start of the current exhaustion
	episode   struct{ waits, timeouts uint64 }

	reserves, waits, timeouts, refused, exhaustions uint64
}

// budgetWaiter is a reservation waiting for room. granted is set (under the budget's
// mutex) and ready closed when it is granted.
type budgetWaiter struct {
	n       int64
	ready   chan struct{}
	granted bool
}

// ReceiveBudgetStats are a budget's numbers.
type ReceiveBudgetStats struct {
	Limit       int64  // bytes; 0 when unlimited
	InUse       int64  // bytes reserved now
	Peak        int64  // highest InUse so far
	Waiting     int    // frames waiting for room now
	Exhausted   bool   // frames waited recently and InUse has not yet fallen to 3/4 of Limit
	Reserves    uint64 // reservations granted (frames that outgrew a connection's own buffer)
	Waits       uint64 // reservations that had to wait for room
	Timeouts    uint64 // waits that ended at the frame's deadline (the connection was closed)
	Refused     uint64 // frames larger than the whole limit (the connection was closed)
	Exhaustions uint64 // times the budget became exhausted
}

// Internal outcomes of reserve; the read loop turns them into errors naming the frame.
var (
	errBudgetTimeout = errors.New("no room before the frame's deadline")
	errBudgetTooBig  = errors.New("the frame is larger than the budget's whole limit")
	errBudgetStopped = errors.New("stopped while waiting for room")
)

// NewReceiveBudget returns a budget of limit bytes (<= 0: unlimited, but still
// counted). logger receives its state changes; nil means slog.Default() at the time of
// logging. The limit should be at least the reservation of the largest frame
// accepted (16 MiB + 64 KiB for the default MaxFrameSize); larger frames are refused.
func NewReceiveBudget(limit int64, logger *slog.Logger) *ReceiveBudget {
	return &ReceiveBudget{limit: max(limit, 0), log: logger}
}

var sharedBudget = sync.OnceValue(func() *ReceiveBudget { return NewReceiveBudget(DefaultReceiveBudget, nil) })

// SharedReceiveBudget returns the process-wide budget that every Server whose
// Options.ReceiveBudget is nil charges. Its limit is DefaultReceiveBudget until
// SetLimit changes it.
func SharedReceiveBudget() *ReceiveBudget { return sharedBudget() }

// SetLimit changes the limit (<= 0: unlimited). Reservations already granted stay;
// waiting ones that now fit are granted.
func (b *ReceiveBudget) SetLimit(limit int64) {
	b.mu.Lock()
	b.limit = max(limit, 0)
	b.grantLocked()
	logFn := b.checkRecoveredLocked()
	b.mu.Unlock()
	logFn()
}

// Stats returns the budget's numbers.
func (b *ReceiveBudget) Stats() ReceiveBudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return ReceiveBudgetStats{
		Limit: b.limit, InUse: b.used, Peak: b.peak, Waiting: len(b.waiters), Exhausted: b.exhausted,
		Reserves: b.reserves, Waits: b.waits, Timeouts: b.timeouts, Refused: b.refused, Exhaustions: b.exhaustions,
	}
}

func (b *ReceiveBudget) logger() *slog.Logger {
	if b.log != nil {
		return b.log
	}
	return slog.Default()
}

func (b *ReceiveBudget) fitsLocked(n int64) bool { return b.limit <= 0 || b.used+n <= b.limit }

func (b *ReceiveBudget) takeLocked(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
	b.reserves++
}

// reserve takes n bytes, waiting in arrival order for room until deadline (zero: no
// deadline) or until stop is closed. It reports how long it waited. On error nothing
// is held.
func (b *ReceiveBudget) reserve(n int64, deadline time.Time, stop <-chan struct{}) (time.Duration, error) {
	b.mu.Lock()
	if b.limit > 0 && n > b.limit {
		b.refused++
		b.mu.Unlock()
		return 0, errBudgetTooBig
	}
	if len(b.waiters) == 0 && b.fitsLocked(n) {
		b.takeLocked(n)
		b.mu.Unlock()
		return 0, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.waits++
	var logFn func()
	if !b.exhausted {
		b.exhausted, b.since = true, time.Now()
		b.episode.waits, b.episode.timeouts = 0, 0
		b.exhaustions++
		limit, used := b.limit, b.used
		logFn = func() {
			b.logger().Warn("remoting: receive budget exhausted: frames larger than a connection's read buffer wait for room",
				"limit", limit, "in_use", used, "need", n)
		}
	}
	b.episode.waits++
	b.mu.Unlock()
	if logFn != nil {
		logFn()
	}

	start := time.Now()
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case <-w.ready:
		return time.Since(start), nil
	case <-timeout:
		err = errBudgetTimeout
	case <-stop:
		err = errBudgetStopped
	}
	b.mu.Lock()
	if w.granted {
		// Granted while the timer or stop fired: give it back.
		b.used -= n
	} else {
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	if err == errBudgetTimeout {
		b.timeouts++
		b.episode.timeouts++
	}
	// The head may have changed, or room been returned.
	b.grantLocked()
	logFn = b.checkRecoveredLocked()
	b.mu.Unlock()
	logFn()
	return time.Since(start), err
}

// release returns n reserved bytes and grants the waiting reservations that now fit.
func (b *ReceiveBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	over := b.used < 0
	if over {
		b.used = 0
	}
	b.grantLocked()
	logFn := b.checkRecoveredLocked()
	b.mu.Unlock()
	if over {
		b.logger().Error("remoting: receive budget released more than was reserved", "released", n)
	}
	logFn()
}

// grantLocked grants waiting reservations in arrival order while the first one fits.
func (b *ReceiveBudget) grantLocked() {
	i := 0
	for ; i < len(b.waiters) && b.fitsLocked(b.waiters[i].n); i++ {
		w := b.waiters[i]
		b.takeLocked(w.n)
		w.granted = true
		close(w.ready)
		b.waiters[i] = nil
	}
	if i > 0 {
		b.waiters = append(b.waiters[:0], b.waiters[i:]...)
	}
}

// checkRecoveredLocked ends an exhaustion once nothing waits and at most 3/4 of the
// limit is reserved (the margin keeps a load hovering at the limit from logging a
// pair of lines per frame). It returns the logging to do after unlocking.
func (b *ReceiveBudget) checkRecoveredLocked() func() {
	if !b.exhausted || len(b.waiters) > 0 || (b.limit > 0 && b.used > b.limit/4*3) {
		return func() {}
	}
	b.exhausted = false
	d, waits, timeouts, used := time.Since(b.since), b.episode.waits, b.episode.timeouts, b.used
	return func() {
		b.logger().Info("remoting: receive budget has room again",
			"after", d.Round(time.Millisecond), "waited", waits, "timed_out", timeouts, "in_use", used)
	}
}

// TryReserve takes n bytes if they fit now, without waiting (and never ahead of a
// reservation that waits); it reports whether it took them. It is how another front
// end of the process (the gRPC one) charges this budget where it cannot wait: the
// caller answers a refusal itself, and gives the bytes back with Release.
func (b *ReceiveBudget) TryReserve(n int64) bool {
	if n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters) > 0 || !b.fitsLocked(n) {
		return false
	}
	b.takeLocked(n)
	return true
}

// Release gives back n bytes taken by TryReserve, granting the waiting reservations
// that now fit.
func (b *ReceiveBudget) Release(n int64) { b.release(n) }
