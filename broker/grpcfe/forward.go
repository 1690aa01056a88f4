package grpcfe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/apogeemq/apogee/rmqpb"
)

// Forwarding: every member of a broker group serves the gRPC front end in
// every role, and a member that is not its group's master forwards to the
// master what the master serves, as RocketMQ 5's proxy in cluster mode
// sends every request of a broker name to that name's master. RocketMQ 5's
// SDKs keep a route for 30 s and do not refresh it after a failed call,
// so a route must name endpoints that stay valid across a failover: every
// member is one (route.go's endpoints).
//
// Who serves what, on a member whose Options.Master names another member:
//
//   - Forwarded to the master, the call and its answer unchanged: every
//     method that writes or reads the group's state (SendMessage,
//     EndTransaction, RecallMessage, ReceiveMessage, AckMessage,
//     ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue,
//     SyncLiteSubscription (lite.go: the lite state is the master's),
//     PullMessage, UpdateOffset, GetOffset, QueryOffset) and the client's
//     session (Telemetry, relayed both ways while it is open; Heartbeat;
//     NotifyClientTermination), so the master's core knows the client and
//     sends it transaction checks. Reads go to the master too, as
//     RocketMQ's proxy does: a slave's queues and offsets lag.
//   - Served here: QueryRoute and QueryAssignment (from this member's
//     topic table; a topic this member does not know yet is asked of the
//     master).
//
// A forwarded stream (a receive or pull held on the master, a telemetry
// relay) ends when this server shuts down, as the calls it holds do.
//
// Without a master (Options.Master nil, or naming none, or this member)
// every call is served here: a slave's core then refuses what only a
// master does with its own answer, and serves reads from its replica.
//
// A forwarded call carries the caller's metadata (client id, language,
// version, namespace, the authorization header and its date: the master
// authenticates and authorizes the original client again) and its
// deadline (a unary call without one gets ForwardTimeout), plus the
// x-apogee-forwarded header: a member never forwards a call that has it
// (two members that each think the other master would otherwise bounce
// a call until its deadline); it serves it with its own core instead.
// A master out of reach (gRPC Unavailable: no connection, or it broke) is
// a failover under way: the call waits, up to ForwardRetryWait and within
// its deadline less 200 ms, for Options.Master to name another master
// (MasterChanged wakes it; the hook is also asked every 25 ms), then goes
// there, or is served here when this member is the master now. A receive
// is sent again only if no frame came. A master still out of reach then,
// or a call that failed otherwise on the way, is answered PROXY_TIMEOUT in
// the method's status, as RocketMQ's proxy answers a broker it timed out
// on: every SDK retries it. A gRPC error the master answered with passes
// through. A unary call sent again may have been served by the old
// master before it went (its answer lost): a send may then be stored
// twice, as when an SDK retries it.
//
// The connection to the master is one grpc-go client connection, made on
// the first forwarded call and replaced (the old one closed, its calls
// ended) when Options.Master names another address; Shutdown closes it.
// At most MaxForwarded calls are forwarded at once (held receives and
// open telemetry relays included); beyond, a call is answered
// TOO_MANY_REQUESTS.

// Defaults of the forwarding options.
const (
	// DefaultMaxForwarded bounds the calls forwarded at once: room for
	// DefaultMaxHeldReceives receives held on the master and as many
	// other calls and telemetry relays.
	DefaultMaxForwarded = 2 * DefaultMaxHeldReceives
	// DefaultForwardTimeout bounds a forwarded unary call whose caller set
	// no deadline.
	DefaultForwardTimeout = 10 * time.Second
	// DefaultForwardDialTimeout bounds one attempt to connect to the
	// master.
	DefaultForwardDialTimeout = 3 * time.Second
	// DefaultForwardRetryWait bounds how long a call whose master is out
	// of reach waits for Options.Master to name the next one.
	DefaultForwardRetryWait = 5 * time.Second
)

// metaForwarded marks a call a member forwarded (its value: the member's
// Addr).
const metaForwarded = "x-apogee-forwarded"

// forwarder holds the connection to the current master.
type forwarder struct {
	mu     sync.Mutex
	addr   string                       // guarded by mu: the master cc reaches
	cc     *grpc.ClientConn             // guarded by mu
	cli    rmqpb.MessagingServiceClient // guarded by mu
	closed bool                         // guarded by mu
	// changed is closed (and replaced) by MasterChanged: it wakes the
	// calls waiting for a new master.
	changed chan struct{} // guarded by mu
}

