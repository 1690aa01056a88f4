package remoting

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

func TestBigClass(t *testing.T) {
	for k := range bigClasses {
		size := bigClassSize(k)
		if got := bigClass(size); got != k {
			t.Errorf("bigClass(%d) = %d, want %d", size, got, k)
		}
		if k > 0 {
			if got := bigClass(bigClassSize(k-1) + 1); got != k {
				t.Errorf("bigClass(%d) = %d, want %d", bigClassSize(k-1)+1, got, k)
			}
			// Growing when full never holds more than twice what arrived.
			if prev := bigClassSize(k - 1); size != 2*prev-bigUnit {
				t.Errorf("class %d is %d bytes, class %d %d", k, size, k-1, prev)
			}
		}
	}
	for _, n := range []int{1, maxReadBuffer, 128 << 10, 300 << 10, 4<<20 + 500, 16<<20 + 4, math.MaxInt32 + 4} {
		k := bigClass(n)
		if k >= bigClasses || bigClassSize(k) < n || (k > 0 && bigClassSize(k-1) >= n) {
			t.Errorf("bigClass(%d) = %d (%d bytes)", n, k, bigClassSize(k))
		}
	}
	if k := bigClass(protocol.DefaultMaxFrameSize + 4); k != 8 || bigClassSize(k) != 16<<20+64<<10 {
		t.Errorf("the largest default frame takes class %d (%d bytes)", k, bigClassSize(k))
	}
}

// reserveAsync runs b.reserve on its own goroutine.
func reserveAsync(b *ReceiveBudget, n int64, deadline time.Time, stop <-chan struct{}) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := b.reserve(n, deadline, stop)
		ch <- err
	}()
	return ch
}

func waitWaiting(t *testing.T, b *ReceiveBudget, n int) {
	t.Helper()
	waitBudget(t, b, fmt.Sprintf("%d budget waiters", n), func(st ReceiveBudgetStats) bool { return st.Waiting == n })
}

func TestReceiveBudgetAccounting(t *testing.T) {
	logger, sink := newLogger(t, "budget")
	b := NewReceiveBudget(1000, logger)
	never := make(chan struct{})
	if _, err := b.reserve(600, time.Time{}, never); err != nil {
		t.Fatal(err)
	}
	// 600 more does not fit: it waits; 100 would fit but waits behind it (arrival order).
	second := reserveAsync(b, 600, time.Time{}, never)
	waitWaiting(t, b, 1)
	third := reserveAsync(b, 100, time.Time{}, never)
	waitWaiting(t, b, 2)
	select {
	case err := <-second:
		t.Fatalf("second reservation returned %v while the budget was full", err)
	case err := <-third:
		t.Fatalf("third reservation jumped the queue: %v", err)
	default: // both counted as waiting: neither was granted
	}
	if st := b.Stats(); !st.Exhausted || st.Exhaustions != 1 || st.InUse != 600 {
		t.Fatalf("while waiting: %+v", st)
	}
	b.release(600)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	st := b.Stats()
	if st.InUse != 700 || st.Waiting != 0 || st.Waits != 2 || st.Reserves != 3 || st.Peak != 700 || st.Exhausted {
		t.Fatalf("after the grants: %+v", st)
	}
	if w, i := sink.count("WARN", "receive budget exhausted"), sink.count("INFO", "receive budget has room again"); w != 1 || i != 1 {
		t.Fatalf("%d exhausted and %d room-again lines, want one each:\n%v", w, i, sink.lines())
	}

	// A wait ends at its deadline with nothing held.
	start := time.Now()
	if _, err := b.reserve(400, start.Add(50*time.Millisecond), never); err != errBudgetTimeout {
		t.Fatalf("reserve past the deadline: %v", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("gave up after %v", d)
	}
	// ... or when the connection stops.
	stop := make(chan struct{})
	stopped := reserveAsync(b, 400, time.Time{}, stop)
	waitWaiting(t, b, 1)
	close(stop)
	if err := <-stopped; err != errBudgetStopped {
		t.Fatalf("stopped wait: %v", err)
	}
	// A frame larger than the whole budget is refused at once.
	if _, err := b.reserve(1001, time.Time{}, never); err != errBudgetTooBig {
		t.Fatalf("reserve over the limit: %v", err)
	}
	st = b.Stats()
	if st.InUse != 700 || st.Waiting != 0 || st.Timeouts != 1 || st.Refused != 1 || st.Exhaustions != 3 {
		t.Fatalf("after timeout, stop and refusal: %+v", st)
	}

	// Raising the limit grants what now fits.
	raised := reserveAsync(b, 400, time.Time{}, never)
	waitWaiting(t, b, 1)
	b.SetLimit(2000)
	if err := <-raised; err != nil {
		t.Fatal(err)
	}
	b.release(700)
	b.release(400)
	if st := b.Stats(); st.InUse != 0 || st.Limit != 2000 || st.Exhausted {
		t.Fatalf("after releasing everything: %+v", st)
	}

	// Unlimited: counted, never waits.
	u := NewReceiveBudget(0, logger)
	if _, err := u.reserve(1<<40, time.Time{}, never); err != nil || u.Stats().InUse != 1<<40 {
		t.Fatalf("unlimited budget: %v %+v", err, u.Stats())
	}
}

// Many goroutines reserving and releasing concurrently never exceed the limit and
// leave nothing behind (run with -race).
func TestReceiveBudgetConcurrent(t *testing.T) {
	const limit = 1 << 20
	b := NewReceiveBudget(limit, testlog.New(t, "budget"))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			never := make(chan struct{})
			for range 300 {
				n := int64(r.IntN(limit/2) + 1)
				dl := time.Now().Add(time.Duration(r.IntN(2000)) * time.Microsecond)
				if _, err := b.reserve(n, dl, never); err != nil {
					if err != errBudgetTimeout {
						t.Error(err)
						return
					}
					continue
				}
				if used := b.Stats().InUse; used > limit {
					t.Errorf("%d reserved over a limit of %d", used, limit)
				}
				time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				b.release(n)
			}
		}()
	}
	wg.Wait()
	if st := b.Stats(); st.InUse != 0 || st.Waiting != 0 || st.Peak > limit || st.Exhausted {
		t.Fatalf("after the run: %+v", st)
	}
}

