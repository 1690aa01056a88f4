package scenario

import (
	"context"
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
	"github.com/apogeemq/apogee/broker/grpcfe"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/rmqpb"
)

// grpcDriver runs the scenarios through the gRPC front end (broker/grpcfe)
// with the generated MessagingService client, as RocketMQ 5's SDKs call it.
//
// Topics and groups are created on the core directly (its admin
// operations): RocketMQ 5's MessagingService has no administration (topics
// and groups are made with the remoting admin API, mqadmin or the
// dashboard), so there is nothing of the gRPC protocol to drive there.
type grpcDriver struct {
	admin *coreDriver
	cli   rmqpb.MessagingServiceClient
}

// clientIDHeader is the metadata key of RocketMQ 5's client id.
const clientIDHeader = "x-mq-client-id"

func newGRPCDriver(t *testing.T) driver {
	t.Helper()
	c, err := core.New(coreOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(func() {
		if err := c.Shutdown(); err != nil {
			t.Errorf("core Shutdown: %v", err)
		}
	})
	return startGRPC(t, c)
}

// startGRPC starts a gRPC front end on c and returns a driver connected to
// it; the front end stops before c does (c's cleanup is registered first).
func startGRPC(t *testing.T, c *core.Core) *grpcDriver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := grpcfe.New(c, grpcfe.Options{Addr: l.Addr().String(), Logger: testlog.New(t, "grpc")})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("grpcfe Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return dialGRPC(t, l.Addr().String(), c)
}

// dialGRPC returns a driver connected to the gRPC front end at addr on core
// c (its admin operations'); the connection closes when the test ends,
// before what was started earlier stops.
func dialGRPC(t *testing.T, addr string, c *core.Core) *grpcDriver {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &grpcDriver{admin: &coreDriver{c: c, queues: map[string]int32{}, orderly: map[string]bool{}},
		cli: rmqpb.NewMessagingServiceClient(cc)}
}

func (d *grpcDriver) lacks(o op) string {
	switch o {
	case opDelayLevel:
		return "a message's SystemProperties carry a delivery_timestamp and no delay level (DELAY is a reserved property)"
	case opSubscribe:
		return "PullMessage and ReceiveMessage carry their filter_expression: a client's subscriptions (telemetry settings) " +
			"register it and filter nothing"
	case opSendBack:
		return "MessagingService has no CONSUMER_SEND_MSG_BACK: a received message is retried through its invisible duration " +
			"(ChangeInvisibleDuration) or given up with ForwardMessageToDeadLetterQueue, and PullMessage's messages are not retried"
	}
	return ""
}

// ctx is a call context of a client id, bounded by callTimeout.
func ctx(t *testing.T, clientID string) context.Context {
	c, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(c, clientIDHeader, clientID)
}

func res(name string) *rmqpb.Resource { return &rmqpb.Resource{Name: name} }

func (d *grpcDriver) createTopic(t *testing.T, topic string, queues int32, typ string) {
	t.Helper()
	d.admin.createTopic(t, topic, queues, typ)
}

func (d *grpcDriver) createGroup(t *testing.T, group string, g groupConfig) {
	t.Helper()
	d.admin.createGroup(t, group, g)
}

// grpcMessage is the protocol's message for m, of type typ (unspecified: the
// front end infers it).
func grpcMessage(m Msg, id string, typ rmqpb.MessageType) *rmqpb.Message {
	sp := &rmqpb.SystemProperties{MessageId: id, BornTimestamp: timestamppb.Now(), BornHost: "127.0.0.1",
		BodyEncoding: rmqpb.Encoding_IDENTITY, MessageType: typ, Keys: m.Keys}
	if m.Tag != "" {
		sp.Tag = &m.Tag
	}
	if m.Group != "" {
		sp.MessageGroup = &m.Group
	}
	sp.Priority = m.Priority
	if !m.DeliverAt.IsZero() {
		sp.DeliveryTimestamp = timestamppb.New(m.DeliverAt)
	}
	return &rmqpb.Message{Topic: res(m.Topic), Body: []byte(m.Body), SystemProperties: sp, UserProperties: m.Props}
}

func (d *grpcDriver) sendMessage(t *testing.T, m *rmqpb.Message) (*rmqpb.SendResultEntry, error) {
	t.Helper()
	r, err := d.cli.SendMessage(ctx(t, "scenario-producer"), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{m}})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if c := r.GetStatus().GetCode(); c != rmqpb.Code_OK || len(r.Entries) != 1 {
		return nil, statusError(r.GetStatus())
	}
	return r.Entries[0], nil
}