// changedChan returns the channel the next MasterChanged closes.
func (f *forwarder) changedChan() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

// errForwardClosed: the server shut down.
var errForwardClosed = errors.New("grpcfe: the front end is shutting down")

// masterClient returns the client of the master a call is to be forwarded
// to, or nil when this member serves it.
func (s *Server) masterClient(ctx context.Context) (rmqpb.MessagingServiceClient, string, error) {
	if s.opts.Master == nil {
		return nil, "", nil
	}
	if len(metadata.ValueFromIncomingContext(ctx, metaForwarded)) > 0 {
		return nil, "", nil
	}
	addr, self := s.opts.Master()
	if self || addr == "" || addr == s.opts.Addr {
		return nil, "", nil
	}
	cli, err := s.fwd.client(s, addr)
	return cli, addr, err
}

// retryReserve is kept of a caller's deadline, when a call waits for a new
// master, to answer in time.
const retryReserve = 200 * time.Millisecond

// masterPoll is how often a call waiting for a new master asks
// Options.Master (MasterChanged wakes it at once).
const masterPoll = 25 * time.Millisecond

// awaitMaster waits, after the master at failed could not be reached, for
// Options.Master to name another one (this member included), until
// deadline: the client of the new master; nil with ok when this member is
// the master now (the call is served here); ok false when none came in
// time, or the call or the server ended.
func (s *Server) awaitMaster(ctx context.Context, failed string, deadline time.Time) (cli rmqpb.MessagingServiceClient, addr string, ok bool) {
	if s.opts.Master == nil {
		return nil, "", false
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	poll := time.NewTicker(masterPoll)
	defer poll.Stop()
	for {
		changed := s.fwd.changedChan()
		addr, self := s.opts.Master()
		switch {
		case self || addr == s.opts.Addr:
			return nil, "", true
		case addr != "" && addr != failed:
			cli, err := s.fwd.client(s, addr)
			return cli, addr, err == nil
		}
		select {
		case <-changed:
		case <-poll.C:
		case <-timer.C:
			return nil, "", false
		case <-ctx.Done():
			return nil, "", false
		case <-s.shutdown:
			return nil, "", false
		}
	}
}

// retryDeadline is how long a forwarded call may wait for a new master:
// ForwardRetryWait from now, within the caller's deadline less a reserve.
func (s *Server) retryDeadline(ctx context.Context) time.Time {
	d := time.Now().Add(s.opts.ForwardRetryWait)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-retryReserve).Before(d) {
		d = dl.Add(-retryReserve)
	}
	return d
}

// masterGone reports whether err, from a forwarded call, says the master
// is out of reach (no connection, or it broke) or was replaced (its
// connection closed by a change of master): worth waiting for another.
// The caller checks that its own context is not done.
func masterGone(err error) bool {
	c := grpcstatus.Code(err)
	return c == codes.Unavailable || c == codes.Canceled
}

// client returns the client of addr, connecting (lazily: grpc-go connects
// on the first call) when the master changed.
func (f *forwarder) client(s *Server, addr string) (rmqpb.MessagingServiceClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errForwardClosed
	}
	if f.addr == addr {
		return f.cli, nil
	}
	creds := insecure.NewCredentials()
	if s.opts.ForwardTLS != nil {
		creds = credentials.NewTLS(s.opts.ForwardTLS)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: s.opts.ForwardDialTimeout,
			Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.opts.MaxRecvMsgSize), grpc.MaxCallSendMsgSize(s.opts.MaxRecvMsgSize), grpc.ForceCodecV2(msgCodec{})),
		grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(16<<20), experimental.WithBufferPool(bufPool),
		// A master cut off without its connections closing (a machine
		// gone, a partition) is noticed within about 15 s; the port's
		// enforcement policy allows pings every 5 s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}))
	if err != nil {
		return nil, fmt.Errorf("grpcfe: a connection to the master %s: %w", addr, err)
	}
	if f.cc != nil {
		s.log.Info("grpc: the master changed: forwarding to the new one", "from", f.addr, "to", addr)
		_ = f.cc.Close() // its calls end: the old master is not the group's any more
	}
	f.addr, f.cc, f.cli = addr, cc, rmqpb.NewMessagingServiceClient(cc)
	return f.cli, nil
}

