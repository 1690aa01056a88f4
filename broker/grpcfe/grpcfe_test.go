package grpcfe

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

func TestRouteCreatesTopic(t *testing.T) {
	e := newEnv(t, nil)
	r := e.route("Orders")
	if r.Status.Code != rmqpb.Code_OK || len(r.MessageQueues) != core.DefaultTopicQueues {
		t.Fatalf("QueryRoute: %v", r)
	}
	q := r.MessageQueues[0]
	if q.Permission != rmqpb.Permission_READ_WRITE || q.Broker.Name != core.DefaultBrokerName ||
		q.Broker.Endpoints.Addresses[0].Host != "127.0.0.1" ||
		// Created without message.type: NORMAL, as RocketMQ's TopicConfig.
		len(q.AcceptMessageTypes) != 1 || q.AcceptMessageTypes[0] != rmqpb.MessageType_NORMAL {
		t.Fatalf("queue: %v", q)
	}
	if _, ok := e.core.TopicConfig("Orders"); !ok {
		t.Fatal("the topic was not created")
	}
	a, err := e.cli.QueryAssignment(e.ctx("c", callTimeout), &rmqpb.QueryAssignmentRequest{Topic: res("Orders"), Group: res("G")})
	if err != nil || a.Status.Code != rmqpb.Code_OK || len(a.Assignments) != 1 || a.Assignments[0].MessageQueue.Id != -1 {
		t.Fatalf("QueryAssignment: %v, %v", a, err)
	}
}

func TestSendReceiveAck(t *testing.T) {
	e := newEnv(t, nil)
	m := msg("T", "ID-1", "hello")
	tag := "TagA"
	m.SystemProperties.Tag = &tag
	m.SystemProperties.Keys = []string{"k1", "k2"}
	m.UserProperties = map[string]string{"color": "red"}
	ent := e.send(m)
	if ent.MessageId != "ID-1" || ent.Offset != 0 {
		t.Fatalf("entry: %v", ent)
	}
	got, st := e.receive("G", "T", 32, 30*time.Second, arrival, nil)
	if st.Code != rmqpb.Code_OK || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, st)
	}
	g := got[0]
	sp := g.SystemProperties
	if string(g.Body) != "hello" || sp.MessageId != "ID-1" || sp.GetTag() != "TagA" || strings.Join(sp.Keys, ",") != "k1,k2" ||
		g.UserProperties["color"] != "red" || len(g.UserProperties) != 1 || sp.GetDeliveryAttempt() != 1 ||
		sp.GetReceiptHandle() == "" || sp.BodyDigest.GetType() != rmqpb.DigestType_MD5 || sp.BodyDigest.GetChecksum() != "5D41402ABC4B2A76B9719D911017C592" || sp.MessageType != rmqpb.MessageType_NORMAL {
		t.Fatalf("message: %v", g)
	}
	// Invisible to the group now; a second receive finds nothing.
	if got, st := e.receive("G", "T", 32, 30*time.Second, 100*time.Millisecond, nil); len(got) != 0 || st.Code != rmqpb.Code_MESSAGE_NOT_FOUND {
		t.Fatalf("second receive: %v %v", got, st)
	}
	if c := e.ack("G", g); c != rmqpb.Code_OK {
		t.Fatalf("ack: %v", c)
	}
	if c := e.ack("G", g); c != rmqpb.Code_OK {
		t.Fatalf("second ack: %v", c)
	}
	// A tag filter that rejects it: another group sees nothing.
	if got, _ := e.receive("G2", "T", 32, time.Second, 100*time.Millisecond, &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "TagB"}); len(got) != 0 {
		t.Fatalf("filtered receive: %v", got)
	}
}

