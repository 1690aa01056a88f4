package grpcfe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/rmqpb"
)

// testBudget is a Budget with a limit, counting what it granted.
type testBudget struct {
	mu                         sync.Mutex
	limit, used, peak, granted int64
	refused                    int
}

func (b *testBudget) TryReserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit > 0 && b.used+n > b.limit {
		b.refused++
		return false
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	b.granted++
	return true
}

func (b *testBudget) Release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.used < 0 {
		panic("released more than reserved")
	}
}

func (b *testBudget) snapshot() (used, granted int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.granted
}

// usedIs waits until the budget holds n bytes.
func (b *testBudget) usedIs(t *testing.T, n int64) {
	t.Helper()
	wait.For(t, fmt.Sprintf("the budget holding %d bytes", n), func() error {
		if used, _ := b.snapshot(); used != n {
			return fmt.Errorf("%d held", used)
		}
		return nil
	})
}

// With ACL on, an unauthenticated call is refused from its headers by the
// tap: Unauthenticated, nothing reserved, nothing of its request read. An
// authenticated request larger than the cap is refused from its length
// prefix (ResourceExhausted, counted), and its reservation goes back.
func TestTapRefusesBeforeReading(t *testing.T) {
	g := openGuard(t, io.Discard)
	b := &testBudget{}
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	e := newEnvWith(t, nil, func(o *Options) { o.Guard, o.Budget = g, b }, []grpc.DialOption{plain, signedBy("app", "app-secret")})
	capBytes := int64(e.srv.opts.MaxRecvMsgSize)
	if want := int64(1<<20 + MsgSizeHeadroom); capBytes != want {
		t.Fatalf("receive cap %d, want the core's maximum message size plus the headroom (%d)", capBytes, want)
	}
	big := msg("orders-1", "big", strings.Repeat("x", int(capBytes)+1))

	// Unsigned, with a request larger than the cap: refused for its
	// credentials before anything else.
	_, err := e.client(plain).SendMessage(e.ctx("intruder", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{big}})
	if grpcstatus.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "UNAUTHORIZED (40100)") {
		t.Fatalf("unsigned send: %v, want Unauthenticated naming 40100", err)
	}
	if _, granted := b.snapshot(); granted != 0 {
		t.Fatalf("the unauthenticated call reserved budget %d times", granted)
	}
	if st := e.srv.Stats(); st.AuthRefused != 1 || st.Streams != 1 {
		t.Fatalf("stats %+v: want 1 stream, refused for authentication", st)
	}

	// Signed, too large: refused from the length prefix.
	_, err = e.cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{big}})
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized send: %v, want ResourceExhausted", err)
	}
	wait.For(t, "the size refusal counted", func() error {
		if n := e.srv.Stats().SizeRefused; n != 1 {
			return fmt.Errorf("%d counted", n)
		}
		return nil
	})
	b.usedIs(t, 0)

	// A signed send within the cap is served, its reservation given back.
	e.send(msg("orders-1", "ok", "hello"))
	b.usedIs(t, 0)
	if _, granted := b.snapshot(); granted != 2 {
		t.Fatalf("%d reservations, want 2 (the oversized send and the good one)", granted)
	}
	if b.peak > capBytes {
		t.Fatalf("peak %d bytes reserved, want at most one request's cap (%d)", b.peak, capBytes)
	}
}