// drop closes the connection (its calls end) unless it is to keep, the
// current master's; the next forwarded call makes a new one. It wakes the
// calls waiting for a new master.
func (f *forwarder) drop(keep string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
	if f.cc != nil && f.addr != keep {
		_ = f.cc.Close()
		f.cc, f.cli, f.addr = nil, nil, ""
	}
}

// MasterChanged tells the front end that its group's master changed
// (Options.Master answers the new one): the owner calls it after a role
// change or when it learns of a new master. The telemetry streams relayed
// to the old master end, and so, on a member that is no longer master,
// do the streams it serves itself (its clients are forgotten): each
// client opens a new stream, which reaches the new master, whose core
// sends the transaction checks. Calls in flight to the old master end
// with PROXY_TIMEOUT. Other calls need nothing: each asks Options.Master.
func (s *Server) MasterChanged() {
	if s.opts.Master == nil {
		s.fwd.drop("")
		return
	}
	addr, self := s.opts.Master()
	if self {
		s.fwd.drop("")
		return
	}
	s.fwd.drop(addr)
	s.clients.mu.Lock()
	cs := make([]*client, 0, len(s.clients.m))
	for _, c := range s.clients.m {
		cs = append(cs, c)
	}
	s.clients.mu.Unlock()
	for _, c := range cs {
		s.forget(c)
	}
}

// close closes the connection; later forwarding fails.
func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.cc != nil {
		_ = f.cc.Close()
		f.cc, f.cli, f.addr = nil, nil, ""
	}
}

// forwardContext is the outgoing context of a forwarded call: the
// caller's metadata but for the transport's own headers, the forwarded
// mark, and the caller's deadline and cancellation.
func (s *Server) forwardContext(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	out := make(metadata.MD, len(in)+1)
	for k, v := range in {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") {
			continue
		}
		switch k {
		case "content-type", "user-agent", "te", metaForwarded:
			continue
		}
		out[k] = v
	}
	out[metaForwarded] = []string{s.opts.Addr}
	return metadata.NewOutgoingContext(ctx, out)
}

// acquireForward takes one of the MaxForwarded slots; false when all are
// taken.
func (s *Server) acquireForward() bool {
	if s.forwarding.Add(1) > int64(s.opts.MaxForwarded) {
		s.forwarding.Add(-1)
		return false
	}
	s.stats.forwarded.Add(1)
	return true
}

func (s *Server) releaseForward() { s.forwarding.Add(-1) }

var (
	statusForwardBusy = status(rmqpb.Code_TOO_MANY_REQUESTS, "too many calls are being forwarded to the master")
)

// unreachable is the status of a master that could not be reached.
func unreachable(err error) *rmqpb.Status {
	return status(rmqpb.Code_PROXY_TIMEOUT, "the group's master could not be reached: "+err.Error())
}

