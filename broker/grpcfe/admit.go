package grpcfe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/rmqpb"
)

// Admission: what a stream may cost before its request is read.
//
// grpc-go reads a call's request message before any interceptor runs: a
// unary interceptor gets the decoded request, and for every call the
// server grants the client flow-control window for the whole message as
// soon as its 5-byte length prefix arrives (up to the server's maximum
// receive size). What a stream holds while its request arrives is decided
// before that, by three things, all set in New:
//
//   - The message size caps (Options.MaxRecvMsgSize, MaxSendMsgSize):
//     the broker's maximum message size plus MsgSizeHeadroom by default,
//     not RocketMQ's proxy's 130 MiB. A request that declares more is
//     refused from its length prefix, before a byte of it is held
//     (ResourceExhausted); an answer larger than the cap is not sent.
//   - The tap (grpc.InTapHandle), which runs on the connection's reader
//     goroutine when a stream's headers arrive and before the stream
//     exists: with Options.Guard it authenticates the "authorization"
//     header (a refusal: codes.Unauthenticated, the stream never
//     created, nothing of its body read); with Options.Budget it reserves
//     MaxRecvMsgSize bytes of the process's receive budget for the
//     request (no room: codes.ResourceExhausted at once, counted and
//     logged; the tap may not wait: it runs under the transport's lock).
//     The service's wrapped handlers (sizedService) give the reservation
//     back as soon as the request has been read, or the sweeper (admitSweeper)
//     does once the stream ended; a request that has not arrived within
//     Options.RequestTimeout of its headers (within sweepEvery) ends its
//     stream (a stalled or slow sender holds the budget no longer than
//     that).
//   - The wrapped handlers and the codec (sizedService, msgCodec) that
//     count the calls grpc-go ended with ResourceExhausted for a message
//     larger than the cap, either way, and log them, throttled.
//
// Why not grpc-go's buffer pool (experimental.BufferPool): its Get is
// called for each HTTP/2 DATA frame on the connection's reader goroutine
// and must return a buffer. It can count, but not refuse; waiting there
// stops every stream of the connection, including those whose messages
// would release the bytes it waits for (a budget full of half-received
// messages deadlocks, or must overcommit); frames under 1 KiB bypass it,
// and the decoded copy comes from the process-wide default pool. The tap
// is grpc-go's one seam before a stream can be granted window, so the
// reservation is made there, for the largest request the stream may send.
//
// What is not charged: the decoded request while its method runs (the
// core copies what it stores, and the sends' bytes are bounded by the
// core's MaxInFlightBytes), and a Telemetry stream's commands after its
// first (a few small ones per session; each within the cap).

// Budget is the process's receive budget the front end charges for the
// requests being received (remoting's ReceiveBudget implements it:
// grpcfe does not import remoting, the node passes the shared one). Both
// methods must be safe for concurrent use and quick: TryReserve runs
// under grpc-go's transport lock, and never waits.
type Budget interface {
	// TryReserve takes n bytes if they fit now; it reports whether it did.
	TryReserve(n int64) bool
	// Release gives back n bytes taken by TryReserve.
	Release(n int64)
}

// admission is what the tap decided for one stream. The reservation is
// given back once, by whichever comes first: the handler that read the
// request (sizedService), or the sweeper (admitSweeper), which finds the stream ended
// or its request timed out (and then ends the stream).
//
// An admission is also the stream's context from the tap on (the
// Context it embeds, with itself as the value of admissionKey): one
// allocation per call rather than two.
type admission struct {
	// Context is the stream's context: grpc-go's, or with a reservation
	// the one derived from it that cancel ends.
	context.Context

	s      *Server
	call   callCtx // authentication's result, when authed
	authed bool
	n      int64 // bytes reserved in Options.Budget
	done   atomic.Bool

	// With a reservation: the stream context's cancel, when its request
	// is due, and the sweeper's list.
	cancel   context.CancelCauseFunc
	deadline time.Time
	method   string
	next     *admission
}

type admissionKey struct{}

// Value is the embedded context's, and the admission itself for
// admissionKey.
func (a *admission) Value(key any) any {
	if _, ok := key.(admissionKey); ok {
		return a
	}
	return a.Context.Value(key)
}