// A full budget refuses new calls at once (ResourceExhausted, counted);
// a stream's reservation goes back when its first request arrives, and a
// stream whose request does not come within RequestTimeout is ended and
// gives it back.
func TestBudgetRefusesWhenFull(t *testing.T) {
	b := &testBudget{}
	e := newEnvWith(t, nil, func(o *Options) {
		o.Budget = b
		o.RequestTimeout = 300 * time.Millisecond
	}, nil)
	capBytes := int64(e.srv.opts.MaxRecvMsgSize)
	b.mu.Lock()
	b.limit = capBytes // room for one request
	b.mu.Unlock()

	// A Telemetry stream whose first command does not come yet holds the
	// room.
	ctx, cancel := context.WithCancel(e.ctx("producer-1", callTimeout))
	defer cancel()
	tel, err := e.cli.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.usedIs(t, capBytes)
	_, err = e.cli.QueryRoute(e.ctx("producer-1", callTimeout), &rmqpb.QueryRouteRequest{Topic: res("T")})
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call while the budget is full: %v, want ResourceExhausted", err)
	}
	if n := e.srv.Stats().BudgetRefused; n != 1 {
		t.Fatalf("%d budget refusals counted, want 1", n)
	}

	// Its first command arrives: the room is given back.
	if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: rmqpb.ClientType_PRODUCER.Enum()}}}); err != nil {
		t.Fatal(err)
	}
	b.usedIs(t, 0)
	if r := e.route("T"); r.GetStatus().GetCode() != rmqpb.Code_OK {
		t.Fatalf("route after the room came back: %v", r.GetStatus())
	}

	// A second stream that never sends its request is ended after the
	// request timeout.
	ctx2, cancel2 := context.WithCancel(e.ctx("producer-2", callTimeout))
	defer cancel2()
	stalled, err := e.cli.Telemetry(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Recv(); err == nil {
		t.Fatal("the stalled stream was answered")
	}
	b.usedIs(t, 0)
	if n := e.srv.Stats().RequestTimeouts; n != 1 {
		t.Fatalf("%d request timeouts counted, want 1", n)
	}
}

// receiveHeld starts a receive of topic for group as client id on cli,
// holding up to a minute; it returns its status on ch (OK once a message
// came; nil when the stream ended without one, after ctx was cancelled).
func receiveHeld(ctx context.Context, cli rmqpb.MessagingServiceClient, id, group, topic string, ch chan<- *rmqpb.Status) {
	ctx = metadata.AppendToOutgoingContext(ctx, metaClientID, id)
	go func() {
		s, err := cli.ReceiveMessage(ctx, &rmqpb.ReceiveMessageRequest{Group: res(group), MessageQueue: &rmqpb.MessageQueue{Topic: res(topic), Id: -1},
			FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}, BatchSize: 1,
			InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(time.Minute)})
		if err != nil {
			ch <- nil
			return
		}
		for {
			r, err := s.Recv()
			switch {
			case err != nil:
				ch <- nil
				return
			case r.GetMessage() != nil:
				ch <- okStatus
				return
			case r.GetStatus() != nil:
				ch <- r.GetStatus()
				return
			}
		}
	}()
}

// One client holding many receives it does not read cannot take the
// broker's long polls from another: beyond MaxHeldPerClient its receives
// are refused (TOO_MANY_REQUESTS), on one connection and over several,
// counted and logged once; another client's consumer is still held and
// served.
func TestHeldPerClient(t *testing.T) {
	var log lockedBuffer
	e := newEnvWith(t, func(o *core.Options) { o.LongPollMax = time.Minute }, func(o *Options) {
		o.MaxHeldPerClient = 3
		o.MaxHeldReceives = 8
		o.Logger = testLogger(&log)
	}, nil)
	e.route("quiet")
	e.route("orders")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan *rmqpb.Status, 16)
	held := func(n int) {
		t.Helper()
		wait.For(t, fmt.Sprintf("%d receives held", n), func() error {
			if h := e.srv.Stats().Held; h != n {
				return fmt.Errorf("%d held", h)
			}
			return nil
		})
	}
	refused := func(what string) {
		t.Helper()
		select {
		case st := <-answers:
			if st.GetCode() != rmqpb.Code_TOO_MANY_REQUESTS {
				t.Fatalf("%s: %v, want TOO_MANY_REQUESTS", what, st)
			}
		case <-time.After(callTimeout):
			t.Fatalf("%s: not refused", what)
		}
	}
	for i := 0; i < 3; i++ {
		receiveHeld(ctx, e.cli, "greedy", "g1", "quiet", answers)
	}
	held(3)
	receiveHeld(ctx, e.cli, "greedy", "g1", "quiet", answers)
	refused("a fourth receive on the same connection")
	// The same client on a second connection.
	other := e.client(grpc.WithTransportCredentials(insecure.NewCredentials()))
	receiveHeld(ctx, other, "greedy", "g1", "quiet", answers)
	refused("the client's receive on another connection")
	st := e.srv.Stats()
	if st.HeldRefusedConn != 1 || st.HeldRefusedClient != 1 || st.HeldRefusedBroker != 0 {
		t.Fatalf("stats %+v: want one refusal by the connection's bound, one by the client's", st)
	}

	// Another client's consumer is held, and served when a message comes.
	receiveHeld(ctx, other, "fair", "g2", "orders", answers)
	held(4)
	e.send(msg("orders", "m1", "hello"))
	select {
	case st := <-answers:
		if st.GetCode() != rmqpb.Code_OK {
			t.Fatalf("the fair consumer: %v", st)
		}
	case <-time.After(callTimeout):
		t.Fatal("the fair consumer was not served")
	}
	out := log.String()
	if n := strings.Count(out, "grpc: a receive or pull was refused"); n != 2 {
		t.Errorf("%d refusal lines, want 2 (one per cause):\n%s", n, out)
	}
	if !strings.Contains(out, "client=greedy") {
		t.Errorf("the refusal does not name the client:\n%s", out)
	}
}