// A held receive is answered with a message that arrives while it waits
// (before its long polling ends: that would answer MESSAGE_NOT_FOUND).
func TestReceiveLongPollingWakesOnArrival(t *testing.T) {
	e := newEnv(t, nil)
	e.route("T")
	sent := make(chan error, 1)
	go func() {
		// The message comes once the receive is held, not before.
		err := wait.Poll(wait.DefaultTimeout, func() error {
			if n := e.srv.polls.Stats().Held; n != 1 {
				return fmt.Errorf("%d receives held", n)
			}
			return nil
		})
		if err == nil {
			var r *rmqpb.SendMessageResponse
			r, err = e.cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("T", "late", "x")}})
			if err == nil && r.GetStatus().GetCode() != rmqpb.Code_OK {
				err = fmt.Errorf("SendMessage: %v", r.GetStatus())
			}
		}
		sent <- err
	}()
	got, st := e.receive("G", "T", 1, 10*time.Second, arrival, nil)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if st.Code != rmqpb.Code_OK || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, st)
	}
}

func TestChangeInvisibleAndRedelivery(t *testing.T) {
	e := newEnv(t, nil)
	e.send(msg("T", "A", "a"))
	got, _ := e.receive("G", "T", 1, time.Minute, arrival, nil)
	if len(got) != 1 {
		t.Fatal("nothing received")
	}
	old := got[0].SystemProperties.GetReceiptHandle()
	r, err := e.cli.ChangeInvisibleDuration(e.ctx("c", callTimeout), &rmqpb.ChangeInvisibleDurationRequest{Group: res("G"), Topic: res("T"),
		ReceiptHandle: old, InvisibleDuration: durationpb.New(time.Millisecond), MessageId: "A"})
	if err != nil || r.Status.Code != rmqpb.Code_OK || r.ReceiptHandle == old {
		t.Fatalf("change: %v %v", r, err)
	}
	got, _ = e.receive("G", "T", 1, time.Minute, arrival, nil)
	if len(got) != 1 || got[0].SystemProperties.GetDeliveryAttempt() != 2 {
		t.Fatalf("redelivery: %v", got)
	}
	// The first handle is void now.
	stale := &rmqpb.Message{Topic: res("T"), SystemProperties: &rmqpb.SystemProperties{MessageId: "A", ReceiptHandle: &old}}
	if c := e.ack("G", stale); c != rmqpb.Code_INVALID_RECEIPT_HANDLE {
		t.Fatalf("ack with a stale handle: %v", c)
	}
	if c := e.ack("G", got[0]); c != rmqpb.Code_OK {
		t.Fatalf("ack: %v", c)
	}
}

// A held receive is woken when a message its group did not ack becomes
// visible again, without any periodic look: one revive, no arrival, and
// three looks in all (the first receive, the held one, its revive).
func TestReceiveLongPollingWakesOnRevive(t *testing.T) {
	e := newEnv(t, nil)
	e.send(msg("T", "A", "a"))
	e.dispatched("T", 1)
	// The arrival is reported just after the queue grew: once the holder
	// has it, it cannot reach the held receive.
	wait.Until(t, "the arrival reported", func() bool { return e.srv.polls.Ticket() == 1 })
	got, _ := e.receive("G", "T", 1, time.Second, arrival, nil) // not acked
	if len(got) != 1 {
		t.Fatal("nothing received")
	}
	got, st := e.receive("G", "T", 1, time.Minute, arrival, nil)
	if st.Code != rmqpb.Code_OK || len(got) != 1 || got[0].SystemProperties.GetDeliveryAttempt() != 2 {
		t.Fatalf("held receive: %v %v", got, st)
	}
	hs := e.srv.polls.Stats()
	if hs.Parked != 1 || hs.Revived != 1 || hs.Woken != 0 || hs.Expired != 0 || hs.Held != 0 {
		t.Fatalf("holder: %+v", hs)
	}
	if ri := e.srv.RuntimeInfo(); ri["grpcHeldRevived"] != "1" || ri["grpcHeldReceives"] != "0" {
		t.Fatalf("runtime info: %v", ri)
	}
	if n := e.core.Admin().RuntimeInfo()["popRequests"]; n != "3" {
		t.Fatalf("%s pop looks, want 3", n)
	}
}

