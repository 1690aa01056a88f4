package remoting

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

var connIDs atomic.Uint64

// Conn is one TCP connection, on either side: the server's end of a client
// connection, or a Client's connection to a server. Both sides can send requests
// (Invoke, InvokeAsync, InvokeOneway) and both serve the requests they receive with a
// Handler. See the package documentation for the goroutines involved and buffer
// ownership.
type Conn struct {
	id     uint64
	nc     net.Conn
	remote string // for logs
	cfg    *config
	h      Handler
	srv    *Server    // nil on the client side
	src    netip.Addr // the source counted in the server's ConnLimit

	// Read goroutine only.
	rbuf     []byte // the current buffer, own or *big; len(rbuf) == cap(rbuf); frames in rbuf[r:w]
	r, w     int
	need     int     // bytes the next frame needs in all (length field included), once known
	grow     bool    // the last read filled at least half of the buffer
	own      []byte  // the connection's own buffer (not charged to the receive budget)
	big      *[]byte // while a frame larger than own arrives: its buffer, of class bigClass
	bigClass int
	bigFinal int       // the class reserved for that frame
	reserved int64     // bytes reserved in the receive budget (0 without a big buffer)
	frameAt  time.Time // when the first byte of the incomplete frame in rbuf[r:w] was read; zero if none
	rateAt   time.Time // frameAt moved later by the time this side did not read (slow-sender clock)
	waited   bool      // prepareRead waited for the budget: the time taken before it is stale
	dlKind   int       // what the read deadline was set from (dlIdle, dlFrame, dlSlow)
	dlSet    bool      // a read deadline is set on the socket
	in       protocol.Command
	respCmd  protocol.Command
	resp     Response
	cur      *protocol.Command // request being served
	deferred bool              // Defer was called for cur
	seq      uint64            // requests served so far; cur's number while serving

	// queued: a frame was queued without waking the writer (set under wmu,
	// cleared by kick: on the read goroutine, or Flush's caller).
	queued atomic.Bool
	// serving is seq while the read goroutine runs the handler of request
	// seq, else 0: a Responder of that request replying meanwhile is on
	// the read goroutine (or races it), and its answer waits for the
	// read's end like an inline answer.
	serving atomic.Uint64

	nextOpaque atomic.Int32

	cmu         sync.Mutex
	calls       map[int32]*call // outstanding requests this side sent
	callsClosed bool

	// Back-pressure counters, changed under wmu, read lock-free by the read goroutine.
	owed     atomic.Int64 // response bytes queued, not yet written
	inflight atomic.Int32 // deferred requests not yet answered

	wmu         sync.Mutex
	rcond       sync.Cond // the read goroutine waits here while over a limit (L = &wmu)
	pend, spare *batch    // frames queued for the writer; spare is nil while writing
	writerIdle  bool      // the writer waits on wake
	// carry is a batch the read goroutine's direct write (kick) could not
	// write whole; carryOff of its bytes are written. The writer writes the
	// rest before anything pending. Set only while spare is nil.
	carry         *batch
	carryOff      int
	readerWaiting bool
	readerDone    bool // the read goroutine exited for a graceful drain
	closed        bool
	err           error // why the connection closed, wrapping ErrClosed
	wake          chan struct{}

	draining atomic.Bool
	closing  atomic.Bool
	stopc    chan struct{} // closed when the connection closes or drains: ends a wait for the budget
	stopOnce sync.Once
	live     atomic.Int32 // goroutines running: read and write
	done     chan struct{}

	// Writer goroutine only.
	iov  [][]byte
	bufs net.Buffers
	// coalesce is set for a connection that has no vectored write (a TLS
	// connection, any net.Conn but a TCP or Unix socket): net.Buffers would
	// write each piece with a Write of its own, each a TLS record and a
	// system call, so the pieces are copied into flat and written at once.
	coalesce bool
	flat     []byte
	// idleTimer ends an idle wait after idleTrimAfter while a write buffer is
	// oversized (waitIdleTrim).
	idleTimer *time.Timer

	// direct writes for kick (the read goroutine, Flush); nil where the platform or
	// the connection has no non-blocking vectored write.
	direct *directWriter

	value atomic.Pointer[any]

	framesIn, framesOut, writes atomic.Uint64
}