// echoFrameBytes is the wire form of an echo request with an n-byte body.
func echoFrameBytes(t *testing.T, n int, opaque int32) []byte {
	req := request(codeEcho, "")
	req.Body = bytes.Repeat([]byte{byte(opaque)}, n)
	req.Opaque = opaque
	return frame(t, req)
}

// rawConn dials addr and writes data (maybe part of a frame).
func rawConn(t *testing.T, addr string, data []byte) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if len(data) > 0 {
		if _, err := nc.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	return nc
}

// closeErrors records the Err of every connection the server closes.
func closeErrors(s *testServer) <-chan error {
	ch := make(chan error, 64)
	s.OnClose(func(c *Conn) { ch <- c.Err() })
	return ch
}

func waitBudget(t *testing.T, b *ReceiveBudget, what string, cond func(ReceiveBudgetStats) bool) {
	t.Helper()
	wait.For(t, what, func() error {
		if st := b.Stats(); !cond(st) {
			return fmt.Errorf("budget %+v", st)
		}
		return nil
	})
}

// Frames of every size class, several connections at once: each is served, the
// ones larger than the own buffer go through the budget, which ends empty.
func TestLargeFramesThroughBudget(t *testing.T) {
	checkGoroutines(t)
	budget := NewReceiveBudget(64<<20, testlog.New(t, "budget"))
	s := startServer(t, echoHandler, &Options{ReceiveBudget: budget})
	sizes := []int{10, 60 << 10, maxReadBuffer + 100, 300 << 10, 1 << 20, 5 << 20, 100} // four over the own buffer
	var wg sync.WaitGroup
	for range 3 {
		cl := dial(t, s.addr, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testCtx(t)
			for _, n := range sizes {
				req := request(codeEcho, "")
				req.Body = bytes.Repeat([]byte{byte(n)}, n)
				resp, err := cl.Invoke(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(resp.Body, req.Body) {
					t.Errorf("%d-byte echo came back as %d bytes", n, len(resp.Body))
				}
			}
		}()
	}
	wg.Wait()
	waitBudget(t, budget, "an empty budget", func(st ReceiveBudgetStats) bool { return st.InUse == 0 })
	if st := budget.Stats(); st.Reserves != 3*4 || st.Peak == 0 || st.Peak > st.Limit {
		t.Fatalf("budget after the run: %+v", st)
	}
	// The pipelined small frames around them were served from the own buffers.
	if st := s.Stats(); st.FrameTimeouts+st.SlowSenders+st.BudgetCloses != 0 {
		t.Fatalf("server stats %+v", st)
	}
}

// When the budget is exhausted, a large frame waits (its connection stops reading)
// until room is released, while small frames on other connections keep being served;
// one log line marks each state change.
func TestBudgetExhaustedWaitsThenServes(t *testing.T) {
	checkGoroutines(t)
	const body = 300 << 10
	holderFrame := echoFrameBytes(t, body, 1)
	limit := int64(bigClassSize(bigClass(len(holderFrame)))) // room for one such frame
	logger, sink := newLogger(t, "budget")
	budget := NewReceiveBudget(limit, logger)
	s := startServer(t, echoHandler, &Options{ReceiveBudget: budget, MinReceiveRate: -1})

	holder := rawConn(t, s.addr, holderFrame[:100<<10])
	waitBudget(t, budget, "the holder's reservation", func(st ReceiveBudgetStats) bool { return st.InUse == limit })
	waiter := rawConn(t, s.addr, echoFrameBytes(t, body, 2))
	waitBudget(t, budget, "a waiting frame", func(st ReceiveBudgetStats) bool { return st.Waiting == 1 })

	cl := dial(t, s.addr, nil)
	ctx := testCtx(t)
	for i := range 20 {
		if _, err := cl.Invoke(ctx, request(codeEcho, "small")); err != nil {
			t.Fatalf("small request %d while the budget is exhausted: %v", i, err)
		}
	}
	if st := budget.Stats(); st.Waiting != 1 || !st.Exhausted {
		t.Fatalf("budget while the holder stalls: %+v", st)
	}

	if _, err := holder.Write(holderFrame[100<<10:]); err != nil {
		t.Fatal(err)
	}
	if r := readResponse(t, holder); r.Opaque != 1 || len(r.Body) != body {
		t.Fatalf("holder's response: opaque %d, %d bytes", r.Opaque, len(r.Body))
	}
	if r := readResponse(t, waiter); r.Opaque != 2 || len(r.Body) != body {
		t.Fatalf("waiter's response: opaque %d, %d bytes", r.Opaque, len(r.Body))
	}
	waitBudget(t, budget, "an empty budget", func(st ReceiveBudgetStats) bool { return st.InUse == 0 && !st.Exhausted })
	if st := budget.Stats(); st.Waits != 1 || st.Reserves != 2 || st.Timeouts != 0 {
		t.Fatalf("budget after: %+v", st)
	}
	// The line is written just after the state changes.
	wait.Until(t, "the room-again line", func() bool { return sink.count("INFO", "receive budget has room again") > 0 })
	if w, i := sink.count("WARN", "receive budget exhausted"), sink.count("INFO", "receive budget has room again"); w != 1 || i != 1 {
		t.Fatalf("%d exhausted and %d room-again lines, want one each:\n%v", w, i, sink.lines())
	}
}

// A frame that waits for the budget past its FrameTimeout closes its connection with
// ErrReceiveBudget. The budget is shared by two servers: the holder is on one with no
// frame timeout, the waiter on another.
func TestBudgetWaitTimesOut(t *testing.T) {
	checkGoroutines(t)
	holderFrame := echoFrameBytes(t, 300<<10, 1)
	limit := int64(bigClassSize(bigClass(len(holderFrame))))
	budget := NewReceiveBudget(limit, testlog.New(t, "budget"))
	patient := startServer(t, echoHandler, &Options{ReceiveBudget: budget, FrameTimeout: -1, MinReceiveRate: -1})
	strict := startServer(t, echoHandler, &Options{ReceiveBudget: budget, FrameTimeout: 300 * time.Millisecond, MinReceiveRate: -1})
	closed := closeErrors(strict)

	holder := rawConn(t, patient.addr, holderFrame[:100<<10])
	waitBudget(t, budget, "the holder's reservation", func(st ReceiveBudgetStats) bool { return st.InUse == limit })
	start := time.Now()
	waiter := rawConn(t, strict.addr, echoFrameBytes(t, 300<<10, 2))
	expectClosed(t, waiter)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("closed after %v, before the frame timeout", d)
	}
	if err := <-closed; !errors.Is(err, ErrReceiveBudget) {
		t.Fatalf("waiter closed with %v", err)
	}
	if st := strict.Stats(); st.BudgetCloses != 1 || st.FrameTimeouts != 0 || st.Budget.Timeouts != 1 {
		t.Fatalf("strict server stats %+v", st)
	}
	if n := strict.log.count("WARN", "receive limit", "no room in the receive budget"); n != 1 {
		t.Fatalf("%d Warn lines for the closed waiter:\n%v", n, strict.log.lines())
	}
	// The holder is still being served; closing it mid-frame gives its room back.
	holder.Close()
	waitBudget(t, budget, "an empty budget", func(st ReceiveBudgetStats) bool { return st.InUse == 0 && st.Waiting == 0 })
}