// admissionOf returns the tap's admission of a call, nil when there was
// none (no tap installed, or a call made directly in a test).
func admissionOf(ctx context.Context) *admission {
	a, _ := ctx.Value(admissionKey{}).(*admission)
	return a
}

// received gives the reservation back, once: the request was read (or
// the stream ended). It reports whether this call gave it back.
func (a *admission) received() bool {
	if a == nil || !a.done.CompareAndSwap(false, true) {
		return false
	}
	if a.n > 0 {
		a.s.opts.Budget.Release(a.n)
	}
	return true
}

// errRequestTimeout ends a stream whose request did not arrive within
// Options.RequestTimeout.
var errRequestTimeout = errors.New("grpcfe: the request did not arrive in time")

// sweepEvery is how often the sweeper looks at the streams whose request
// is being received (only while there are some): the precision of
// RequestTimeout.
const sweepEvery = 100 * time.Millisecond

// admitSweeper holds the admissions with a reservation not yet known to
// be given back, in a lock-free stack the tap pushes on; its goroutine
// (run, while the server runs) takes the stack every sweepEvery while it
// is not empty, drops the admissions given back, gives back those whose
// stream ended, ends (and gives back) those whose request is late, and
// pushes the rest back. No timer and no goroutine per call.
type admitSweeper struct {
	head atomic.Pointer[admission]
	wake chan struct{} // one slot: the stack became non-empty
}

func (w *admitSweeper) push(a *admission) {
	for {
		old := w.head.Load()
		a.next = old
		if w.head.CompareAndSwap(old, a) {
			if old == nil {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
			return
		}
	}
}

// run sweeps until stop is closed.
func (w *admitSweeper) run(stop <-chan struct{}) {
	t := time.NewTimer(sweepEvery)
	t.Stop()
	for {
		if w.head.Load() == nil {
			select {
			case <-w.wake:
			case <-stop:
				return
			}
		}
		t.Reset(sweepEvery)
		select {
		case <-t.C:
		case <-stop:
			return
		}
		w.sweep(time.Now())
	}
}

// sweep handles the stack once (see admitSweeper).
func (w *admitSweeper) sweep(now time.Time) {
	var keep []*admission
	for a := w.head.Swap(nil); a != nil; {
		next := a.next
		a.next = nil
		switch {
		case a.done.Load():
		case a.Err() != nil:
			a.received()
		case now.After(a.deadline):
			if a.received() {
				s := a.s
				s.stats.requestTimeouts.Add(1)
				s.warn("request-timeout", "grpc: a call's request did not arrive within the request timeout: stream ended; "+
					"a client this slow should be fixed, or RequestTimeout raised",
					"method", a.method, "peer", peerOf(a), "timeout", s.opts.RequestTimeout)
				a.cancel(errRequestTimeout)
			}
		default:
			keep = append(keep, a)
		}
		a = next
	}
	for _, a := range keep {
		w.push(a)
	}
}

// releaseAll gives back every reservation still held (Shutdown, once the
// streams have ended).
func (w *admitSweeper) releaseAll() {
	for a := w.head.Swap(nil); a != nil; a = a.next {
		a.received()
	}
}

// tap is the server's grpc.InTapHandle (see Admission above).
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	s.stats.streams.Add(1)
	a := &admission{s: s}
	if s.opts.Guard != nil {
		c, st := s.authenticateMD(ctx, info.FullMethodName, info.Header)
		if st != nil {
			s.stats.authRefused.Add(1)
			return nil, grpcstatus.Error(codes.Unauthenticated, st.GetCode().String()+" ("+strconv.Itoa(int(st.GetCode()))+"): "+st.GetMessage())
		}
		a.call, a.authed = c, true
	}
	if b := s.opts.Budget; b != nil {
		n := int64(s.opts.MaxRecvMsgSize)
		if !reserve(b, n) {
			s.stats.budgetRefused.Add(1)
			s.warn("budget", "grpc: receive budget full: a call was refused (RESOURCE_EXHAUSTED) before its request was read; "+
				"raise --receive-budget if the load is legitimate, or find the clients holding half-sent requests",
				"method", info.FullMethodName, "peer", peerOf(ctx), "reserve", n)
			return nil, grpcstatus.Error(codes.ResourceExhausted, "the broker's receive budget is full: retry later")
		}
		a.n, a.method, a.deadline = n, info.FullMethodName, time.Now().Add(s.opts.RequestTimeout)
		ctx, a.cancel = context.WithCancelCause(ctx)
	}
	a.Context = ctx
	if a.n > 0 {
		s.sweeper.push(a)
	}
	return a, nil
}

