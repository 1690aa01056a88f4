package interopgrpc

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestMessageTypes: RocketMQ 5's rule, as its proxy applies it with its
// default enableTopicMessageTypeCheck: a topic created without message.type
// is NORMAL and refuses FIFO, DELAY and TRANSACTION messages; a FIFO topic
// refuses a message without a group; MIXED takes every type. The SDK is
// told to check too (validate_message_type), so its producer refuses a
// mismatch itself from the route's accepted types; a request that skips
// the SDK's check is refused by the broker with
// MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (40014).
func TestMessageTypes(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	b.createTopic(t, "Untyped", 4, "")
	b.createTopic(t, "FifoOnly", 4, "FIFO")
	b.createTopic(t, "Mixed", 4, "MIXED")
	p := b.producer(t, rmq.WithTopics("Untyped", "FifoOnly", "Mixed"))
	grouped := func(topic string) *rmq.Message {
		m := &rmq.Message{Topic: topic, Body: []byte("grouped")}
		m.SetMessageGroup("g")
		return m
	}
	timed := func(topic string) *rmq.Message {
		m := &rmq.Message{Topic: topic, Body: []byte("timed")}
		m.SetDelayTimestamp(time.Now().Add(time.Hour))
		return m
	}
	plain := func(topic string) *rmq.Message { return &rmq.Message{Topic: topic, Body: []byte("plain")} }
	for _, c := range []struct {
		what string
		m    *rmq.Message
		ok   bool
	}{
		{"an untyped topic, a FIFO message", grouped("Untyped"), false},
		{"an untyped topic, a DELAY message", timed("Untyped"), false},
		{"an untyped topic, a NORMAL message", plain("Untyped"), true},
		{"a FIFO topic, a NORMAL message", plain("FifoOnly"), false},
		{"a FIFO topic, a FIFO message", grouped("FifoOnly"), true},
		{"a MIXED topic, a FIFO message", grouped("Mixed"), true},
		{"a MIXED topic, a DELAY message", timed("Mixed"), true},
		{"a MIXED topic, a NORMAL message", plain("Mixed"), true},
	} {
		_, err := p.Send(context.Background(), c.m)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.what, err)
		case !c.ok && err == nil:
			t.Errorf("%s: sent", c.what)
		case !c.ok && !strings.Contains(err.Error(), "message type"):
			t.Errorf("%s: %v, want the SDK's message type refusal", c.what, err)
		}
	}
	tx := p.BeginTransaction()
	if _, err := p.SendWithTransaction(context.Background(), plain("Untyped"), tx); err == nil || !strings.Contains(err.Error(), "message type") {
		t.Errorf("an untyped topic, a TRANSACTION message: %v, want the SDK's message type refusal", err)
	}

	// The broker's own check: requests the SDK would not send.
	cli, _, ctx := rawClient(t, b)
	send := func(topic string, typ v2.MessageType, group string, at time.Time) v2.Code {
		t.Helper()
		sp := &v2.SystemProperties{MessageId: "raw-" + topic + "-" + typ.String(), BornTimestamp: timestamppb.Now(),
			BornHost: "test", BodyEncoding: v2.Encoding_IDENTITY, MessageType: typ}
		if group != "" {
			sp.MessageGroup = &group
		}
		if !at.IsZero() {
			sp.DeliveryTimestamp = timestamppb.New(at)
		}
		r, err := cli.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{{Topic: &v2.Resource{Name: topic},
			SystemProperties: sp, Body: []byte("raw")}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus().GetCode()
	}
	later := time.Now().Add(time.Hour)
	for _, c := range []struct {
		what  string
		topic string
		typ   v2.MessageType
		group string
		at    time.Time
		want  v2.Code
	}{
		{"untyped, FIFO", "Untyped", v2.MessageType_FIFO, "g", time.Time{}, v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"untyped, DELAY", "Untyped", v2.MessageType_DELAY, "", later, v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"untyped, TRANSACTION", "Untyped", v2.MessageType_TRANSACTION, "", time.Time{}, v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"FIFO, NORMAL", "FifoOnly", v2.MessageType_NORMAL, "", time.Time{}, v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"untyped, NORMAL", "Untyped", v2.MessageType_NORMAL, "", time.Time{}, v2.Code_OK},
		{"FIFO, FIFO", "FifoOnly", v2.MessageType_FIFO, "g", time.Time{}, v2.Code_OK},
	} {
		if got := send(c.topic, c.typ, c.group, c.at); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}

	// What the route and the settings tell clients.
	rt, err := cli.QueryRoute(ctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: "Untyped"},
		Endpoints: &v2.Endpoints{Addresses: []*v2.Address{{Host: "127.0.0.1", Port: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	if qs := rt.GetMessageQueues(); len(qs) == 0 || len(qs[0].GetAcceptMessageTypes()) != 1 || qs[0].GetAcceptMessageTypes()[0] != v2.MessageType_NORMAL {
		t.Errorf("an untyped topic's route: %v", qs)
	}
	tel, err := cli.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pt := v2.ClientType_PRODUCER
	if err := tel.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: &v2.Settings{ClientType: &pt,
		PubSub: &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: []*v2.Resource{{Name: "Untyped"}}}}}}}); err != nil {
		t.Fatal(err)
	}
	r, err := tel.Recv()
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !r.GetSettings().GetPublishing().GetValidateMessageType() {
		t.Errorf("the settings answered do not ask the client to check message types: %v", r.GetSettings())
	}
}