// An incomplete frame is closed FrameTimeout after its first byte, small or large (the
// large one's reservation is given back); a connection with no incomplete frame is not.
func TestFrameTimeout(t *testing.T) {
	checkGoroutines(t)
	budget := NewReceiveBudget(8<<20, testlog.New(t, "budget"))
	s := startServer(t, echoHandler, &Options{ReceiveBudget: budget, FrameTimeout: 200 * time.Millisecond, MinReceiveRate: -1})
	closed := closeErrors(s)
	idle := rawConn(t, s.addr, nil)
	start := time.Now()
	small := rawConn(t, s.addr, echoFrameBytes(t, 100, 1)[:10])
	large := rawConn(t, s.addr, echoFrameBytes(t, 1<<20, 2)[:200<<10])
	expectClosed(t, small)
	expectClosed(t, large)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("closed after %v", d)
	}
	for range 2 {
		if err := <-closed; !errors.Is(err, ErrFrameTimeout) {
			t.Fatalf("closed with %v", err)
		}
	}
	waitBudget(t, budget, "an empty budget", func(st ReceiveBudgetStats) bool { return st.InUse == 0 })
	if st := s.Stats(); st.FrameTimeouts != 2 || st.SlowSenders != 0 || st.Connections != 1 {
		t.Fatalf("server stats %+v", st)
	}
	// One Warn line for both (the second within a minute is only counted).
	if n := s.log.count("WARN", "receive limit"); n != 1 {
		t.Fatalf("%d receive-limit lines:\n%v", n, s.log.lines())
	}
	// The idle connection was not closed.
	if _, err := idle.Write(echoFrameBytes(t, 10, 3)); err != nil {
		t.Fatal(err)
	}
	if r := readResponse(t, idle); r.Opaque != 3 {
		t.Fatalf("idle connection's response %+v", r)
	}
}