// batch is a run of frames queued for one vectored write: headers and copied bodies in
// buf, zero-copy views spliced in by segs.
type batch struct {
	buf    []byte
	segs   []segment
	rels   []Releaser
	frames int
	bytes  int // wire bytes, views included
	owed   int // of which response bytes (counted in Conn.owed)
}

// segment: view is written after buf[:at] and before buf[at:].
type segment struct {
	at   int
	view []byte
}

func (b *batch) empty() bool { return b.frames == 0 }

// directMaxFrames: the read goroutine writes a read's answers itself only
// when they are at most this many (kick).
const directMaxFrames = 4

// pieces appends b's pieces in wire order to iov: runs of buf and the views
// spliced between them, none empty.
func (b *batch) pieces(iov [][]byte) [][]byte {
	prev := 0
	for _, s := range b.segs {
		if s.at > prev {
			iov = append(iov, b.buf[prev:s.at])
			prev = s.at
		}
		iov = append(iov, s.view)
	}
	if len(b.buf) > prev {
		iov = append(iov, b.buf[prev:])
	}
	return iov
}

func (b *batch) reset() {
	clear(b.segs) // drop references to views
	clear(b.rels)
	b.segs, b.rels = b.segs[:0], b.rels[:0]
	b.buf = b.buf[:0]
	if cap(b.buf) > keepWriteBatch {
		b.buf = nil
	}
	b.frames, b.bytes, b.owed = 0, 0, 0
}

func (b *batch) runReleases(c *Conn) {
	for i, r := range b.rels {
		b.rels[i] = nil
		c.safeRelease(r)
	}
	b.rels = b.rels[:0]
}

// Stats are a connection's counters.
type Stats struct {
	FramesIn     uint64 // frames received
	FramesOut    uint64 // frames written
	Writes       uint64 // vectored writes (each is one writev unless the kernel takes it in parts)
	InFlight     int    // deferred requests not yet answered
	PendingBytes int64  // response bytes queued, not yet written
}

func newConn(nc net.Conn, cfg *config, h Handler, srv *Server) *Conn {
	c := &Conn{
		id:    connIDs.Add(1),
		nc:    nc,
		cfg:   cfg,
		h:     h,
		srv:   srv,
		own:   make([]byte, cfg.readBuf),
		pend:  new(batch),
		spare: new(batch),
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
		stopc: make(chan struct{}),
	}
	c.rbuf = c.own
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		c.direct = newDirectWriter(nc)
	default:
		c.coalesce = true
	}
	if a := nc.RemoteAddr(); a != nil {
		c.remote = a.String()
	}
	c.rcond.L = &c.wmu
	c.resp.Cmd = &c.respCmd
	return c
}

// start runs the read and write goroutines.
func (c *Conn) start() {
	c.live.Store(2)
	go c.writeLoop()
	go c.readLoop()
}

// ID returns the connection's process-wide unique id.
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr returns this side's address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// SetValue attaches v to the connection (for example the broker's client record).
// Safe for concurrent use.
func (c *Conn) SetValue(v any) { c.value.Store(&v) }

// Value returns what SetValue attached, or nil.
func (c *Conn) Value() any {
	if p := c.value.Load(); p != nil {
		return *p
	}
	return nil
}

// Done is closed once the connection is closed and both of its goroutines have
// exited (so no handler is running on it any more) and the OnClose callbacks ran.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection closed (wrapping ErrClosed), or nil while it is open.
func (c *Conn) Err() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.err
}

