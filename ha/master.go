package ha

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apogeemq/apogee/internal/logthrottle"

	"github.com/apogeemq/apogee/store"
)

// MasterOptions configure a Master. Zero values mean the defaults given.
type MasterOptions struct {
	// BatchSize bounds the body of one frame, in bytes. Default 1 MiB
	// (RocketMQ's haTransferBatchSize is 32 KiB; larger frames cost fewer
	// system calls when a slave catches up).
	BatchSize int
	// HeartbeatInterval: an empty frame goes to an idle slave after this
	// long without a frame. Default 5 s.
	HeartbeatInterval time.Duration
	// HousekeepingInterval: a connection on which the slave reported nothing
	// for this long is closed. Default 20 s.
	HousekeepingInterval time.Duration
	// Logger receives connections, refusals and restarts. Default
	// slog.Default().
	Logger *slog.Logger
	// Handshake, when set, runs on each connection before the slave's
	// first report (controller mode's epoch handshake, docs/failover.md):
	// it reads the slave's hello and answers it on c, and returns the name
	// the slave is known by as a replica (store.AddReplica); an error
	// closes the connection. Default: none (RocketMQ's classic stream).
	Handshake func(c net.Conn) (name string, err error)
	// Secure, when set, prepares each accepted connection before anything
	// else is read or written on it, and returns the connection to use:
	// the broker passes tlsconf.Server.Handshake, which gives a *tls.Conn
	// for a TLS slave, the connection itself for a plain one in permissive
	// mode, and an error (the connection is closed) for a plain one in
	// enforcing mode. It runs on the connection's own goroutine, bounded by
	// ctx (HandshakeTimeout) and the connection's deadline; a *net.TCPConn
	// it returns (or a connection that passes one through, plainTCP)
	// keeps the vectored zero-copy writes, any other connection
	// gets each frame's header and the start of its body copied into one
	// Write (one TLS record for a small frame). Default: none (plain TCP).
	Secure func(ctx context.Context, c net.Conn) (net.Conn, error)
	// Cluster and BrokerName name the master's broker group: a slave whose
	// identity handshake names another cluster or broker name is refused
	// (an ERROR names both sides) and never counts as a replica. Empty: not
	// checked. Default: empty (a broker sets its own).
	Cluster, BrokerName string
	// Verify, when set, makes authentication required on every connection
	// (the broker sets it when access control is on): a slave is taken
	// only when it comes over TLS with a client certificate that verified
	// against the server's client CAs (mutual TLS, MasterOptions.Secure),
	// or when Verify accepts its credentials: the access key and the
	// signature of content (the identity handshake's fields and this
	// connection's nonce) it presented. Verify returns the user's name, or
	// an error to refuse it; remote is the peer's address. It runs on the
	// connection's goroutine. A peer that sends no identity handshake (a
	// RocketMQ slave, an earlier Apogee) is refused unless its certificate
	// verified. Default: nil (no authentication, as RocketMQ's HA port).
	Verify func(remote net.Addr, accessKey string, content, signature []byte) (user string, err error)
}

// HandshakeTimeout bounds MasterOptions.Secure on one connection.
const HandshakeTimeout = 10 * time.Second

// acceptLogs throttles accept failures (one per retry, up to one a
// second, while file descriptors run out).
var acceptLogs = logthrottle.New(time.Minute)

