package remoting

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/logthrottle"
)

// Server accepts connections and serves their requests with one Handler.
type Server struct {
	h   Handler
	cfg config

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	shaking   map[net.Conn]struct{} // accepted, in Options.Handshake
	onClose   []func(*Conn)
	closed    bool
	done      chan struct{} // closed when the server is (wakes an accept loop's pause)

	limits        limitCounters
	handshakeErrs atomic.Uint64
}

// limitCounters count the connections a server closed for a receive limit, and
// space out their log lines.
type limitCounters struct {
	frameTimeouts, slowSenders, budgetCloses atomic.Uint64
	lastLog                                  atomic.Int64  // UnixNano of the last Warn line; 0: none yet
	unlogged                                 atomic.Uint64 // closes since that line that were not logged
}

// limitLogEvery spaces the Warn lines about connections closed for a receive limit:
// the first close logs one, later ones within this time are only counted, and the
// next line says how many there were.
const limitLogEvery = time.Minute

// ServerStats are a server's counters.
type ServerStats struct {
	Connections int // open now
	// Connections closed because a frame was not received within FrameTimeout
	// (ErrFrameTimeout), arrived below MinReceiveRate (ErrSlowSender), or found no
	// room in the receive budget before its deadline (ErrReceiveBudget).
	FrameTimeouts, SlowSenders, BudgetCloses uint64
	// Budget is the receive budget this server charges; a shared budget's numbers
	// cover every server that shares it.
	Budget ReceiveBudgetStats
	// Conns and Responses are the connection limit and the response budget the
	// server shares (their numbers cover every server that shares them).
	Conns     ConnLimitStats
	Responses ResponseBudgetStats
	// HandshakeFailures counts connections closed because Options.Handshake
	// failed (a TLS handshake that did not complete, a plain client refused by
	// an enforcing TLS listener, ...).
	HandshakeFailures uint64
}

// acceptLogs throttles accept failures (one per retry, up to one a
// second, while file descriptors run out): one line a minute per listener
// (acceptBackoff).
var acceptLogs = logthrottle.New(time.Minute)

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Connections:   s.Len(),
		FrameTimeouts: s.limits.frameTimeouts.Load(),
		SlowSenders:   s.limits.slowSenders.Load(),
		BudgetCloses:  s.limits.budgetCloses.Load(),
		Budget:        s.cfg.budget.Stats(),
		Conns:         s.cfg.connLimit.Stats(),
		Responses:     s.cfg.respBudget.Stats(),

		HandshakeFailures: s.handshakeErrs.Load(),
	}
}

// Budget returns the receive budget the server's connections charge.
func (s *Server) Budget() *ReceiveBudget { return s.cfg.budget }

// NewServer returns a server that serves every connection's requests with h. opts may
// be nil.
func NewServer(h Handler, opts *Options) *Server {
	if h == nil {
		panic("remoting: NewServer with a nil Handler")
	}
	s := &Server{
		h:         h,
		cfg:       opts.config(),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*Conn]struct{}),
		shaking:   make(map[net.Conn]struct{}),
		done:      make(chan struct{}),
	}
	if s.cfg.budget == nil {
		s.cfg.budget = SharedReceiveBudget()
	}
	if s.cfg.connLimit == nil {
		s.cfg.connLimit = SharedConnLimit()
	}
	if s.cfg.respBudget == nil {
		s.cfg.respBudget = SharedResponseBudget()
	}
	return s
}

// OnClose registers fn to run once for every connection that closes, after its
// goroutines have exited (no handler runs on it any more) and before its Done channel
// is closed. fn runs on one of the connection's goroutines and must not block for long.
func (s *Server) OnClose(fn func(*Conn)) {
	s.mu.Lock()
	s.onClose = append(s.onClose, fn)
	s.mu.Unlock()
}

// Serve accepts connections on l until the server is closed, then returns
// ErrServerClosed. Accept errors that pass (too many open files, ...) are retried
// after a pause that grows from 5 ms to 1 s, with a Warn line a minute (as
// LimitListener's). Serve closes l when it returns.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		_ = l.Close()
	}()

	var backoff acceptBackoff
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			if backoff.pause(err, s.done, s.cfg.log, "remoting", l.Addr()) {
				continue
			}
			if s.isClosed() {
				return ErrServerClosed
			}
			return err
		}
		backoff.reset()
		src := sourceOf(nc.RemoteAddr())
		if !s.cfg.connLimit.acquire(src, s.cfg.log, "remoting") {
			_ = nc.Close()
			continue
		}
		if s.cfg.handshake != nil {
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				_ = nc.Close()
				s.cfg.connLimit.release(src)
				return ErrServerClosed
			}
			s.shaking[nc] = struct{}{}
			s.mu.Unlock()
			go s.handshake(nc, src)
			continue
		}
		if !s.startConn(nc, src) {
			return ErrServerClosed
		}
	}
}

