package grpcfe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// typedTopic creates topic with 8 queues and the message.type typ.
func (e *env) typedTopic(topic, typ string) {
	e.t.Helper()
	if err := e.core.Admin().CreateTopic(&core.TopicRequest{Topic: topic, ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6,
		Attributes: "+message.type=" + typ}); err != nil {
		e.t.Fatal(err)
	}
}

// sendCode sends m and returns its entry's status code.
func (e *env) sendCode(m *rmqpb.Message) rmqpb.Code {
	e.t.Helper()
	r, err := e.cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{m}})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetStatus().GetCode()
}

// TestMessageTypesAsRocketMQ: RocketMQ 5's proxy's check: a topic without
// message.type is NORMAL, a FIFO topic refuses a message without a group,
// MIXED takes every type; the settings tell clients to check too.
func TestMessageTypesAsRocketMQ(t *testing.T) {
	e := newEnv(t, nil)
	e.typedTopic("F", "FIFO")
	e.typedTopic("M", "MIXED")
	e.route("U") // created without message.type
	grouped := func(topic string) *rmqpb.Message {
		m := msg(topic, "g-"+topic, "g")
		m.SystemProperties.MessageGroup = new(string)
		*m.SystemProperties.MessageGroup = "g"
		return m
	}
	timed := func(topic string) *rmqpb.Message {
		m := msg(topic, "d-"+topic, "d")
		m.SystemProperties.DeliveryTimestamp = timestamppb.New(time.Now().Add(time.Hour))
		return m
	}
	tx := func(topic string) *rmqpb.Message {
		m := msg(topic, "t-"+topic, "t")
		m.SystemProperties.MessageType = rmqpb.MessageType_TRANSACTION
		return m
	}
	for _, c := range []struct {
		what string
		m    *rmqpb.Message
		want rmqpb.Code
	}{
		{"untyped, FIFO", grouped("U"), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"untyped, DELAY", timed("U"), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"untyped, TRANSACTION", tx("U"), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"untyped, NORMAL", msg("U", "n-U", "n"), rmqpb.Code_OK},
		{"FIFO, NORMAL", msg("F", "n-F", "n"), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"FIFO, FIFO", grouped("F"), rmqpb.Code_OK},
		{"MIXED, FIFO", grouped("M"), rmqpb.Code_OK},
		{"MIXED, DELAY", timed("M"), rmqpb.Code_OK},
		{"MIXED, NORMAL", msg("M", "n-M", "n"), rmqpb.Code_OK},
	} {
		if got := e.sendCode(c.m); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
	if q := e.route("F").MessageQueues[0]; len(q.AcceptMessageTypes) != 1 || q.AcceptMessageTypes[0] != rmqpb.MessageType_FIFO {
		t.Errorf("a FIFO topic's queue accepts %v", q.AcceptMessageTypes)
	}
	// The settings a producer is answered with: check message types.
	pt := rmqpb.ClientType_PRODUCER
	st := e.settings("producer-1", &rmqpb.Settings{ClientType: &pt,
		PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res("U")}}}})
	if !st.GetPublishing().GetValidateMessageType() {
		t.Errorf("the settings do not ask the client to check message types: %v", st)
	}
}

// settings opens a telemetry stream for id, sends in and returns the
// settings answered; the stream stays open until the test ends.
func (e *env) settings(id string, in *rmqpb.Settings) *rmqpb.Settings {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx(id, callTimeout))
	e.t.Cleanup(cancel)
	tel, err := e.cli.Telemetry(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: in}}); err != nil {
		e.t.Fatal(err)
	}
	r, err := tel.Recv()
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetSettings()
}

// consumer opens id's telemetry stream as a push consumer of group; cancel
// ends the stream.
func (e *env) consumer(id, group string) (cancel context.CancelFunc) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx(id, time.Hour))
	e.t.Cleanup(cancel)
	tel, err := e.cli.Telemetry(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	ct := rmqpb.ClientType_PUSH_CONSUMER
	if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: &ct, PubSub: &rmqpb.Settings_Subscription{Subscription: &rmqpb.Subscription{Group: res(group)}}}}}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := tel.Recv(); err != nil {
		e.t.Fatal(err)
	}
	return cancel
}

