package grpcfe

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/rmqpb"
	"github.com/apogeemq/apogee/store"
)

const (
	// callTimeout bounds a call the test expects an answer to: it only
	// ends a test that would hang, so it is internal/wait's bound.
	callTimeout = wait.DefaultTimeout
	// arrival is how long a receive that expects a message holds: it is
	// answered as soon as one is there, so the bound only ends a test that
	// would hang (the env's core allows holds that long).
	arrival = wait.DefaultTimeout
)

// newEnvB is newEnv for a benchmark.
func newEnvB(b *testing.B) *env { return newEnvTB(b, nil) }

// env is a core and its gRPC front end on a loopback port, with a client
// connection to it.
type env struct {
	t    testing.TB
	core *core.Core
	srv  *Server
	cc   *grpc.ClientConn
	cli  rmqpb.MessagingServiceClient
}

// newEnv starts a core in t's temporary directory (mutate changes its
// options first) and the front end; both stop when the test ends.
func newEnv(t *testing.T, mutate func(*core.Options)) *env { return newEnvTB(t, mutate) }

func newEnvTB(t testing.TB, mutate func(*core.Options)) *env { return newEnvWith(t, mutate, nil, nil) }

// newEnvWith is newEnvTB with the front end's options changed by front and
// the client's dial options.
func newEnvWith(t testing.TB, mutate func(*core.Options), front func(*Options), dial []grpc.DialOption) *env {
	t.Helper()
	o := core.Options{
		DataDir: t.TempDir(), AdvertiseAddr: "127.0.0.1:10911", Logger: testlog.New(t, "core"), LongPollMax: arrival,
		Store: store.Options{SegmentSize: 8 << 20, ConsumeQueueEntries: 4096, IndexSlots: 1024,
			IndexMaxEntries: 8192, CleanInterval: -1},
		MaxMessageSize: 1 << 20,
	}
	if mutate != nil {
		mutate(&o)
	}
	c, err := core.New(o)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fo := Options{Addr: l.Addr().String(), Logger: testlog.New(t, "grpc")}
	if front != nil {
		front(&fo)
	}
	s, err := New(c, fo)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	if dial == nil {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(l.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, core: c, srv: s, cc: cc, cli: rmqpb.NewMessagingServiceClient(cc)}
	t.Cleanup(func() {
		cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := c.Shutdown(); err != nil {
			t.Errorf("core Shutdown: %v", err)
		}
	})
	return e
}

// ctx returns a call context of client id, bounded by d.
func (e *env) ctx(id string, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, metaClientID, id)
}

func res(name string) *rmqpb.Resource { return &rmqpb.Resource{Name: name} }

// msg is a message to send.
func msg(topic, id, body string) *rmqpb.Message {
	return &rmqpb.Message{Topic: res(topic), Body: []byte(body), SystemProperties: &rmqpb.SystemProperties{
		MessageId: id, BornTimestamp: timestamppb.Now(), BornHost: "test", BodyEncoding: rmqpb.Encoding_IDENTITY}}
}

// send sends one message and returns its entry, failing on a non-OK status.
func (e *env) send(m *rmqpb.Message) *rmqpb.SendResultEntry {
	e.t.Helper()
	r, err := e.cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{m}})
	if err != nil {
		e.t.Fatal(err)
	}
	if r.GetStatus().GetCode() != rmqpb.Code_OK || len(r.Entries) != 1 {
		e.t.Fatalf("SendMessage: %v", r)
	}
	return r.Entries[0]
}

// receive receives up to n messages of topic for group, holding up to
// wait; it returns the messages and the final status.
func (e *env) receive(group, topic string, n int32, invisible, wait time.Duration, filter *rmqpb.FilterExpression) ([]*rmqpb.Message, *rmqpb.Status) {
	e.t.Helper()
	req := &rmqpb.ReceiveMessageRequest{Group: res(group), MessageQueue: &rmqpb.MessageQueue{Topic: res(topic), Id: -1},
		FilterExpression: filter, BatchSize: n, InvisibleDuration: durationpb.New(invisible),
		LongPollingTimeout: durationpb.New(wait)}
	if filter == nil {
		req.FilterExpression = &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}
	}
	st, err := e.cli.ReceiveMessage(e.ctx("consumer-1", wait+callTimeout), req)
	if err != nil {
		e.t.Fatal(err)
	}
	var msgs []*rmqpb.Message
	var status *rmqpb.Status
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			e.t.Fatal(err)
		}
		switch c := r.Content.(type) {
		case *rmqpb.ReceiveMessageResponse_Message:
			msgs = append(msgs, c.Message)
		case *rmqpb.ReceiveMessageResponse_Status:
			status = c.Status
		}
	}
	if status == nil {
		e.t.Fatal("the receive ended without a status")
	}
	return msgs, status
}

// ack acknowledges m for group and returns the entry's status code.
func (e *env) ack(group string, m *rmqpb.Message) rmqpb.Code {
	e.t.Helper()
	r, err := e.cli.AckMessage(e.ctx("consumer-1", callTimeout), &rmqpb.AckMessageRequest{Group: res(group), Topic: m.Topic,
		Entries: []*rmqpb.AckMessageEntry{{MessageId: m.SystemProperties.MessageId, ReceiptHandle: m.SystemProperties.GetReceiptHandle()}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Entries[0].Status.Code
}

// route queries a topic's route (creating it).
func (e *env) route(topic string) *rmqpb.QueryRouteResponse {
	e.t.Helper()
	r, err := e.cli.QueryRoute(e.ctx("producer-1", callTimeout), &rmqpb.QueryRouteRequest{Topic: res(topic)})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// dispatched waits until topic's queues hold n messages: a send returns
// once its message is stored, the dispatcher makes it visible just after.
func (e *env) dispatched(topic string, n int64) {
	e.t.Helper()
	cfg, ok := e.core.TopicConfig(topic)
	if !ok {
		e.t.Fatalf("no topic %s", topic)
	}
	wait.For(e.t, fmt.Sprintf("%d messages of %s dispatched", n, topic), func() error {
		var total int64
		for q := int32(0); q < cfg.ReadQueueNums; q++ {
			total += e.core.MaxOffset(topic, q)
		}
		if total < n {
			return fmt.Errorf("%d dispatched", total)
		}
		return nil
	})
}