// A held receive whose call is cancelled is taken back from the holder at
// once (not at its long polling's end).
func TestReceiveCancelledWhileHeld(t *testing.T) {
	e := newEnv(t, nil)
	e.route("T")
	ctx, cancel := context.WithCancel(e.ctx("consumer-1", time.Minute))
	defer cancel()
	req := &rmqpb.ReceiveMessageRequest{Group: res("G"), MessageQueue: &rmqpb.MessageQueue{Topic: res("T"), Id: -1},
		FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}, BatchSize: 1,
		InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(50 * time.Second)}
	st, err := e.cli.ReceiveMessage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wait.Equal(t, "the receive held", 1, func() int { return e.srv.polls.Stats().Held })
	cancel()
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	wait.Equal(t, "the receive taken back", int64(1), func() int64 { return e.srv.polls.Stats().Cancelled })
	if hs := e.srv.polls.Stats(); hs.Held != 0 || hs.Expired != 0 {
		t.Fatalf("holder: %+v", hs)
	}
}

func TestFIFOGroupsInOrder(t *testing.T) {
	e := newEnv(t, nil)
	e.typedTopic("F", "FIFO")
	cfg := protocol.DefaultSubscriptionGroupConfig("FG")
	cfg.ConsumeMessageOrderly = true
	if err := e.core.Admin().UpdateSubscriptionGroup(cfg); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"g1", "g2"} {
		for i := 0; i < 3; i++ {
			m := msg("F", fmt.Sprintf("%s-%d", g, i), fmt.Sprintf("%s-%d", g, i))
			grp := g
			m.SystemProperties.MessageGroup = &grp
			m.SystemProperties.MessageType = rmqpb.MessageType_FIFO
			e.send(m)
		}
	}
	e.dispatched("F", 6)
	// A FIFO receive hands out each group's messages in order, consecutive
	// ones in one answer (a batch, as RocketMQ's orderly pop).
	got, st := e.receive("FG", "F", 32, time.Minute, arrival, nil)
	if st.Code != rmqpb.Code_OK || len(got) != 6 {
		t.Fatalf("%d messages, %v", len(got), st)
	}
	next := map[string]int{"g1": 0, "g2": 0}
	for _, m := range got {
		g := m.SystemProperties.GetMessageGroup()
		if want := fmt.Sprintf("%s-%d", g, next[g]); string(m.Body) != want {
			t.Fatalf("got %s, want %s", m.Body, want)
		}
		next[g]++
	}
	// Nothing more until they are acked; then nothing is left.
	if more, _ := e.receive("FG", "F", 32, time.Minute, 50*time.Millisecond, nil); len(more) != 0 {
		t.Fatalf("%d messages while their groups are in flight", len(more))
	}
	for _, m := range got {
		if c := e.ack("FG", m); c != rmqpb.Code_OK {
			t.Fatal(c)
		}
	}
	if more, _ := e.receive("FG", "F", 32, time.Minute, 50*time.Millisecond, nil); len(more) != 0 {
		t.Fatalf("%d messages after the acks", len(more))
	}
}

