package remoting

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// acceptAll accepts from ln until it fails, keeping what it accepts, and
// reports the error it ended with on done.
func acceptAll(ln net.Listener) (conns func() []net.Conn, done <-chan error) {
	var mu sync.Mutex
	var got []net.Conn
	d := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				d <- err
				return
			}
			mu.Lock()
			got = append(got, c)
			mu.Unlock()
		}
	}()
	return func() []net.Conn {
		mu.Lock()
		defer mu.Unlock()
		return append([]net.Conn(nil), got...)
	}, d
}

// dialFrom dials addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: wait.DefaultTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A LimitListener counts its connections in the shared limit, per source
// and in all, closes those over a bound before reading anything (the
// client sees the close), gives a count back when its connection closes,
// and logs one refusal line for many.
func TestLimitListener(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("binds 127.0.0.x source addresses")
	}
	log, sink := newLogger(t, "limit")
	lim := NewConnLimit(6, 4)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(raw, "test", lim, log)
	conns, done := acceptAll(ln)
	addr := raw.Addr().String()

	// Four from one source are accepted, the next two are closed.
	for range 6 {
		dialFrom(t, "127.0.0.2", addr)
	}
	wait.Until(t, "two refused per source", func() bool { return lim.Stats().RefusedSource == 2 })
	if n := len(conns()); n != 4 {
		t.Fatalf("%d accepted, want 4", n)
	}
	// Two more from another source fill the bound in all; a third is refused.
	for range 3 {
		dialFrom(t, "127.0.0.3", addr)
	}
	wait.Until(t, "one refused in all", func() bool { return lim.Stats().RefusedTotal == 1 })
	refused := dialFrom(t, "127.0.0.4", addr)
	expectClosed(t, refused)
	if st := lim.Stats(); st.Open != 6 || st.Sources != 2 || st.RefusedTotal != 2 {
		t.Fatalf("stats %+v, want 6 open from 2 sources, 2 refused in all", st)
	}
	// A closed connection gives its count back, once.
	c := conns()[0]
	c.Close()
	c.Close()
	if st := lim.Stats(); st.Open != 5 {
		t.Fatalf("%d open after a close, want 5", st.Open)
	}
	dialFrom(t, "127.0.0.4", addr)
	wait.Until(t, "a new connection accepted", func() bool { return len(conns()) == 7 })
	for _, why := range []string{"from one source", "in all"} {
		if n := sink.count("WARN", "connection refused", why, "listener=test"); n != 1 {
			t.Fatalf("%d refusal lines for %q, want 1 (the rest counted):\n%v", n, why, sink.lines())
		}
	}
	ln.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	for _, c := range conns() {
		c.Close()
	}
	if st := lim.Stats(); st.Open != 0 {
		t.Fatalf("%d open after every close", st.Open)
	}
}

// failingListener fails its Accept with err n times, then accepts from the
// real listener.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	n     int
	err   error
	calls int
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls++
	if l.n != 0 {
		if l.n > 0 {
			l.n--
		}
		l.mu.Unlock()
		return nil, l.err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func (l *failingListener) Calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// An Accept that fails with EMFILE is retried after growing pauses, not in
// a spin, with one Warn line; a Close ends a pause at once.
func TestLimitListenerBacksOff(t *testing.T) {
	log, sink := newLogger(t, "backoff")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	fl := &failingListener{Listener: raw, n: 4, err: emfile}
	ln := LimitListener(fl, "test", NewConnLimit(0, 0), log)
	c := dialFrom(t, "127.0.0.1", raw.Addr().String())
	start := time.Now()
	got, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	c.Close()
	// Four failures: pauses of 5, 10, 20 and 40 ms.
	if el := time.Since(start); el < 75*time.Millisecond || fl.Calls() != 5 {
		t.Fatalf("%d calls in %v, want 5 after 75 ms of pauses", fl.Calls(), el)
	}
	if n := sink.count("WARN", "accept failed", "EMFILE", "listener=test"); n != 1 {
		t.Fatalf("%d Warn lines, want 1:\n%v", n, sink.lines())
	}
	// Failing for ever: Close ends the pause and Accept returns.
	fl.mu.Lock()
	fl.n = -1
	fl.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		done <- err
	}()
	wait.Until(t, "Accept pausing", func() bool { return fl.Calls() > 6 })
	ln.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Accept after Close returned a connection")
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("Close did not end Accept's pause")
	}
}

