package grpcfe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/internal/logthrottle"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/rmqpb"
)

// Defaults of Options.
const (
	// DefaultMaxHeldReceives bounds the receives and pulls held at once
	// waiting for messages; beyond, a receive is answered TOO_MANY_REQUESTS.
	DefaultMaxHeldReceives = 4096
	// DefaultLongPollingTimeout is the long polling a push consumer is told
	// to ask for in its settings.
	DefaultLongPollingTimeout = 20 * time.Second
	// MsgSizeHeadroom is what the default message size caps add to the
	// broker's maximum message size (core Options.MaxMessageSize, 4 MiB by
	// default): protobuf's framing of a request or answer (field tags and
	// lengths, system properties, the other fields of a batch's messages).
	// A batch's bodies and properties together must fit the maximum
	// message size, as a remoting batch's body must.
	MsgSizeHeadroom = 256 << 10
	// DefaultMaxHeldPerClient bounds the receives and pulls one client
	// holds at once, on one connection and over all its connections (by
	// its x-mq-client-id): a sixteenth of DefaultMaxHeldReceives, as
	// remoting's per-connection bound is of its broker-wide one. Beyond,
	// TOO_MANY_REQUESTS; other clients keep the rest.
	DefaultMaxHeldPerClient = DefaultMaxHeldReceives / 16
	// DefaultRequestTimeout bounds the time from a call's headers to the
	// end of its request message, with Options.Budget (admit.go): a call
	// whose request has not arrived by then is ended.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultMaxConcurrentStreams bounds the calls in progress on one
	// client connection.
	DefaultMaxConcurrentStreams = 1024
)

// Route is one broker of a topic's route: its name, its gRPC address(es),
// and the topic's queues on it.
type Route struct {
	BrokerName string
	// Addr is the broker's gRPC endpoint, host:port.
	Addr string
	// Addrs, when set, are the gRPC endpoints of every member of the
	// broker's group (each forwards to the group's master, forward.go),
	// which clients are given after Addr (route.go's endpoints).
	Addrs        []string
	ReadQueues   int32
	WriteQueues  int32
	Perm         int32 // protocol.Perm* bits
	MessageTypes []rmqpb.MessageType
}