// transportFailure reports whether err, from a forwarded call, is the
// connection's (the master unreachable, gone or replaced, or the call's
// time up on the way) rather than an answer of the master's.
func transportFailure(err error) bool {
	switch grpcstatus.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// forwardFailed answers a forwarded call that failed: nil and the
// caller's error when the caller is gone, a status when the master could
// not be reached, the master's own gRPC error otherwise.
func (s *Server) forwardFailed(ctx context.Context, err error) (*rmqpb.Status, error) {
	if ctx.Err() != nil {
		return nil, grpcstatus.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, errForwardClosed) {
		return status(rmqpb.Code_INTERNAL_SERVER_ERROR, err.Error()), nil
	}
	if _, ok := grpcstatus.FromError(err); !ok || transportFailure(err) {
		s.stats.forwardFailures.Add(1)
		return unreachable(err), nil
	}
	return nil, err
}

// unaryMethod is a unary method of the service's client (a method
// expression of rmqpb.MessagingServiceClient).
type unaryMethod[Req, Resp any] func(rmqpb.MessagingServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error)

// forwardUnary forwards a unary call when a master other than this member
// is known: forwarded reports whether it did (then resp and err are the
// call's answer). failed makes the method's response of a status.
func forwardUnary[Req, Resp any](s *Server, ctx context.Context, r Req, m unaryMethod[Req, Resp],
	failed func(*rmqpb.Status) Resp) (resp Resp, forwarded bool, err error) {
	cli, addr, err := s.masterClient(ctx)
	if cli == nil && err == nil {
		return resp, false, nil
	}
	if err == nil && !s.acquireForward() {
		return failed(statusForwardBusy), true, nil
	}
	if err == nil {
		defer s.releaseForward()
		fctx := s.forwardContext(ctx)
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			fctx, cancel = context.WithTimeout(fctx, s.opts.ForwardTimeout)
			defer cancel()
		}
		var retryBy time.Time
		for {
			if resp, err = m(cli, fctx, r); err == nil {
				return resp, true, nil
			}
			if !masterGone(err) || ctx.Err() != nil {
				break
			}
			// The master is out of reach (a failover): wait for the next.
			if retryBy.IsZero() {
				retryBy = s.retryDeadline(fctx)
			}
			next, nextAddr, ok := s.awaitMaster(fctx, addr, retryBy)
			if !ok {
				break
			}
			if next == nil {
				return resp, false, nil // this member is the master now
			}
			s.stats.forwardRetries.Add(1)
			cli, addr = next, nextAddr
		}
	}
	st, err := s.forwardFailed(ctx, err)
	if st == nil {
		return resp, true, err
	}
	return failed(st), true, nil
}

// The unary methods' forwarding, each with its response of a status.

func (s *Server) forwardSend(ctx context.Context, r *rmqpb.SendMessageRequest) (*rmqpb.SendMessageResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.SendMessage,
		func(st *rmqpb.Status) *rmqpb.SendMessageResponse { return &rmqpb.SendMessageResponse{Status: st} })
}

func (s *Server) forwardEndTransaction(ctx context.Context, r *rmqpb.EndTransactionRequest) (*rmqpb.EndTransactionResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.EndTransaction,
		func(st *rmqpb.Status) *rmqpb.EndTransactionResponse { return &rmqpb.EndTransactionResponse{Status: st} })
}

func (s *Server) forwardRecall(ctx context.Context, r *rmqpb.RecallMessageRequest) (*rmqpb.RecallMessageResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.RecallMessage,
		func(st *rmqpb.Status) *rmqpb.RecallMessageResponse { return &rmqpb.RecallMessageResponse{Status: st} })
}

func (s *Server) forwardAck(ctx context.Context, r *rmqpb.AckMessageRequest) (*rmqpb.AckMessageResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.AckMessage,
		func(st *rmqpb.Status) *rmqpb.AckMessageResponse { return &rmqpb.AckMessageResponse{Status: st} })
}

func (s *Server) forwardChangeInvisible(ctx context.Context, r *rmqpb.ChangeInvisibleDurationRequest) (*rmqpb.ChangeInvisibleDurationResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.ChangeInvisibleDuration,
		func(st *rmqpb.Status) *rmqpb.ChangeInvisibleDurationResponse {
			return &rmqpb.ChangeInvisibleDurationResponse{Status: st}
		})
}

func (s *Server) forwardDeadLetter(ctx context.Context, r *rmqpb.ForwardMessageToDeadLetterQueueRequest) (*rmqpb.ForwardMessageToDeadLetterQueueResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.ForwardMessageToDeadLetterQueue,
		func(st *rmqpb.Status) *rmqpb.ForwardMessageToDeadLetterQueueResponse {
			return &rmqpb.ForwardMessageToDeadLetterQueueResponse{Status: st}
		})
}

func (s *Server) forwardUpdateOffset(ctx context.Context, r *rmqpb.UpdateOffsetRequest) (*rmqpb.UpdateOffsetResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.UpdateOffset,
		func(st *rmqpb.Status) *rmqpb.UpdateOffsetResponse { return &rmqpb.UpdateOffsetResponse{Status: st} })
}

func (s *Server) forwardGetOffset(ctx context.Context, r *rmqpb.GetOffsetRequest) (*rmqpb.GetOffsetResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.GetOffset,
		func(st *rmqpb.Status) *rmqpb.GetOffsetResponse { return &rmqpb.GetOffsetResponse{Status: st} })
}