// A Server whose Accept fails with EMFILE pauses too, and its Close ends
// the pause.
func TestServerAcceptBacksOff(t *testing.T) {
	log, sink := newLogger(t, "server")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: raw, n: -1, err: os.NewSyscallError("accept4", syscall.EMFILE)}
	s := NewServer(echoHandler, &Options{Logger: log, ConnLimit: NewConnLimit(0, 0)})
	done := make(chan error, 1)
	go func() { done <- s.Serve(fl) }()
	wait.Until(t, "failures", func() bool { return fl.Calls() > 5 })
	calls := fl.Calls()
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("Close did not end Serve's pause")
	}
	// 5 ms, 10, 20, 40, 80...: a spin would have made thousands of calls.
	if calls > 20 {
		t.Fatalf("%d Accept calls before the test saw 5: a spin", calls)
	}
	if n := sink.count("WARN", "accept failed"); n != 1 {
		t.Fatalf("%d Warn lines, want 1:\n%v", n, sink.lines())
	}
}

// ReserveFDs bounds the connections in all by the descriptors left: with
// a headroom that leaves room for three, the fourth is refused (counted in
// RefusedFD and logged); a lowered soft limit is followed on the next
// accept.
func TestReserveFDs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts /proc/self/fd")
	}
	log, sink := newLogger(t, "fd")
	lim := NewConnLimit(0, 0)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	soft, err := softNoFile()
	if err != nil {
		t.Fatal(err)
	}
	open, err := openFDs()
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.ReserveFDs(int(soft)-open-3, log); err != nil {
		t.Fatal(err)
	}
	st := lim.Stats()
	// The count may differ by what other goroutines opened meanwhile.
	if st.FDLimit != int(soft) || st.FDBound < 1 || st.FDBound > 3 {
		t.Fatalf("stats %+v: want the soft limit %d and a bound of about 3", st, soft)
	}
	bound := st.FDBound
	ln := LimitListener(raw, "test", lim, log)
	conns, done := acceptAll(ln)
	for range bound + 2 {
		dialFrom(t, "127.0.0.1", raw.Addr().String())
	}
	// (A count of the descriptors a second later would see the test's own
	// ends of these connections, and lower the bound.)
	wait.Until(t, "every connection accepted or refused", func() bool { return len(conns())+int(lim.Stats().RefusedFD) == bound+2 })
	if n := len(conns()); n > bound || lim.Stats().RefusedFD < 2 {
		t.Fatalf("%d accepted and %d refused, want at most %d accepted", n, lim.Stats().RefusedFD, bound)
	}
	if n := sink.count("WARN", "connection refused", "file descriptors", "RLIMIT_NOFILE"); n != 1 {
		t.Fatalf("%d refusal lines, want 1:\n%v", n, sink.lines())
	}

	// Lower the soft limit by one: the next accept sees it.
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	saved := rl
	rl.Cur--
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved) })
	dialFrom(t, "127.0.0.1", raw.Addr().String())
	wait.Until(t, "the lowered limit followed", func() bool { return sink.count("INFO", "RLIMIT_NOFILE changed") == 1 })
	if st := lim.Stats(); st.FDLimit != int(rl.Cur) {
		t.Fatalf("stats %+v after the limit was lowered to %d", st, rl.Cur)
	}
	ln.Close()
	<-done
	for _, c := range conns() {
		c.Close()
	}
}

// DefaultFDHeadroom is a quarter of the limit within [64, 1024].
func TestDefaultFDHeadroom(t *testing.T) {
	for _, c := range []struct{ soft, want int }{{100, 64}, {1024, 256}, {4096, 1024}, {1 << 20, 1024}} {
		if got := DefaultFDHeadroom(c.soft); got != c.want {
			t.Errorf("DefaultFDHeadroom(%d) = %d, want %d", c.soft, got, c.want)
		}
	}
	if got := (ConnLimitStats{Max: 100, FDLimit: 4096, FDBound: 50}).Bound(); got != 50 {
		t.Errorf("Bound: %d", got)
	}
	if got := (ConnLimitStats{Max: 100}).Bound(); got != 100 {
		t.Errorf("Bound without a reserve: %d", got)
	}
}