func (o MasterOptions) withDefaults() MasterOptions {
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	o.BatchSize = min(o.BatchSize, MaxFrameBody)
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.HousekeepingInterval <= 0 {
		o.HousekeepingInterval = DefaultHousekeepingInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Master serves its store's commit log to slaves: one connection per slave,
// each streaming from the offset the slave reported. Its methods are safe for
// concurrent use.
type Master struct {
	st   *store.Store
	opts MasterOptions

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[*masterConn]struct{}
	closed bool
	wg     sync.WaitGroup // Serve loops and connection goroutines

	refusals refusalLog
}

// NewMaster returns a Master for st, which must not be a replica.
func NewMaster(st *store.Store, opts MasterOptions) (*Master, error) {
	if st.IsReplica() {
		return nil, errors.New("ha: a replica's store cannot serve slaves")
	}
	return &Master{
		st:    st,
		opts:  opts.withDefaults(),
		lns:   map[net.Listener]struct{}{},
		conns: map[*masterConn]struct{}{},
	}, nil
}

// ErrMasterClosed is returned by Serve after Close.
var ErrMasterClosed = errors.New("ha: master closed")

// Serve accepts slaves on ln until Close (then it returns ErrMasterClosed)
// or until accepting fails for good. It closes ln when it returns.
func (m *Master) Serve(ln net.Listener) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		ln.Close()
		return ErrMasterClosed
	}
	m.lns[ln] = struct{}{}
	m.wg.Add(1)
	m.mu.Unlock()
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.lns, ln)
		m.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if closed {
				return ErrMasterClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				acceptLogs.Warn(m.opts.Logger, ln.Addr().String(), "ha: accept failed (out of file descriptors?); retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("ha: accept: %w", err)
		}
		backoff = 0
		m.start(c)
	}
}

// ServeConn serves one slave's connection accepted elsewhere (a listener
// whose connections go to whichever master side a broker has at the
// moment). After Close it closes c.
func (m *Master) ServeConn(c net.Conn) { m.start(c) }

// start runs a connection's two goroutines, after MasterOptions.Secure
// when there is one.
func (m *Master) start(c net.Conn) {
	mc := &masterConn{m: m, raw: c, c: c, name: c.RemoteAddr().String(), start: make(chan int64, 1), done: make(chan struct{})}
	mc.since = time.Now()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		c.Close()
		return
	}
	m.conns[mc] = struct{}{}
	m.wg.Add(2)
	m.mu.Unlock()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if m.opts.Secure == nil {
		if tc, ok := plainTCP(c); ok {
			mc.c = tc // writes go out with writev; Close stays c's (mc.raw)
		}
		mc.vectored = true
		go mc.readLoop()
		go mc.writeLoop()
		return
	}
	go mc.secure()
}

// plainTCP is the TCP connection under c when c passes its bytes through
// unchanged: c itself, or a wrapper that says so with a TCPConn method
// (remoting.LimitListener's connections, which count against the
// process's connection limit and give their count back on Close).
func plainTCP(c net.Conn) (*net.TCPConn, bool) {
	switch t := c.(type) {
	case *net.TCPConn:
		return t, true
	case interface{ TCPConn() *net.TCPConn }:
		tc := t.TCPConn()
		return tc, tc != nil
	}
	return nil, false
}

// secure runs MasterOptions.Secure, then the connection's two loops (this
// goroutine becomes the writer), or closes the connection when it fails.
func (c *masterConn) secure() {
	ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	c.raw.SetDeadline(time.Now().Add(HandshakeTimeout))
	sc, err := c.m.opts.Secure(ctx, c.raw)
	cancel()
	if err != nil {
		select {
		case <-c.done: // closed meanwhile: nothing to say
		default:
			c.m.opts.Logger.Warn("ha: refusing a slave's connection: its TLS handshake failed", "slave", c.name, "err", err)
		}
		c.close()
		c.m.wg.Done()
		c.m.wg.Done()
		return
	}
	c.raw.SetDeadline(time.Time{})
	c.c = sc // before the loops start: they are the only readers of c.c
	if tc, ok := plainTCP(sc); ok {
		c.c, c.vectored = tc, true
	}
	go c.readLoop()
	c.writeLoop()
}

// Close stops accepting, closes every connection (their slaves stop counting
// as replicas) and waits for the goroutines. It returns nil; a second call
// does nothing.
func (m *Master) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	for ln := range m.lns {
		ln.Close()
	}
	conns := make([]*masterConn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	m.wg.Wait()
	return nil
}