// statusError is a non-OK status as a refusal.
func statusError(s *rmqpb.Status) error {
	return &refusal{grpc: s.GetCode().String(), msg: s.GetMessage(), noTopic: s.GetCode() == rmqpb.Code_TOPIC_NOT_FOUND}
}

func (d *grpcDriver) send(t *testing.T, m Msg) (Sent, error) {
	t.Helper()
	id := newID()
	e, err := d.sendMessage(t, grpcMessage(m, id, rmqpb.MessageType_MESSAGE_TYPE_UNSPECIFIED))
	if err != nil {
		return Sent{}, err
	}
	// The protocol's send result names no queue.
	return Sent{ID: e.MessageId, Queue: -1, Offset: e.Offset}, nil
}

func (d *grpcDriver) sendHalf(t *testing.T, m Msg) Sent {
	t.Helper()
	id := newID()
	e, err := d.sendMessage(t, grpcMessage(m, id, rmqpb.MessageType_TRANSACTION))
	if err != nil {
		t.Fatalf("half send: %v", err)
	}
	return Sent{ID: e.MessageId, Queue: -1, Offset: e.Offset, tx: txRef{id: e.MessageId, grpcID: e.TransactionId}}
}

func (d *grpcDriver) endTx(t *testing.T, topic string, tx txRef, how resolution, fromCheck bool) {
	t.Helper()
	r := &rmqpb.EndTransactionRequest{Topic: res(topic), MessageId: tx.id, TransactionId: tx.grpcID,
		Resolution: rmqpb.TransactionResolution_TRANSACTION_RESOLUTION_UNSPECIFIED, Source: rmqpb.TransactionSource_SOURCE_CLIENT}
	switch how {
	case commit:
		r.Resolution = rmqpb.TransactionResolution_COMMIT
	case rollback:
		r.Resolution = rmqpb.TransactionResolution_ROLLBACK
	}
	if fromCheck {
		r.Source = rmqpb.TransactionSource_SOURCE_SERVER_CHECK
	}
	resp, err := d.cli.EndTransaction(ctx(t, "scenario-producer"), r)
	if err != nil || resp.GetStatus().GetCode() != rmqpb.Code_OK {
		t.Fatalf("EndTransaction: %v %v", resp, err)
	}
}

// watchChecks opens a producer's telemetry stream that publishes topic: the
// broker pushes its checks on it.
func (d *grpcDriver) watchChecks(t *testing.T, topic string) <-chan Check {
	t.Helper()
	c, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), clientIDHeader, "scenario-producer-"+topic))
	tel, err := d.cli.Telemetry(c)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	pt := rmqpb.ClientType_PRODUCER
	if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: &pt, PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res(topic)}}}}}}); err != nil {
		cancel()
		t.Fatal(err)
	}
	reply, err := tel.Recv()
	if err != nil || reply.GetStatus().GetCode() != rmqpb.Code_OK {
		cancel()
		t.Fatalf("the settings' answer: %v %v", reply, err)
	}
	ch := make(chan Check, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			cmd, err := tel.Recv()
			if err != nil {
				return
			}
			chk := cmd.GetRecoverOrphanedTransactionCommand()
			if chk == nil {
				continue
			}
			id := chk.GetMessage().GetSystemProperties().GetMessageId()
			select {
			case ch <- Check{ID: id, Body: string(chk.GetMessage().GetBody()), tx: txRef{id: id, grpcID: chk.GetTransactionId()}}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ch
}

func filterExpr(f Filter) *rmqpb.FilterExpression {
	if f.typ() == "SQL92" {
		return &rmqpb.FilterExpression{Type: rmqpb.FilterType_SQL, Expression: f.expr()}
	}
	return &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: f.expr()}
}