// Close closes the connection at once: queued frames not yet written are dropped
// (their Release runs), outstanding Invokes fail with ErrClosed. It does not wait for
// the goroutines; use Done for that. Closing twice is harmless.
func (c *Conn) Close() error {
	c.fail(nil)
	return nil
}

// Stats returns the connection's counters.
func (c *Conn) Stats() Stats {
	return Stats{
		FramesIn:     c.framesIn.Load(),
		FramesOut:    c.framesOut.Load(),
		Writes:       c.writes.Load(),
		InFlight:     int(c.inflight.Load()),
		PendingBytes: c.owed.Load(),
	}
}

// Defer marks the request being served as deferred and returns the Responder that
// answers it. It must be called on the read goroutine, from the handler serving req,
// before that handler returns; the request then counts toward MaxInFlight until the
// Responder's Reply or Cancel.
func (c *Conn) Defer(req *protocol.Command) Responder {
	if req == c.cur {
		c.deferred = true
	}
	c.wmu.Lock()
	c.inflight.Add(1)
	c.wmu.Unlock()
	r := Responder{c: c, opaque: req.Opaque, st: req.SerializeType, oneway: req.IsOneway()}
	if req == c.cur {
		r.seq = c.seq
	}
	return r
}

// settle ends one deferred request.
func (c *Conn) settle() {
	c.wmu.Lock()
	c.settleLocked()
	c.wmu.Unlock()
}

func (c *Conn) settleLocked() {
	if c.inflight.Add(-1) < 0 {
		c.inflight.Store(0)
		c.cfg.log.Error("remoting: a Responder answered twice (or Cancel after Reply)", "conn", c.id, "remote", c.remote)
	}
	if c.readerWaiting {
		c.rcond.Signal()
	}
	if c.draining.Load() {
		c.wakeWriterLocked()
	}
}

// Queue flags.
const (
	qResponse = 1 << iota // counts toward MaxPendingBytes
	qWake                 // wake the writer now (else the read goroutine kicks it later)
	qSettle               // ends a deferred request, if queued
	// qServing: wake the writer now unless the read goroutine is still in
	// the handler of request seq (a deferred request answered by its own
	// handler: the answer waits for the read's end like an inline one).
	// The check is made before queued is set, and the read goroutine
	// clears serving before it reads queued (both sequentially consistent):
	// either this side sees serving cleared and wakes the writer, or the
	// read goroutine sees queued and kicks.
	qServing
)

// enqueue encodes cmd's header and Cmd.Body into the pending batch and splices views
// after it. rel runs exactly once: after the write, when the connection closes, or
// now if the frame is not queued (an error is returned then).
func (c *Conn) enqueue(cmd *protocol.Command, views [][]byte, rel Releaser, flags int) error {
	return c.enqueueSeq(cmd, views, rel, flags, 0)
}

// enqueueSeq is enqueue with the request number qServing is about.
func (c *Conn) enqueueSeq(cmd *protocol.Command, views [][]byte, rel Releaser, flags int, seq uint64) error {
	viewLen := 0
	for _, v := range views {
		viewLen += len(v)
	}
	c.wmu.Lock()
	if c.closed {
		err := c.err
		c.wmu.Unlock()
		c.safeRelease(rel)
		return err
	}
	b := c.pend
	start := len(b.buf)
	bodyLen := len(cmd.Body) + viewLen
	var err error
	b.buf, err = protocol.AppendFrameHeader(b.buf, cmd, bodyLen)
	if frameLen := len(b.buf) - start - 4 + bodyLen; err == nil && frameLen > c.cfg.maxFrame {
		b.buf = b.buf[:start]
		err = fmt.Errorf("%d-byte frame exceeds MaxFrameSize %d: %w", frameLen, c.cfg.maxFrame, protocol.ErrFrameTooLarge)
	}
	if err != nil {
		c.wmu.Unlock()
		c.safeRelease(rel)
		return fmt.Errorf("remoting: encode code %d: %w", cmd.Code, err)
	}
	b.buf = append(b.buf, cmd.Body...)
	for _, v := range views {
		if len(v) > 0 {
			b.segs = append(b.segs, segment{at: len(b.buf), view: v})
		}
	}
	if rel != nil {
		b.rels = append(b.rels, rel)
	}
	n := len(b.buf) - start + viewLen
	b.frames++
	b.bytes += n
	if flags&qResponse != 0 {
		b.owed += n
		c.owed.Add(int64(n))
		if c.cfg.respBudget != nil {
			c.cfg.respBudget.add(int64(n))
		}
	}
	if flags&qSettle != 0 {
		c.settleLocked()
	}
	// The read goroutine's answers wait for the end of its read so that they leave
	// together, unless enough is queued to start writing.
	if flags&qWake != 0 || b.bytes >= kickBytes || flags&qServing != 0 && c.serving.Load() != seq {
		c.wakeWriterLocked()
	} else {
		c.queued.Store(true)
	}
	c.wmu.Unlock()
	return nil
}