// SlaveInfo describes a connected slave.
type SlaveInfo struct {
	// Addr is the slave's remote address.
	Addr string
	// Since is when it connected.
	Since time.Time
	// Acked is the last offset it reported (-1 before its first report):
	// it holds everything below, as durable as its flush mode makes it.
	Acked int64
	// Sent is the offset the stream has reached (the next byte to send).
	Sent int64
	// BytesSent counts the commit-log bytes sent on this connection.
	BytesSent int64
}

// Slaves describes the connected slaves.
func (m *Master) Slaves() []SlaveInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]SlaveInfo, 0, len(m.conns))
	for c := range m.conns {
		out = append(out, SlaveInfo{Addr: c.name, Since: c.since, Acked: c.acked.Load(), Sent: c.sent.Load(), BytesSent: c.bytes.Load()})
	}
	return out
}

// masterConn is one slave's connection. readLoop reads its reports (the
// first names the offset to stream from; the others acknowledge), writeLoop
// streams. Either one's end closes the connection, which ends the other.
type masterConn struct {
	m     *Master
	raw   net.Conn // as accepted; close closes it
	c     net.Conn // what the loops read and write: raw, or what Secure made of it
	name  string
	peer  string // what its identity handshake named ("" without one); set by readLoop before the first report
	since time.Time
	start chan int64    // the offset to stream from, sent once by readLoop
	done  chan struct{} // closed by close

	closeOnce sync.Once
	repMu     sync.Mutex
	rep       *store.Replica // registered once the first report is accepted; under repMu

	acked atomic.Int64 // the last report
	sent  atomic.Int64 // the stream's position
	bytes atomic.Int64 // bytes of log sent

	hdr  [HeaderSize]byte
	arr  [2][]byte
	bufs net.Buffers // arr, for writev

	vectored bool   // c is a *net.TCPConn: frames go out with writev, uncopied
	scratch  []byte // a frame's header and body start, for any other connection
}

func (c *masterConn) close() {
	c.closeOnce.Do(func() {
		c.raw.Close()
		close(c.done)
		c.repMu.Lock()
		if c.rep != nil {
			c.rep.Remove()
		}
		c.repMu.Unlock()
		c.m.mu.Lock()
		delete(c.m.conns, c)
		c.m.mu.Unlock()
	})
}