// startConn serves an accepted (and prepared) connection; false: the
// server is closed, and nc was closed.
func (s *Server) startConn(nc net.Conn, src netip.Addr) bool {
	c := newConn(nc, &s.cfg, s.h, s)
	c.src = src
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		s.cfg.connLimit.release(src)
		return false
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.start()
	return true
}

// handshake runs Options.Handshake on an accepted connection, bounded by
// HandshakeTimeout, and serves what it returns.
func (s *Server) handshake(nc net.Conn, src netip.Addr) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.hsTimeout)
	_ = nc.SetDeadline(time.Now().Add(s.cfg.hsTimeout))
	conn, err := s.cfg.handshake(ctx, nc)
	cancel()
	s.mu.Lock()
	delete(s.shaking, nc)
	s.mu.Unlock()
	if err == nil {
		err = conn.SetDeadline(time.Time{})
	}
	if err != nil {
		s.handshakeErrs.Add(1)
		s.cfg.log.Debug("remoting: connection closed: handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		_ = nc.Close()
		s.cfg.connLimit.release(src)
		return
	}
	s.startConn(conn, src)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// remove forgets a finished connection and runs the OnClose callbacks.
func (s *Server) remove(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	fns := s.onClose
	s.mu.Unlock()
	s.cfg.connLimit.release(c.src)
	for _, fn := range fns {
		fn(c)
	}
}

// Len returns the number of open connections.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Range calls fn for each open connection until fn returns false. fn must not call
// back into the server.
func (s *Server) Range(fn func(*Conn) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if !fn(c) {
			return
		}
	}
}

// stop marks the server closed, closes its listeners and returns its connections.
func (s *Server) stop() []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	for l := range s.listeners {
		_ = l.Close()
	}
	for nc := range s.shaking {
		_ = nc.Close() // its handshake fails and releases it
	}
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// Shutdown stops the server gracefully: it stops accepting, stops reading new
// requests (frames already received are still served), waits for every deferred
// request to be answered and every response to be written, then closes each
// connection. If ctx ends first, the remaining connections are closed at once and
// ctx's error is returned. Long-polling handlers should answer their parked requests
// when the owner shuts down, or Shutdown waits for them until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	conns := s.stop()
	for _, c := range conns {
		c.drain()
	}
	for i, c := range conns {
		select {
		case <-c.done:
		case <-ctx.Done():
			for _, c := range conns[i:] {
				c.fail(ErrServerClosed)
			}
			for _, c := range conns[i:] {
				<-c.done
			}
			return ctx.Err()
		}
	}
	return nil
}

// Close stops accepting and closes every connection at once (queued responses are
// dropped, their Release run). It waits for the connections' goroutines to exit, so
// it must not be called from a Handler.
func (s *Server) Close() error {
	conns := s.stop()
	for _, c := range conns {
		c.fail(ErrServerClosed)
	}
	for _, c := range conns {
		<-c.done
	}
	return nil
}

// countLimitClose counts a connection closed for a receive limit in its
// server's counters (a client's connection has none) and reports whether
// cause is such a limit.
func (c *Conn) countLimitClose(cause error) bool {
	if cause == nil {
		return false
	}
	var lim *limitCounters
	if c.srv != nil {
		lim = &c.srv.limits
	}
	var n *atomic.Uint64
	switch {
	case errors.Is(cause, ErrFrameTimeout):
		if lim != nil {
			n = &lim.frameTimeouts
		}
	case errors.Is(cause, ErrSlowSender):
		if lim != nil {
			n = &lim.slowSenders
		}
	case errors.Is(cause, ErrReceiveBudget):
		if lim != nil {
			n = &lim.budgetCloses
		}
	default:
		return false
	}
	if n != nil {
		n.Add(1)
	}
	return true
}

// logLimitClose logs a connection closed for a receive limit. A server's
// connections share one Warn line per limitLogEvery (the first close logs at
// once); a client's connection logs its own.
func (c *Conn) logLimitClose(cause error) {
	attrs := []any{"conn", c.id, "remote", c.remote, "err", cause}
	if c.srv == nil {
		c.cfg.log.Warn("remoting: closing connection: receive limit", attrs...)
		return
	}
	lim := &c.srv.limits
	now := time.Now().UnixNano()
	last := lim.lastLog.Load()
	if last != 0 && now-last < int64(limitLogEvery) || !lim.lastLog.CompareAndSwap(last, now) {
		lim.unlogged.Add(1)
		return
	}
	attrs = append(attrs, "closed_unlogged_since_last_line", lim.unlogged.Swap(0),
		"frame_timeouts", lim.frameTimeouts.Load(), "slow_senders", lim.slowSenders.Load(),
		"budget_closes", lim.budgetCloses.Load())
	c.cfg.log.Warn("remoting: closing connection: receive limit (further ones within a minute are only counted)", attrs...)
}