// receiveRenewed receives up to n messages as id with auto_renew (what a
// PushConsumer sends: no invisible duration) and returns them and the
// status.
func (e *env) receiveRenewed(id, group, topic string, n int32) ([]*rmqpb.Message, *rmqpb.Status) {
	e.t.Helper()
	req := &rmqpb.ReceiveMessageRequest{Group: res(group), MessageQueue: &rmqpb.MessageQueue{Topic: res(topic), Id: -1},
		FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}, BatchSize: n,
		AutoRenew: true, LongPollingTimeout: durationpb.New(arrival)}
	st, err := e.cli.ReceiveMessage(e.ctx(id, arrival+callTimeout), req)
	if err != nil {
		e.t.Fatal(err)
	}
	var msgs []*rmqpb.Message
	var status *rmqpb.Status
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
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
	return msgs, status
}

// fastRenew: deliveries invisible for 400 ms, renewed from 300 ms before.
func fastRenew(o *Options) {
	o.AutoRenewInvisible, o.RenewAhead, o.RenewPeriod = 400*time.Millisecond, 300*time.Millisecond, 20*time.Millisecond
	o.RenewClearInvisible, o.RenewOfflineGrace = 50*time.Millisecond, 100*time.Millisecond
}

// TestAutoRenewHoldsTheMessage: a delivery received with auto_renew stays
// invisible past its first invisible time (renewed), and the client's
// first receipt handle acks it.
func TestAutoRenewHoldsTheMessage(t *testing.T) {
	e := newEnvWith(t, nil, fastRenew, nil)
	e.consumer("push-1", "G")
	e.send(msg("T", "m1", "one"))
	e.dispatched("T", 1)
	got, st := e.receiveRenewed("push-1", "G", "T", 1)
	if len(got) != 1 {
		t.Fatalf("received %v (%v)", got, st)
	}
	received := time.Now()
	// Renewed (for a minute, the first step of RocketMQ's schedule), and
	// past twice the first invisible time: another consumer finds nothing.
	wait.For(t, "a renewal, past twice the first invisible time", func() error {
		if n := e.srv.Stats().Renewals; n < 1 {
			return fmt.Errorf("%d renewals", n)
		}
		if since := time.Since(received); since < 2*e.srv.opts.AutoRenewInvisible {
			return fmt.Errorf("%v since the receive", since)
		}
		return nil
	})
	if more, _ := e.receive("G", "T", 1, time.Minute, 100*time.Millisecond, nil); len(more) != 0 {
		t.Fatalf("the renewed message was delivered again: %v", more)
	}
	if code := e.ackAs("push-1", "G", got[0]); code != rmqpb.Code_OK {
		t.Fatalf("ack with the first handle: %v", code)
	}
	if n := e.srv.Stats().Renewing; n != 0 {
		t.Fatalf("%d deliveries still renewed after the ack", n)
	}
}

