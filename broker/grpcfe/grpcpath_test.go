package grpcfe

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/rmqpb"
)

// sizeRefusedIs waits until the front end counted n size refusals.
func (e *env) sizeRefusedIs(n int64) {
	e.t.Helper()
	wait.For(e.t, fmt.Sprintf("%d size refusals counted", n), func() error {
		if got := e.srv.Stats().SizeRefused; got != n {
			return fmt.Errorf("%d counted", got)
		}
		return nil
	})
}

// A stream's request beyond MaxRecvMsgSize is refused and counted (the
// stream handlers' RecvMsg, sizedStream), as a unary one is (the unary
// handlers' decode function; TestTapRefusesBeforeReading), without a
// stats handler.
func TestSizeRefusedStreamRequest(t *testing.T) {
	e := newEnvTB(t, nil)
	req := &rmqpb.ReceiveMessageRequest{Group: res("g"), MessageQueue: &rmqpb.MessageQueue{Topic: res("orders-1"), Id: -1},
		FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: strings.Repeat("x", e.srv.opts.MaxRecvMsgSize)},
		BatchSize:        1, InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(time.Second)}
	st, err := e.cli.ReceiveMessage(e.ctx("consumer-1", callTimeout), req)
	if err == nil {
		_, err = st.Recv()
	}
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("an oversized receive request: %v, want ResourceExhausted", err)
	}
	e.sizeRefusedIs(1)

	// A unary request too.
	big := msg("orders-1", "big", strings.Repeat("x", e.srv.opts.MaxRecvMsgSize+1))
	if _, err := e.cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{big}}); grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("an oversized send: %v, want ResourceExhausted", err)
	}
	e.sizeRefusedIs(2)
}

// A stream's answer beyond MaxSendMsgSize is not sent and is counted (the
// server's codec, msgCodec), as a unary one is (TestSendCap).
func TestSizeRefusedStreamAnswer(t *testing.T) {
	e := newEnvWith(t, nil, func(o *Options) { o.MaxSendMsgSize = 2048 }, nil)
	e.send(msg("orders-1", "m1", strings.Repeat("x", 4096)))
	e.dispatched("orders-1", 1)
	req := &rmqpb.ReceiveMessageRequest{Group: res("g"), MessageQueue: &rmqpb.MessageQueue{Topic: res("orders-1"), Id: -1},
		FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"},
		BatchSize:        1, InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(arrival)}
	st, err := e.cli.ReceiveMessage(e.ctx("consumer-1", arrival+callTimeout), req)
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			t.Fatal("the receive ended without an error")
		}
		if err != nil {
			if grpcstatus.Code(err) != codes.ResourceExhausted {
				t.Fatalf("a receive whose message is beyond the send cap: %v, want ResourceExhausted", err)
			}
			break
		}
		if r.GetMessage() != nil {
			t.Fatalf("a message beyond the send cap was sent (%d bytes)", len(r.GetMessage().GetBody()))
		}
	}
	e.sizeRefusedIs(1)
}

// TestSendAllocs: the front end's share of a one-message SendMessage is one
// allocation (the answer, its entry and its entries slice together); the
// core's Send allocates nothing. Skipped under -race.
func TestSendAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	e := newEnvTB(t, nil)
	e.route("orders-1")
	req := &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("orders-1", "m1", strings.Repeat("x", 1024))}}
	ctx := e.ctx("producer-1", callTimeout)
	allocs := testing.AllocsPerRun(200, func() {
		if r, err := e.srv.SendMessage(ctx, req); err != nil || r.Status.Code != rmqpb.Code_OK {
			t.Fatalf("send: %v %v", r, err)
		}
	})
	if allocs > 1 {
		t.Errorf("%.1f allocations per one-message SendMessage, want at most 1", allocs)
	}
}

// The message buffer pool: a buffer less than twice the length asked
// for (from 256 B), zeroed as far as it is handed out, reused by its tier;
// buffers of other capacities are not kept, larger ones not pooled.
func TestBufferPool(t *testing.T) {
	p := new(tieredPool)
	for _, c := range []struct{ n, cap int }{{0, 256}, {1, 256}, {256, 256}, {257, 512}, {1029, 2048}, {33 << 10, 64 << 10}, {4<<20 + MsgSizeHeadroom, 8 << 20}, {8 << 20, 8 << 20}, {8<<20 + 1, 8<<20 + 1}} {
		b := p.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.cap {
			t.Fatalf("Get(%d): len %d cap %d, want cap %d", c.n, len(*b), cap(*b), c.cap)
		}
		for i := range *b {
			(*b)[i] = 0xff
		}
		p.Put(b)
		if c.n > 8<<20 {
			continue
		}
		// A smaller length from the same tier: zeroed as far as handed out.
		n := c.n / 2
		if tierOf(n) != tierOf(c.n) {
			continue
		}
		b2 := p.Get(n)
		for i, x := range *b2 {
			if x != 0 {
				t.Fatalf("Get(%d) after Get(%d): byte %d is %#x, want 0", n, c.n, i, x)
			}
		}
	}
	odd := make([]byte, 0, 3000)
	p.Put(&odd) // not a tier's capacity: dropped
	if b := p.Get(3000); cap(*b) != 4096 {
		t.Fatalf("Get(3000) after Put of a 3000-byte buffer: cap %d, want 4096", cap(*b))
	}
}
