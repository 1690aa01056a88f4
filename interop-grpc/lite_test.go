package interopgrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	rmtg "github.com/apogeemq/apogee/remoting"
)

// Lite topics (RocketMQ 5.5, RIP-83) with the Go SDK v5.1.4: a parent
// topic of message.type=LITE, a producer's Message.SetLiteTopic, and a
// LitePushConsumer of a group bound to the parent (lite.bind.topic) that
// subscribes to lite topics one by one (docs/lite-topics.md, section 3).

// createLiteTopic creates a LITE parent topic (attrs: more "+key=value"
// attributes, comma-separated, or "").
func (b *broker) createLiteTopic(t *testing.T, parent string, queues int, attrs string) {
	t.Helper()
	createLiteTopicAt(t, b.Addr, parent, queues, attrs)
}

// createLiteTopicAt creates a LITE parent topic on the broker at addr.
func createLiteTopicAt(t *testing.T, addr, parent string, queues int, attrs string) {
	t.Helper()
	ext := map[string]string{"topic": parent, "defaultTopic": "TBW102", "readQueueNums": strconv.Itoa(queues),
		"writeQueueNums": strconv.Itoa(queues), "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
		"attributes": "+message.type=LITE"}
	if attrs != "" {
		ext["attributes"] += "," + attrs
	}
	if code, remark := remoting(t, addr, 17, ext, nil); code != 0 {
		t.Fatalf("create lite topic %s on %s: %d %s", parent, addr, code, remark)
	}
}

// startLiteBroker starts a broker that creates no topic by itself (conf:
// more broker.conf lines) with a LITE parent topic of queues queues
// (topicAttrs: more attributes, as createLiteTopic takes them) and its lite
// group parent+"Group" (groupAttrs: as liteGroup takes them).
func startLiteBroker(t *testing.T, parent string, queues int, topicAttrs string, groupAttrs map[string]string, conf ...string) *broker {
	t.Helper()
	b := startBroker(t, append([]string{"autoCreateTopicEnable=false"}, conf...)...)
	b.createLiteTopic(t, parent, queues, topicAttrs)
	b.liteGroup(t, parent+"Group", parent, groupAttrs)
	return b
}

// waitDispatched waits until topic's queues hold n messages in all
// (GET_MAX_OFFSET of each queue): the dispatcher indexes a lite message's
// lite topic in the same step as its parent queue's entry.
func (b *broker) waitDispatched(t *testing.T, topic string, queues, n int) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%d messages of %s dispatched", n, topic), func() error {
		sum := 0
		for q := range queues {
			r, err := remotingCall(b.Addr, 30, map[string]string{"topic": topic, "queueId": strconv.Itoa(q)}, nil, 10*time.Second)
			if err != nil {
				return err
			}
			off, err := strconv.Atoi(r.Ext["offset"])
			if r.Code != 0 || err != nil {
				return fmt.Errorf("GET_MAX_OFFSET of %s/%d: code %d %s", topic, q, r.Code, r.Remark)
			}
			sum += off
		}
		if sum != n {
			return fmt.Errorf("%d of %d", sum, n)
		}
		return nil
	})
}

// liteGroup creates a lite group bound to parent, with more lite.*
// attributes (and retryMaxTimes, the group's field).
func (b *broker) liteGroup(t *testing.T, group, parent string, attrs map[string]string) {
	t.Helper()
	liteGroupAt(t, b.Addr, group, parent, attrs)
}

// liteGroupAt creates a lite group on the broker at addr.
func liteGroupAt(t *testing.T, addr, group, parent string, attrs map[string]string) {
	t.Helper()
	a := map[string]string{"+lite.bind.topic": parent}
	retryMax := 16
	for k, v := range attrs {
		if k == "retryMaxTimes" { // the group's field, not an attribute
			retryMax, _ = strconv.Atoi(v)
			continue
		}
		a["+"+k] = v
	}
	body, _ := json.Marshal(map[string]any{"groupName": group, "consumeEnable": true, "consumeFromMinEnable": true,
		"consumeBroadcastEnable": true, "retryQueueNums": 1, "retryMaxTimes": retryMax, "brokerId": 0,
		"whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": true, "attributes": a})
	if code, remark := remoting(t, addr, 200, map[string]string{}, body); code != 0 {
		t.Fatalf("update lite group %s on %s: %d %s", group, addr, code, remark)
	}
}