// tapWait bounds how long the tap waits for a reservation that does not
// fit (see reserve).
const tapWait = 250 * time.Millisecond

// reserve takes n bytes of b. When they do not fit it waits for the calls
// whose requests are being read to give theirs back (the interceptors do
// as soon as a request is read), polling with a growing pause, for at
// most tapWait: a client that opens hundreds of calls at once (a consumer
// starting its receives, clients reconnecting after a failover) would
// otherwise outrun the goroutines that read their requests, and on a
// loaded machine have most of its calls refused although their requests
// are small and already arrived. The tap runs on the connection's reader
// goroutine under that transport's lock, so the wait stalls this one
// connection only (the requests it waits for were read off the socket
// before this stream's headers, and their goroutines need neither); under
// a budget full of stalled requests each new call costs its own
// connection tapWait and is refused.
func reserve(b Budget, n int64) bool {
	if b.TryReserve(n) {
		return true
	}
	pause := 100 * time.Microsecond
	for start := time.Now(); time.Since(start) < tapWait; {
		time.Sleep(pause)
		if b.TryReserve(n) {
			return true
		}
		pause = min(2*pause, 10*time.Millisecond)
	}
	return false
}

// peerOf is a call's remote address for a log line.
func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// authenticateMD authenticates the metadata md of a stream from ctx's
// peer (the tap's: the metadata is not yet in ctx); a refusal is a
// Status.
func (s *Server) authenticateMD(ctx context.Context, method string, md metadata.MD) (callCtx, *rmqpb.Status) {
	return s.authenticateHeaders(ctx, method, firstMD(md, auth.HeaderAuthorization), firstMD(md, auth.HeaderDateTime))
}

