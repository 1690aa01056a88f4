package ha

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/store"
)

// SlaveOptions configure a Slave. Zero values mean the defaults given.
type SlaveOptions struct {
	// MasterAddr is the master's HA address (host:port). It may be empty
	// and set later with SetMasterAddr.
	MasterAddr string
	// ReportInterval: the slave reports its offset after this long without
	// a report, even when it has not changed (a heartbeat). Default 5 s.
	ReportInterval time.Duration
	// HousekeepingInterval: a connection on which nothing arrived from the
	// master for this long is closed (the master sends an empty frame every
	// 5 s when idle). Default 20 s.
	HousekeepingInterval time.Duration
	// RetryInterval is the wait before reconnecting after a connection
	// ended or failed; it doubles while attempts keep failing, up to
	// MaxRetryInterval. Default 1 s.
	RetryInterval time.Duration
	// MaxRetryInterval bounds RetryInterval's doubling. Default 10 s.
	MaxRetryInterval time.Duration
	// DialTimeout bounds a connection attempt. Default 3 s.
	DialTimeout time.Duration
	// BufferSize is the receive buffer's initial size; it grows to hold a
	// record larger than it. Default 4 MiB.
	BufferSize int
	// Logger receives connections, start-overs and failures. Default
	// slog.Default().
	Logger *slog.Logger
	// Handshake, when set, runs on each new connection before the first
	// report (controller mode's epoch handshake, docs/failover.md): it
	// says hello on c and reads the master's answer, and may truncate the
	// replica's log (nothing is appended meanwhile); the first report then
	// names the log's end as it left it. An error ends the connection (and
	// is retried as a failed connection). Default: none.
	Handshake func(c net.Conn) error
	// TLS, when set, makes every connection to the master TLS with this
	// configuration (crypto/tls; the handshake is bounded by DialTimeout).
	// Without a ServerName (and unless InsecureSkipVerify), the master's
	// certificate is verified for the host of the master's address. A
	// master whose broker runs --tls-mode enforcing refuses a slave without
	// it; one in permissive mode takes either. Default: nil (plain TCP).
	TLS *tls.Config
	// Cluster, BrokerName and BrokerID are the slave's names, sent in the
	// identity handshake on every connection: a master of another cluster
	// or broker group refuses the slave (RefusedError). Default: empty.
	Cluster, BrokerName string
	BrokerID            int64
	// Sign, when set, signs the identity handshake's content (its fields
	// and the master's nonce) with the slave's credentials and returns the
	// access key and the signature, which a master under access control
	// verifies (MasterOptions.Verify). Default: nil (no credentials).
	Sign func(content []byte) (accessKey string, signature []byte)
}