// ackAs acknowledges m for group as client id.
func (e *env) ackAs(id, group string, m *rmqpb.Message) rmqpb.Code {
	e.t.Helper()
	r, err := e.cli.AckMessage(e.ctx(id, callTimeout), &rmqpb.AckMessageRequest{Group: res(group), Topic: m.Topic,
		Entries: []*rmqpb.AckMessageEntry{{MessageId: m.SystemProperties.MessageId, ReceiptHandle: m.SystemProperties.GetReceiptHandle()}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Entries[0].Status.Code
}

// TestAutoRenewChangeInvisible: a change of the invisible duration with
// the first handle ends the renewal and applies to the delivery as it is.
func TestAutoRenewChangeInvisible(t *testing.T) {
	e := newEnvWith(t, nil, fastRenew, nil)
	e.consumer("push-1", "G")
	e.send(msg("T", "m1", "one"))
	e.dispatched("T", 1)
	got, _ := e.receiveRenewed("push-1", "G", "T", 1)
	if len(got) != 1 {
		t.Fatal("nothing received")
	}
	wait.For(t, "a renewal", func() error {
		if e.srv.Stats().Renewals < 1 {
			return errors.New("none yet")
		}
		return nil
	})
	m := got[0]
	r, err := e.cli.ChangeInvisibleDuration(e.ctx("push-1", callTimeout), &rmqpb.ChangeInvisibleDurationRequest{Group: res("G"),
		Topic: m.Topic, ReceiptHandle: m.SystemProperties.GetReceiptHandle(), MessageId: m.SystemProperties.MessageId,
		InvisibleDuration: durationpb.New(10 * time.Millisecond)})
	if err != nil || r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("ChangeInvisibleDuration: %v, %v", r, err)
	}
	if e.srv.Stats().Renewing != 0 {
		t.Fatal("still renewed after the change")
	}
	again, _ := e.receive("G", "T", 1, time.Minute, arrival, nil)
	if len(again) != 1 || again[0].SystemProperties.MessageId != "m1" {
		t.Fatalf("after the change: %v", again)
	}
}

// TestAutoRenewReleased: a client's renewed deliveries are visible again
// soon after it terminates, or after its telemetry stream is gone for the
// grace.
func TestAutoRenewReleased(t *testing.T) {
	for _, how := range []string{"termination", "connection loss"} {
		t.Run(how, func(t *testing.T) {
			e := newEnvWith(t, nil, fastRenew, nil)
			end := e.consumer("push-1", "G")
			e.send(msg("T", "m1", "one"))
			e.dispatched("T", 1)
			if got, _ := e.receiveRenewed("push-1", "G", "T", 1); len(got) != 1 {
				t.Fatal("nothing received")
			}
			if how == "termination" {
				r, err := e.cli.NotifyClientTermination(e.ctx("push-1", callTimeout), &rmqpb.NotifyClientTerminationRequest{Group: res("G")})
				if err != nil || r.Status.Code != rmqpb.Code_OK {
					t.Fatalf("NotifyClientTermination: %v, %v", r, err)
				}
			} else {
				end()
			}
			again, _ := e.receive("G", "T", 1, time.Minute, arrival, nil)
			if len(again) != 1 || again[0].SystemProperties.MessageId != "m1" {
				t.Fatalf("after the %s: %v", how, again)
			}
			if s := e.srv.Stats(); s.RenewReleased != 1 || s.Renewing != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestAutoRenewBound: a client may hold MaxRenewPerClient renewed
// deliveries; a receive that could exceed it is refused and counted.
func TestAutoRenewBound(t *testing.T) {
	e := newEnvWith(t, nil, func(o *Options) { fastRenew(o); o.MaxRenewPerClient = 2 }, nil)
	e.consumer("push-1", "G")
	for i := range 3 {
		e.send(msg("T", fmt.Sprint("m", i), "x"))
	}
	e.dispatched("T", 3)
	if got, st := e.receiveRenewed("push-1", "G", "T", 3); len(got) != 0 || st.GetCode() != rmqpb.Code_TOO_MANY_REQUESTS {
		t.Fatalf("a batch of 3 beyond a bound of 2: %d messages, %v", len(got), st)
	}
	if got, _ := e.receiveRenewed("push-1", "G", "T", 2); len(got) != 2 {
		t.Fatalf("a batch of 2: %d messages", len(got))
	}
	if _, st := e.receiveRenewed("push-1", "G", "T", 1); st.GetCode() != rmqpb.Code_TOO_MANY_REQUESTS {
		t.Fatalf("a third with 2 held: %v", st)
	}
	if s := e.srv.Stats(); s.RenewRefused != 2 || s.Renewing != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRenewSchedule: RocketMQ's RenewStrategyPolicy.
func TestRenewSchedule(t *testing.T) {
	want := []time.Duration{time.Minute, 3 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		if got := renewStep(i); got != w {
			t.Errorf("renewal %d: %v, want %v", i, got, w)
		}
	}
}

// TestAutoRenewMax: a delivery due for renewal past RenewMax is not
// renewed but made visible after the group's retry delay (RocketMQ's
// STOP_RENEW), and comes back.
func TestAutoRenewMax(t *testing.T) {
	e := newEnvWith(t, nil, func(o *Options) { fastRenew(o); o.RenewMax = 50 * time.Millisecond }, nil)
	cfg := protocol.DefaultSubscriptionGroupConfig("G")
	cfg.GroupRetryPolicy = []byte(`{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[100,100,100]}}`)
	if err := e.core.Admin().UpdateSubscriptionGroup(cfg); err != nil {
		t.Fatal(err)
	}
	e.consumer("push-1", "G")
	e.send(msg("T", "m1", "one"))
	e.dispatched("T", 1)
	if got, _ := e.receiveRenewed("push-1", "G", "T", 1); len(got) != 1 {
		t.Fatal("nothing received")
	}
	again, _ := e.receive("G", "T", 1, time.Minute, arrival, nil)
	if len(again) != 1 || again[0].SystemProperties.MessageId != "m1" {
		t.Fatalf("after the renewal's maximum: %v", again)
	}
	if s := e.srv.Stats(); s.Renewing != 0 || s.Renewals != 0 {
		t.Fatalf("stats %+v", s)
	}
}
