package remoting

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// Defaults of Options and ClientOptions.
const (
	// DefaultIdleTimeout is how long a connection may receive nothing before it is
	// closed: the official Go client's read deadline.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultWriteTimeout bounds one vectored write of queued frames.
	DefaultWriteTimeout = 60 * time.Second
	// DefaultMaxInFlight is the number of deferred (parked) requests a connection may
	// hold before its read goroutine stops reading from the socket.
	DefaultMaxInFlight = 4096
	// DefaultMaxPendingBytes is the number of response bytes a connection may have
	// queued but not yet written before its read goroutine stops reading.
	DefaultMaxPendingBytes = 64 << 20
	// DefaultReadBufferSize is the initial size of a connection's read buffer. It
	// doubles (up to maxReadBuffer) while reads keep filling it, and grows to hold a
	// frame larger than itself as that frame's bytes arrive.
	DefaultReadBufferSize = 4 << 10
	// DefaultDialTimeout bounds Dial when its context has no earlier deadline (the
	// official Go client's dial timeout).
	DefaultDialTimeout = 15 * time.Second
	// DefaultFrameTimeout is how long a frame may take to arrive from its first byte.
	// RocketMQ clients give up on a request after 3 s (sendMsgTimeout): a frame still
	// arriving after 30 s is of use to nobody, and ten times the client's patience
	// leaves room for a 16 MiB frame over a slow link (560 KiB/s).
	DefaultFrameTimeout = 30 * time.Second
	// DefaultMinReceiveRate is the slow-sender rule's rate, in bytes per second, as
	// Apache's mod_reqtimeout MinRate: after the grace period every 64 KiB received
	// buys the frame one more second. A peer trickling a byte now and then is closed
	// soon after the grace; any working link is far faster.
	DefaultMinReceiveRate = 64 << 10
	// DefaultSlowSenderGrace is how long a frame may arrive at any rate before the
	// minimum rate applies (room for TCP's slow start and a retransmission or two).
	DefaultSlowSenderGrace = 5 * time.Second

	maxReadBuffer  = 64 << 10        // the own read buffer's growth stops here; larger frames use a big buffer
	keepWriteBatch = 4 << 20         // a write batch buffer larger than this is dropped once written
	idleWriteBatch = 256 << 10       // and one larger than this once the writer has idled idleTrimAfter
	idleTrimAfter  = 1 * time.Second // (so that an idle connection holds no large buffer)
	kickBytes      = 64 << 10        // the read goroutine wakes the writer mid-read once this much is queued
)

// Options are the limits of a connection, for servers and clients alike. The zero
// value (or a nil *Options) gives every default.
type Options struct {
	// MaxFrameSize is the largest frame accepted or sent, counted as the frame's length
	// field (everything after it). A peer that announces a larger frame is
	// disconnected; Invoke and Reply refuse to queue a larger one. Default
	// protocol.DefaultMaxFrameSize (16 MiB, the Java broker's limit).
	MaxFrameSize int

	// IdleTimeout closes a connection that has received no bytes for this long.
	// Default DefaultIdleTimeout (120 s); negative disables it.
	IdleTimeout time.Duration

	// WriteTimeout bounds each vectored write; a peer that does not read for this long
	// is disconnected. Default DefaultWriteTimeout (60 s); negative disables it.
	WriteTimeout time.Duration

	// MaxInFlight caps the deferred requests (see Conn.Defer) a connection holds; while
	// at the cap its read goroutine stops reading, which pushes back on the peer
	// through TCP. Default DefaultMaxInFlight (4096).
	MaxInFlight int

	// MaxPendingBytes caps the bytes of responses queued on a connection but not yet
	// written (zero-copy bodies included). While over it the read goroutine stops
	// reading. It is checked before each request is handled, so one request's
	// response may overshoot it. Requests this side sends do not count: they cannot
	// deadlock two peers that both stop reading. Default DefaultMaxPendingBytes (64 MiB).
	MaxPendingBytes int

	// ReadBufferSize is the initial size of a connection's own read buffer. It
	// doubles while reads fill it, up to 64 KiB (or stays at ReadBufferSize if that
	// is larger). The own buffer is not charged to the ReceiveBudget. Default
	// DefaultReadBufferSize (4 KiB).
	ReadBufferSize int

	// ReceiveBudget caps the memory held for frames larger than a connection's own
	// read buffer while they arrive (see ReceiveBudget). Nil: the connections of a
	// Server charge SharedReceiveBudget() (DefaultReceiveBudget, 128 MiB, for the
	// whole process); a Client's connection charges nothing (it trusts the server it
	// dialled).
	ReceiveBudget *ReceiveBudget

	// FrameTimeout closes a connection (ErrFrameTimeout) when a frame is still
	// incomplete this long after its first byte arrived, time spent waiting for the
	// ReceiveBudget included (time this side stopped reading for MaxInFlight or
	// MaxPendingBytes is not). It also bounds that wait. Default DefaultFrameTimeout
	// (30 s); negative disables it.
	FrameTimeout time.Duration

	// MinReceiveRate, in bytes per second, is the slow-sender rule: a frame whose
	// first byte arrived t ago, with R bytes of it received, is closed
	// (ErrSlowSender) once t > SlowSenderGrace + R/MinReceiveRate. The time this side
	// did not read (waiting for the budget, MaxInFlight or MaxPendingBytes) does not
	// count. Default DefaultMinReceiveRate (64 KiB/s); negative disables it.
	MinReceiveRate int64

	// SlowSenderGrace is how long a frame may arrive at any rate before
	// MinReceiveRate applies. Default DefaultSlowSenderGrace (5 s).
	SlowSenderGrace time.Duration

	// Logger receives one line per closed connection (Debug for ordinary closes, Warn
	// for a malformed frame), handler and callback panics (Error), and accept errors.
	// Default slog.Default().
	Logger *slog.Logger

	// ConnLimit bounds a Server's connections, in all and per source address
	// (see ConnLimit). Nil: SharedConnLimit(), one per process
	// (DefaultMaxConns, DefaultMaxConnsPerSource). Clients ignore it.
	ConnLimit *ConnLimit

	// ResponseBudget bounds the answers a Server's connections hold queued for
	// peers that do not read them (see ResponseBudget). Nil:
	// SharedResponseBudget(), one per process (DefaultResponseBudget, 512 MiB).
	// Clients ignore it.
	ResponseBudget *ResponseBudget

	// Handshake, when set, prepares each connection a Server accepts before it
	// is served: it runs on a goroutine of its own (the accept loop goes on),
	// bounded by HandshakeTimeout through ctx and the connection's deadline, and
	// returns the connection to serve (a TLS connection, or nc itself for a
	// plain one) or an error, which closes nc. internal/tlsconf's Server.Handshake
	// implements TLS with RocketMQ's disabled, permissive and enforcing modes.
	// Nil: connections are served as accepted. Clients ignore it.
	Handshake func(ctx context.Context, nc net.Conn) (net.Conn, error)

	// HandshakeTimeout bounds Handshake. Default DefaultHandshakeTimeout (10 s).
	HandshakeTimeout time.Duration
}

