package grpcfe

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/rmqpb"
)

// TestGuardAllocs: an allowed call costs the interceptor at most 2
// allocations, grpc-go's copies of the two metadata values. Skipped under
// -race, which allocates on its own (scripts/test.sh runs it without).
func TestGuardAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	g := openGuard(t, io.Discard)
	s := &Server{opts: Options{Guard: g}}
	authz, dt := auth.NewKey("app-secret").SignV2("app", time.Now())
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(auth.HeaderAuthorization, authz, auth.HeaderDateTime, dt))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
	req := &rmqpb.ReceiveMessageRequest{Group: res("billing"), MessageQueue: &rmqpb.MessageQueue{Topic: res("orders-1")}}
	info := &grpc.UnaryServerInfo{FullMethod: "/apache.rocketmq.v2.MessagingService/ReceiveMessage"}
	resp := &rmqpb.SendMessageResponse{Status: okStatus}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	allocs := testing.AllocsPerRun(200, func() {
		if r, _ := s.unaryEntry(ctx, req, info, handler); r != resp {
			t.Fatalf("refused: %v", r)
		}
	})
	if allocs > 2 {
		t.Errorf("%.1f allocations per allowed call, want at most 2", allocs)
	}
}
