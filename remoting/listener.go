package remoting

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// LimitListener wraps ln, a listener whose connections are served by
// something other than a remoting Server (the gRPC front end, the HA
// stream, the operator's HTTP port, Raft), so that they count against the
// process's connection bounds as a Server's do:
//
//   - every accepted connection is counted in lim (SharedConnLimit() when
//     nil), by its source address; one over a bound (in all, per source,
//     or the file-descriptor reserve, ConnLimit.ReserveFDs) is closed before
//     anything is read from it, with ConnLimit's Warn line (one a minute,
//     the rest counted), and Accept goes on to the next one;
//   - a connection Accept returns gives its count back when it is closed
//     (once, however often Close is called);
//   - an Accept that fails while the listener is open (the process or
//     the system out of file descriptors, out of buffers) is retried after
//     a pause that grows from 5 ms to 1 s, with a Warn line a minute (the
//     rest counted), so that a process out of descriptors does not spin;
//     Close ends a pause at once. Once the listener is closed, Accept
//     returns its error.
//
// name says which listener it is in the log ("gRPC", "HA", ...). A
// remoting Server counts its connections itself: do not give it a
// LimitListener.
func LimitListener(ln net.Listener, name string, lim *ConnLimit, log *slog.Logger) net.Listener {
	if lim == nil {
		lim = SharedConnLimit()
	}
	if log == nil {
		log = slog.Default()
	}
	return &limitListener{Listener: ln, name: name, lim: lim, log: log, closed: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	name string
	lim  *ConnLimit
	log  *slog.Logger

	closeOnce sync.Once
	closed    chan struct{}
	backoff   acceptBackoff
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if !l.backoff.pause(err, l.closed, l.log, l.name, l.Addr()) {
				return nil, err
			}
			continue
		}
		l.backoff.reset()
		src := sourceOf(nc.RemoteAddr())
		if !l.lim.acquire(src, l.log, l.name) {
			_ = nc.Close()
			continue
		}
		return &limitedConn{Conn: nc, lim: l.lim, src: src}, nil
	}
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitedConn gives its count back to the limit when it is first closed.
type limitedConn struct {
	net.Conn
	lim      *ConnLimit
	src      netip.Addr
	released atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.released.CompareAndSwap(false, true) {
		c.lim.release(c.src)
	}
	return err
}

// TCPConn returns the accepted TCP connection, whose bytes are this
// one's (nil if it is not TCP): a writer that wants vectored writes
// (net.Buffers, writev) writes to it, and closes this one.
func (c *limitedConn) TCPConn() *net.TCPConn {
	tc, _ := c.Conn.(*net.TCPConn)
	return tc
}

// acceptBackoff paces the retries of an accept loop whose Accept fails
// while its listener is open; its Warn lines go through acceptLogs (one a
// minute per listener, with the count held back). Its zero value is
// ready; it is safe for concurrent use (Accepts called at once share the
// pause).
type acceptBackoff struct {
	delay    atomic.Int64 // the last pause (a time.Duration); 0 after a success
	failures atomic.Uint64
}

// Pauses of an accept loop after a passing failure.
const (
	acceptPauseMin = 5 * time.Millisecond
	acceptPauseMax = time.Second
)

// retryAccept reports whether an Accept error may pass: any but the
// listener's end. On an open listener they do (the process or the system
// out of file descriptors or buffers, a connection reset before it was
// accepted, a network error of a pending connection, which Linux reports
// from accept), and a loop that stopped for one would stop serving.
func retryAccept(err error) bool { return !errors.Is(err, net.ErrClosed) }

// pause waits before the next Accept after err, unless err does not pass
// (false: return it) or closed is closed first (false too).
func (b *acceptBackoff) pause(err error, closed <-chan struct{}, log *slog.Logger, name string, addr net.Addr) bool {
	if !retryAccept(err) {
		return false
	}
	select {
	case <-closed:
		return false
	default:
	}
	b.failures.Add(1)
	delay := min(max(2*time.Duration(b.delay.Load()), acceptPauseMin), acceptPauseMax)
	b.delay.Store(int64(delay))
	acceptLogs.Warn(log, name+" "+addrString(addr), "accept failed; retrying after a pause (further failures within a minute are only counted): "+
		"if the process is out of file descriptors (EMFILE), raise its RLIMIT_NOFILE (ulimit -n, systemd LimitNOFILE=) or lower --max-connections",
		"listener", name, "addr", addrString(addr), "err", err, "retry_in", delay, "failures", b.failures.Load())
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-closed:
		return false
	}
}

// reset ends a run of failures: the next pause starts short again.
func (b *acceptBackoff) reset() {
	if b.delay.Load() != 0 {
		b.delay.Store(0)
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