// gotOfMessage is a delivered message of the protocol as a Got.
func gotOfMessage(m *rmqpb.Message) Got {
	sp := m.GetSystemProperties()
	g := Got{ID: sp.GetMessageId(), Topic: m.GetTopic().GetName(), Body: string(m.GetBody()), Tag: sp.GetTag(),
		Keys: sp.GetKeys(), Props: m.GetUserProperties(), Group: sp.GetMessageGroup(), Queue: sp.GetQueueId(),
		Offset: sp.GetQueueOffset(), Reconsume: sp.GetDeliveryAttempt() - 1, StoreTime: sp.GetStoreTimestamp().AsTime(),
		RetryTopic: sp.GetDeadLetterQueue().GetTopic(), handle: sp.GetReceiptHandle()}
	if g.Props == nil {
		g.Props = map[string]string{}
	}
	return g
}

func (d *grpcDriver) pull(t *testing.T, group, topic string, q int32, offset int64, f Filter) (Pulled, error) {
	t.Helper()
	return d.pullHeld(t, group, topic, q, offset, f, 0)
}

// pullHeld is a PullMessage with a long_polling_timeout.
func (d *grpcDriver) pullHeld(t *testing.T, group, topic string, q int32, offset int64, f Filter, hold time.Duration) (Pulled, error) {
	t.Helper()
	if f.registered != 0 {
		t.Fatal("the gRPC protocol pulls by its own filter (lacks)")
	}
	for {
		st, err := d.cli.PullMessage(ctx(t, "scenario-consumer"), &rmqpb.PullMessageRequest{Group: res(group),
			MessageQueue: &rmqpb.MessageQueue{Topic: res(topic), Id: q}, Offset: offset, BatchSize: 32,
			FilterExpression: filterExpr(f), LongPollingTimeout: durationpb.New(hold)})
		if err != nil {
			t.Fatalf("PullMessage: %v", err)
		}
		var out Pulled
		var status *rmqpb.Status
		for {
			r, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("PullMessage: %v", err)
			}
			switch c := r.Content.(type) {
			case *rmqpb.PullMessageResponse_Status:
				status = c.Status
			case *rmqpb.PullMessageResponse_Message:
				out.Msgs = append(out.Msgs, gotOfMessage(c.Message))
			case *rmqpb.PullMessageResponse_NextOffset:
				out.Next = c.NextOffset
			}
		}
		switch status.GetCode() {
		case rmqpb.Code_OK, rmqpb.Code_ILLEGAL_OFFSET:
		case rmqpb.Code_MESSAGE_NOT_FOUND:
			// Nothing matched the filter up to the next offset: read on.
			if out.Next > offset {
				offset = out.Next
				continue
			}
		default:
			return Pulled{}, statusError(status)
		}
		return out, nil
	}
}

func (d *grpcDriver) pop(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter) ([]Got, error) {
	t.Helper()
	return d.popHeld(t, group, topic, max, invisible, f, 0)
}

// popHeld is a ReceiveMessage with a long_polling_timeout.
func (d *grpcDriver) popHeld(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter, hold time.Duration) ([]Got, error) {
	t.Helper()
	st, err := d.cli.ReceiveMessage(ctx(t, "scenario-consumer"), &rmqpb.ReceiveMessageRequest{Group: res(group),
		MessageQueue: &rmqpb.MessageQueue{Topic: res(topic), Id: -1}, FilterExpression: filterExpr(f), BatchSize: max,
		InvisibleDuration: durationpb.New(invisible), LongPollingTimeout: durationpb.New(hold)})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	var out []Got
	var status *rmqpb.Status
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		switch c := r.Content.(type) {
		case *rmqpb.ReceiveMessageResponse_Status:
			status = c.Status
		case *rmqpb.ReceiveMessageResponse_Message:
			out = append(out, gotOfMessage(c.Message))
		}
	}
	switch status.GetCode() {
	case rmqpb.Code_OK, rmqpb.Code_MESSAGE_NOT_FOUND:
	default:
		return nil, statusError(status)
	}
	return out, nil
}

// receiptStatus reports whether a receipt operation succeeded: false for
// INVALID_RECEIPT_HANDLE, a failure of t for any other status.
func receiptStatus(t *testing.T, what string, s *rmqpb.Status) bool {
	t.Helper()
	switch s.GetCode() {
	case rmqpb.Code_OK:
		return true
	case rmqpb.Code_INVALID_RECEIPT_HANDLE:
		return false
	}
	t.Fatalf("%s: %v", what, s)
	return false
}

