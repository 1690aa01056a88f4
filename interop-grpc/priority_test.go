package interopgrpc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/internal/wait"
)

// Priority messages (RocketMQ 5.4, RIP-80) with the Go SDK v5.1.4's
// Message.SetPriority: a topic of message.type=PRIORITY stores a message
// in the queue of its priority (min(priority, queues-1)), and its receives
// take the highest queue first.

// queueDepths returns the number of messages of each of topic's queues,
// read with GET_MAX_OFFSET (30) over remoting: what the broker has
// dispatched.
func (b *broker) queueDepths(t *testing.T, topic string, queues int) []int64 {
	t.Helper()
	out := make([]int64, queues)
	for q := range queues {
		r, err := remotingCall(b.Addr, 30, map[string]string{"topic": topic, "queueId": strconv.Itoa(q)}, nil, 10*time.Second)
		if err != nil || r.Code != 0 {
			t.Fatalf("GET_MAX_OFFSET of %s/%d: %d %s %v", topic, q, r.Code, r.Remark, err)
		}
		if out[q], err = strconv.ParseInt(r.Ext["offset"], 10, 64); err != nil {
			t.Fatalf("GET_MAX_OFFSET of %s/%d: offset %q", topic, q, r.Ext["offset"])
		}
	}
	return out
}

// waitDepths waits until topic's queues hold want messages each.
func (b *broker) waitDepths(t *testing.T, topic string, want []int64) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%s's queues holding %v", topic, want), func() error {
		if got := b.queueDepths(t, topic, len(want)); !slices.Equal(got, want) {
			return fmt.Errorf("they hold %v", got)
		}
		return nil
	})
}