// liteLog records what a lite consumer's handler saw.
type liteLog struct {
	mu       sync.Mutex
	got      []*rmq.MessageView
	handle   func(mv *rmq.MessageView) rmq.ConsumerResult // nil: SUCCESS
	starting []string                                     // bodies as their handler started
}

func (l *liteLog) consume(mv *rmq.MessageView) rmq.ConsumerResult {
	l.mu.Lock()
	l.starting = append(l.starting, string(mv.GetBody()))
	h := l.handle
	l.mu.Unlock()
	res := rmq.SUCCESS
	if h != nil {
		res = h(mv)
	}
	l.mu.Lock()
	l.got = append(l.got, mv)
	l.mu.Unlock()
	return res
}

// bodies returns the bodies handled so far of lite topic lt ("" for all),
// in the order their handlers ended.
func (l *liteLog) bodies(lt string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, mv := range l.got {
		if lt == "" || mv.GetLiteTopic() == lt {
			out = append(out, string(mv.GetBody()))
		}
	}
	return out
}

// waitBodies waits until lite topic lt's handled bodies are want.
func (l *liteLog) waitBodies(t *testing.T, lt string, want []string) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%s's messages %v handled", lt, want), func() error {
		if got := l.bodies(lt); !slices.Equal(got, want) {
			if len(got) > len(want) {
				t.Fatalf("%s: handled %v, want %v", lt, got, want)
			}
			return fmt.Errorf("handled %v", got)
		}
		return nil
	})
}

// liteConsumer starts a LitePushConsumer of group bound to parent (four
// consumption threads), subscribed to lites.
func (b *broker) liteConsumer(t *testing.T, group, parent string, invisible time.Duration, log *liteLog, lites ...string) rmq.LitePushConsumer {
	t.Helper()
	return startLiteConsumer(t, b.config(group), parent, invisible, log, []rmq.PushConsumerOption{rmq.WithPushConsumptionThreadCount(4)}, lites...)
}