// Options configure a Server. The zero value of every field means its
// default.
type Options struct {
	// Addr is the host:port clients are told to reach this broker's gRPC
	// service at (routes, assignments). Required.
	Addr string
	// Routes, when set, gives the brokers of a topic in a cluster (every
	// broker's gRPC address); nil serves this broker alone, from the core's
	// topic table. This broker's entry comes from the core either way.
	Routes func(topic string) []Route
	// ServerOptions are appended to the server's own (message sizes,
	// keepalive, stream limits): the hook for other transport credentials
	// (grpc.Creds) and interceptors (grpc.ChainUnaryInterceptor and
	// grpc.ChainStreamInterceptor: metrics, say). Interceptors given here
	// run before every method, after Guard's.
	ServerOptions []grpc.ServerOption
	// TLS is the certificate configuration of TLS connections (see
	// transport.go: TLS and plaintext are both accepted on the port);
	// nil: a self-signed certificate made at New.
	TLS *tls.Config
	// MaxHeldReceives, MaxHeldPerClient, LongPollingTimeout,
	// MaxConcurrentStreams, RequestTimeout: see their Default constants.
	MaxHeldReceives      int
	MaxHeldPerClient     int
	LongPollingTimeout   time.Duration
	MaxConcurrentStreams uint32
	RequestTimeout       time.Duration
	// MaxRecvMsgSize and MaxSendMsgSize cap one request and one answer
	// message (grpc-go refuses larger ones with ResourceExhausted; a
	// request from its length prefix, before reading it). Default: the
	// core's MaxMessageSize plus MsgSizeHeadroom (MaxSendMsgSize: the
	// receive cap).
	MaxRecvMsgSize int
	MaxSendMsgSize int
	// Budget, when set, is the process's receive budget (remoting's shared
	// one, passed by the node): each call reserves MaxRecvMsgSize in it
	// from its headers until its request has been read, and is refused
	// with ResourceExhausted when there is no room (admit.go). Nil: calls
	// reserve nothing.
	Budget Budget
	// Logger defaults to the core's.
	Logger *slog.Logger
	// Guard, when set, authenticates every call (RocketMQ 5's
	// authorization header) and authorizes it as RocketMQ 5's proxy does
	// (security.go). Nil (the default): every call is served.
	Guard *acl.Guard
	// Master, when set, names the group's current master: its gRPC
	// address, and whether it is this member. A member that is not the
	// master forwards to it what the master serves (forward.go); nil, or
	// no address: every call is served by this member's core. Called on
	// every call that may be forwarded: it must be cheap (an atomic load).
	Master func() (addr string, self bool)
	// Members, when set, returns the gRPC endpoints of every member of this
	// broker's group (this one's Addr among them or not): the endpoints
	// routes give for this broker (route.go). Nil: Addr alone.
	Members func() []string
	// ForwardTLS, when set, is the TLS configuration of the connection to
	// the master (its port's certificate must be trusted; ALPN h2 is
	// added). Nil: plaintext, which the port accepts unless its TLSServer
	// is Enforcing.
	ForwardTLS *tls.Config
	// MaxForwarded, ForwardTimeout, ForwardDialTimeout, ForwardRetryWait:
	// see their Default constants (ForwardRetryWait negative: a call whose
	// master is out of reach does not wait for the next).
	MaxForwarded       int
	ForwardTimeout     time.Duration
	ForwardDialTimeout time.Duration
	ForwardRetryWait   time.Duration
	// TLSServer, when set and not in tlsconf.Disabled mode, is the port's
	// transport: its mode (Enforcing: TLS only; Permissive: TLS and
	// plaintext by the first byte) and its certificate files, reloaded as
	// they change; its Config must offer ALPN "h2". It replaces TLS and
	// the self-signed certificate. Nil (the default) or Disabled: TLS and
	// plaintext as transport.go says.
	TLSServer *tlsconf.Server
	// Renewal of auto_renew receives (renew.go), RocketMQ's proxy's
	// settings: AutoRenewInvisible (defaultInvisibleTimeMills: a
	// delivery's first invisible time), RenewAhead (renewAheadTimeMillis),
	// RenewPeriod (renewSchedulePeriodMillis), RenewMax
	// (renewMaxTimeMillis), RenewClearInvisible
	// (invisibleTimeMillisWhenClear); and Apogee's RenewOfflineGrace (how
	// long a client's telemetry stream may be gone before its handles are
	// released) and MaxRenewPerClient (handles one client may hold). Zero:
	// the Default constants.
	AutoRenewInvisible, RenewAhead, RenewPeriod, RenewMax time.Duration
	RenewClearInvisible, RenewOfflineGrace                time.Duration
	MaxRenewPerClient                                     int
}

// Server is the gRPC front end: the MessagingService of RocketMQ 5 on a
// broker's core. Its methods are safe for concurrent use.
type Server struct {
	rmqpb.UnimplementedMessagingServiceServer

	core Core
	opts Options
	log  *slog.Logger
	srv  *grpc.Server

	brokerName string
	self       netip.AddrPort // Addr, when it is an IP address
	selfHost   string
	selfPort   int32

	clients clientTable
	polls   *longpoll.Holder[*heldCall] // held receives and pulls (longpoll.go)
	renew   *renewer                    // auto_renew deliveries (renew.go)
	// fwd is the connection to the master; forwarding counts the calls
	// forwarded now.
	fwd        forwarder
	forwarding atomic.Int64
	// inited holds "group\x00topic" once initGroup ran for it.
	inited sync.Map

	closing  atomic.Bool
	shutdown chan struct{}
	stopOnce sync.Once

	stats struct {
		sends, sendErrors, receives, received, acks, pulls atomic.Int64
		forwarded, forwardFailures, forwardRetries         atomic.Int64
		// Admission (admit.go): streams the tap saw, refused for their
		// authentication and for the budget, ended for a late request,
		// and calls grpc-go ended for a message beyond the size caps.
		streams, authRefused, budgetRefused, requestTimeouts, sizeRefused atomic.Int64
		// Long polls refused: the broker's bound, a connection's, a
		// client's.
		heldFull, heldConnFull, heldClientFull atomic.Int64
	}
	// sweeper: the admissions whose request is being received (admit.go).
	sweeper admitSweeper
	// throttle: one log line per cause of refusal per interval (admit.go's
	// warn).
	throttle *logthrottle.Throttle
}

