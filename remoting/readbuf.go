package remoting

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"
)

// Read buffers.
//
// A connection reads into its own buffer (ReadBufferSize, growing to 64 KiB while
// reads fill it): many small frames per read, no allocation per frame, nothing charged
// to the receive budget. A frame larger than that buffer is moved, once the own
// buffer is full of it, into a "big" buffer of a size class, reserved in the receive
// budget for the class that holds the whole frame and allocated in growing classes as
// its bytes arrive (pooled classes at once). While a connection has a big buffer it holds exactly one frame:
// reads stop at the frame's end, so once the frame is handled the big buffer is empty
// and goes back (with its reservation), and the next frame starts in the own buffer.
//
// Class k holds (2^k + 1) × 64 KiB: 128 KiB, 192 KiB, 320 KiB, 576 KiB, 1088 KiB, ...,
// 16 MiB + 64 KiB (class 8). The extra 64 KiB lets a frame whose body is a power of
// two (a 4 MiB message, the 16 MiB limit) fit the class of that size with its header,
// and makes each class twice the previous one less 64 KiB, so a buffer that grows when
// full never holds more than twice what arrived. Classes up to 1088 KiB are pooled
// (a stream of medium frames allocates nothing, as the retained buffer did before)
// and a frame's first big buffer is its reserved class or 1088 KiB, whichever is
// smaller; larger classes are allocated as the frame's bytes arrive and left to the
// garbage collector with it. So a connection holds at most max(1088 KiB, twice what
// it received) for a frame, and never more than its reservation.

const (
	bigUnit       = maxReadBuffer // class sizes are multiples of this
	bigClasses    = 16            // class 15 holds 2 GiB + 64 KiB: any int32 frame length
	pooledClasses = 5             // classes 0..4 (up to 1088 KiB) are pooled
)

// bigClassSize returns the size of class k.
func bigClassSize(k int) int { return (1<<k + 1) * bigUnit }

// bigClass returns the smallest class whose size is at least n (n > 0).
func bigClass(n int) int {
	units := (n + bigUnit - 1) / bigUnit // need (2^k + 1) >= units
	if units <= 2 {
		return 0
	}
	return bits.Len(uint(units - 2)) // smallest k with 2^k >= units-1
}

var bigPools [pooledClasses]sync.Pool // *[]byte of the class's size

func getBig(k int) *[]byte {
	if k < pooledClasses {
		if p, _ := bigPools[k].Get().(*[]byte); p != nil {
			return p
		}
	}
	b := make([]byte, bigClassSize(k))
	return &b
}

func putBig(p *[]byte, k int) {
	if k < pooledClasses {
		bigPools[k].Put(p)
	}
}

// prepareRead makes room in the read buffer for the next Read: it resets an empty
// buffer, grows the own buffer, moves the unread tail to the front, or (for a frame
// larger than the own buffer, once that is full) reserves and grows a big buffer.
// It returns an error only when a big frame cannot get room in the receive budget
// (see ReceiveBudget); it may wait for that room.
func (c *Conn) prepareRead() error {
	have := c.w - c.r
	if have == 0 {
		c.r, c.w = 0, 0
		if c.big != nil {
			c.leaveBig()
		}
	}
	if c.big != nil {
		// One frame at rbuf[0:w], reads capped at its end: grow within the reservation
		// once the buffer is full.
		if c.w == len(c.rbuf) {
			c.growBig()
		}
		return nil
	}
	size := len(c.own)
	if c.grow && size < maxReadBuffer {
		size = min(2*size, maxReadBuffer)
	}
	c.grow = false
	if size != len(c.own) {
		c.resizeOwn(size)
	}
	need := max(c.need, 4)
	if c.r > 0 && (c.w == len(c.rbuf) || c.r+need > len(c.rbuf)) {
		copy(c.rbuf, c.rbuf[c.r:c.w])
		c.r, c.w = 0, have
	}
	if c.w < len(c.rbuf) {
		return nil
	}
	// Full of one frame (r == 0) that is larger than the buffer. Grow only now that
	// its bytes have arrived, so that a length field alone allocates nothing.
	if len(c.own) < maxReadBuffer {
		c.resizeOwn(min(2*len(c.own), maxReadBuffer))
		return nil
	}
	return c.enterBig(need)
}

// resizeOwn replaces the own buffer (the current one) by one of size bytes.
func (c *Conn) resizeOwn(size int) {
	have := c.w - c.r
	nb := make([]byte, size)
	copy(nb, c.rbuf[c.r:c.w])
	c.own, c.rbuf, c.r, c.w = nb, nb, 0, have
}

// enterBig reserves the class that holds the whole frame (need bytes, length field
// included) and moves the frame into the first big class.
func (c *Conn) enterBig(need int) error {
	final := bigClass(need)
	res := int64(bigClassSize(final))
	if b := c.cfg.budget; b != nil {
		waited, err := b.reserve(res, c.frameDeadline(), c.stopc)
		if waited > 0 {
			// This side did not read meanwhile: not the sender's time.
			c.rateAt = c.rateAt.Add(waited)
			c.waited = true
		}
		if err != nil {
			return c.budgetError(err, need, res)
		}
	}
	c.reserved, c.bigFinal, c.bigClass = res, final, -1
	c.growBig()
	return nil
}