func (s *Server) forwardQueryOffset(ctx context.Context, r *rmqpb.QueryOffsetRequest) (*rmqpb.QueryOffsetResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.QueryOffset,
		func(st *rmqpb.Status) *rmqpb.QueryOffsetResponse { return &rmqpb.QueryOffsetResponse{Status: st} })
}

func (s *Server) forwardHeartbeat(ctx context.Context, r *rmqpb.HeartbeatRequest) (*rmqpb.HeartbeatResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.Heartbeat,
		func(st *rmqpb.Status) *rmqpb.HeartbeatResponse { return &rmqpb.HeartbeatResponse{Status: st} })
}

func (s *Server) forwardTermination(ctx context.Context, r *rmqpb.NotifyClientTerminationRequest) (*rmqpb.NotifyClientTerminationResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.NotifyClientTermination,
		func(st *rmqpb.Status) *rmqpb.NotifyClientTerminationResponse {
			return &rmqpb.NotifyClientTerminationResponse{Status: st}
		})
}

// forwardRoute asks the master for a topic's route this member does not
// know (yet: a slave follows its master's topics a moment later, and never
// creates one).
func (s *Server) forwardRoute(ctx context.Context, r *rmqpb.QueryRouteRequest) (*rmqpb.QueryRouteResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.QueryRoute,
		func(st *rmqpb.Status) *rmqpb.QueryRouteResponse { return &rmqpb.QueryRouteResponse{Status: st} })
}

// forwardAssignment asks the master for the assignments of a topic this
// member does not know (yet).
func (s *Server) forwardAssignment(ctx context.Context, r *rmqpb.QueryAssignmentRequest) (*rmqpb.QueryAssignmentResponse, bool, error) {
	return forwardUnary(s, ctx, r, rmqpb.MessagingServiceClient.QueryAssignment,
		func(st *rmqpb.Status) *rmqpb.QueryAssignmentResponse {
			return &rmqpb.QueryAssignmentResponse{Status: st}
		})
}

// endAtShutdown cancels a forwarded stream (a receive held on the master,
// a telemetry relay) when the server shuts down, as Shutdown ends the
// calls held here; the function it returns undoes it.
func (s *Server) endAtShutdown(cancel context.CancelFunc) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-s.shutdown:
			cancel()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// serverStream is the server side of a server-streaming method.
type serverStream[Resp any] interface {
	Send(Resp) error
	grpc.ServerStream
}

// clientStream is the client side of a server-streaming method.
type clientStream[Resp any] interface {
	Recv() (Resp, error)
	grpc.ClientStream
}

// forwardServerStream relays a server-streaming call (ReceiveMessage,
// PullMessage) to the master when one other than this member is known:
// forwarded reports whether it did. Every frame the master sends is sent
// on as it comes. failed makes the frame of a status, sent when the master
// could not be reached before its first frame; a failure after it ends the
// call with gRPC's Aborted (the client's receipt handles it has come back
// after their invisible time).
func forwardServerStream[Req, Resp any, CS clientStream[Resp]](s *Server, r Req, stream serverStream[Resp],
	open func(rmqpb.MessagingServiceClient, context.Context, Req, ...grpc.CallOption) (CS, error),
	failed func(*rmqpb.Status) Resp) (forwarded bool, err error) {
	ctx := stream.Context()
	cli, addr, err := s.masterClient(ctx)
	if cli == nil && err == nil {
		return false, nil
	}
	if err == nil && !s.acquireForward() {
		return true, stream.Send(failed(statusForwardBusy))
	}
	sent := 0
	if err == nil {
		defer s.releaseForward()
		fctx, cancel := context.WithCancel(s.forwardContext(ctx))
		defer cancel()
		defer s.endAtShutdown(cancel)()
		var retryBy time.Time
		for {
			var up CS
			if up, err = open(cli, fctx, r); err == nil {
				for {
					var f Resp
					if f, err = up.Recv(); err != nil {
						break
					}
					if err := stream.Send(f); err != nil {
						return true, err
					}
					sent++
				}
				if err == io.EOF {
					return true, nil
				}
			}
			if sent > 0 || !masterGone(err) || ctx.Err() != nil {
				break
			}
			// Nothing came: the call can go to the next master.
			if retryBy.IsZero() {
				retryBy = s.retryDeadline(fctx)
			}
			next, nextAddr, ok := s.awaitMaster(fctx, addr, retryBy)
			if !ok {
				break
			}
			if next == nil {
				return false, nil // this member is the master now
			}
			s.stats.forwardRetries.Add(1)
			cli, addr = next, nextAddr
		}
	}
	st, err := s.forwardFailed(ctx, err)
	if st == nil {
		return true, err
	}
	if sent > 0 {
		return true, grpcstatus.Error(codes.Aborted, st.Message)
	}
	return true, stream.Send(failed(st))
}

