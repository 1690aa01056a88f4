package core

// Pending is what an operation that stored messages leaves to its caller in
// sync-flush mode or on a SYNC_MASTER: its answer must wait until the commit
// log is durable up to the end of what it stored (the durability the
// store's WaitDurable and OnDurable give: flushed in sync flush mode, and
// acknowledged by the slave on a SYNC_MASTER).
// The zero Pending waits for nothing: answer at once.
//
// A Pending that Waiting reports true must be handed to exactly one of
// WaitDurable and WhenDurable: it holds in-flight message bytes (a send's,
// counted against MaxInFlightBytes) that only they release.
type Pending struct {
	end  int64 // commit-log offset that must be durable
	held int64 // in-flight bytes released once it is
}

// Waiting reports whether the answer must wait for durability.
func (p Pending) Waiting() bool { return p.end > 0 }

// DurableWaiter is told once what a Pending waited for is durable: err is
// nil; an *Error of ErrFlushDiskTimeout's code (the store's sync did not
// complete in time), ErrFlushSlaveTimeout's (the slave did not acknowledge
// in time) or ErrSlaveNotAvailable's (no slave in sync to wait for): in
// those three the messages are stored all the same (NotDurable); or the
// store's failure as an *Error (SERVICE_NOT_AVAILABLE: the log failed or
// the store closed).
type DurableWaiter interface {
	Durable(err error)
}

// WaitDurable blocks until p is durable and returns the outcome as
// DurableWaiter describes. For a caller that may block (no connection to
// answer later on): every other caller uses WhenDurable.
func (c *Core) WaitDurable(p Pending) error {
	if !p.Waiting() {
		return nil
	}
	err := c.store.WaitPutDurable(p.end)
	c.inflight.Add(-p.held)
	return durableError(err)
}

// WhenDurable calls w.Durable once p is durable, on the store's durability
// goroutine (or at once, on the caller's, when it already is): no goroutine
// is held per waiting operation, and one sync answers every operation it
// covers. w.Durable must not block. It does not allocate in steady state.
func (c *Core) WhenDurable(p Pending, w DurableWaiter) {
	if !p.Waiting() {
		w.Durable(nil)
		return
	}
	d, _ := c.waitPool.Get().(*durableWait)
	if d == nil {
		d = new(durableWait)
	}
	d.c, d.held, d.w = c, p.held, w
	c.store.OnDurable(p.end, d)
}

// durableWait is the store.DurableWaiter of WhenDurable: it releases the
// in-flight bytes, recycles itself and tells the caller's waiter.
type durableWait struct {
	c    *Core
	held int64
	w    DurableWaiter
}

func (d *durableWait) Durable(err error) {
	c, w := d.c, d.w
	c.inflight.Add(-d.held)
	d.c, d.w = nil, nil
	c.waitPool.Put(d)
	w.Durable(durableError(err))
}
