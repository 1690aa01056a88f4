package grpcfe

import (
	"fmt"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// A lite simple consumer (RocketMQ 5.5.1's LITE_SIMPLE_CONSUMER, which no
// SDK in the module cache speaks yet), driven call by call: its settings on
// the telemetry stream, SyncLiteSubscription, receives of the parent that
// return only its lite topics' messages, in order, and acks naming the
// lite topic; an unsubscribed lite topic's messages are not delivered.
func TestLiteSimpleConsumer(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.core.Admin().CreateTopic(&core.TopicRequest{Topic: "LiteP", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6,
		Attributes: "+message.type=LITE"}); err != nil {
		t.Fatal(err)
	}
	g := protocol.DefaultSubscriptionGroupConfig("LG")
	g.Attributes = map[string]string{"+lite.bind.topic": "LiteP"}
	if err := e.core.Admin().UpdateSubscriptionGroup(g); err != nil {
		t.Fatal(err)
	}

	// The consumer's settings, on its telemetry stream.
	tel, err := e.cli.Telemetry(e.ctx("consumer-1", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ct := rmqpb.ClientType_LITE_SIMPLE_CONSUMER
	if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: &ct, PubSub: &rmqpb.Settings_Subscription{Subscription: &rmqpb.Subscription{Group: res("LG"),
			Subscriptions: []*rmqpb.SubscriptionEntry{{Topic: res("LiteP"), Expression: &rmqpb.FilterExpression{
				Type: rmqpb.FilterType_TAG, Expression: "*"}}}}}}}}); err != nil {
		t.Fatal(err)
	}
	if reply, err := tel.Recv(); err != nil || reply.GetSettings() == nil {
		t.Fatalf("settings reply: %v %v", reply, err)
	}

	sync := func(action rmqpb.LiteSubscriptionAction, lites ...string) {
		t.Helper()
		r, err := e.cli.SyncLiteSubscription(e.ctx("consumer-1", callTimeout), &rmqpb.SyncLiteSubscriptionRequest{
			Action: action, Topic: res("LiteP"), Group: res("LG"), LiteTopicSet: lites})
		if err != nil || r.GetStatus().GetCode() != rmqpb.Code_OK {
			t.Fatalf("SyncLiteSubscription %v %v: %v %v", action, lites, r.GetStatus(), err)
		}
	}
	sync(rmqpb.LiteSubscriptionAction_PARTIAL_ADD, "L1")

	n := 0
	send := func(lite, body string) {
		t.Helper()
		n++
		m := msg("LiteP", fmt.Sprintf("0A00000100002A9F00000000000000%02d", n), body)
		m.SystemProperties.MessageType = rmqpb.MessageType_LITE
		m.SystemProperties.LiteTopic = &lite
		e.send(m)
	}
	send("L1", "a1")
	send("L2", "b1")
	send("L1", "a2")

	var got []string
	for len(got) < 2 {
		msgs, st := e.receive("LG", "LiteP", 16, time.Minute, 5*time.Second, nil)
		if len(msgs) == 0 {
			t.Fatalf("a receive ended with %v and no message; have %v", st, got)
		}
		for _, m := range msgs {
			if m.GetSystemProperties().GetLiteTopic() != "L1" {
				t.Fatalf("received %q of lite topic %q: only L1 is subscribed", m.Body, m.GetSystemProperties().GetLiteTopic())
			}
			got = append(got, string(m.Body))
			lite := "L1"
			r, err := e.cli.AckMessage(e.ctx("consumer-1", callTimeout), &rmqpb.AckMessageRequest{Group: res("LG"), Topic: res("LiteP"),
				Entries: []*rmqpb.AckMessageEntry{{MessageId: m.SystemProperties.MessageId,
					ReceiptHandle: m.SystemProperties.GetReceiptHandle(), LiteTopic: &lite}}})
			if err != nil || r.GetEntries()[0].GetStatus().GetCode() != rmqpb.Code_OK {
				t.Fatalf("ack %q: %v %v", m.Body, r, err)
			}
		}
	}
	if got[0] != "a1" || got[1] != "a2" {
		t.Fatalf("L1 delivered %v, want [a1 a2]", got)
	}
	// Nothing more: L2 is not subscribed, and L1's messages were acked.
	if msgs, _ := e.receive("LG", "LiteP", 16, time.Minute, 200*time.Millisecond, nil); len(msgs) != 0 {
		t.Fatalf("after the acks: %d more messages (first %q)", len(msgs), msgs[0].Body)
	}
	// Subscribing to L2 starts at its end (RocketMQ's MAX): b1 is not
	// delivered, a message sent after is.
	sync(rmqpb.LiteSubscriptionAction_PARTIAL_ADD, "L2")
	send("L2", "b2")
	msgs, st := e.receive("LG", "LiteP", 16, time.Minute, 5*time.Second, nil)
	if len(msgs) != 1 || string(msgs[0].Body) != "b2" || msgs[0].GetSystemProperties().GetLiteTopic() != "L2" {
		t.Fatalf("after subscribing to L2: %d messages, status %v", len(msgs), st)
	}
}