func (s *Server) forwardReceive(r *rmqpb.ReceiveMessageRequest, stream rmqpb.MessagingService_ReceiveMessageServer) (bool, error) {
	return forwardServerStream(s, r, stream, rmqpb.MessagingServiceClient.ReceiveMessage,
		func(st *rmqpb.Status) *rmqpb.ReceiveMessageResponse {
			return &rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: st}}
		})
}

func (s *Server) forwardPull(r *rmqpb.PullMessageRequest, stream rmqpb.MessagingService_PullMessageServer) (bool, error) {
	return forwardServerStream(s, r, stream, rmqpb.MessagingServiceClient.PullMessage,
		func(st *rmqpb.Status) *rmqpb.PullMessageResponse {
			return &rmqpb.PullMessageResponse{Content: &rmqpb.PullMessageResponse_Status{Status: st}}
		})
}

// forwardTelemetry relays a telemetry stream to the master when one other
// than this member is known: the client's commands (settings, answers) go
// to the master, the master's (settings, transaction checks, stack
// requests) to the client, until either side ends it, the master changes
// (its connection closes) or the server shuts down. A master that cannot
// be reached is answered with a command of status PROXY_TIMEOUT and the
// stream ends: the SDKs open a new one.
func (s *Server) forwardTelemetry(stream rmqpb.MessagingService_TelemetryServer) (bool, error) {
	ctx := stream.Context()
	cli, _, err := s.masterClient(ctx)
	if cli == nil && err == nil {
		return false, nil
	}
	if err == nil && !s.acquireForward() {
		return true, stream.Send(&rmqpb.TelemetryCommand{Status: statusForwardBusy})
	}
	if err == nil {
		defer s.releaseForward()
		fctx, cancel := context.WithCancel(s.forwardContext(ctx))
		defer cancel()
		defer s.endAtShutdown(cancel)()
		var up rmqpb.MessagingService_TelemetryClient
		if up, err = cli.Telemetry(fctx); err == nil {
			var clientErr error
			clientErr, err = s.relayTelemetry(fctx, cancel, stream, up)
			switch {
			case clientErr != nil:
				return true, clientErr // a refused command (the guard answers it) or a broken stream
			case err == nil || ctx.Err() != nil:
				return true, nil
			}
		}
	}
	st, err := s.forwardFailed(ctx, err)
	if st == nil {
		return true, err
	}
	return true, stream.Send(&rmqpb.TelemetryCommand{Status: st})
}

// relayTelemetry copies commands both ways until one side ends. clientErr
// is the client side's error when it ended the relay (nil: it closed its
// side, or the master ended first); masterErr is the master side's (nil
// when the master ended the stream, or the server shuts down).
func (s *Server) relayTelemetry(ctx context.Context, cancel context.CancelFunc, down rmqpb.MessagingService_TelemetryServer,
	up rmqpb.MessagingService_TelemetryClient) (clientErr, masterErr error) {
	// The client's side: its Recv returns once the client closes its side
	// or the call ends (when this method's caller returns).
	fromClient := make(chan error, 1)
	go func() {
		for {
			cmd, err := down.Recv()
			if err != nil {
				fromClient <- err
				if err == io.EOF {
					_ = up.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := up.Send(cmd); err != nil {
				return // the master's side failed: its Recv says why
			}
		}
	}()
	var err error
	for {
		var cmd *rmqpb.TelemetryCommand
		if cmd, err = up.Recv(); err != nil {
			break
		}
		if err = down.Send(cmd); err != nil {
			break
		}
	}
	cancel()
	select {
	case e := <-fromClient:
		if e != io.EOF {
			return e, nil
		}
	default:
	}
	if err == io.EOF || s.closing.Load() {
		return nil, nil
	}
	return nil, err
}