// growBig moves the frame into the next class, at most the reserved one: from the own
// buffer straight to the largest pooled class (pooled buffers are already resident,
// and this spares the copies through the small classes), then doubling.
func (c *Conn) growBig() {
	next := c.bigClass + 1
	if c.big == nil {
		next = max(pooledClasses-1, bigClass(len(c.rbuf)+1))
	}
	k := min(next, c.bigFinal)
	nb := getBig(k)
	copy(*nb, c.rbuf[:c.w])
	if c.big != nil {
		putBig(c.big, c.bigClass)
	}
	c.big, c.bigClass, c.rbuf = nb, k, *nb
}

// leaveBig returns the big buffer and its reservation; the own buffer is current
// again. The big buffer must hold nothing still needed.
func (c *Conn) leaveBig() {
	putBig(c.big, c.bigClass)
	c.big, c.rbuf, c.r, c.w = nil, c.own, 0, 0
	if res := c.reserved; res > 0 {
		c.reserved = 0
		if b := c.cfg.budget; b != nil {
			b.release(res)
		}
	}
}

// readSpace returns where the next Read goes: the rest of the buffer, or, in a big
// buffer, up to the frame's end.
func (c *Conn) readSpace() []byte {
	if c.big != nil {
		return c.rbuf[c.w:min(c.need, len(c.rbuf))]
	}
	return c.rbuf[c.w:]
}

// releaseRead gives back what the read side holds of the receive budget; it runs
// when the read goroutine exits.
func (c *Conn) releaseRead() {
	if c.big != nil {
		c.leaveBig()
	}
}

// ---- receive limits: frame deadline, slow senders ----

// Which bound the read deadline was set from.
const (
	dlIdle = iota
	dlFrame
	dlSlow
)

// frameDeadline returns when the frame being received must be complete (zero: no
// deadline): FrameTimeout after its first byte, or the idle timeout from now when the
// frame timeout is disabled.
func (c *Conn) frameDeadline() time.Time {
	if ft := c.cfg.frameTimeout; ft > 0 && !c.frameAt.IsZero() {
		return c.frameAt.Add(ft)
	}
	if it := c.cfg.idleTimeout; it > 0 {
		return time.Now().Add(it)
	}
	return time.Time{}
}

// setReadDeadline sets the socket's read deadline to the earliest of the idle
// timeout and, while a frame is incomplete, its frame deadline and the time its
// received bytes stop paying for (the slow-sender rule).
func (c *Conn) setReadDeadline(now time.Time) error {
	var dl time.Time
	kind := dlIdle
	if it := c.cfg.idleTimeout; it > 0 {
		dl = now.Add(it)
	}
	if !c.frameAt.IsZero() {
		if ft := c.cfg.frameTimeout; ft > 0 {
			if t := c.frameAt.Add(ft); dl.IsZero() || t.Before(dl) {
				dl, kind = t, dlFrame
			}
		}
		if rate := c.cfg.minRate; rate > 0 {
			paid := time.Duration(int64(c.w-c.r) * int64(time.Second) / rate)
			if t := c.rateAt.Add(c.cfg.slowGrace + paid); dl.IsZero() || t.Before(dl) {
				dl, kind = t, dlSlow
			}
		}
	}
	c.dlKind = kind
	if dl.IsZero() && !c.dlSet {
		return nil
	}
	c.dlSet = !dl.IsZero()
	return c.nc.SetReadDeadline(dl)
}

// limitError is the error a read deadline set from a receive limit ends the read
// loop with, or nil when the deadline was the idle timeout.
func (c *Conn) limitError() error {
	have, need := c.w-c.r, max(c.need, 4)
	open := time.Since(c.frameAt).Round(time.Millisecond)
	switch c.dlKind {
	case dlFrame:
		return fmt.Errorf("%w: %d of %d bytes in %v (FrameTimeout %v)", ErrFrameTimeout, have, need, open, c.cfg.frameTimeout)
	case dlSlow:
		return fmt.Errorf("%w: %d of %d bytes in %v, under %d B/s after the %v grace", ErrSlowSender, have, need, open, c.cfg.minRate, c.cfg.slowGrace)
	}
	return nil
}

// budgetError turns a failed reservation into the read loop's error.
func (c *Conn) budgetError(err error, need int, res int64) error {
	switch {
	case errors.Is(err, errBudgetStopped):
		if c.draining.Load() {
			return errDraining
		}
		return ErrClosed
	case errors.Is(err, errBudgetTooBig):
		return fmt.Errorf("%w: a %d-byte frame needs %d bytes, more than the budget's limit", ErrReceiveBudget, need, res)
	}
	return fmt.Errorf("%w: a %d-byte frame waited for %d bytes until its deadline (%d received in %v)",
		ErrReceiveBudget, need, res, c.w-c.r, time.Since(c.frameAt).Round(time.Millisecond))
}