// DefaultHandshakeTimeout bounds Options.Handshake.
const DefaultHandshakeTimeout = 10 * time.Second

// Signer signs a request before it is sent (package auth's Signer: RocketMQ's
// AccessKey and Signature fields).
type Signer interface {
	Sign(req *protocol.Command)
}

// config is Options with every default filled in.
type config struct {
	maxFrame     int
	idleTimeout  time.Duration // 0: disabled
	writeTimeout time.Duration // 0: disabled
	maxInFlight  int32
	maxPending   int64
	readBuf      int
	log          *slog.Logger
	budget       *ReceiveBudget // nil: none (NewServer sets the shared one)
	frameTimeout time.Duration  // 0: disabled
	minRate      int64          // 0: disabled
	slowGrace    time.Duration
	connLimit    *ConnLimit      // nil: none (NewServer sets the shared one)
	respBudget   *ResponseBudget // nil: none (NewServer sets the shared one)
	handshake    func(context.Context, net.Conn) (net.Conn, error)
	hsTimeout    time.Duration
	signer       Signer // a client's
}

func (o *Options) config() config {
	var opt Options
	if o != nil {
		opt = *o
	}
	c := config{
		maxFrame:     opt.MaxFrameSize,
		idleTimeout:  opt.IdleTimeout,
		writeTimeout: opt.WriteTimeout,
		maxInFlight:  int32(min(opt.MaxInFlight, 1<<30)),
		maxPending:   int64(opt.MaxPendingBytes),
		readBuf:      opt.ReadBufferSize,
		log:          opt.Logger,
		budget:       opt.ReceiveBudget,
		frameTimeout: opt.FrameTimeout,
		minRate:      opt.MinReceiveRate,
		slowGrace:    opt.SlowSenderGrace,
		connLimit:    opt.ConnLimit,
		respBudget:   opt.ResponseBudget,
		handshake:    opt.Handshake,
		hsTimeout:    opt.HandshakeTimeout,
	}
	if c.hsTimeout <= 0 {
		c.hsTimeout = DefaultHandshakeTimeout
	}
	if c.maxFrame <= 0 {
		c.maxFrame = protocol.DefaultMaxFrameSize
	}
	switch {
	case c.idleTimeout == 0:
		c.idleTimeout = DefaultIdleTimeout
	case c.idleTimeout < 0:
		c.idleTimeout = 0
	}
	switch {
	case c.writeTimeout == 0:
		c.writeTimeout = DefaultWriteTimeout
	case c.writeTimeout < 0:
		c.writeTimeout = 0
	}
	if c.maxInFlight <= 0 {
		c.maxInFlight = DefaultMaxInFlight
	}
	if c.maxPending <= 0 {
		c.maxPending = DefaultMaxPendingBytes
	}
	if c.readBuf < 64 {
		c.readBuf = DefaultReadBufferSize
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	switch {
	case c.frameTimeout == 0:
		c.frameTimeout = DefaultFrameTimeout
	case c.frameTimeout < 0:
		c.frameTimeout = 0
	}
	switch {
	case c.minRate == 0:
		c.minRate = DefaultMinReceiveRate
	case c.minRate < 0:
		c.minRate = 0
	}
	if c.slowGrace <= 0 {
		c.slowGrace = DefaultSlowSenderGrace
	}
	return c
}

// ClientOptions configure Dial and Pool.
type ClientOptions struct {
	Options

	// Handler serves the requests the server pushes on the connection (for example
	// NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE). It is called on the
	// connection's read goroutine, like a server handler. Nil answers every pushed
	// request with REQUEST_CODE_NOT_SUPPORTED (and oneway ones with nothing).
	Handler Handler

	// DialTimeout bounds the TCP connect (and the TLS handshake). Default
	// DefaultDialTimeout (15 s).
	DialTimeout time.Duration

	// TLS, when set, makes every connection a TLS client connection with this
	// configuration (its ServerName defaults to the dialled host). Nil: plain
	// TCP.
	TLS *tls.Config

	// Signer, when set, signs every request the connection sends (Invoke,
	// InvokeInto, InvokeAsync, InvokeOneway) just before it is encoded: the
	// request's extension fields are changed by it. Nil: requests go unsigned.
	Signer Signer
}
