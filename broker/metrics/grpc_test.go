package metrics

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestGRPCLatencyLabels(t *testing.T) {
	g := NewGRPCLatency(prometheus.Labels{"cluster": "c"})
	send := &grpc.UnaryServerInfo{FullMethod: "/apache.rocketmq.v2.MessagingService/SendMessage"}
	route := &grpc.UnaryServerInfo{FullMethod: "/apache.rocketmq.v2.MessagingService/QueryRoute"}
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	for range 3 {
		if _, err := g.Unary(context.Background(), nil, send, ok); err != nil {
			t.Fatal(err)
		}
	}
	g.Unary(context.Background(), nil, route, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.NotFound, "no such topic")
	})
	g.Stream(nil, nil, &grpc.StreamServerInfo{FullMethod: "/apache.rocketmq.v2.MessagingService/ReceiveMessage"},
		func(any, grpc.ServerStream) error { return nil })
	got := counts(t, g.RPCLatency)
	for k, want := range map[[2]string]uint64{
		{"SendMessage", "OK"}: 3, {"QueryRoute", "NotFound"}: 1, {"ReceiveMessage", "OK"}: 1,
	} {
		if got[k] != want {
			t.Errorf("%v: %d, want %d (all: %v)", k, got[k], want, got)
		}
	}
	// Beside the remoting histogram in one registry: one family, two
	// protocol types.
	reg := prometheus.NewRegistry()
	r := NewRPCLatency("remoting", prometheus.Labels{"cluster": "c"})
	r.Observe(10, 0, 1)
	reg.MustRegister(r, g)
	fams, err := reg.Gather()
	if err != nil || len(fams) != 1 || len(fams[0].Metric) != 4 {
		t.Fatalf("gather: %v, %d families", err, len(fams))
	}
}