func (o SlaveOptions) withDefaults() SlaveOptions {
	if o.ReportInterval <= 0 {
		o.ReportInterval = DefaultHeartbeatInterval
	}
	if o.HousekeepingInterval <= 0 {
		o.HousekeepingInterval = DefaultHousekeepingInterval
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = time.Second
	}
	if o.MaxRetryInterval <= 0 {
		o.MaxRetryInterval = 10 * time.Second
	}
	o.MaxRetryInterval = max(o.MaxRetryInterval, o.RetryInterval)
	if o.DialTimeout <= 0 {
		o.DialTimeout = 3 * time.Second
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 4 << 20
	}
	o.BufferSize = max(o.BufferSize, 64<<10)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Slave keeps a replica's store a copy of its master's commit log: it
// connects to the master's HA address, reports its offset, appends what the
// master streams and reports what it holds, reconnecting whenever the
// connection ends. Its methods are safe for concurrent use.
type Slave struct {
	st   *store.Store
	opts SlaveOptions

	mu      sync.Mutex
	addr    string
	conn    net.Conn // the current connection, closed by Close and SetMasterAddr
	started bool
	wake    chan struct{} // cap 1: the address changed

	stop chan struct{}
	wg   sync.WaitGroup
	buf  []byte // the receive buffer, reused by each connection (run's goroutine only)

	connected atomic.Bool
	lastRead  atomic.Int64 // unix nanos
	lastWrite atomic.Int64
	reported  atomic.Int64
	received  atomic.Int64 // commit-log bytes appended
	resets    atomic.Int64
	sessions  atomic.Int64
}

// NewSlave returns a Slave for st, which must be a replica's store
// (store.Options.Replica). Start runs it.
func NewSlave(st *store.Store, opts SlaveOptions) (*Slave, error) {
	if !st.IsReplica() {
		return nil, errors.New("ha: a slave needs a replica's store (store.Options.Replica)")
	}
	o := opts.withDefaults()
	return &Slave{st: st, opts: o, addr: o.MasterAddr, wake: make(chan struct{}, 1), stop: make(chan struct{})}, nil
}

// SetMasterAddr points the slave at the master's HA address: a change ends
// the current connection, and the next one goes to addr ("" waits for an
// address).
func (s *Slave) SetMasterAddr(addr string) {
	s.mu.Lock()
	if s.addr == addr {
		s.mu.Unlock()
		return
	}
	old := s.addr
	s.addr = addr
	c := s.conn
	s.mu.Unlock()
	s.opts.Logger.Info("ha: master address changed", "old", old, "new", addr)
	if c != nil {
		c.Close()
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// MasterAddr returns the master's HA address.
func (s *Slave) MasterAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Start runs the slave's connection loop in the background until Close.
func (s *Slave) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	s.wg.Add(1)
	go s.run()
}

// Close ends the connection and the loop, and waits for them. The store
// stays open (its owner closes it).
func (s *Slave) Close() error {
	s.mu.Lock()
	select {
	case <-s.stop:
		s.mu.Unlock()
		return nil
	default:
	}
	close(s.stop)
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// SlaveStatus describes a slave's replication.
type SlaveStatus struct {
	MasterAddr string
	// Connected is true while a connection to the master is up.
	Connected bool
	// Offset is the replica's log end; Reported, the last offset reported
	// to the master (acknowledged: durable as the replica's flush mode says).
	Offset, Reported int64
	// LastRead and LastWrite are when something last came from the master
	// and when the last report went (zero: never).
	LastRead, LastWrite time.Time
	// Received counts the commit-log bytes appended; Resets, the times the
	// log started over; Sessions, the connections made.
	Received, Resets, Sessions int64
}

// Status describes the slave's replication.
func (s *Slave) Status() SlaveStatus {
	st := SlaveStatus{
		MasterAddr: s.MasterAddr(),
		Connected:  s.connected.Load(),
		Offset:     s.st.WrittenOffset(),
		Reported:   s.reported.Load(),
		Received:   s.received.Load(),
		Resets:     s.resets.Load(),
		Sessions:   s.sessions.Load(),
	}
	if t := s.lastRead.Load(); t != 0 {
		st.LastRead = time.Unix(0, t)
	}
	if t := s.lastWrite.Load(); t != 0 {
		st.LastWrite = time.Unix(0, t)
	}
	return st
}

func (s *Slave) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// run connects, streams, and reconnects until Close.
func (s *Slave) run() {
	defer s.wg.Done()
	log := s.opts.Logger
	wait := s.opts.RetryInterval
	var lastFailed bool // the previous session ended without progress
	var lastLogged time.Time
	for !s.stopped() {
		addr := s.MasterAddr()
		if addr == "" {
			select {
			case <-s.stop:
				return
			case <-s.wake:
			}
			continue
		}
		progressed, err := s.session(addr)
		if s.stopped() {
			return
		}
		if s.MasterAddr() != addr {
			continue // SetMasterAddr ended the session and said so
		}
		if progressed {
			wait = s.opts.RetryInterval
		} else {
			wait = min(2*wait, s.opts.MaxRetryInterval)
		}
		// Failures in a row (sessions that made no progress) are logged at
		// most once a minute; the first after a session that made progress
		// at once.
		if progressed || !lastFailed || time.Since(lastLogged) >= time.Minute {
			lvl := slog.LevelWarn
			msg := "ha: replication from the master stopped; reconnecting"
			attrs := []any{"master", addr, "err", err, "retryIn", wait}
			var refused *RefusedError
			switch {
			case errors.As(err, &refused):
				lvl = slog.LevelError
				msg = "ha: the master refused this slave; it copies nothing until the master's or this slave's configuration changes: " +
					"a slave of another group must be pointed at its own group's master, and under access control it needs " +
					"innerClientAuthenticationCredentials (or mutual TLS)"
				attrs = []any{"master", addr, "reason", refused.Reason.String(),
					"masterCluster", refused.MasterCluster, "masterBrokerName", refused.MasterBrokerName,
					"slaveCluster", s.opts.Cluster, "slaveBrokerName", s.opts.BrokerName, "slaveBrokerId", s.opts.BrokerID, "retryIn", wait}
			case errors.Is(err, store.ErrReplicaData) || errors.Is(err, errOffsetMismatch):
				lvl = slog.LevelError
			}
			log.Log(context.Background(), lvl, msg, attrs...)
			lastLogged = time.Now()
		}
		lastFailed = !progressed
		t := time.NewTimer(wait)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-s.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// clientTLS runs a TLS client handshake on c within timeout and returns
// the TLS connection.
func clientTLS(c net.Conn, addr string, base *tls.Config, timeout time.Duration) (net.Conn, error) {
	cfg := base
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		cfg = base.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("ha: TLS handshake with the master %s: %w", addr, err)
	}
	return tc, nil
}

var errOffsetMismatch = errors.New("ha: the master streams from another offset than the slave's end")

// session runs one connection: dial, first report, then the reader here and
// the reporter beside it until either fails. progressed reports whether
// anything was appended.
func (s *Slave) session(addr string) (progressed bool, err error) {
	d := net.Dialer{Timeout: s.opts.DialTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return false, fmt.Errorf("ha: connect to the master: %w", err)
	}
	s.mu.Lock()
	if s.stopped() || s.addr != addr {
		s.mu.Unlock()
		c.Close()
		return false, errors.New("ha: stopped or redirected while connecting")
	}
	s.conn = c
	s.mu.Unlock()
	s.sessions.Add(1)
	defer func() {
		s.connected.Store(false)
		s.mu.Lock()
		s.conn = nil
		s.mu.Unlock()
		c.Close()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if s.opts.TLS != nil {
		// s.conn stays the TCP connection: closing it ends the TLS one.
		tc, err := clientTLS(c, addr, s.opts.TLS, s.opts.DialTimeout)
		if err != nil {
			return false, err
		}
		c = tc
	}
	c.SetDeadline(time.Now().Add(s.opts.HousekeepingInterval))
	err = s.identifySlave(c)
	c.SetDeadline(time.Time{})
	if err != nil {
		return false, err
	}
	if hs := s.opts.Handshake; hs != nil {
		c.SetDeadline(time.Now().Add(s.opts.HousekeepingInterval))
		err := hs(c)
		c.SetDeadline(time.Time{})
		if err != nil {
			return false, fmt.Errorf("ha: handshake: %w", err)
		}
	}
	// The first report names where the stream starts: the log's end, made
	// durable first (it is an acknowledgement too).
	end := s.st.WrittenOffset()
	if err := s.st.WaitDurable(end); err != nil {
		return false, fmt.Errorf("ha: flush before reporting: %w", err)
	}
	f := &failure{c: c}
	rp := reporter{s: s, c: c, f: f, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := rp.report(end); err != nil {
		return false, err
	}
	s.connected.Store(true)
	s.opts.Logger.Info("ha: connected to the master", "master", addr, "offset", end)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rp.loop()
	}()
	if len(s.buf) < s.opts.BufferSize {
		s.buf = make([]byte, s.opts.BufferSize)
	}
	rc := receiver{s: s, c: c, rp: &rp, pendOff: end, first: true, buf: s.buf}
	f.fail(rc.loop())
	close(rp.done)
	wg.Wait()
	s.buf = rc.buf // kept grown for the next connection
	return rc.appended > 0, f.first()
}

// failure keeps the first error of a session (the reader's or the
// reporter's) and closes the connection, which ends the other side: its
// error is a consequence and is dropped.
type failure struct {
	c   net.Conn
	mu  sync.Mutex
	err error
}

func (f *failure) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
	f.c.Close()
}

func (f *failure) first() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// receiver reads frames and appends their bodies.
//
// The buffer holds, in order: stream bytes the log has not consumed yet (a
// record cut off by the end of what arrived: buf[pend:r], the master's
// commit log from pendOff on), and bytes read but not parsed yet (buf[r:w]:
// part of a frame header). A frame's header is dropped by moving the pending
// bytes over it, so the pending bytes and the body that follows are
// contiguous and a record cut between two frames is whole again.
type receiver struct {
	s  *Slave
	c  net.Conn
	rp *reporter

	buf      []byte
	pend     int   // first stream byte not consumed by the log
	r, w     int   // parse position; end of the bytes read
	pendOff  int64 // log offset of buf[pend]
	bodyLeft int64 // bytes of the current frame's body still to come
	first    bool  // no frame yet on this connection
	frames   int64
	appended int64 // log bytes appended on this connection
	moved    bool  // appended since the last report
}

func (rc *receiver) loop() error {
	s := rc.s
	for {
		if rc.w == len(rc.buf) {
			if err := rc.makeRoom(); err != nil {
				return err
			}
		}
		rc.c.SetReadDeadline(time.Now().Add(s.opts.HousekeepingInterval))
		n, err := rc.c.Read(rc.buf[rc.w:])
		if n > 0 {
			rc.w += n
			s.lastRead.Store(time.Now().UnixNano())
			perr := rc.process()
			if rc.moved {
				rc.moved = false
				if rerr := rc.rp.appended(); rerr != nil && perr == nil {
					perr = rerr
				}
			}
			if perr != nil {
				return perr
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("ha: nothing from the master for %v", s.opts.HousekeepingInterval)
			}
			if rc.frames == 0 {
				return fmt.Errorf("ha: the master closed the connection before sending anything (did it refuse this slave? see its log): %w", err)
			}
			return fmt.Errorf("ha: read from the master: %w", err)
		}
	}
}

// process parses the frames in buf[r:w] and appends their bodies.
func (rc *receiver) process() error {
	for {
		if rc.bodyLeft > 0 {
			k := min(rc.bodyLeft, int64(rc.w-rc.r))
			if k == 0 {
				return nil
			}
			rc.r += int(k)
			rc.bodyLeft -= k
			if err := rc.append(); err != nil {
				return err
			}
			continue
		}
		if rc.w-rc.r < HeaderSize {
			return nil
		}
		off, n := readHeader(rc.buf[rc.r:])
		if n > MaxFrameBody {
			return fmt.Errorf("ha: the master sent a frame of %d bytes at %d (at most %d)", n, off, MaxFrameBody)
		}
		if want := rc.pendOff + int64(rc.r-rc.pend); off != want {
			if !rc.first || off < want {
				return fmt.Errorf("%w: a frame for offset %d, the slave expected %d", errOffsetMismatch, off, want)
			}
			if err := rc.startOver(off); err != nil {
				return err
			}
		}
		rc.first = false
		rc.frames++
		// Drop the header: move the pending bytes over it.
		copy(rc.buf[rc.pend+HeaderSize:], rc.buf[rc.pend:rc.r])
		rc.pend += HeaderSize
		rc.r += HeaderSize
		rc.bodyLeft = n
	}
}

// startOver resets the replica's log to begin at off: the master streams
// from its oldest segment because it no longer holds this slave's offset.
func (rc *receiver) startOver(off int64) error {
	s := rc.s
	from := rc.pendOff
	aside, err := s.st.ResetReplica(off)
	if err != nil {
		return fmt.Errorf("ha: start over at the master's offset %d: %w", off, err)
	}
	s.resets.Add(1)
	s.opts.Logger.Warn("ha: the master no longer holds this replica's next offset (retention removed it): "+
		"the replica's log starts over at the master's oldest segment; consume queues and index are rebuilt from what arrives",
		"replicaEnd", from, "startsAt", off, "oldLogSetAsideIn", aside)
	rc.pendOff = off
	return nil
}

// append hands the pending bytes to the log.
func (rc *receiver) append() error {
	if rc.r == rc.pend {
		return nil
	}
	n, err := rc.s.st.AppendReplicated(rc.pendOff, rc.buf[rc.pend:rc.r])
	if n > 0 {
		rc.pend += n
		rc.pendOff += int64(n)
		rc.appended += int64(n)
		rc.s.received.Add(int64(n))
		rc.moved = true
	}
	if errors.Is(err, store.ErrReplicaData) {
		return fmt.Errorf("ha: append the master's bytes at %d: %w "+
			"(are the master's and the slave's commit-log segment sizes the same?)", rc.pendOff, err)
	}
	if err != nil {
		return fmt.Errorf("ha: append the master's bytes at %d: %w", rc.pendOff, err)
	}
	return nil
}

// makeRoom makes room at the end of a full buffer: it moves the unconsumed
// bytes to the front, and grows the buffer when they fill it (a record
// larger than the buffer).
func (rc *receiver) makeRoom() error {
	keep := rc.w - rc.pend
	if rc.pend == 0 {
		size := len(rc.buf) * 2
		if rc.r-rc.pend >= 4 {
			need := int(binary.BigEndian.Uint32(rc.buf[rc.pend:])) + HeaderSize + 64<<10
			size = max(size, need)
		}
		if size > 2*int(rc.s.st.SegmentSize())+MaxFrameBody {
			return fmt.Errorf("ha: receive buffer would grow to %d bytes", size)
		}
		nb := make([]byte, size)
		copy(nb, rc.buf[rc.pend:rc.w])
		rc.buf = nb
	} else {
		copy(rc.buf, rc.buf[rc.pend:rc.w])
	}
	rc.r -= rc.pend
	rc.w = keep
	rc.pend = 0
	return nil
}

// reporter sends the slave's reports: after appends, once they are durable
// as the replica's flush mode says, and every ReportInterval. Without sync
// flush the appended bytes are durable at once, and the receiver reports
// them itself, right after the read that brought them (no hand-off to
// another goroutine on the path of a sync replication's acknowledgement);
// with sync flush the reporter's goroutine waits for the flush.
type reporter struct {
	s    *Slave
	c    net.Conn
	f    *failure
	wake chan struct{} // cap 1
	done chan struct{}

	mu   sync.Mutex // serialises reports
	last int64      // under mu
	b    [ReportSize]byte
}

// appended is called by the receiver after a read appended bytes.
func (rp *reporter) appended() error {
	if rp.s.st.DurableWaits() {
		select {
		case rp.wake <- struct{}{}:
		default:
		}
		return nil
	}
	return rp.reportIfMoved(rp.s.st.DurableOffset(), false)
}

// reportIfMoved reports off if it is beyond the last report, or if force.
func (rp *reporter) reportIfMoved(off int64, force bool) error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if off <= rp.last && !force {
		return nil
	}
	return rp.reportLocked(max(off, rp.last))
}

func (rp *reporter) report(off int64) error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.reportLocked(off)
}

func (rp *reporter) reportLocked(off int64) error {
	binary.BigEndian.PutUint64(rp.b[:], uint64(off))
	rp.c.SetWriteDeadline(time.Now().Add(rp.s.opts.HousekeepingInterval))
	if _, err := rp.c.Write(rp.b[:]); err != nil {
		return fmt.Errorf("ha: report to the master: %w", err)
	}
	rp.last = off
	rp.s.reported.Store(off)
	rp.s.lastWrite.Store(time.Now().UnixNano())
	return nil
}

func (rp *reporter) loop() {
	s := rp.s
	t := time.NewTicker(max(s.opts.ReportInterval/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-rp.done:
			return
		case <-rp.wake:
		case <-t.C:
		}
		if err := s.st.WaitDurable(s.st.WrittenOffset()); err != nil && !errors.Is(err, store.ErrFlushTimeout) {
			rp.f.fail(fmt.Errorf("ha: the replica's log failed: %w", err))
			return
		}
		due := time.Since(time.Unix(0, s.lastWrite.Load())) >= s.opts.ReportInterval
		if err := rp.reportIfMoved(s.st.DurableOffset(), due); err != nil {
			rp.f.fail(err)
			return
		}
	}
}