// readLoop reads the slave's reports until the connection fails, the slave
// stays silent for HousekeepingInterval, or the first report is refused.
func (c *masterConn) readLoop() {
	defer c.m.wg.Done()
	defer c.close()
	c.acked.Store(-1)
	log := c.m.opts.Logger
	br := bufio.NewReaderSize(c.c, 512)
	var b [ReportSize]byte
	first := true
	// The backlog the slave had at its first report, logged once it has
	// caught up with it (the stream's catch-up rate).
	var backlogFrom, backlogEnd int64
	var began time.Time
	if !c.identify(br) {
		return
	}
	if hs := c.m.opts.Handshake; hs != nil {
		c.c.SetDeadline(time.Now().Add(c.m.opts.HousekeepingInterval))
		name, err := hs(bufConn{c.c, br})
		c.c.SetDeadline(time.Time{})
		if err != nil {
			log.Warn("ha: handshake refused", "slave", c.name, "err", err)
			return
		}
		c.m.mu.Lock() // Slaves reads the name
		c.name = name
		c.m.mu.Unlock()
	}
	for {
		c.c.SetReadDeadline(time.Now().Add(c.m.opts.HousekeepingInterval))
		if _, err := io.ReadFull(br, b[:]); err != nil {
			select {
			case <-c.done:
				return // closed on purpose
			default:
			}
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				log.Warn("ha: slave silent for too long; closing its connection", "slave", c.name, "silentFor", c.m.opts.HousekeepingInterval)
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				log.Info("ha: slave disconnected", "slave", c.name, "acked", c.acked.Load())
			default:
				log.Warn("ha: slave connection failed", "slave", c.name, "err", err)
			}
			return
		}
		// Several reports may be waiting: the newest is what counts.
		for br.Buffered() >= ReportSize {
			br.Read(b[:])
		}
		off := int64(binary.BigEndian.Uint64(b[:]))
		if first {
			first = false
			start, ok := c.begin(off)
			if !ok {
				return
			}
			c.acked.Store(off)
			c.start <- start
			backlogFrom, backlogEnd, began = start, c.m.st.WrittenOffset(), time.Now()
			continue
		}
		// The master never sends a byte beyond its written position, so a
		// slave cannot hold one: an acknowledgement beyond it is a peer
		// faking replication, and must never count.
		if end := c.m.st.WrittenOffset(); off > end || off < 0 {
			log.Error("ha: a slave acknowledged an offset beyond the master's log end, which it cannot hold: "+
				"closing its connection, the acknowledgement not counted (a peer that is not this master's slave? "+
				"turn on access control or mutual TLS to keep strangers off the HA port)",
				"slave", c.name, "acked", off, "masterEnd", end)
			return
		}
		c.acked.Store(off)
		c.repMu.Lock()
		c.rep.Ack(off)
		c.repMu.Unlock()
		if backlogEnd > backlogFrom && off >= backlogEnd {
			took := time.Since(began)
			log.Info("ha: slave caught up with the log it lacked when it connected", "slave", c.name,
				"bytes", backlogEnd-backlogFrom, "took", took.Round(time.Millisecond),
				"MBps", int64(float64(backlogEnd-backlogFrom)/took.Seconds()/1e6))
			backlogEnd = backlogFrom // once
		}
	}
}

// bufConn reads through r, which buffers c's first bytes.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// begin decides where the stream to a slave that reported off starts, and
// registers the slave as a replica. It refuses (false) a slave whose log is
// longer than the master's.
func (c *masterConn) begin(off int64) (int64, bool) {
	st, log := c.m.st, c.m.opts.Logger
	end, min := st.WrittenOffset(), st.LogMinOffset()
	start := off
	switch {
	case off > end || off < 0:
		log.Error("ha: refusing a slave whose commit log ends beyond the master's: the logs diverged "+
			"(an asynchronously flushed master that crashed loses what it had not synced, and its slave may hold it); "+
			"the slave's log must be cut back to the master's end, or the slave rebuilt from an empty data directory",
			"slave", c.name, "slaveOffset", off, "masterEnd", end)
		return 0, false
	case off < min:
		log.Warn("ha: slave's offset is below the master's oldest retained offset (retention removed what it needs next): "+
			"it starts over from the master's oldest segment and sets its own log aside",
			"slave", c.name, "slaveOffset", off, "masterMin", min, "masterEnd", end)
		start = min
	default:
		log.Info("ha: slave connected", "slave", c.name, "peer", c.peer, "from", off, "masterEnd", end)
	}
	rep := st.AddReplica(c.name, off)
	c.repMu.Lock()
	c.rep = rep
	c.repMu.Unlock()
	// close may have run meanwhile, before rep was set.
	select {
	case <-c.done:
		rep.Remove()
		return 0, false
	default:
	}
	return start, true
}