// New returns a Server for c. It registers its arrival listener with the
// core (long polling); Serve serves it on a listener.
func New(c Core, opts Options) (*Server, error) {
	if opts.Addr == "" {
		return nil, errors.New("grpcfe: Options.Addr is required")
	}
	host, port, err := net.SplitHostPort(opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("grpcfe: Options.Addr %q: %w", opts.Addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("grpcfe: Options.Addr %q: bad port: %w", opts.Addr, err)
	}
	if opts.MaxHeldReceives <= 0 {
		opts.MaxHeldReceives = DefaultMaxHeldReceives
	}
	if opts.LongPollingTimeout <= 0 {
		opts.LongPollingTimeout = DefaultLongPollingTimeout
	}
	if opts.MaxRecvMsgSize <= 0 {
		opts.MaxRecvMsgSize = c.Options().MaxMessageSize + MsgSizeHeadroom
	}
	if opts.MaxSendMsgSize <= 0 {
		opts.MaxSendMsgSize = opts.MaxRecvMsgSize
	}
	if opts.MaxHeldPerClient <= 0 {
		opts.MaxHeldPerClient = DefaultMaxHeldPerClient
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MaxConcurrentStreams == 0 {
		opts.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if opts.MaxForwarded <= 0 {
		opts.MaxForwarded = DefaultMaxForwarded
	}
	if opts.ForwardTimeout <= 0 {
		opts.ForwardTimeout = DefaultForwardTimeout
	}
	if opts.ForwardDialTimeout <= 0 {
		opts.ForwardDialTimeout = DefaultForwardDialTimeout
	}
	if opts.ForwardRetryWait == 0 {
		opts.ForwardRetryWait = DefaultForwardRetryWait
	}
	opts.setRenewDefaults()
	if opts.Logger == nil {
		opts.Logger = c.Options().Logger
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{core: c, opts: opts, log: opts.Logger, brokerName: c.Options().BrokerName,
		selfHost: host, selfPort: int32(p), shutdown: make(chan struct{})}
	if ap, err := netip.ParseAddrPort(opts.Addr); err == nil {
		s.self = ap
	}
	s.clients.init()
	s.polls = newHolder(s)
	s.renew = newRenewer(s)
	s.sweeper.wake = make(chan struct{}, 1)
	s.throttle = logthrottle.New(throttleEvery)

	var creds credentials.TransportCredentials
	if opts.TLSServer != nil && opts.TLSServer.Mode() != tlsconf.Disabled {
		creds = transportCreds{srv: opts.TLSServer}
	} else if creds, err = newPermissive(opts.TLS, []string{host}); err != nil {
		return nil, err
	}
	so := append([]grpc.ServerOption{grpc.Creds(creds),
		grpc.ForceServerCodecV2(msgCodec{s: s})}, serverOptions(opts)...)
	if opts.Guard != nil || opts.Budget != nil {
		so = append(so, grpc.InTapHandle(s.tap))
	}
	if opts.Guard != nil {
		so = append(so, grpc.ChainUnaryInterceptor(s.unaryEntry), grpc.ChainStreamInterceptor(s.streamEntry))
	}
	so = append(so, opts.ServerOptions...)
	s.srv = grpc.NewServer(so...)
	s.srv.RegisterService(s.sizedService(), s)
	if opts.Budget != nil {
		go s.sweeper.run(s.shutdown)
	}
	go s.renew.run(s.shutdown)
	return s, nil
}

// serverOptions are the server's options besides its credentials and
// Options.ServerOptions.
func serverOptions(opts Options) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(opts.MaxSendMsgSize),
		grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams),
		// Calls run on a pool of goroutines (grpc-go starts more when all
		// are busy, as with held receives) rather than one new goroutine
		// per call, whose stack grows anew every time.
		grpc.NumStreamWorkers(uint32(max(runtime.GOMAXPROCS(0), 4))),
		// Fixed windows (they turn grpc-go's bandwidth-delay estimation
		// off): a connection's large enough that a connection full of small
		// sends does not stop for window updates; a stream's small, as it
		// bounds what a client may send on a stream beyond the message the
		// server reads (data after a receive's request, before a request
		// is read), which no budget counts: 64 KiB a stream. A large
		// request is not slowed: grpc-go grants a message's whole length
		// once its prefix is read (admit.go's reservation covers it).
		// apogee-bench produce --protocol grpc, 1 KiB and 1 MiB: no
		// difference from 1 MiB windows within the VM's noise.
		grpc.InitialWindowSize(64 << 10),
		// Message buffers from tiers of every power of two, cleared only
		// as far as they are used (bufpool.go).
		experimental.BufferPool(bufPool),
		grpc.InitialConnWindowSize(16 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second}),
	}
}

