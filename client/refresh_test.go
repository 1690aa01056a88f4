package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// Sends refused with an answer a failover explains refresh the topic's route
// before their retries, but the name server sees at most one route request per
// gap however many sends fail; with the refresh off it sees none.
func TestProducerRouteRefreshOnFailureIsRateLimited(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  time.Duration
	}{{"gap200ms", 200 * time.Millisecond}, {"off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBroker(t)
			p := newProducer(t, b, client.RouteRefreshOnFailure(tc.gap), client.SendRetries(2), client.FaultTolerance(false))
			ctx := ctxT(t)
			if _, err := p.SendSync(ctx, &client.Message{Topic: "RL", Body: []byte("first")}); err != nil {
				t.Fatal(err)
			}
			before := b.codeCount(protocol.ReqGetRouteInfoByTopic)
			b.setHook(func(req *protocol.Command) (int32, bool) {
				if req.Code == protocol.ReqSendMessage {
					return protocol.RespSystemError, true // a fenced master's answer
				}
				return 0, false
			})
			start := time.Now()
			sends := 0
			for time.Since(start) < time.Second {
				_, err := p.SendSync(ctx, &client.Message{Topic: "RL", Body: []byte("refused")})
				var be *client.BrokerError
				if !errors.As(err, &be) || be.Code != protocol.RespSystemError {
					t.Fatalf("send %d: %v, want SYSTEM_ERROR", sends, err)
				}
				sends++
			}
			elapsed := time.Since(start)
			refreshes := b.codeCount(protocol.ReqGetRouteInfoByTopic) - before
			sendReqs := b.codeCount(protocol.ReqSendMessage)
			t.Logf("%d sends (%d attempts) refused in %v: %d route requests", sends, sendReqs, elapsed.Round(time.Millisecond), refreshes)
			if tc.gap < 0 {
				if refreshes != 0 {
					t.Fatalf("%d route requests with the refresh on failure off", refreshes)
				}
				return
			}
			if max := int(elapsed/tc.gap) + 1; refreshes < 2 || refreshes > max {
				t.Fatalf("%d route requests over %v with a gap of %v, want 2..%d", refreshes, elapsed, tc.gap, max)
			}
			if sends < 3*refreshes {
				t.Fatalf("only %d sends: the test did not fail faster than the gap", sends)
			}
			b.setHook(func(*protocol.Command) (int32, bool) { return 0, false })
			if _, err := p.SendSync(context.Background(), &client.Message{Topic: "RL", Body: []byte("after")}); err != nil {
				t.Fatalf("send after the broker took writes again: %v", err)
			}
		})
	}
}

// A send that gets no answer at all (a paused master keeps its connection
// open) times out, and the timeout refreshes the topic's route.
func TestProducerTimeoutRefreshesRoute(t *testing.T) {
	b := newFakeBroker(t)
	p := newProducer(t, b, client.SendTimeout(150*time.Millisecond), client.RouteRefreshOnFailure(50*time.Millisecond))
	ctx := ctxT(t)
	if _, err := p.SendSync(ctx, &client.Message{Topic: "TO", Body: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	before := b.codeCount(protocol.ReqGetRouteInfoByTopic)
	b.setHook(func(req *protocol.Command) (int32, bool) {
		return -1, req.Code == protocol.ReqSendMessage // no reply
	})
	for i := range 3 {
		if _, err := p.SendSync(ctx, &client.Message{Topic: "TO", Body: []byte("unanswered")}); !errors.Is(err, client.ErrTimeout) {
			t.Fatalf("send %d: %v, want ErrTimeout", i, err)
		}
	}
	wait.Until(t, "a route request after the timeouts", func() bool {
		return b.codeCount(protocol.ReqGetRouteInfoByTopic) > before
	})
}

// A oneway send that cannot reach its broker refreshes the topic's route for
// the sends after it (the oneway send itself is not retried).
func TestProducerOnewayFailureRefreshesRoute(t *testing.T) {
	dead := newFakeBroker(t, func(b *fakeBroker) { b.name = "broker-b" })
	b := newFakeBroker(t, func(b *fakeBroker) { b.peers = []*fakeBroker{dead} })
	p := newProducer(t, b, client.RouteRefreshOnFailure(0), client.FaultTolerance(false))
	ctx := ctxT(t)
	if err := p.SendOneway(ctx, &client.Message{Topic: "OW", Body: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	dead.close()
	before := b.codeCount(protocol.ReqGetRouteInfoByTopic)
	// Round robin over both brokers' queues; a connection the instance had
	// to the closed broker (its heartbeat) may take a write or two before the
	// client sees it closed.
	wait.Until(t, "a oneway send to the closed broker failing", func() bool {
		return p.SendOneway(ctx, &client.Message{Topic: "OW", Body: []byte("oneway")}) != nil
	})
	wait.Until(t, "a route request after the failed oneway sends", func() bool {
		return b.codeCount(protocol.ReqGetRouteInfoByTopic) > before
	})
}