func (d *grpcDriver) ack(t *testing.T, group string, g Got) bool {
	t.Helper()
	r, err := d.cli.AckMessage(ctx(t, "scenario-consumer"), &rmqpb.AckMessageRequest{Group: res(group), Topic: res(g.Topic),
		Entries: []*rmqpb.AckMessageEntry{{MessageId: g.ID, ReceiptHandle: g.handle}}})
	if err != nil {
		t.Fatalf("AckMessage: %v", err)
	}
	if len(r.Entries) != 1 {
		t.Fatalf("AckMessage: %v", r)
	}
	return receiptStatus(t, "AckMessage", r.Entries[0].Status)
}

func (d *grpcDriver) changeInvisible(t *testing.T, group string, g Got, dur time.Duration) (Got, bool) {
	t.Helper()
	r, err := d.cli.ChangeInvisibleDuration(ctx(t, "scenario-consumer"), &rmqpb.ChangeInvisibleDurationRequest{Group: res(group),
		Topic: res(g.Topic), ReceiptHandle: g.handle, InvisibleDuration: durationpb.New(dur), MessageId: g.ID})
	if err != nil {
		t.Fatalf("ChangeInvisibleDuration: %v", err)
	}
	if !receiptStatus(t, "ChangeInvisibleDuration", r.Status) {
		return g, false
	}
	g.handle = r.ReceiptHandle
	return g, true
}

func (d *grpcDriver) commitOffset(t *testing.T, group, topic string, q int32, offset int64) {
	t.Helper()
	r, err := d.cli.UpdateOffset(ctx(t, "scenario-consumer"), &rmqpb.UpdateOffsetRequest{Group: res(group),
		MessageQueue: &rmqpb.MessageQueue{Topic: res(topic), Id: q}, Offset: offset})
	if err != nil || r.GetStatus().GetCode() != rmqpb.Code_OK {
		t.Fatalf("UpdateOffset: %v %v", r, err)
	}
}

func (d *grpcDriver) queryOffset(t *testing.T, group, topic string, q int32) (int64, bool) {
	t.Helper()
	r, err := d.cli.GetOffset(ctx(t, "scenario-consumer"), &rmqpb.GetOffsetRequest{Group: res(group),
		MessageQueue: &rmqpb.MessageQueue{Topic: res(topic), Id: q}})
	if err != nil {
		t.Fatalf("GetOffset: %v", err)
	}
	switch r.GetStatus().GetCode() {
	case rmqpb.Code_OK:
		return r.Offset, true
	case rmqpb.Code_OFFSET_NOT_FOUND:
		return 0, false
	}
	t.Fatalf("GetOffset: %v", r.GetStatus())
	return 0, false
}

func (d *grpcDriver) sendBack(t *testing.T, group string, g Got, delayLevel int32) {
	t.Fatal("the gRPC protocol has no send-back (lacks)")
}

func (d *grpcDriver) readDLQ(t *testing.T, group string) []Got {
	t.Helper()
	p, err := d.pull(t, "dlq-reader", "%DLQ%"+group, 0, 0, Filter{})
	if err != nil && !topicMissing(err) {
		t.Fatalf("pull of %%DLQ%%%s: %v", group, err)
	}
	return p.Msgs
}

func (d *grpcDriver) forwardDLQ(t *testing.T, group string, g Got) bool {
	t.Helper()
	r, err := d.cli.ForwardMessageToDeadLetterQueue(ctx(t, "scenario-consumer"), &rmqpb.ForwardMessageToDeadLetterQueueRequest{
		Group: res(group), Topic: res(g.Topic), ReceiptHandle: g.handle, MessageId: g.ID,
		DeliveryAttempt: g.Reconsume + 1, MaxDeliveryAttempts: g.Reconsume + 1})
	if err != nil {
		t.Fatalf("ForwardMessageToDeadLetterQueue: %v", err)
	}
	return receiptStatus(t, "ForwardMessageToDeadLetterQueue", r.GetStatus())
}

func (d *grpcDriver) subscribe(t *testing.T, _, _ string, _ Filter) int64 {
	t.Fatal("the gRPC protocol pulls by its own filter (lacks)")
	return 0
}