// Serve accepts connections on l until Shutdown; it returns nil after a
// Shutdown, the listener's error otherwise.
func (s *Server) Serve(l net.Listener) error {
	err := s.srv.Serve(l)
	if errors.Is(err, grpc.ErrServerStopped) || s.closing.Load() {
		return nil
	}
	return err
}

// GRPCServer returns the underlying server, for registering further
// services (health, reflection) before Serve.
func (s *Server) GRPCServer() *grpc.Server { return s.srv }

// Shutdown stops accepting calls, answers the held receives and pulls
// (with what they have: nothing), ends the telemetry streams and waits for
// the calls in progress until ctx is done, then closes every connection
// (the connection to the master last). The core is not shut down: its
// owner does that after.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.closing.Store(true)
		close(s.shutdown)
		s.polls.Stop() // the held calls answer (with nothing)
	})
	done := make(chan struct{})
	go func() {
		s.srv.GracefulStop()
		close(done)
	}()
	defer s.fwd.close()
	// Every stream has ended by then: give back what the sweeper, stopped,
	// did not.
	defer s.sweeper.releaseAll()
	select {
	case <-done:
	case <-ctx.Done():
		s.srv.Stop()
		<-done
		<-s.renew.done
		return ctx.Err()
	}
	<-s.renew.done // the renewed handles are released (the core is still up)
	return nil
}