func (c *Conn) wakeWriterLocked() {
	if c.writerIdle {
		c.writerIdle = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// Flush sends what Responder.Queue queued on c (and anything else queued
// without waking the writer): when it is a few frames (at most 4) and the
// writer goroutine is idle, with one non-blocking writev on the caller's
// goroutine, as the read goroutine sends a read's answers (kick);
// otherwise, and for what that write leaves, it wakes the writer. It never
// waits for the peer, and costs one atomic load when nothing is queued.
// Safe for concurrent use with everything else on c.
func (c *Conn) Flush() { c.kick() }

// kick sends the frames queued without waking the writer: the read
// goroutine's at the end of a read, Queue's at a Flush. When they are few (at
// most directMaxFrames: requests arriving one by one), the writer is idle
// and nothing is carried over, the calling goroutine writes them itself
// with one non-blocking vectored write (writeDirect), which saves the
// writer's wake-up, a goroutine switch and often a thread's wake-up per
// read. One caller at a time takes the write side for that (spare nil,
// writerIdle false, under wmu); another finds it taken and leaves its
// frames to writeDirect's end, which wakes the writer for them.
// Otherwise, or for what that write leaves, it wakes the writer: a read
// that brought many requests says the peer keeps many in flight, and the
// writer, yielding once before it takes the batch, lets the answers of the
// next read share its write (in a closed loop of 4 × 64 in flight, direct
// writes of every read doubled the writes per message).
func (c *Conn) kick() {
	if !c.queued.Load() {
		return
	}
	c.wmu.Lock()
	c.queued.Store(false)
	if c.direct != nil && c.writerIdle && !c.closed && c.carry == nil && c.spare != nil &&
		!c.pend.empty() && c.pend.frames <= directMaxFrames && !c.draining.Load() {
		b := c.pend
		c.pend, c.spare = c.spare, nil
		// The writer stays parked: nobody sends it a token while
		// writerIdle is false, until writeDirect hands back.
		c.writerIdle = false
		c.wmu.Unlock()
		c.writeDirect(b)
		return
	}
	c.wakeWriterLocked()
	c.wmu.Unlock()
}

// writeDirect writes b on kick's goroutine without blocking, then gives
// the write side back to the writer: b becomes the spare batch once
// written whole; otherwise it is carried over to the writer, which writes
// the rest (waiting for room, with the write timeout) or fails the
// connection with the write's error.
func (c *Conn) writeDirect(b *batch) {
	n := c.direct.write(b)
	c.writes.Add(1)
	whole := n == b.bytes
	if whole {
		c.framesOut.Add(uint64(b.frames))
		b.runReleases(c)
	}
	c.wmu.Lock()
	if whole {
		c.owed.Add(-int64(b.owed))
		if c.cfg.respBudget != nil {
			c.cfg.respBudget.add(-int64(b.owed))
		}
		b.reset()
		c.spare = b
	} else {
		c.carry, c.carryOff = b, n
	}
	if c.carry != nil || !c.pend.empty() || c.closed || c.draining.Load() {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	} else {
		c.writerIdle = true
	}
	c.wmu.Unlock()
}

// ---- read side ----

// errDraining ends the read loop of a draining connection.
var errDraining = errors.New("remoting: draining")

// protocolError marks a malformed or oversized frame: the connection is closed with a
// Warn log line.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

func malformed(format string, args ...any) error {
	return &protocolError{fmt.Errorf("remoting: "+format, args...)}
}

func (c *Conn) readLoop() {
	defer c.exit()
	defer c.releaseRead()
	err := c.readFrames()
	if c.draining.Load() {
		var pe *protocolError
		if !errors.As(err, &pe) {
			c.wmu.Lock()
			c.readerDone = true
			c.wakeWriterLocked()
			c.wmu.Unlock()
			return
		}
	}
	c.fail(err)
}

func (c *Conn) readFrames() error {
	timed := c.cfg.idleTimeout > 0 || c.cfg.frameTimeout > 0 || c.cfg.minRate > 0
	for {
		handled := false
		for {
			if !c.waitCapacity() {
				return ErrClosed
			}
			ok, err := c.handleNext()
			if err != nil {
				c.kick()
				return err
			}
			if !ok {
				break
			}
			handled = true
		}
		c.kick()
		var now time.Time
		if timed {
			now = time.Now()
			switch {
			case c.r == c.w:
				c.frameAt = time.Time{}
			case handled || c.frameAt.IsZero():
				// The incomplete frame at rbuf[r:w] started in the last read.
				c.frameAt, c.rateAt = now, now
			}
		}
		if err := c.prepareRead(); err != nil {
			return err
		}
		if timed {
			if c.waited {
				c.waited = false
				now = time.Now()
			}
			if err := c.setReadDeadline(now); err != nil {
				return err
			}
		}
		if c.draining.Load() {
			return errDraining
		}
		free := c.readSpace()
		n, err := c.nc.Read(free)
		c.w += n
		c.grow = c.big == nil && n >= len(c.rbuf)/2 && n == len(free)
		if err != nil {
			if n > 0 {
				continue // handle what arrived; the error comes back on the next Read
			}
			if c.dlKind != dlIdle && errors.Is(err, os.ErrDeadlineExceeded) && !c.draining.Load() {
				return c.limitError()
			}
			if errors.Is(err, io.EOF) && c.w > c.r {
				return malformed("connection closed inside a frame (%d bytes of it received)", c.w-c.r)
			}
			return err
		}
	}
}

// overCapacity reports whether the connection owes its peer too much to
// read more requests: MaxInFlight deferred requests, MaxPendingBytes of
// queued answers, or more than 256 KiB while its server's ResponseBudget is
// exhausted.
func (c *Conn) overCapacity() bool {
	owed := c.owed.Load()
	return c.inflight.Load() >= c.cfg.maxInFlight || owed >= c.cfg.maxPending ||
		c.cfg.respBudget != nil && c.cfg.respBudget.over(owed)
}

// waitCapacity blocks while the connection is over capacity. It returns
// false once the connection is closed.
func (c *Conn) waitCapacity() bool {
	if !c.overCapacity() {
		return true
	}
	c.kick()
	start := time.Now()
	c.wmu.Lock()
	if !c.closed && c.cfg.respBudget != nil && c.inflight.Load() < c.cfg.maxInFlight && c.owed.Load() < c.cfg.maxPending {
		c.cfg.respBudget.stalled(c.cfg.log, c, c.owed.Load())
	}
	for !c.closed && c.overCapacity() {
		c.readerWaiting = true
		c.rcond.Wait()
	}
	c.readerWaiting = false
	ok := !c.closed
	c.wmu.Unlock()
	if !c.frameAt.IsZero() {
		// This side did not read meanwhile: the time is not the sender's.
		waited := time.Since(start)
		c.frameAt, c.rateAt = c.frameAt.Add(waited), c.rateAt.Add(waited)
	}
	return ok
}

// handleNext decodes and dispatches the next complete frame in the read buffer. It
// reports false when no complete frame is buffered.
func (c *Conn) handleNext() (bool, error) {
	avail := c.w - c.r
	if avail < 4 {
		return false, nil
	}
	n := binary.BigEndian.Uint32(c.rbuf[c.r:])
	if uint64(n) > uint64(c.cfg.maxFrame) || n > math.MaxInt32 {
		return false, malformed("frame length %d exceeds MaxFrameSize %d: %w", n, c.cfg.maxFrame, protocol.ErrFrameTooLarge)
	}
	if n < 4 {
		return false, malformed("frame length %d below 4: %w", n, protocol.ErrBadFrame)
	}
	total := 4 + int(n)
	if avail < total {
		c.need = total
		return false, nil
	}
	c.need = 0
	frame := c.rbuf[c.r+4 : c.r+total : c.r+total]
	c.r += total
	if err := protocol.DecodeFrame(frame, &c.in); err != nil {
		return false, &protocolError{fmt.Errorf("remoting: decode frame: %w", err)}
	}
	c.framesIn.Add(1)
	if c.in.IsResponse() {
		c.deliver(&c.in)
	} else {
		c.serve(&c.in)
	}
	return true, nil
}

// serve runs the handler for one request and queues its answer.
func (c *Conn) serve(req *protocol.Command) {
	c.respCmd.InitResponse(req, protocol.RespSuccess)
	c.resp = Response{Cmd: &c.respCmd}
	c.cur, c.deferred = req, false
	c.seq++
	c.serving.Store(c.seq)
	act, panicked := c.callHandler(req, &c.resp)
	c.serving.Store(0)
	c.cur = nil
	resp := &c.resp
	switch {
	case c.deferred:
		resp.release()
		return
	case panicked:
		resp.release()
		c.replyError(req, "handler panic")
		return
	}
	switch act {
	case Reply:
		if req.IsOneway() {
			resp.release()
			return
		}
		if resp.Cmd == nil {
			resp.release()
			c.cfg.log.Error("remoting: handler returned Reply with a nil resp.Cmd", "conn", c.id, "remote", c.remote, "code", req.Code)
			c.replyError(req, "request not answered by its handler")
			return
		}
		resp.Cmd.Opaque = req.Opaque
		resp.Cmd.Flag |= protocol.FlagResponse
		if err := c.enqueue(resp.Cmd, resp.Body, resp.Release, qResponse); err != nil && !errors.Is(err, ErrClosed) {
			c.cfg.log.Error("remoting: cannot encode response", "conn", c.id, "remote", c.remote, "code", req.Code, "err", err)
			c.replyError(req, err.Error())
		}
	case NoReply:
		resp.release()
	default:
		resp.release()
		c.cfg.log.Error("remoting: handler returned Deferred without calling Defer", "conn", c.id, "remote", c.remote, "code", req.Code)
		c.replyError(req, "request not answered by its handler")
	}
}

// replyError answers req with SYSTEM_ERROR (unless it is oneway).
func (c *Conn) replyError(req *protocol.Command, remark string) {
	if req.IsOneway() {
		return
	}
	c.respCmd.InitResponse(req, protocol.RespSystemError)
	c.respCmd.SetRemark(remark)
	_ = c.enqueue(&c.respCmd, nil, nil, qResponse)
}

func (c *Conn) callHandler(req *protocol.Command, resp *Response) (act Action, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			c.cfg.log.Error("remoting: handler panic", "conn", c.id, "remote", c.remote,
				"code", req.Code, "opaque", req.Opaque, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return c.h.ServeRemoting(c, req, resp), false
}

func (c *Conn) safeRelease(r Releaser) {
	if r == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			c.cfg.log.Error("remoting: Release panic", "conn", c.id, "remote", c.remote, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	r.Release()
}

// ---- write side ----

func (c *Conn) writeLoop() {
	defer c.exit()
	for {
		c.wmu.Lock()
		for c.pend.empty() && c.carry == nil && !c.closed && !c.drainedLocked() {
			oversized := c.oversizedLocked()
			c.writerIdle = true
			c.wmu.Unlock()
			if oversized {
				c.waitIdleTrim()
			} else {
				<-c.wake
			}
			// Let the goroutines that are runnable now (callers woken by responses) queue
			// their frames too, so that they share this write.
			runtime.Gosched()
			c.wmu.Lock()
		}
		if c.closed {
			owed := c.pend.owed
			if c.carry != nil {
				owed += c.carry.owed
			}
			c.owed.Add(-int64(owed))
			if c.cfg.respBudget != nil {
				c.cfg.respBudget.add(-int64(owed))
			}
			carry := c.carry
			c.carry = nil
			b := c.pend
			c.wmu.Unlock()
			if carry != nil {
				carry.runReleases(c)
				carry.reset()
			}
			b.runReleases(c)
			b.reset()
			return
		}
		if c.pend.empty() && c.carry == nil { // drained: every answer written, the reader gone
			c.wmu.Unlock()
			c.fail(ErrServerClosed)
			continue
		}
		var b *batch
		skip := 0
		if c.carry != nil { // spare is nil: the carried batch becomes it
			b, skip = c.carry, c.carryOff
			c.carry = nil
		} else {
			b = c.pend
			c.pend, c.spare = c.spare, nil
		}
		c.wmu.Unlock()

		err := c.writeBatch(b, skip)

		c.wmu.Lock()
		c.owed.Add(-int64(b.owed))
		if c.cfg.respBudget != nil {
			c.cfg.respBudget.add(-int64(b.owed))
		}
		b.reset()
		c.spare = b
		if c.readerWaiting {
			c.rcond.Signal()
		}
		c.wmu.Unlock()
		if err != nil {
			c.fail(err)
		}
	}
}

// oversizedLocked reports whether a write buffer grew past idleWriteBatch.
// c.wmu is held.
func (c *Conn) oversizedLocked() bool {
	return cap(c.pend.buf) > idleWriteBatch || (c.spare != nil && cap(c.spare.buf) > idleWriteBatch) ||
		cap(c.flat) > idleWriteBatch
}

// waitIdleTrim waits for the writer's wake-up like the plain receive, but
// once the connection has been idle for idleTrimAfter it drops the write
// buffers a burst of large frames grew past idleWriteBatch: an idle
// connection then holds at most two buffers of that size, not two of
// keepWriteBatch (the response budget counts bytes queued, not buffers
// kept). A connection under load never idles that long and keeps its
// buffers: dropping them at every idle moment made a producer with 256
// requests in flight regrow its buffer at every batch. The timer is armed
// only while a buffer is oversized. Only the writer calls it.
func (c *Conn) waitIdleTrim() {
	if c.idleTimer == nil {
		c.idleTimer = time.NewTimer(idleTrimAfter)
	} else {
		c.idleTimer.Reset(idleTrimAfter)
	}
	select {
	case <-c.wake:
		c.idleTimer.Stop()
		return
	case <-c.idleTimer.C:
	}
	c.wmu.Lock()
	if c.pend.empty() && cap(c.pend.buf) > idleWriteBatch {
		c.pend.buf = nil
	}
	if c.spare != nil && cap(c.spare.buf) > idleWriteBatch {
		c.spare.buf = nil
	}
	c.wmu.Unlock()
	if cap(c.flat) > idleWriteBatch { // the writer's own
		c.flat = nil
	}
	<-c.wake
}

// drainedLocked reports whether a draining connection has nothing left to do.
func (c *Conn) drainedLocked() bool {
	return c.draining.Load() && c.readerDone && c.inflight.Load() == 0
}

// writeBatch writes b but its first skip bytes (written already by
// writeDirect) with one vectored write and runs its releases.
func (c *Conn) writeBatch(b *batch, skip int) error {
	all := b.pieces(c.iov[:0])
	c.iov = all
	iov := all
	for skip > 0 { // skip < b.bytes: no piece is empty
		if skip < len(iov[0]) {
			iov[0] = iov[0][skip:]
			break
		}
		skip -= len(iov[0])
		iov = iov[1:]
	}
	var err error
	if c.cfg.writeTimeout > 0 {
		err = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.writeTimeout))
	}
	switch {
	case err != nil:
	case c.coalesce && len(iov) > 1:
		flat := c.flat[:0]
		for _, v := range iov {
			flat = append(flat, v...)
		}
		_, err = c.nc.Write(flat)
		if cap(flat) > keepWriteBatch {
			flat = nil
		}
		c.flat = flat[:0]
	default:
		c.bufs = iov
		_, err = c.bufs.WriteTo(c.nc)
	}
	clear(all) // drop references to views
	c.bufs = nil
	c.writes.Add(1)
	if err == nil {
		c.framesOut.Add(uint64(b.frames))
	}
	b.runReleases(c)
	return err
}

// ---- closing ----

// fail closes the connection (once) for the given cause; nil means a local Close.
func (c *Conn) fail(cause error) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	err := ErrClosed
	if cause != nil && !errors.Is(cause, ErrClosed) {
		err = fmt.Errorf("%w: %w", ErrClosed, cause)
	}
	c.wmu.Lock()
	c.closed = true
	c.err = err
	c.rcond.Broadcast()
	c.wakeWriterLocked()
	c.wmu.Unlock()
	c.stopReading()
	// Counted before the peer can see the close, so that a peer which then
	// asks for the counters finds its own close among them.
	limitClosed := c.countLimitClose(cause)
	_ = c.nc.Close()

	c.cmu.Lock()
	calls := c.calls
	c.calls = nil
	c.callsClosed = true
	c.cmu.Unlock()
	for _, cl := range calls {
		cl.complete(c, nil, err)
	}
	c.logClose(cause, limitClosed)
}

func (c *Conn) logClose(cause error, limitClosed bool) {
	log := c.cfg.log
	var pe *protocolError
	switch {
	case errors.As(cause, &pe):
		log.Warn("remoting: closing connection: bad input", "conn", c.id, "remote", c.remote, "err", cause)
	case limitClosed:
		c.logLimitClose(cause)
	case errors.Is(cause, os.ErrDeadlineExceeded):
		log.Debug("remoting: connection closed: idle or write timeout", "conn", c.id, "remote", c.remote, "err", cause)
	default:
		if log.Enabled(context.Background(), slog.LevelDebug) {
			if cause == nil {
				cause = ErrClosed
			}
			log.Debug("remoting: connection closed", "conn", c.id, "remote", c.remote, "err", cause)
		}
	}
}

// exit runs as each of the two goroutines ends; the last one finishes the connection.
func (c *Conn) exit() {
	if c.live.Add(-1) != 0 {
		return
	}
	if c.srv != nil {
		c.srv.remove(c)
	}
	close(c.done)
}

// drain stops reading new frames; the writer closes the connection once every
// deferred request is answered and every frame written.
func (c *Conn) drain() {
	c.draining.Store(true)
	c.wmu.Lock()
	c.rcond.Broadcast()
	c.wakeWriterLocked()
	c.wmu.Unlock()
	c.stopReading()
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
}

// stopReading ends a wait of the read goroutine for the receive budget.
func (c *Conn) stopReading() {
	c.stopOnce.Do(func() { close(c.stopc) })
}