// writeLoop streams the log from the start offset: an empty frame at once
// (it names the offset), then frames of up to BatchSize bytes as the log
// grows, and an empty frame after HeartbeatInterval without one.
func (c *masterConn) writeLoop() {
	defer c.m.wg.Done()
	defer c.close()
	var pos int64
	select {
	case pos = <-c.start:
	case <-c.done:
		return
	}
	st, o := c.m.st, c.m.opts
	c.sent.Store(pos)
	if err := c.send(pos, nil); err != nil {
		c.writeFailed(err)
		return
	}
	last := time.Now()
	hb := time.NewTicker(max(o.HeartbeatInterval/4, time.Millisecond))
	defer hb.Stop()
	for {
		v, err := st.ReadLog(pos, o.BatchSize)
		if err != nil {
			switch {
			case errors.Is(err, store.ErrClosed):
				o.Logger.Info("ha: the store closed; closing a slave's connection", "slave", c.name)
			case errors.Is(err, store.ErrOffsetDeleted):
				o.Logger.Warn("ha: retention removed commit-log bytes before they were sent; closing the connection: "+
					"the slave starts over when it reconnects", "slave", c.name, "offset", pos, "masterMin", st.LogMinOffset())
			default:
				o.Logger.Error("ha: reading the commit log for a slave failed; closing its connection", "slave", c.name, "offset", pos, "err", err)
			}
			return
		}
		b := v.Bytes()
		if len(b) == 0 {
			if time.Since(last) >= o.HeartbeatInterval {
				if err := c.send(pos, nil); err != nil {
					c.writeFailed(err)
					return
				}
				last = time.Now()
			}
			select {
			case <-st.LogWritten(pos):
				settle(st)
			case <-hb.C:
			case <-c.done:
				return
			}
			continue
		}
		err = c.send(pos, b)
		v.Release()
		if err != nil {
			c.writeFailed(err)
			return
		}
		pos += int64(len(b))
		c.sent.Store(pos)
		c.bytes.Add(int64(len(b)))
		last = time.Now()
	}
}

// send writes one frame. On a TCP connection its header and body go in one
// writev, the body straight from the commit log's mapping. On any other
// connection (TLS) the header and up to coalesceSize bytes of the body are
// copied into one buffer and written together, the rest of the body with a
// second Write: a small frame is then one TLS record and one system call
// rather than two, and a large one pays one copy of at most coalesceSize
// bytes on top of the encryption's own.
func (c *masterConn) send(off int64, body []byte) error {
	putHeader(&c.hdr, off, len(body))
	if !c.vectored {
		return c.sendCopied(body)
	}
	c.arr[0], c.arr[1] = c.hdr[:], body
	c.bufs = c.arr[:]
	if len(body) == 0 {
		c.bufs = c.arr[:1]
	}
	_, err := c.bufs.WriteTo(c.c)
	c.arr[1] = nil
	return err
}

// coalesceSize is how much of a frame's body sendCopied copies next to its
// header: a TLS record's payload (16 KiB) less the header.
const coalesceSize = 16<<10 - HeaderSize

func (c *masterConn) sendCopied(body []byte) error {
	if c.scratch == nil {
		c.scratch = make([]byte, 0, HeaderSize+coalesceSize)
	}
	head := min(len(body), coalesceSize)
	c.scratch = append(append(c.scratch[:0], c.hdr[:]...), body[:head]...)
	if _, err := c.c.Write(c.scratch); err != nil {
		return err
	}
	if head == len(body) {
		return nil
	}
	_, err := c.c.Write(body[head:])
	return err
}

func (c *masterConn) writeFailed(err error) {
	select {
	case <-c.done:
		return // closed on purpose, or by readLoop, which said why
	default:
	}
	c.m.opts.Logger.Info("ha: writing to a slave failed; closing its connection", "slave", c.name, "err", err)
}

// settleYields bounds settle.
const settleYields = 8

// settle lets the writers that are appending right now finish before a
// woken sender reads its batch: it yields while the written position keeps
// moving, a few times at most, never sleeping. With sync replication the
// producers an acknowledgement released append together; without this the
// sender would wake at the first append and send it alone, and the rest
// would wait a whole round trip (the commit log's flusher settles the same
// way before a sync).
func settle(st *store.Store) {
	w := st.WrittenOffset()
	still := 0
	for i := 0; i < settleYields && still < 2; i++ {
		runtime.Gosched()
		next := st.WrittenOffset()
		if next == w {
			still++
		} else {
			still = 0
		}
		w = next
	}
}