func TestTransactionCommitRollbackAndCheck(t *testing.T) {
	e := newEnv(t, func(o *core.Options) {
		o.TransactionTimeout = 200 * time.Millisecond
		o.TransactionCheckInterval = 200 * time.Millisecond
	})
	e.typedTopic("X", "TRANSACTION")
	end := func(ent *rmqpb.SendResultEntry, res rmqpb.TransactionResolution) {
		t.Helper()
		r, err := e.cli.EndTransaction(e.ctx("producer-1", callTimeout), &rmqpb.EndTransactionRequest{Topic: res_("X"),
			MessageId: ent.MessageId, TransactionId: ent.TransactionId, Resolution: res, Source: rmqpb.TransactionSource_SOURCE_CLIENT})
		if err != nil || r.Status.Code != rmqpb.Code_OK {
			t.Fatalf("EndTransaction: %v %v", r, err)
		}
	}
	tx := func(id string) *rmqpb.Message {
		m := msg("X", id, id)
		m.SystemProperties.MessageType = rmqpb.MessageType_TRANSACTION
		return m
	}
	// The producer's telemetry stream, which the check comes on.
	tel, err := e.cli.Telemetry(e.ctx("producer-1", callTimeout))
	if err != nil {
		t.Fatal(err)
	}
	pt := rmqpb.ClientType_PRODUCER
	if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: &pt, PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res("X")}}}}}}); err != nil {
		t.Fatal(err)
	}
	reply, err := tel.Recv()
	if err != nil || reply.GetSettings().GetPublishing().GetMaxBodySize() != 1<<20 {
		t.Fatalf("settings reply: %v %v", reply, err)
	}
	// A producer that sent no backoff policy (the Node.js SDK) gets the
	// proxy's default: its SDK refuses settings without an exponential one.
	if b := reply.GetSettings().GetBackoffPolicy(); b.GetMaxAttempts() != 3 || b.GetExponentialBackoff().GetMultiplier() != 2 {
		t.Fatalf("settings reply's backoff policy: %v", b)
	}

	c1 := e.send(tx("commit"))
	r1 := e.send(tx("rollback"))
	if c1.TransactionId == "" {
		t.Fatal("no transaction id")
	}
	if got, _ := e.receive("G", "X", 32, time.Minute, 100*time.Millisecond, nil); len(got) != 0 {
		t.Fatalf("half messages visible: %v", got)
	}
	end(c1, rmqpb.TransactionResolution_COMMIT)
	end(r1, rmqpb.TransactionResolution_ROLLBACK)
	got, _ := e.receive("G", "X", 32, time.Minute, arrival, nil)
	if len(got) != 1 || string(got[0].Body) != "commit" || got[0].SystemProperties.MessageType != rmqpb.MessageType_TRANSACTION {
		t.Fatalf("after commit: %v", got)
	}
	e.ack("G", got[0])

	// Unended: the broker asks the producer on its telemetry stream.
	u := e.send(tx("checked"))
	// Under load a check of "commit" or "rollback" can come first: the
	// checker may have run before their EndTransaction landed, and a
	// producer answers such checks with what it already decided.
	var chk *rmqpb.RecoverOrphanedTransactionCommand
	for chk == nil || chk.Message.GetSystemProperties().GetMessageId() != "checked" {
		cmd, err := tel.Recv()
		if err != nil {
			t.Fatal(err)
		}
		chk = cmd.GetRecoverOrphanedTransactionCommand()
	}
	if chk.TransactionId != u.TransactionId || chk.Message.SystemProperties.MessageId != "checked" || chk.Message.Topic.Name != "X" {
		t.Fatalf("check: %v (sent %v)", chk, u)
	}
	r, err := e.cli.EndTransaction(e.ctx("producer-1", callTimeout), &rmqpb.EndTransactionRequest{Topic: res_("X"),
		MessageId: "checked", TransactionId: chk.TransactionId, Resolution: rmqpb.TransactionResolution_COMMIT,
		Source: rmqpb.TransactionSource_SOURCE_SERVER_CHECK})
	if err != nil || r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("EndTransaction after check: %v %v", r, err)
	}
	got, _ = e.receive("G", "X", 32, time.Minute, arrival, nil)
	if len(got) != 1 || string(got[0].Body) != "checked" {
		t.Fatalf("after the checked commit: %v", got)
	}
	if r, _ := e.cli.EndTransaction(e.ctx("producer-1", callTimeout), &rmqpb.EndTransactionRequest{Topic: res_("X"),
		TransactionId: "nonsense", Resolution: rmqpb.TransactionResolution_COMMIT}); r.Status.Code != rmqpb.Code_INVALID_TRANSACTION_ID {
		t.Fatalf("bad transaction id: %v", r)
	}
}