// newLiteConsumer makes a LitePushConsumer of cfg's group bound to parent,
// its messages handled by log, a receive awaiting 2 s (opts: more
// options); it is not started.
func newLiteConsumer(t *testing.T, cfg *rmq.Config, parent string, invisible time.Duration, log *liteLog, opts ...rmq.PushConsumerOption) rmq.LitePushConsumer {
	t.Helper()
	opts = append([]rmq.PushConsumerOption{rmq.WithPushAwaitDuration(2 * time.Second),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: log.consume})}, opts...)
	c, err := rmq.NewLitePushConsumer(cfg, rmq.NewLitePushConsumerConfig(parent, invisible), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startLiteConsumer starts newLiteConsumer's consumer (stopped when the
// test ends) and subscribes it to lites.
func startLiteConsumer(t *testing.T, cfg *rmq.Config, parent string, invisible time.Duration, log *liteLog,
	opts []rmq.PushConsumerOption, lites ...string) rmq.LitePushConsumer {
	t.Helper()
	c := newLiteConsumer(t, cfg, parent, invisible, log, opts...)
	if err := c.Start(); err != nil {
		t.Fatalf("lite push consumer start: %v", err)
	}
	t.Cleanup(func() { c.GracefulStop() })
	for _, l := range lites {
		if err := c.SubscribeLite(l); err != nil {
			t.Fatalf("subscribe to lite topic %s: %v", l, err)
		}
	}
	return c
}

// sendLite sends one message of body to parent's lite topic lt.
func sendLite(t *testing.T, p rmq.Producer, parent, lt, body string) {
	t.Helper()
	m := &rmq.Message{Topic: parent, Body: []byte(body)}
	m.SetLiteTopic(lt)
	if _, err := p.Send(context.Background(), m); err != nil {
		t.Fatalf("send %s to %s/%s: %v", body, parent, lt, err)
	}
}

func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// TestLiteSubscribeReceiveUnsubscribe: cases 1, 2 and 3 of the test plan.
// Messages sent to L1 before the first subscription are not delivered
// (RocketMQ starts a new lite topic at its end); L1's later ones come in
// order, once each, with their lite topic, and none of the unsubscribed
// L2; after UnSubscribeLite(L1) new L1 messages wait, and a new
// subscription resumes at the group's offset.
func TestLiteSubscribeReceiveUnsubscribe(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteParent", 4, "", nil)
	p := b.producer(t, rmq.WithTopics("LiteParent"))
	for _, body := range seq("before", 3) {
		sendLite(t, p, "LiteParent", "L1", body)
	}
	// A subscription starts at the lite topic's end as the broker has
	// indexed it (RocketMQ's MAX): wait until the three are dispatched, or
	// on a loaded machine they may still be behind that end.
	b.waitDispatched(t, "LiteParent", 4, 3)
	log := &liteLog{}
	c := b.liteConsumer(t, "LiteParentGroup", "LiteParent", 10*time.Second, log, "L1")
	for i := range 10 {
		sendLite(t, p, "LiteParent", "L1", fmt.Sprintf("a-%d", i))
		if i < 5 {
			sendLite(t, p, "LiteParent", "L2", fmt.Sprintf("b-%d", i))
		}
	}
	log.waitBodies(t, "L1", seq("a", 10))
	log.mu.Lock()
	got := slices.Clone(log.got)
	log.mu.Unlock()
	for _, mv := range got {
		if mv.GetLiteTopic() != "L1" || mv.GetTopic() != "LiteParent" {
			t.Fatalf("a message of lite topic %q, topic %q", mv.GetLiteTopic(), mv.GetTopic())
		}
	}

	// Unsubscribed: L1's new messages wait; an L3 marker subscribed to
	// after them comes, and they do not.
	if err := c.UnSubscribeLite("L1"); err != nil {
		t.Fatal(err)
	}
	for _, body := range seq("u", 3) {
		sendLite(t, p, "LiteParent", "L1", body)
	}
	if err := c.SubscribeLite("L3"); err != nil {
		t.Fatal(err)
	}
	sendLite(t, p, "LiteParent", "L3", "marker")
	log.waitBodies(t, "L3", []string{"marker"})
	if got := log.bodies("L1"); !slices.Equal(got, seq("a", 10)) {
		t.Fatalf("L1 after the unsubscription: %v", got)
	}
	// Subscribed again: from the group's offset.
	if err := c.SubscribeLite("L1"); err != nil {
		t.Fatal(err)
	}
	log.waitBodies(t, "L1", append(seq("a", 10), seq("u", 3)...))
	if got := log.bodies("L2"); len(got) != 0 {
		t.Fatalf("L2 was never subscribed to, yet %v came", got)
	}
}

// TestLiteFIFOAcrossSlowHandler: case 4. A handler slower than the
// invisible duration on L1 does not let L1's next message start before it
// ends; L2 proceeds meanwhile.
func TestLiteFIFOAcrossSlowHandler(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteFifo", 2, "", nil)
	p := b.producer(t, rmq.WithTopics("LiteFifo"))
	release := make(chan struct{})
	var once sync.Once
	log := &liteLog{handle: func(mv *rmq.MessageView) rmq.ConsumerResult {
		if string(mv.GetBody()) == "slow" {
			once.Do(func() { <-release })
		}
		return rmq.SUCCESS
	}}
	b.liteConsumer(t, "LiteFifoGroup", "LiteFifo", 2*time.Second, log, "L1", "L2")
	sendLite(t, p, "LiteFifo", "L1", "slow")
	wait.For(t, "the slow handler started", func() error {
		log.mu.Lock()
		defer log.mu.Unlock()
		if !slices.Contains(log.starting, "slow") {
			return fmt.Errorf("started %v", log.starting)
		}
		return nil
	})
	sendLite(t, p, "LiteFifo", "L1", "next")
	sendLite(t, p, "LiteFifo", "L2", "other")
	log.waitBodies(t, "L2", []string{"other"})
	// Past the invisible duration, L1's next has not started.
	visibleAgain := time.Now().Add(3 * time.Second)
	wait.Until(t, "the slow message's invisible time passed", func() bool { return time.Now().After(visibleAgain) })
	log.mu.Lock()
	started := slices.Clone(log.starting)
	log.mu.Unlock()
	if slices.Contains(started, "next") {
		t.Fatalf("L1's next message started while the first was handled: %v", started)
	}
	close(release)
	wait.For(t, "L1's messages handled in order", func() error {
		got := log.bodies("L1")
		if len(got) < 2 || got[len(got)-1] != "next" || got[0] != "slow" {
			return fmt.Errorf("L1 handled %v", got)
		}
		return nil
	})
}

// TestLiteSuspend: case 5. A handler answering
// NewConsumerResultSuspend(200ms) gets the message again after about 200
// ms, and its delivery attempt does not grow.
func TestLiteSuspend(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteSusp", 2, "", nil)
	p := b.producer(t, rmq.WithTopics("LiteSusp"))
	var mu sync.Mutex
	var attempts []int32
	var times []time.Time
	log := &liteLog{handle: func(mv *rmq.MessageView) rmq.ConsumerResult {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, mv.GetDeliveryAttempt())
		times = append(times, time.Now())
		if len(attempts) == 1 {
			return rmq.NewConsumerResultSuspend(200 * time.Millisecond)
		}
		return rmq.SUCCESS
	}}
	b.liteConsumer(t, "LiteSuspGroup", "LiteSusp", 20*time.Second, log, "S1")
	sendLite(t, p, "LiteSusp", "S1", "suspended")
	log.waitBodies(t, "S1", []string{"suspended", "suspended"})
	mu.Lock()
	defer mu.Unlock()
	if attempts[0] != attempts[1] {
		t.Fatalf("delivery attempts %v: a suspend must not count as an attempt", attempts)
	}
	if d := times[1].Sub(times[0]); d < 200*time.Millisecond {
		t.Fatalf("delivered again after %v, before the 200 ms suspension", d)
	}
}

