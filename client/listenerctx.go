package client

import (
	"context"
	"sync"
	"time"
)

// listenerCtx is the context a listener call gets: it carries the call's
// ConsumeContext, ends at the consume timeout or when the consumer shuts down
// (runCtx), and is canceled when the call returns. It does what
// context.WithValue(context.WithTimeout(...)) did, but in one allocation
// instead of four and without arming a timer per call: the timer and the Done
// channel are made only if the listener asks for Done. Profiles of draining a
// backlog had the per-message timer and contexts at 6% of the CPU.
type listenerCtx struct {
	parent   context.Context
	deadline time.Time
	cc       *ConsumeContext

	mu    sync.Mutex
	done  chan struct{} // made by the first Done
	err   error         // set when the context ends
	stop  func() bool   // stops what Done armed
	ended bool          // the call returned
}

func newListenerCtx(parent context.Context, timeout time.Duration, cc *ConsumeContext) *listenerCtx {
	return &listenerCtx{parent: parent, deadline: time.Now().Add(timeout), cc: cc}
}

func (c *listenerCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *listenerCtx) Value(key any) any {
	if _, ok := key.(consumeCtxKey); ok {
		return c.cc
	}
	return c.parent.Value(key)
}

// Err reports DeadlineExceeded once the deadline passed, the parent's error
// once it ended, and Canceled after the call returned.
func (c *listenerCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errLocked()
}

func (c *listenerCtx) errLocked() error {
	if c.err != nil {
		return c.err
	}
	switch {
	case !time.Now().Before(c.deadline):
		c.err = context.DeadlineExceeded
	case c.parent.Err() != nil:
		c.err = c.parent.Err()
	case c.ended:
		c.err = context.Canceled
	}
	return c.err
}

// Done makes the channel on first use and arms a timer for the deadline and a
// watch on the parent; both are stopped when the call returns.
func (c *listenerCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = make(chan struct{})
	if c.errLocked() != nil {
		close(c.done)
		return c.done
	}
	t := time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
	stopParent := context.AfterFunc(c.parent, func() { c.end(c.parent.Err()) })
	c.stop = func() bool { t.Stop(); return stopParent() }
	return c.done
}

// end records err (the first cause wins) and closes Done if it was made.
func (c *listenerCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	if c.done != nil {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
}

// finish is called when the listener returned. It reports whether the
// deadline had passed by then, and cancels the context.
func (c *listenerCtx) finish() (timedOut bool) {
	timedOut = time.Until(c.deadline) <= 0 // the monotonic clock alone: half the cost of time.Now here
	c.mu.Lock()
	c.ended = true
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	if timedOut {
		c.end(context.DeadlineExceeded) // as a timer that fired before cancel
	} else {
		c.end(context.Canceled)
	}
	return timedOut
}