// trickle writes data in pieces of n bytes every d until it is written or the peer
// closes; it reports whether all was written.
func trickle(nc net.Conn, data []byte, n int, d time.Duration) bool {
	for len(data) > 0 {
		k := min(n, len(data))
		if _, err := nc.Write(data[:k]); err != nil {
			return false
		}
		data = data[k:]
		time.Sleep(d) // the sender's pace: what the tests of slow senders are about
	}
	return true
}

// A frame that arrives below MinReceiveRate after the grace is closed; one that keeps
// above it is served, however long it takes.
func TestSlowSender(t *testing.T) {
	checkGoroutines(t)
	s := startServer(t, echoHandler, &Options{FrameTimeout: -1, MinReceiveRate: 10_000, SlowSenderGrace: 200 * time.Millisecond})
	closed := closeErrors(s)

	// 2 KB every 50 ms (40 KB/s) for 30 KB: served.
	steady := rawConn(t, s.addr, nil)
	steadyDone := make(chan bool, 1)
	go func() { steadyDone <- trickle(steady, echoFrameBytes(t, 30_000, 1), 2000, 50*time.Millisecond) }()

	// A byte every 20 ms (50 B/s): closed soon after the grace.
	slow := rawConn(t, s.addr, nil)
	start := time.Now()
	if trickle(slow, echoFrameBytes(t, 1000, 2), 1, 20*time.Millisecond) {
		t.Fatal("the trickling sender got its whole frame in")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("closed after %v, within the grace", d)
	}
	if err := <-closed; !errors.Is(err, ErrSlowSender) {
		t.Fatalf("slow sender closed with %v", err)
	}
	if !<-steadyDone {
		t.Fatal("the steady sender was cut off")
	}
	if r := readResponse(t, steady); r.Opaque != 1 || len(r.Body) != 30_000 {
		t.Fatalf("steady sender's response: opaque %d, %d bytes", r.Opaque, len(r.Body))
	}
	if st := s.Stats(); st.SlowSenders != 1 || st.FrameTimeouts != 0 {
		t.Fatalf("server stats %+v", st)
	}
}