// RuntimeInfo returns the front end's counters, for the broker's runtime
// info (keys prefixed grpc).
func (s *Server) RuntimeInfo() map[string]string {
	hs := s.polls.Stats()
	return map[string]string{
		"grpcClients":      strconv.Itoa(s.clients.count()),
		"grpcSends":        strconv.FormatInt(s.stats.sends.Load(), 10),
		"grpcSendErrors":   strconv.FormatInt(s.stats.sendErrors.Load(), 10),
		"grpcReceives":     strconv.FormatInt(s.stats.receives.Load(), 10),
		"grpcReceivedMsgs": strconv.FormatInt(s.stats.received.Load(), 10),
		"grpcAcks":         strconv.FormatInt(s.stats.acks.Load(), 10),
		"grpcPulls":        strconv.FormatInt(s.stats.pulls.Load(), 10),
		"grpcHeldReceives": strconv.Itoa(hs.Held),
		"grpcHeldTotal":    strconv.FormatInt(hs.Parked, 10),
		"grpcHeldWoken":    strconv.FormatInt(hs.Woken, 10),
		"grpcHeldRevived":  strconv.FormatInt(hs.Revived, 10),
		"grpcHeldExpired":  strconv.FormatInt(hs.Expired, 10),
		"grpcHeldRefused":  strconv.FormatInt(hs.Refused, 10),
		// Calls forwarded to the master: now, in all, and those that
		// could not reach it.
		"grpcForwarding":      strconv.FormatInt(s.forwarding.Load(), 10),
		"grpcForwarded":       strconv.FormatInt(s.stats.forwarded.Load(), 10),
		"grpcForwardFailures": strconv.FormatInt(s.stats.forwardFailures.Load(), 10),
		// Forwarded calls sent again to a new master after the old one
		// went out of reach.
		"grpcForwardRetries": strconv.FormatInt(s.stats.forwardRetries.Load(), 10),
		// Admission and limits (admit.go, longpoll.go).
		"grpcStreams":           strconv.FormatInt(s.stats.streams.Load(), 10),
		"grpcAuthRefused":       strconv.FormatInt(s.stats.authRefused.Load(), 10),
		"grpcBudgetRefused":     strconv.FormatInt(s.stats.budgetRefused.Load(), 10),
		"grpcRequestTimeouts":   strconv.FormatInt(s.stats.requestTimeouts.Load(), 10),
		"grpcSizeRefused":       strconv.FormatInt(s.stats.sizeRefused.Load(), 10),
		"grpcHeldRefusedBroker": strconv.FormatInt(s.stats.heldFull.Load(), 10),
		"grpcHeldRefusedConn":   strconv.FormatInt(s.stats.heldConnFull.Load(), 10),
		"grpcHeldRefusedClient": strconv.FormatInt(s.stats.heldClientFull.Load(), 10),
		"grpcMaxRecvMsgSize":    strconv.Itoa(s.opts.MaxRecvMsgSize),
		"grpcMaxHeldPerClient":  strconv.Itoa(s.opts.MaxHeldPerClient),
		"grpcRenewing":          strconv.Itoa(s.renew.count()),
		"grpcRenewals":          strconv.FormatInt(s.renew.renewals.Load(), 10),
		"grpcRenewFailures":     strconv.FormatInt(s.renew.failures.Load(), 10),
		"grpcRenewReleased":     strconv.FormatInt(s.renew.released.Load(), 10),
		"grpcRenewRefused":      strconv.FormatInt(s.renew.refused.Load(), 10),
		"grpcMaxRenewPerClient": strconv.Itoa(s.opts.MaxRenewPerClient),
	}
}

// Stats are the front end's counters, for the metrics (broker/metrics's
// GRPCStats, which the broker binary fills from them).
type Stats struct {
	// Streams the tap admitted or refused (every call with Guard or
	// Budget set), and its refusals: authentication, receive budget.
	Streams, AuthRefused, BudgetRefused int64
	// RequestTimeouts: calls ended because their request did not arrive
	// within RequestTimeout. SizeRefused: calls grpc-go ended for a
	// message beyond MaxRecvMsgSize or MaxSendMsgSize.
	RequestTimeouts, SizeRefused int64
	// Held: receives and pulls waiting now; HeldTotal: parked in all;
	// HeldRefused*: refused by the broker's, a connection's and a client's
	// bound.
	Held                                                  int
	HeldTotal                                             int64
	HeldRefusedBroker, HeldRefusedConn, HeldRefusedClient int64
	// Clients registered now; sends and receives in all.
	Clients         int
	Sends, Receives int64
	// Renewing: auto_renew deliveries being renewed now (renew.go);
	// Renewals done, RenewFailures, RenewReleased (their client gone),
	// RenewRefused (receives refused by MaxRenewPerClient).
	Renewing                                             int
	Renewals, RenewFailures, RenewReleased, RenewRefused int64
}

// Stats returns the front end's counters.
func (s *Server) Stats() Stats {
	hs := s.polls.Stats()
	return Stats{
		Streams: s.stats.streams.Load(), AuthRefused: s.stats.authRefused.Load(), BudgetRefused: s.stats.budgetRefused.Load(),
		RequestTimeouts: s.stats.requestTimeouts.Load(), SizeRefused: s.stats.sizeRefused.Load(),
		Held: hs.Held, HeldTotal: hs.Parked,
		HeldRefusedBroker: s.stats.heldFull.Load(), HeldRefusedConn: s.stats.heldConnFull.Load(), HeldRefusedClient: s.stats.heldClientFull.Load(),
		Clients: s.clients.count(), Sends: s.stats.sends.Load(), Receives: s.stats.receives.Load(),
		Renewing: s.renew.count(), Renewals: s.renew.renewals.Load(), RenewFailures: s.renew.failures.Load(),
		RenewReleased: s.renew.released.Load(), RenewRefused: s.renew.refused.Load(),
	}
}