func res_(name string) *rmqpb.Resource { return res(name) }

func TestDelayAndRecall(t *testing.T) {
	e := newEnv(t, nil)
	e.typedTopic("D", "DELAY")
	// Delivery times are milliseconds on the wire: a nanosecond remainder
	// would make a punctual delivery look early. Two seconds leave time to
	// send and recall before then on a loaded machine.
	at := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	keep := msg("D", "keep", "keep")
	keep.SystemProperties.DeliveryTimestamp = timestamppb.New(at)
	drop := msg("D", "drop", "drop")
	drop.SystemProperties.DeliveryTimestamp = timestamppb.New(at)
	e.send(keep)
	de := e.send(drop)
	if de.RecallHandle == "" {
		t.Fatal("no recall handle for a delayed message")
	}
	r, err := e.cli.RecallMessage(e.ctx("p", callTimeout), &rmqpb.RecallMessageRequest{Topic: res("D"), RecallHandle: de.RecallHandle})
	if err != nil || r.Status.Code != rmqpb.Code_OK || r.MessageId != "drop" {
		t.Fatalf("recall: %v %v", r, err)
	}
	// One receive held until the message comes: answered before its
	// delivery time, it was delivered early.
	got, _ := e.receive("G", "D", 32, time.Minute, arrival, nil)
	if now := time.Now(); now.Before(at) {
		t.Fatalf("%d messages delivered %v before their time", len(got), at.Sub(now))
	}
	if len(got) != 1 || string(got[0].Body) != "keep" || got[0].SystemProperties.MessageType != rmqpb.MessageType_DELAY ||
		got[0].SystemProperties.GetDeliveryTimestamp().AsTime().UnixMilli() != at.UnixMilli() {
		t.Fatalf("delivered: %v", got)
	}
	if m, _ := e.receive("G", "D", 32, time.Minute, 500*time.Millisecond, nil); len(m) != 0 {
		t.Fatalf("the recalled message came: %v", m)
	}
	r, _ = e.cli.RecallMessage(e.ctx("p", callTimeout), &rmqpb.RecallMessageRequest{Topic: res("D"), RecallHandle: de.RecallHandle})
	if r.Status.Code != rmqpb.Code_NOT_FOUND {
		t.Fatalf("recall after the delivery time: %v", r)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, func(o *core.Options) { o.DisableAutoCreateTopic = true })
	if r := e.route("Nope"); r.Status.Code != rmqpb.Code_TOPIC_NOT_FOUND {
		t.Fatalf("unknown topic: %v", r)
	}
	if r := e.route("bad topic"); r.Status.Code != rmqpb.Code_ILLEGAL_TOPIC {
		t.Fatalf("illegal topic: %v", r)
	}
	if err := e.core.Admin().CreateTopic(&core.TopicRequest{Topic: "T", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	big := msg("T", "big", "")
	big.Body = bytes.Repeat([]byte("x"), 1<<20+1)
	r, err := e.cli.SendMessage(e.ctx("p", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{big}})
	if err != nil || r.Status.Code != rmqpb.Code_MESSAGE_BODY_TOO_LARGE {
		t.Fatalf("oversized: %v %v", r, err)
	}
	r, _ = e.cli.SendMessage(e.ctx("p", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("Nope", "x", "x")}})
	if r.Status.Code != rmqpb.Code_TOPIC_NOT_FOUND {
		t.Fatalf("send to an unknown topic: %v", r)
	}
	bad := msg("T", "p", "x")
	bad.UserProperties = map[string]string{"UNIQ_KEY": "x"}
	if r, _ = e.cli.SendMessage(e.ctx("p", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{bad}}); r.Status.Code != rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY {
		t.Fatalf("reserved property: %v", r)
	}
	_, st := e.receive("G", "T", 1, time.Second, 0, &rmqpb.FilterExpression{Type: rmqpb.FilterType_SQL, Expression: "a >"})
	if st.Code != rmqpb.Code_ILLEGAL_FILTER_EXPRESSION {
		t.Fatalf("malformed filter: %v", st)
	}
	_, st = e.receive("G", "Nope", 1, time.Second, 0, nil)
	if st.Code != rmqpb.Code_TOPIC_NOT_FOUND {
		t.Fatalf("receive of an unknown topic: %v", st)
	}
	// No client id: the telemetry stream refuses.
	tel, err := e.cli.Telemetry(e.ctx("", time.Second))
	if err == nil {
		var cmd *rmqpb.TelemetryCommand
		cmd, err = tel.Recv()
		if err == nil && cmd.GetStatus().GetCode() != rmqpb.Code_CLIENT_ID_REQUIRED {
			t.Fatalf("telemetry without a client id: %v", cmd)
		}
	}
	// And the broker still serves.
	if ent := e.send(msg("T", "ok", "ok")); ent.Status.Code != rmqpb.Code_OK {
		t.Fatal(ent)
	}
}

func TestPullAndOffsets(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.core.Admin().CreateTopic(&core.TopicRequest{Topic: "P", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		e.send(msg("P", fmt.Sprint(i), fmt.Sprint(i)))
	}
	e.dispatched("P", 5)
	mq := &rmqpb.MessageQueue{Topic: res("P"), Id: 0}
	q, err := e.cli.QueryOffset(e.ctx("c", callTimeout), &rmqpb.QueryOffsetRequest{MessageQueue: mq, QueryOffsetPolicy: rmqpb.QueryOffsetPolicy_END})
	if err != nil || q.Status.Code != rmqpb.Code_OK || q.Offset != 5 {
		t.Fatalf("QueryOffset END: %v %v", q, err)
	}
	st, err := e.cli.PullMessage(e.ctx("c", callTimeout), &rmqpb.PullMessageRequest{Group: res("PG"), MessageQueue: mq, Offset: 2,
		BatchSize: 32, FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"},
		LongPollingTimeout: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	var next int64 = -1
	var status *rmqpb.Status
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch c := r.Content.(type) {
		case *rmqpb.PullMessageResponse_Status:
			status = c.Status
		case *rmqpb.PullMessageResponse_Message:
			bodies = append(bodies, string(c.Message.Body))
		case *rmqpb.PullMessageResponse_NextOffset:
			next = c.NextOffset
		}
	}
	if status.GetCode() != rmqpb.Code_OK || strings.Join(bodies, ",") != "2,3,4" || next != 5 {
		t.Fatalf("pull: %v %v %d", status, bodies, next)
	}
	u, err := e.cli.UpdateOffset(e.ctx("c", callTimeout), &rmqpb.UpdateOffsetRequest{Group: res("PG"), MessageQueue: mq, Offset: next})
	if err != nil || u.Status.Code != rmqpb.Code_OK {
		t.Fatalf("UpdateOffset: %v %v", u, err)
	}
	g, err := e.cli.GetOffset(e.ctx("c", callTimeout), &rmqpb.GetOffsetRequest{Group: res("PG"), MessageQueue: mq})
	if err != nil || g.Status.Code != rmqpb.Code_OK || g.Offset != 5 {
		t.Fatalf("GetOffset: %v %v", g, err)
	}
	q, _ = e.cli.QueryOffset(e.ctx("c", callTimeout), &rmqpb.QueryOffsetRequest{MessageQueue: mq,
		QueryOffsetPolicy: rmqpb.QueryOffsetPolicy_TIMESTAMP, Timestamp: timestamppb.New(time.Now().Add(-time.Hour))})
	if q.Status.Code != rmqpb.Code_OK || q.Offset != 0 {
		t.Fatalf("QueryOffset TIMESTAMP: %v", q)
	}
}

func TestForwardToDeadLetter(t *testing.T) {
	e := newEnv(t, nil)
	e.send(msg("T", "bad", "bad"))
	got, _ := e.receive("G", "T", 1, time.Minute, arrival, nil)
	if len(got) != 1 {
		t.Fatal("nothing received")
	}
	r, err := e.cli.ForwardMessageToDeadLetterQueue(e.ctx("c", callTimeout), &rmqpb.ForwardMessageToDeadLetterQueueRequest{
		Group: res("G"), Topic: res("T"), ReceiptHandle: got[0].SystemProperties.GetReceiptHandle(), MessageId: "bad",
		DeliveryAttempt: 1, MaxDeliveryAttempts: 1})
	if err != nil || r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("forward: %v %v", r, err)
	}
	if c := e.ack("G", got[0]); c != rmqpb.Code_OK {
		t.Fatalf("the forwarded message is not done: ack %v", c)
	}
	dl, _ := e.receive("DLQReader", "%DLQ%G", 1, time.Minute, arrival, nil)
	if len(dl) != 1 || string(dl[0].Body) != "bad" || dl[0].SystemProperties.GetDeadLetterQueue().GetTopic() != "T" {
		t.Fatalf("dead letter: %v", dl)
	}
}

// TestTLSAndPlaintextOnOnePort: RocketMQ 5's clients connect with TLS by
// default (trusting any certificate); plaintext works on the same port.
func TestTLSAndPlaintextOnOnePort(t *testing.T) {
	e := newEnv(t, nil)
	cc, err := grpc.NewClient(e.cc.Target(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	r, err := rmqpb.NewMessagingServiceClient(cc).QueryRoute(e.ctx("tls", callTimeout), &rmqpb.QueryRouteRequest{Topic: res("T")})
	if err != nil || r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("over TLS: %v %v", r, err)
	}
	if r := e.route("T"); r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("in plaintext: %v", r)
	}
}

// TestProducerSettingsBackoff: a producer's settings are answered with its
// own exponential backoff policy, or the proxy's default when it sent none,
// and with none for the Go SDK (which keeps its own; see serverSettings).
func TestProducerSettingsBackoff(t *testing.T) {
	e := newEnv(t, nil)
	own := &rmqpb.RetryPolicy{MaxAttempts: 5, Strategy: &rmqpb.RetryPolicy_ExponentialBackoff{
		ExponentialBackoff: &rmqpb.ExponentialBackoff{Initial: durationpb.New(time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 3}}}
	for _, c := range []struct {
		name         string
		lang         rmqpb.Language
		sent         *rmqpb.RetryPolicy
		wantAttempts int32 // 0: no policy in the answer
	}{
		{"java-own", rmqpb.Language_JAVA, own, 5},
		{"nodejs-none", rmqpb.Language_NODE_JS, nil, 3},
		{"go", rmqpb.Language_GOLANG, own, 0},
	} {
		tel, err := e.cli.Telemetry(e.ctx("producer-"+c.name, callTimeout))
		if err != nil {
			t.Fatal(err)
		}
		pt := rmqpb.ClientType_PRODUCER
		if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
			ClientType: &pt, BackoffPolicy: c.sent, UserAgent: &rmqpb.UA{Language: c.lang},
			PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res("X")}}}}}}); err != nil {
			t.Fatal(err)
		}
		reply, err := tel.Recv()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b := reply.GetSettings().GetBackoffPolicy()
		if got := b.GetMaxAttempts(); got != c.wantAttempts || (got != 0 && b.GetExponentialBackoff() == nil) {
			t.Errorf("%s: backoff policy %v, want %d attempts, exponential", c.name, b, c.wantAttempts)
		}
		tel.CloseSend()
	}
}