// What a connection reserved is given back however it ends: the peer closing inside
// the frame, Server.Close while frames hold and wait, and Shutdown, which also ends a
// wait for the budget at once.
func TestBudgetReleasedOnClose(t *testing.T) {
	checkGoroutines(t)
	f := echoFrameBytes(t, 300<<10, 1)
	limit := int64(bigClassSize(bigClass(len(f))))
	budget := NewReceiveBudget(limit, testlog.New(t, "budget"))
	opts := &Options{ReceiveBudget: budget, MinReceiveRate: -1}

	t.Run("peer closes inside the frame", func(t *testing.T) {
		s := startServer(t, echoHandler, opts)
		nc := rawConn(t, s.addr, f[:100<<10])
		waitBudget(t, budget, "a reservation", func(st ReceiveBudgetStats) bool { return st.InUse == limit })
		nc.Close()
		waitBudget(t, budget, "an empty budget", func(st ReceiveBudgetStats) bool { return st.InUse == 0 })
		if n := s.log.count("WARN", "closed inside a frame"); n != 1 {
			t.Fatalf("%d bad-input lines:\n%v", n, s.log.lines())
		}
	})
	t.Run("Close", func(t *testing.T) {
		s := startServer(t, echoHandler, opts)
		rawConn(t, s.addr, f[:100<<10])
		waitBudget(t, budget, "a reservation", func(st ReceiveBudgetStats) bool { return st.InUse == limit })
		rawConn(t, s.addr, f)
		waitBudget(t, budget, "a waiter", func(st ReceiveBudgetStats) bool { return st.Waiting == 1 })
		s.Close()
		if st := budget.Stats(); st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("budget after Close: %+v", st)
		}
	})
	t.Run("Shutdown", func(t *testing.T) {
		s := startServer(t, echoHandler, opts)
		rawConn(t, s.addr, f[:100<<10])
		waitBudget(t, budget, "a reservation", func(st ReceiveBudgetStats) bool { return st.InUse == limit })
		rawConn(t, s.addr, f)
		waitBudget(t, budget, "a waiter", func(st ReceiveBudgetStats) bool { return st.Waiting == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if st := budget.Stats(); st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("budget after Shutdown: %+v", st)
		}
	})
	// A frame larger than the whole budget is refused at once.
	t.Run("too large", func(t *testing.T) {
		s := startServer(t, echoHandler, opts)
		closed := closeErrors(s)
		nc := rawConn(t, s.addr, echoFrameBytes(t, 1<<20, 1)[:200<<10])
		expectClosed(t, nc)
		if err := <-closed; !errors.Is(err, ErrReceiveBudget) {
			t.Fatalf("closed with %v", err)
		}
		if st := s.Stats(); st.BudgetCloses != 1 || st.Budget.Refused != 1 || st.Budget.InUse != 0 {
			t.Fatalf("server stats %+v", st)
		}
	})
}

// Servers without a budget of their own share one; a client's connections charge none.
func TestSharedReceiveBudget(t *testing.T) {
	a, b := NewServer(echoHandler, nil), NewServer(echoHandler, &Options{Logger: quiet})
	if a.Budget() != SharedReceiveBudget() || b.Budget() != a.Budget() {
		t.Fatal("servers without a ReceiveBudget do not share the process-wide one")
	}
	if st := a.Stats().Budget; st.Limit != DefaultReceiveBudget {
		t.Fatalf("shared budget limit %d", st.Limit)
	}
	if cfg := (&ClientOptions{}).Options.config(); cfg.budget != nil {
		t.Fatal("a client's config charges a budget")
	}
	own := NewReceiveBudget(1<<20, testlog.New(t, "budget"))
	if c := NewServer(echoHandler, &Options{ReceiveBudget: own}); c.Budget() != own {
		t.Fatal("Options.ReceiveBudget ignored")
	}
}
