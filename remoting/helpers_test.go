package remoting

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// TestMain fails the run if goroutines running this package's code outlive the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitGoroutines(0); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "goroutine leak: %d left\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// remotingGoroutines returns the stacks of the goroutines, other than the caller's,
// that run code of this package (the fuzz engine's and the runtime's do not count).
func remotingGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i > 0 && strings.Contains(g, "apogeemq/apogee/remoting.") {
			out = append(out, g)
		}
	}
	return out
}

// waitGoroutines waits for at most n such goroutines, and returns them if more
// remain.
func waitGoroutines(n int) []string {
	var g []string
	wait.Poll(wait.DefaultTimeout, func() error {
		if g = remotingGoroutines(); len(g) > n {
			return fmt.Errorf("%d goroutines", len(g))
		}
		g = nil
		return nil
	})
	return g
}

// checkGoroutines fails t if, after t's cleanups ran, more of this package's
// goroutines run than before it.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := len(remotingGoroutines())
	t.Cleanup(func() {
		if leaked := waitGoroutines(before); len(leaked) > 0 {
			t.Errorf("goroutine leak: %d before, %d after\n%s", before, len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

// logSink is a slog handler target that keeps every line.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for l := range strings.SplitSeq(strings.TrimSpace(s.buf.String()), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// count returns the lines at level (e.g. "WARN") that contain every substring.
func (s *logSink) count(level string, subs ...string) int {
	n := 0
outer:
	for _, l := range s.lines() {
		if !strings.Contains(l, "level="+level) {
			continue
		}
		for _, sub := range subs {
			if !strings.Contains(l, sub) {
				continue outer
			}
		}
		n++
	}
	return n
}

// newLogger returns a logger whose lines the test can count (the sink) and
// that also writes to t's log (printed if t fails), tagged name.
func newLogger(t testing.TB, name string) (*slog.Logger, *logSink) {
	s := &logSink{}
	h := slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(slog.NewMultiHandler(h, testlog.New(t, name).Handler())), s
}

// Test request codes.
const (
	codeEcho  int32 = 1000 // answers with the request's ext and body
	codePark  int32 = 1001 // deferred until the test lets it go
	codePanic int32 = 1002
)

// echo copies req's ext and body into resp.
func echo(req *protocol.Command, resp *Response) Action {
	resp.Cmd.Ext.CopyFrom(&req.Ext)
	resp.Cmd.Body = req.Body
	return Reply
}

var echoHandler = HandlerFunc(func(_ *Conn, req *protocol.Command, resp *Response) Action { return echo(req, resp) })

type testServer struct {
	*Server
	addr string
	log  *logSink
	errc chan error
}

// startServer serves h on 127.0.0.1:0 until the test ends.
func startServer(t *testing.T, h Handler, opts *Options) *testServer {
	t.Helper()
	logger, sink := newLogger(t, "server")
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Logger = logger
	s := NewServer(h, &o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, addr: l.Addr().String(), log: sink, errc: make(chan error, 1)}
	go func() { ts.errc <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-ts.errc:
			if err != ErrServerClosed {
				t.Errorf("Serve returned %v", err)
			}
		case <-time.After(wait.DefaultTimeout):
			t.Error("Serve did not return")
		}
	})
	return ts
}

// dial connects a Client that is closed (and waited for) when the test ends.
func dial(t *testing.T, addr string, opts *ClientOptions) *Client {
	t.Helper()
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger, _ = newLogger(t, "client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := Dial(ctx, addr, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Close()
		<-cl.Done()
	})
	return cl
}

func request(code int32, body string) *protocol.Command {
	var c protocol.Command
	c.InitRequest(code, 0)
	if body != "" {
		c.Body = []byte(body)
	}
	return &c
}

// testCtx bounds a test's calls: generously, only to end a test that hangs.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	t.Cleanup(cancel)
	return ctx
}

// serverConn returns the server's only connection.
func serverConn(t *testing.T, s *testServer) *Conn {
	t.Helper()
	var c *Conn
	wait.For(t, "a server connection", func() error {
		n := 0
		s.Range(func(x *Conn) bool { c = x; n++; return true })
		if n != 1 {
			return fmt.Errorf("%d connections", n)
		}
		return nil
	})
	return c
}

// waitReaderParked waits until c's read goroutine waits for capacity (it owes
// its peer too much to read more requests), and returns c's counters taken
// then, under the lock the reader parks under: a snapshot of the stopped
// reader, not one the writer may have moved on from since.
func waitReaderParked(t *testing.T, c *Conn) Stats {
	t.Helper()
	var st Stats
	wait.For(t, "the connection's reader waiting for capacity", func() error {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		st = c.Stats()
		if !c.readerWaiting {
			return fmt.Errorf("reading; %+v", st)
		}
		return nil
	})
	return st
}

// frame encodes cmd as one wire frame.
func frame(t testing.TB, cmd *protocol.Command) []byte {
	b, err := protocol.AppendFrame(nil, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readResponse reads one frame from a raw connection.
func readResponse(t *testing.T, nc net.Conn) *protocol.Command {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(wait.DefaultTimeout))
	f, err := protocol.ReadFrame(nc, nil, 0)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	var c protocol.Command
	if err := protocol.DecodeFrame(f, &c); err != nil {
		t.Fatal(err)
	}
	c.Body = bytes.Clone(c.Body)
	return &c
}

// expectClosed waits until the peer closes nc (a read returns an error).
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(wait.DefaultTimeout))
	buf := make([]byte, 4096)
	for {
		_, err := nc.Read(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("connection not closed by the server")
			}
			return
		}
	}
}

// countingReleaser counts Release calls.
type countingReleaser struct {
	mu sync.Mutex
	n  map[int]int
}

type releaseOf struct {
	r  *countingReleaser
	id int
}

func (r releaseOf) Release() {
	r.r.mu.Lock()
	r.r.n[r.id]++
	r.r.mu.Unlock()
}

func (r *countingReleaser) of(id int) Releaser {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = make(map[int]int)
	}
	r.n[id] += 0
	return releaseOf{r, id}
}

// check verifies that each of want ids was released exactly once.
func (r *countingReleaser) exactlyOnce(want int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.n) != want {
		return fmt.Errorf("%d releasers handed out, want %d", len(r.n), want)
	}
	for id, n := range r.n {
		if n != 1 {
			return fmt.Errorf("releaser %d ran %d times", id, n)
		}
	}
	return nil
}