func firstMD(md metadata.MD, key string) string {
	if v := md[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Size refusals: grpc-go ends a call whose request or answer is larger
// than the caps with ResourceExhausted, and no stats handler is installed
// to see it (a stats handler costs every call about 17 allocations and a
// dozen clock reads: grpc-go builds its events whether they are looked at
// or not). The refusals are seen where they pass instead:
//
//   - a request beyond MaxRecvMsgSize: the error of reading it, in the
//     wrappers of the service's handlers (sizedService: the unary
//     handlers' decode function, the stream handlers' RecvMsg);
//   - an answer beyond MaxSendMsgSize: its length when the server's codec
//     (msgCodec) marshals it, the length grpc-go compares with the cap
//     (no compressor is registered in the broker, so the answer grpc-go
//     measures is the one marshalled).

// sizedService returns the MessagingService's description with every
// handler wrapped where a call's request is read: the tap's reservation
// goes back as soon as it has been (so that without a Guard no
// interceptor is needed, which costs grpc-go two allocations per call),
// and a request refused for its size is counted.
func (s *Server) sizedService() *grpc.ServiceDesc {
	sd := rmqpb.MessagingService_ServiceDesc
	sd.Methods = append([]grpc.MethodDesc(nil), sd.Methods...)
	for i := range sd.Methods {
		h, method := sd.Methods[i].Handler, "/"+sd.ServiceName+"/"+sd.Methods[i].MethodName
		sd.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			// The generated handler decodes before the interceptors run.
			return h(srv, ctx, func(m any) error {
				err := dec(m)
				admissionOf(ctx).received()
				s.noteRecvErr(ctx, method, err)
				return err
			}, ic)
		}
	}
	sd.Streams = append([]grpc.StreamDesc(nil), sd.Streams...)
	for i := range sd.Streams {
		h, method := sd.Streams[i].Handler, "/"+sd.ServiceName+"/"+sd.Streams[i].StreamName
		sd.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error {
			return h(srv, &sizedStream{ServerStream: ss, s: s, a: admissionOf(ss.Context()), method: method})
		}
	}
	return &sd
}

// sizedStream gives the tap's reservation back after the stream's first
// request and counts the requests refused for their size.
type sizedStream struct {
	grpc.ServerStream
	s      *Server
	a      *admission // until the first RecvMsg
	method string
}

func (w *sizedStream) RecvMsg(m any) error {
	err := w.ServerStream.RecvMsg(m)
	if w.a != nil {
		w.a.received()
		w.a = nil
	}
	w.s.noteRecvErr(w.Context(), w.method, err)
	return err
}

// noteRecvErr counts and logs (throttled) a request refused for its size.
func (s *Server) noteRecvErr(ctx context.Context, method string, err error) {
	if err == nil || grpcstatus.Code(err) != codes.ResourceExhausted {
		return
	}
	s.stats.sizeRefused.Add(1)
	s.warn("message-size", "grpc: a call was refused for a message larger than the maximum (RESOURCE_EXHAUSTED); "+
		"clients must keep a request, batch included, within the broker's maxMessageSize",
		"method", method, "peer", peerOf(ctx), "max_bytes", s.opts.MaxRecvMsgSize, "err", err)
}

// msgCodec is the protobuf codec of the server (ForceServerCodecV2) and of
// the clients given Codec: grpc-go's, but with its buffers from bufPool
// (grpc-go's codec takes them from the process-wide default pool, which
// clears a 1 MiB buffer for a 33 KB message: bufpool.go). The server's
// (s set) also counts and logs (throttled) the answers larger than
// MaxSendMsgSize, which grpc-go then refuses to send.
type msgCodec struct{ s *Server }

// Codec returns the front end's protobuf codec for a client of the same
// process (grpc.ForceCodecV2): apogee-bench's.
func Codec() encoding.CodecV2 { return msgCodec{} }

func (msgCodec) Name() string { return protoenc.Name }

func (c msgCodec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("grpcfe: cannot marshal %T: not a protobuf message", v)
	}
	// Size first: MarshalAppend may then use the sizes it cached.
	n := proto.Size(m)
	if s := c.s; s != nil && n > s.opts.MaxSendMsgSize {
		s.stats.sizeRefused.Add(1)
		s.warn("message-size", "grpc: an answer larger than the maximum was not sent (RESOURCE_EXHAUSTED); "+
			"the message it carries is larger than the broker's maxMessageSize allows",
			"answer", fmt.Sprintf("%T", v), "bytes", n, "max_bytes", s.opts.MaxSendMsgSize)
	}
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(n) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	b := bufPool.Get(n)
	out, err := opts.MarshalAppend((*b)[:0], m)
	if err != nil {
		bufPool.Put(b)
		return nil, err
	}
	*b = out
	return mem.BufferSlice{mem.NewBuffer(b, bufPool)}, nil
}

func (msgCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("grpcfe: cannot unmarshal into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(bufPool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// messageOf is v as a protobuf message (of either API), nil if it is not
// one.
func messageOf(v any) proto.Message {
	switch m := v.(type) {
	case protoadapt.MessageV2:
		return m
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m)
	}
	return nil
}

// throttleEvery is how often one cause of refusal is logged.
const throttleEvery = time.Minute

// warn logs msg at WARN for cause through the server's throttle: once per
// cause per throttleEvery, with the count held back since
// (internal/logthrottle).
func (s *Server) warn(cause, msg string, args ...any) {
	s.throttle.Log(s.log, slog.LevelWarn, cause, msg, args...)
}

// clientKey is what a call's long polls are counted under as a client
// (longpoll.Wait.Client): its x-mq-client-id, or nil without one.
func clientKey(ctx context.Context) any {
	if v := metadata.ValueFromIncomingContext(ctx, metaClientID); len(v) > 0 && v[0] != "" {
		return v[0]
	}
	return nil
}

// connKey is what a call's long polls are counted under as a connection
// (longpoll.Wait.Owner): its remote address.
func connKey(ctx context.Context) any {
	ap := peerAddr(ctx)
	if !ap.IsValid() || ap.Addr() == netip.IPv4Unspecified() {
		return nil
	}
	return ap
}