// sendPriority sends one message of topic with a priority (none when
// priority < 0) and body as its body.
func sendPriority(t *testing.T, p rmq.Producer, topic string, priority int32, body string) {
	t.Helper()
	m := &rmq.Message{Topic: topic, Body: []byte(body)}
	if priority >= 0 {
		if err := m.SetPriority(priority); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Send(context.Background(), m); err != nil {
		t.Fatalf("send %s (priority %d): %v", body, priority, err)
	}
}

// receiveOneByOne receives n messages one per Receive, acking each unless
// it is in keep, and returns their bodies in the order they came.
func receiveOneByOne(t *testing.T, c rmq.SimpleConsumer, n int) ([]string, []*rmq.MessageView) {
	t.Helper()
	var bodies []string
	var views []*rmq.MessageView
	for len(bodies) < n {
		got := receive(t, c, 1, 30*time.Second, true)
		for _, mv := range got {
			bodies = append(bodies, string(mv.GetBody()))
			views = append(views, mv)
		}
	}
	return bodies, views
}

// TestPriorityBacklogHighestFirst: a backlog of every priority, sent from
// the lowest to the highest, is received from the highest priority to the
// lowest, in send order within a priority; a priority beyond the queues
// goes to the highest queue; a message without a priority is spread as on
// any topic. The 4.x (remoting) producer sets the priority as a property,
// as RocketMQ's Java Message.setPriority does.
func TestPriorityBacklogHighestFirst(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "autoCreateTopicEnable=false")
	const queues = 4
	b.createTopic(t, "Prio", queues, "PRIORITY")
	p := b.producer(t, rmq.WithTopics("Prio"))
	const perPriority = 3
	for j := range perPriority {
		for pr := range int32(queues) {
			sendPriority(t, p, "Prio", pr, fmt.Sprintf("p%d-%d", pr, j))
		}
	}
	// Priority 9 of a 4-queue topic: the highest queue, after p3's.
	sendPriority(t, p, "Prio", 9, "p9")

	// Over remoting: the priority property of a 4.x producer's message.
	ns := primitive.NewPassthroughResolver([]string{b.NsAddr})
	// An instance of its own: TestCrossProtocol's 4.x client, in parallel, has
	// other name servers (the client library keys its instances by name).
	old, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName("PrioProducer4x"), producer.WithRetry(2),
		producer.WithInstanceName("PrioProducer4x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	defer old.Shutdown()
	m := primitive.NewMessage("Prio", []byte("remoting-p2"))
	m.WithProperty("_SYS_MSG_PRIORITY_", "2")
	r, err := old.SendSync(context.Background(), m)
	if err != nil || r.Status != primitive.SendOK || r.MessageQueue.QueueId != 2 {
		t.Fatalf("4.x send with priority 2: %v %v (queue 2 expected)", r, err)
	}
	b.waitDepths(t, "Prio", []int64{perPriority, perPriority, perPriority + 1, perPriority + 1})

	c := b.consumer(t, "PrioGroup", time.Second, all("Prio"))
	got, views := receiveOneByOne(t, c, queues*perPriority+2)
	want := []string{"p3-0", "p3-1", "p3-2", "p9", "p2-0", "p2-1", "p2-2", "remoting-p2", "p1-0", "p1-1", "p1-2", "p0-0", "p0-1", "p0-2"}
	if !slices.Equal(got, want) {
		t.Fatalf("received\n %v\nwant\n %v", got, want)
	}
	for _, mv := range views {
		if _, ok := mv.GetProperties()["_SYS_MSG_PRIORITY_"]; ok {
			t.Fatalf("the priority shows as a user property: %v", mv.GetProperties())
		}
	}

	// A message without a priority is a NORMAL one: over gRPC the topic
	// refuses it, as RocketMQ's proxy does (the SDK itself, from the
	// route's accepted types: message_types_test.go); over remoting it is
	// stored, as RocketMQ's broker does, spread over the queues.
	if _, err := p.Send(context.Background(), &rmq.Message{Topic: "Prio", Body: []byte("plain")}); err == nil ||
		!strings.Contains(err.Error(), "message type") {
		t.Fatalf("a message without a priority over gRPC: %v, want the message type refusal", err)
	}
	for i := range 8 {
		if r, err := old.SendSync(context.Background(), primitive.NewMessage("Prio", []byte(fmt.Sprintf("plain-%d", i)))); err != nil || r.Status != primitive.SendOK {
			t.Fatalf("4.x send without a priority: %v %v", r, err)
		}
	}
	depths := b.queueDepths(t, "Prio", queues)
	spread := 0
	for q, d := range depths {
		if d > []int64{perPriority, perPriority, perPriority + 1, perPriority + 1}[q] {
			spread++
		}
	}
	if spread < 2 {
		t.Fatalf("8 messages without a priority went to %d queue(s): depths %v", spread, depths)
	}
}

// TestPriorityRetryAfterBacklog: a message received and not acked comes
// back after the backlog of new messages of every priority (RocketMQ's
// default: retries of a PRIORITY topic as the lowest priority).
func TestPriorityRetryAfterBacklog(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "autoCreateTopicEnable=false")
	b.createTopic(t, "PrioRetry", 4, "PRIORITY")
	p := b.producer(t, rmq.WithTopics("PrioRetry"))
	sendPriority(t, p, "PrioRetry", 3, "first")
	c := b.consumer(t, "PrioRetryGroup", time.Second, all("PrioRetry"))
	first := receive(t, c, 1, time.Minute, false)
	if len(first) != 1 || string(first[0].GetBody()) != "first" {
		t.Fatalf("first delivery: %v", first)
	}
	sendPriority(t, p, "PrioRetry", 3, "high")
	sendPriority(t, p, "PrioRetry", 0, "low")
	b.waitDepths(t, "PrioRetry", []int64{1, 0, 0, 2})
	// Hidden for a minute; visible again in 100 ms, behind the backlog.
	visible := time.Now().Add(100 * time.Millisecond)
	if err := c.ChangeInvisibleDuration(first[0], 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the first message's invisible time passed", func() bool { return time.Now().After(visible) })
	got, views := receiveOneByOne(t, c, 3)
	if want := []string{"high", "low", "first"}; !slices.Equal(got, want) || views[2].GetDeliveryAttempt() != 2 {
		t.Fatalf("received %v (last attempt %d), want %v with the retry of first last", got, views[2].GetDeliveryAttempt(), want)
	}
}

// TestPriorityRangeRefused: a negative priority is refused by the SDK
// itself (SetPriority) and, sent raw, by the broker with RocketMQ's
// proxy's code (INTERNAL_SERVER_ERROR: its Message.setPriority throws); a
// priority message to a topic of another declared type is a type conflict;
// the SDK refuses a priority with a message group.
func TestPriorityRangeRefused(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "autoCreateTopicEnable=false")
	b.createTopic(t, "PrioRange", 4, "PRIORITY")
	b.createTopic(t, "NormalOnly", 4, "NORMAL")

	m := &rmq.Message{Topic: "PrioRange", Body: []byte("x")}
	if err := m.SetPriority(-1); err == nil {
		t.Fatal("the SDK accepted priority -1")
	}
	m.SetMessageGroup("g")
	if err := m.SetPriority(1); err == nil {
		t.Fatal("the SDK accepted a priority with a message group")
	}

	cli, _, ctx := rawClient(t, b)
	send := func(topic string, priority int32) *v2.SendMessageResponse {
		t.Helper()
		r, err := cli.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{{Topic: &v2.Resource{Name: topic}, Body: []byte("raw"),
			SystemProperties: &v2.SystemProperties{MessageId: fmt.Sprintf("raw-%s-%d", topic, priority), BodyEncoding: v2.Encoding_IDENTITY,
				MessageType: v2.MessageType_PRIORITY, Priority: &priority, BornTimestamp: timestamppb.Now()}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := send("PrioRange", -1); r.GetStatus().GetCode() != v2.Code_INTERNAL_SERVER_ERROR || !strings.Contains(r.GetStatus().GetMessage(), "priority") {
		t.Fatalf("priority -1: %v", r.GetStatus())
	}
	if r := send("NormalOnly", 1); r.GetStatus().GetCode() != v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE {
		t.Fatalf("a PRIORITY message to a NORMAL topic: %v", r.GetStatus())
	}
	if r := send("PrioRange", 2); r.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("priority 2: %v", r.GetStatus())
	}
	b.waitDepths(t, "PrioRange", []int64{0, 0, 1, 0})
	if r := send("PrioRange", 1<<30); r.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("priority 2^30: %v", r.GetStatus())
	}
	b.waitDepths(t, "PrioRange", []int64{0, 0, 1, 1})
}

// TestPriorityBrokerConf: RocketMQ 5.4's broker.conf keys of priority
// messages in an apogee-broker's configuration: priorityOrderAsc=false
// makes queue 0 the highest priority, popFromRetryProbabilityForPriority=100
// hands out retries before the backlog.
func TestPriorityBrokerConf(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "autoCreateTopicEnable=false", "priorityOrderAsc=false", "popFromRetryProbabilityForPriority=100",
		"useSeparateRetryQueue=true")
	b.createTopic(t, "PrioConf", 4, "PRIORITY")
	p := b.producer(t, rmq.WithTopics("PrioConf"))
	sendPriority(t, p, "PrioConf", 2, "first")
	c := b.consumer(t, "PrioConfGroup", time.Second, all("PrioConf"))
	first := receive(t, c, 1, time.Minute, false)
	if len(first) != 1 || string(first[0].GetBody()) != "first" {
		t.Fatalf("first delivery: %v", first)
	}
	for _, pr := range []int32{3, 1, 0} {
		sendPriority(t, p, "PrioConf", pr, fmt.Sprintf("p%d", pr))
	}
	b.waitDepths(t, "PrioConf", []int64{1, 1, 1, 1})
	visible := time.Now().Add(100 * time.Millisecond)
	if err := c.ChangeInvisibleDuration(first[0], 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the first message's invisible time passed", func() bool { return time.Now().After(visible) })
	got, views := receiveOneByOne(t, c, 4)
	if want := []string{"first", "p0", "p1", "p3"}; !slices.Equal(got, want) || views[0].GetDeliveryAttempt() != 2 {
		t.Fatalf("received %v (first attempt %d), want %v: the retry first, then queue 0 up", got, views[0].GetDeliveryAttempt(), want)
	}
}
