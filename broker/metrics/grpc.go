package metrics

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GRPCStats are the gRPC front end's counters the exporter reads at
// scrape time (Options.GRPC; the broker binary fills them from
// grpcfe.Server.Stats, which this package does not import).
type GRPCStats struct {
	// Streams the front end admitted or refused from their headers.
	Streams int64
	// Calls refused before their method ran: authentication failed (from
	// the headers), no room in the receive budget, the request did not
	// arrive within the request timeout, a message beyond the size caps.
	AuthRefused, BudgetRefused, RequestTimeouts, SizeRefused int64
	// Clients registered now.
	Clients int
	// Held: receives and pulls waiting now; HeldTotal: held since start;
	// refused by the broker's, a connection's and a client's bound.
	Held                                                  int
	HeldTotal                                             int64
	HeldRefusedBroker, HeldRefusedConn, HeldRefusedClient int64
	// Renewing: auto_renew deliveries being renewed now; renewals done,
	// failed, released (client gone); receives refused by the per-client
	// bound of renewed deliveries.
	Renewing                                             int
	Renewals, RenewFailures, RenewReleased, RenewRefused int64
}

// GRPCLatency is rocketmq_rpc_latency for the gRPC front end
// (protocol_type "grpc"): request_code is the method's name
// (SendMessage, ReceiveMessage, ...), as RocketMQ's proxy labels it, and
// response_code the gRPC status code's name (OK, DeadlineExceeded, ...;
// RocketMQ 5's own status travels in each answer's body). A streaming
// method (ReceiveMessage, Telemetry) is timed over its whole stream.
// Install its interceptors with ServerOptions.
type GRPCLatency struct {
	*RPCLatency

	mu      sync.Mutex                       // serialises additions to methods
	methods atomic.Pointer[map[string]int32] // full method name → index; copy on write
	names   atomic.Pointer[[]string]         // index → short name; copy on write
}

// NewGRPCLatency returns the gRPC front end's histogram with the constant
// labels given.
func NewGRPCLatency(constLabels prometheus.Labels) *GRPCLatency {
	g := &GRPCLatency{}
	m, n := map[string]int32{}, []string{}
	g.methods.Store(&m)
	g.names.Store(&n)
	g.RPCLatency = NewRPCLatency("grpc", constLabels)
	g.RPCLatency.reqName = func(i int32) string {
		names := *g.names.Load()
		if int(i) < len(names) {
			return names[i]
		}
		return "unknown"
	}
	g.RPCLatency.respName = func(c int32) string {
		return grpcCode(c).String()
	}
	return g
}

// method is the index of a full method name ("/pkg.Service/Method"),
// assigned on its first call; a read of an immutable map afterwards.
func (g *GRPCLatency) method(full string) int32 {
	if i, ok := (*g.methods.Load())[full]; ok {
		return i
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.methods.Load()
	if i, ok := old[full]; ok {
		return i
	}
	short := full
	for k := len(full) - 1; k >= 0; k-- {
		if full[k] == '/' {
			short = full[k+1:]
			break
		}
	}
	names := append(append([]string(nil), *g.names.Load()...), short)
	i := int32(len(names) - 1)
	m := make(map[string]int32, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[full] = i
	g.names.Store(&names)
	g.methods.Store(&m)
	return i
}

// ServerOptions are the unary and stream interceptors that time every
// call, for grpc.NewServer (broker/grpcfe's Options.ServerOptions).
func (g *GRPCLatency) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.Unary), grpc.ChainStreamInterceptor(g.Stream)}
}

// Unary is the unary interceptor: it times the call and observes it under
// its method and status code.
func (g *GRPCLatency) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	g.Observe(g.method(info.FullMethod), int32(status.Code(err)), time.Since(start))
	return resp, err
}

// Stream is the stream interceptor: it times the whole stream.
func (g *GRPCLatency) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	g.Observe(g.method(info.FullMethod), int32(status.Code(err)), time.Since(start))
	return err
}

func grpcCode(c int32) codes.Code { return codes.Code(uint32(c)) }