// Route queries that create topics count against the auto-creation caps
// with the client's address: beyond MaxAutoCreatePerSource they are
// refused (TOPIC_NOT_FOUND).
func TestRouteAutoCreateCap(t *testing.T) {
	e := newEnv(t, func(o *core.Options) { o.MaxAutoCreatePerSource = 3 })
	for i := 0; i < 5; i++ {
		r := e.route(fmt.Sprintf("new-%d", i))
		want := rmqpb.Code_OK
		if i >= 3 {
			want = rmqpb.Code_TOPIC_NOT_FOUND
		}
		if r.GetStatus().GetCode() != want {
			t.Fatalf("route %d: %v, want %v", i, r.GetStatus(), want)
		}
	}
	if _, ok := e.core.TopicConfig("new-3"); ok {
		t.Fatal("a refused route created its topic")
	}
	if n := e.core.Admin().RuntimeInfo()["autoCreateRefusedPerSource"]; n != "2" {
		t.Fatalf("autoCreateRefusedPerSource %q, want 2", n)
	}
}

// An answer larger than MaxSendMsgSize is not sent (ResourceExhausted,
// counted).
func TestSendCap(t *testing.T) {
	e := newEnvWith(t, nil, func(o *Options) { o.MaxSendMsgSize = 64 }, nil)
	_, err := e.cli.QueryRoute(e.ctx("producer-1", callTimeout), &rmqpb.QueryRouteRequest{Topic: res("T")})
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("an answer beyond the send cap: %v, want ResourceExhausted", err)
	}
	wait.For(t, "the size refusal counted", func() error {
		if n := e.srv.Stats().SizeRefused; n != 1 {
			return fmt.Errorf("%d counted", n)
		}
		return nil
	})
}

// testLogger logs text lines into w.
func testLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// A receive a member forwarded counts against its client's bound, not the
// member's connection's (which carries every client of the member).
func TestHeldForwardedSkipsConnBound(t *testing.T) {
	e := newEnvWith(t, func(o *core.Options) { o.LongPollMax = time.Minute }, func(o *Options) { o.MaxHeldPerClient = 2 }, nil)
	e.route("quiet")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan *rmqpb.Status, 8)
	held := func(n int) {
		t.Helper()
		wait.For(t, fmt.Sprintf("%d receives held", n), func() error {
			if h := e.srv.Stats().Held; h != n {
				return fmt.Errorf("%d held", h)
			}
			return nil
		})
	}
	receiveHeld(ctx, e.cli, "a", "g", "quiet", answers)
	receiveHeld(ctx, e.cli, "a2", "g", "quiet", answers)
	held(2) // the connection's bound is reached
	fwd := metadata.AppendToOutgoingContext(ctx, metaForwarded, "127.0.0.1:1")
	receiveHeld(fwd, e.cli, "b", "g", "quiet", answers)
	receiveHeld(fwd, e.cli, "b", "g", "quiet", answers)
	held(4)
	receiveHeld(fwd, e.cli, "b", "g", "quiet", answers)
	select {
	case st := <-answers:
		if st.GetCode() != rmqpb.Code_TOO_MANY_REQUESTS {
			t.Fatalf("a third forwarded receive of client b: %v, want TOO_MANY_REQUESTS (its client's bound)", st)
		}
	case <-time.After(callTimeout):
		t.Fatal("not refused")
	}
	if st := e.srv.Stats(); st.HeldRefusedClient != 1 || st.HeldRefusedConn != 0 {
		t.Fatalf("stats %+v: want one refusal by the client's bound", st)
	}
}