// TestLiteRefusals: case 12. A lite message to a NORMAL topic and a normal
// message to a LITE topic (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE); a bad
// lite topic name (ILLEGAL_LITE_TOPIC); SyncLiteSubscription from a
// regular group (ILLEGAL_CONSUMER_GROUP) and with another parent
// (ILLEGAL_TOPIC).
func TestLiteRefusals(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "autoCreateTopicEnable=false")
	b.createLiteTopic(t, "LiteRef", 2, "")
	b.createLiteTopic(t, "LiteOther", 2, "")
	b.createTopic(t, "Plain", 2, "NORMAL")
	b.liteGroup(t, "LiteRefGroup", "LiteRef", nil)
	b.updateGroup(t, "RegularGroup", false, 16)
	cli, _, ctx := rawClient(t, b)
	send := func(topic string, lt *string, typ v2.MessageType) v2.Code {
		r, err := cli.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{{Topic: &v2.Resource{Name: topic},
			Body: []byte("x"), SystemProperties: &v2.SystemProperties{MessageId: "m-" + topic, BodyEncoding: v2.Encoding_IDENTITY,
				MessageType: typ, BornTimestamp: timestamppb.Now(), LiteTopic: lt}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus().GetCode()
	}
	str := func(s string) *string { return &s }
	if code := send("Plain", str("L1"), v2.MessageType_LITE); code != v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE {
		t.Fatalf("a LITE message to a NORMAL topic: %v", code)
	}
	if code := send("LiteRef", nil, v2.MessageType_NORMAL); code != v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE {
		t.Fatalf("a NORMAL message to a LITE topic: %v", code)
	}
	for _, bad := range []string{"a$b", "   ", strings.Repeat("x", 65), "with space"} {
		if code := send("LiteRef", str(bad), v2.MessageType_LITE); code != v2.Code_ILLEGAL_LITE_TOPIC {
			t.Fatalf("lite topic %q: %v", bad, code)
		}
	}
	if code := send("LiteRef", str(strings.Repeat("x", 64)), v2.MessageType_LITE); code != v2.Code_OK {
		t.Fatalf("a 64-byte lite topic: %v", code)
	}
	sync := func(group, topic string) v2.Code {
		r, err := cli.SyncLiteSubscription(ctx, &v2.SyncLiteSubscriptionRequest{Action: v2.LiteSubscriptionAction_PARTIAL_ADD,
			Topic: &v2.Resource{Name: topic}, Group: &v2.Resource{Name: group}, LiteTopicSet: []string{"L1"}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus().GetCode()
	}
	if code := sync("RegularGroup", "LiteRef"); code != v2.Code_ILLEGAL_CONSUMER_GROUP {
		t.Fatalf("a regular group's SyncLiteSubscription: %v", code)
	}
	if code := sync("LiteRefGroup", "LiteOther"); code != v2.Code_ILLEGAL_TOPIC {
		t.Fatalf("another parent's SyncLiteSubscription: %v", code)
	}
	if code := sync("LiteRefGroup", "LiteRef"); code != v2.Code_OK {
		t.Fatalf("the bound parent's SyncLiteSubscription: %v", code)
	}

	// The SDK's producer refuses a lite message to a NORMAL topic itself
	// (the route's accepted types).
	p := b.producer(t, rmq.WithTopics("Plain", "LiteRef"))
	m := &rmq.Message{Topic: "Plain", Body: []byte("x")}
	m.SetLiteTopic("L1")
	if _, err := p.Send(context.Background(), m); err == nil {
		t.Fatal("a lite message to a NORMAL topic was sent")
	}
}

// TestLiteQuota: case 7. A broker holding at most 3 lite subscriptions
// (maxLiteSubscriptionCount) across two clients refuses the fourth with
// LITE_SUBSCRIPTION_QUOTA_EXCEEDED; a removal makes room.
func TestLiteQuota(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteQuota", 2, "", map[string]string{"lite.sub.client.quota": "2"}, "maxLiteSubscriptionCount=3")
	a := b.liteConsumer(t, "LiteQuotaGroup", "LiteQuota", 10*time.Second, &liteLog{}, "Q1", "Q2")
	c := b.liteConsumer(t, "LiteQuotaGroup", "LiteQuota", 10*time.Second, &liteLog{}, "Q3")
	err := c.SubscribeLite("Q4")
	if codeOf(err) != int32(v2.Code_LITE_SUBSCRIPTION_QUOTA_EXCEEDED) {
		t.Fatalf("a fourth subscription: %v, want LITE_SUBSCRIPTION_QUOTA_EXCEEDED", err)
	}
	if err := a.UnSubscribeLite("Q1"); err != nil {
		t.Fatal(err)
	}
	if err := c.SubscribeLite("Q4"); err != nil {
		t.Fatalf("after a removal: %v", err)
	}
}

// TestLiteExclusive: case 8. In an exclusive group (lite.sub.model=
// Exclusive) client B's subscription to E1 takes it from client A (told
// with NotifyUnsubscribeLiteCommand): only B receives E1's next messages.
func TestLiteExclusive(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteExcl", 2, "", map[string]string{"lite.sub.model": "Exclusive"})
	p := b.producer(t, rmq.WithTopics("LiteExcl"))
	la, lb := &liteLog{}, &liteLog{}
	b.liteConsumer(t, "LiteExclGroup", "LiteExcl", 10*time.Second, la, "E1")
	sendLite(t, p, "LiteExcl", "E1", "to-a")
	la.waitBodies(t, "E1", []string{"to-a"})
	b.liteConsumer(t, "LiteExclGroup", "LiteExcl", 10*time.Second, lb, "E1")
	bodies := seq("to-b", 5)
	for _, body := range bodies {
		sendLite(t, p, "LiteExcl", "E1", body)
	}
	lb.waitBodies(t, "E1", bodies)
	if got := la.bodies("E1"); !slices.Equal(got, []string{"to-a"}) {
		t.Fatalf("the evicted client received %v", got)
	}
}

// TestLiteExpiry: case 10. A parent with lite.topic.expiration=1 on a
// broker with a minLiteTTl of a second: an idle lite topic is deleted
// (its offsets with it), and a new message makes it again from offset 0,
// which a subscriber (at the end of the new lite topic) receives.
func TestLiteExpiry(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteExp", 2, "+lite.topic.expiration=1", nil, "minLiteTTl=1000", "liteTtlCheckInterval=500")
	p := b.producer(t, rmq.WithTopics("LiteExp"))
	log := &liteLog{}
	c := b.liteConsumer(t, "LiteExpGroup", "LiteExp", 10*time.Second, log, "X1")
	sendLite(t, p, "LiteExp", "X1", "first")
	log.waitBodies(t, "X1", []string{"first"})
	// The broker logs each scan that deletes: wait for X1's.
	wait.For(t, "the idle lite topic expired", func() error {
		if !strings.Contains(b.p.Log(), "idle lite topics expired") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// Recreated at 0: a new subscription starts at its end, and the new
	// message after it comes.
	if err := c.SubscribeLite("X1"); err != nil {
		t.Fatal(err)
	}
	sendLite(t, p, "LiteExp", "X1", "again")
	log.waitBodies(t, "X1", []string{"first", "again"})
}

// TestLiteAcrossProtocols: case 13. A remoting producer (the 4.x Go
// client) sending with the __LITE_TOPIC property reaches the gRPC lite
// consumer; the parent's queues hold every lite message, as RocketMQ's
// do (remoting pulls of the parent see them).
func TestLiteAcrossProtocols(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteX", 2, "", nil)
	log := &liteLog{}
	b.liteConsumer(t, "LiteXGroup", "LiteX", 10*time.Second, log, "R1")
	old := remotingProducer(t, b, "LiteX4x")
	for i := range 3 {
		m := primitive.NewMessage("LiteX", []byte(fmt.Sprintf("remoting-%d", i)))
		m.WithProperty("__LITE_TOPIC", "R1")
		if r, err := old.SendSync(context.Background(), m); err != nil || r.Status != primitive.SendOK {
			t.Fatalf("4.x send: %v %v", r, err)
		}
	}
	log.waitBodies(t, "R1", seq("remoting", 3))
	depths := b.queueDepths(t, "LiteX", 2)
	if depths[0]+depths[1] != 3 {
		t.Fatalf("the parent's queues hold %v, want 3 messages", depths)
	}
}

// remotingProducer starts a 4.x (remoting) producer of its own instance.
func remotingProducer(t *testing.T, b *broker, name string) rocketmq.Producer {
	t.Helper()
	ns := primitive.NewPassthroughResolver([]string{b.NsAddr})
	old, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName(name), producer.WithRetry(2),
		producer.WithInstanceName(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Shutdown() })
	return old
}

// liteACLFile: app may Pub and Sub the lite parent and Sub its group;
// stranger may Sub the parent but not the group; ops is a super user
// (topic and group administration).
const liteACLFile = `users:
  - {username: app, password: app-secret}
  - {username: stranger, password: stranger-secret}
  - {username: ops, password: ops-secret, userType: Super}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:LiteAcl", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:LiteAclGroup", actions: [Sub], decision: Allow}
  - subject: User:stranger
    policies:
      - entries:
          - {resource: "Topic:LiteAcl", actions: [Sub], decision: Allow}
`

// TestLiteACL: case 14. Under ACL a user with Pub on the parent sends lite
// messages and, with Sub on the parent and the group, subscribes and
// receives; without Sub on the group SyncLiteSubscription is FORBIDDEN.
func TestLiteACL(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte(liteACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "aclEnable=true", "aclFile="+file, "autoCreateTopicEnable=false")
	ops := auth.Credentials{AccessKey: "ops", SecretKey: "ops-secret"}
	admin := func(code int32, ext map[string]string, body []byte) {
		t.Helper()
		cl, err := rmtg.Dial(context.Background(), b.Addr, &rmtg.ClientOptions{DialTimeout: 5 * time.Second, Signer: auth.NewSigner(ops)})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var req protocol.Command
		req.InitRequest(code, 0)
		req.Language = protocol.LangGo
		req.Version = protocol.VersionV4_5_2
		req.SerializeType = protocol.SerializeJSON
		for k, v := range ext {
			req.Ext.SetString(k, v)
		}
		req.Body = body
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.Invoke(ctx, &req)
		if err != nil || resp.Code != 0 {
			t.Fatalf("admin request %d: %v %v", code, resp, err)
		}
	}
	admin(17, map[string]string{"topic": "LiteAcl", "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2",
		"perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false", "attributes": "+message.type=LITE"}, nil)
	body, _ := json.Marshal(map[string]any{"groupName": "LiteAclGroup", "consumeEnable": true, "retryMaxTimes": 16,
		"attributes": map[string]string{"+lite.bind.topic": "LiteAcl"}})
	admin(200, map[string]string{}, body)
	as := func(group, ak, sk string) *rmq.Config {
		c := b.config(group)
		c.Credentials = &credentials.SessionCredentials{AccessKey: ak, AccessSecret: sk}
		return c
	}
	p := startProducer(t, as("", "app", "app-secret"), rmq.WithTopics("LiteAcl"))
	log := &liteLog{}
	startLiteConsumer(t, as("LiteAclGroup", "app", "app-secret"), "LiteAcl", 10*time.Second, log, nil, "A1")
	sendLite(t, p, "LiteAcl", "A1", "granted")
	log.waitBodies(t, "A1", []string{"granted"})

	// stranger: Sub on the parent, none on the group.
	sc := newLiteConsumer(t, as("LiteAclGroup", "stranger", "stranger-secret"), "LiteAcl", 10*time.Second, &liteLog{})
	if err := sc.Start(); err == nil {
		defer sc.GracefulStop()
		if err := sc.SubscribeLite("A1"); codeOf(err) != codeForbidden {
			t.Fatalf("SyncLiteSubscription without Sub on the group: %v, want FORBIDDEN", err)
		}
	} else if !strings.Contains(err.Error(), "FORBIDDEN") {
		t.Fatalf("a lite consumer without Sub on its group: %v, want FORBIDDEN", err)
	}
}

// restart stops the broker (SIGTERM, or SIGKILL when kill is set) and
// starts it again on the same data, every listener on a new port.
func (b *broker) restart(t *testing.T, kill bool) {
	t.Helper()
	args := b.p.Args()
	if kill {
		b.p.Kill()
	} else {
		b.p.StopClean()
	}
	b.p.Run(args...)
	b.Addr, b.NsAddr, b.GrpcAddr = b.p.Ready.Advertise, b.p.Ready.Namesrv, b.p.Ready.GRPC
}

// TestLiteRestart: case 11. A clean restart keeps the lite messages and
// the group's lite offsets: a new subscriber resumes where the group
// acked, with what was sent while nobody listened. After a SIGKILL the
// messages are kept and delivery resumes at or before the last acked
// offset (at least once).
func TestLiteRestart(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteRe", 2, "", nil)
	consume := func(want []string) *liteLog {
		t.Helper()
		log := &liteLog{}
		b.liteConsumer(t, "LiteReGroup", "LiteRe", 10*time.Second, log, "R")
		if want != nil {
			log.waitBodies(t, "R", want)
		}
		return log
	}
	send := func(bodies []string) {
		t.Helper()
		p, err := rmq.NewProducer(b.config(""), rmq.WithTopics("LiteRe"))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		defer p.GracefulStop()
		for _, body := range bodies {
			sendLite(t, p, "LiteRe", "R", body)
		}
	}
	log := consume(nil)
	send(seq("a", 5))
	log.waitBodies(t, "R", seq("a", 5))
	b.restart(t, false)
	send(seq("b", 5)) // nobody subscribed: kept, the group's offset at b-0
	consume(seq("b", 5))

	b.restart(t, true)
	send([]string{"c-0"})
	log = consume(nil)
	wait.For(t, "c-0 after the kill", func() error {
		if got := log.bodies("R"); !slices.Contains(got, "c-0") {
			return fmt.Errorf("handled %v", got)
		}
		return nil
	})
	for _, body := range log.bodies("R") {
		if strings.HasPrefix(body, "a-") {
			t.Fatalf("%s delivered again after the kill: it was acked before the clean restart", body)
		}
	}
}

// TestLiteDeadLetter: case 6. A handler failing every time: after the
// retry policy's attempts (the group's retryMaxTimes 1: two attempts, the
// SDK retrying locally as for FIFO) the message goes to the group's
// %DLQ%<group> (ForwardMessageToDeadLetterQueue with lite_topic; lite
// topics have no retry topic) and the lite topic moves on.
func TestLiteDeadLetter(t *testing.T) {
	t.Parallel()
	b := startLiteBroker(t, "LiteDlq", 2, "", map[string]string{"retryMaxTimes": "1"})
	p := b.producer(t, rmq.WithTopics("LiteDlq"))
	var mu sync.Mutex
	attempts := 0
	log := &liteLog{handle: func(mv *rmq.MessageView) rmq.ConsumerResult {
		if string(mv.GetBody()) == "bad" {
			mu.Lock()
			attempts++
			mu.Unlock()
			return rmq.FAILURE
		}
		return rmq.SUCCESS
	}}
	b.liteConsumer(t, "LiteDlqGroup", "LiteDlq", time.Minute, log, "D1")
	sendLite(t, p, "LiteDlq", "D1", "bad")
	sendLite(t, p, "LiteDlq", "D1", "good")
	wait.For(t, "the good message handled after the bad one", func() error {
		if got := log.bodies("D1"); !slices.Contains(got, "good") {
			return fmt.Errorf("handled %v", got)
		}
		return nil
	})
	b.waitDepths(t, "%DLQ%LiteDlqGroup", []int64{1})
	mu.Lock()
	defer mu.Unlock()
	if attempts != 2 {
		t.Fatalf("the failing message was attempted %d times, want 2 (retryMaxTimes 1)", attempts)
	}
}

// TestLiteThroughASlave: a lite producer and a LitePushConsumer given only
// a slave's gRPC address (a group of three in controller mode): the slave
// forwards the sends, the subscription, the receives and the acks to the
// master, as for every receive, and the lite messages come in order.
func TestLiteThroughASlave(t *testing.T) {
	t.Parallel()
	g := startFoGroup(t)
	master := g.waitFullSet(t)
	var slave *foBroker
	for _, b := range g.brokers {
		if b != master {
			slave = b
			break
		}
	}
	createLiteTopicAt(t, master.addr, "LiteFo", 2, "")
	liteGroupAt(t, master.addr, "LiteFoGroup", "LiteFo", nil)
	wait.For(t, "the lite topic on the slave", func() error {
		r, err := remotingCall(slave.addr, 21, nil, nil, 5*time.Second) // GET_ALL_TOPIC_CONFIG
		if err != nil {
			return err
		}
		if !strings.Contains(string(r.Body), `"LiteFo"`) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	cfg := func(group string) *rmq.Config {
		return &rmq.Config{Endpoint: slave.grpcListen, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
	}
	p := startProducer(t, cfg(""), rmq.WithTopics("LiteFo"))
	log := &liteLog{}
	startLiteConsumer(t, cfg("LiteFoGroup"), "LiteFo", 10*time.Second, log, nil, "F1")
	for _, b := range seq("f", 5) {
		sendLite(t, p, "LiteFo", "F1", b)
	}
	log.waitBodies(t, "F1", seq("f", 5))
}
