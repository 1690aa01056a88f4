package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
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
