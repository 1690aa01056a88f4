package interop

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/apogeemq/apogee/internal/wait"
)

// RocketMQ 5's POP extras and recall over remoting, through a broker
// process: PEEK_MESSAGE (3444), NOTIFICATION (3446), POLLING_INFO (3447),
// BATCH_ACK_MESSAGE (3543), RECALL_MESSAGE (370), and FIFO pops that hand
// out a message group's consecutive messages together. rocketmq-client-go
// has no API for these codes (its producer sends the messages here); the
// requests are raw frames with RocketMQ's headers and bodies.

// popFrame is a POP_MESSAGE request (3442), initMode MIN.
func popFrame(group, topic string, queue, max int, invisible, poll time.Duration, order bool) *command {
	return request(3442, map[string]string{"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(queue),
		"maxMsgNums": strconv.Itoa(max), "invisibleTime": strconv.FormatInt(invisible.Milliseconds(), 10),
		"pollTime": strconv.FormatInt(poll.Milliseconds(), 10), "bornTime": strconv.FormatInt(time.Now().UnixMilli(), 10),
		"initMode": "0", "order": strconv.FormatBool(order)}, nil)
}

// popBodies decodes a pop's (or peek's) records with the official client's
// decoder.
func popBodies(resp *command) []string {
	var out []string
	for _, m := range primitive.DecodeMessage(resp.Body) {
		out = append(out, string(m.Body))
	}
	return out
}

func sendMsgs(t *testing.T, b *Broker, topic string, msgs ...*primitive.Message) {
	t.Helper()
	p := newProducer(t, b)
	for _, m := range msgs {
		m.Topic = topic
		if _, err := p.SendSync(context.Background(), m); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

func TestPopExtrasPeekNotificationPollingInfo(t *testing.T) {
	b := startBroker(t)
	topic, group := uniq("PX"), uniq("GPX")
	createTopic(t, b, topic, 1)
	rc := dialRaw(t, b.Addr)
	defer rc.Close()

	// NOTIFICATION of a group that does not exist: 26, as RocketMQ answers.
	notify := func(group string, poll time.Duration) *command {
		return request(3446, map[string]string{"consumerGroup": group, "topic": topic, "queueId": "-1",
			"pollTime": strconv.FormatInt(poll.Milliseconds(), 10), "bornTime": strconv.FormatInt(time.Now().UnixMilli(), 10)}, nil)
	}
	if resp := rc.Invoke(t, notify(group, 0)); resp.Code != 26 {
		t.Fatalf("notification of an unknown group: %d %s", resp.Code, resp.Remark)
	}
	// A pop creates the group; the topic is empty.
	if resp := rc.Invoke(t, popFrame(group, topic, -1, 1, time.Minute, 0, false)); resp.Code != 19 {
		t.Fatalf("pop of an empty topic: %d %s", resp.Code, resp.Remark)
	}
	if resp := rc.Invoke(t, notify(group, 0)); resp.Code != 0 || resp.ExtFields["hasMsg"] != "false" {
		t.Fatalf("notification on an empty topic: %d %v", resp.Code, resp.ExtFields)
	}

	// A long-polled notification is answered when a message comes.
	held := dialRaw(t, b.Addr)
	defer held.Close()
	op := held.Send(t, notify(group, 20*time.Second))
	pollInfo := func(queue string) string {
		resp := rc.Invoke(t, request(3447, map[string]string{"consumerGroup": group, "topic": topic, "queueId": queue}, nil))
		if resp.Code != 0 {
			t.Fatalf("polling info: %d %s", resp.Code, resp.Remark)
		}
		return resp.ExtFields["pollingNum"]
	}
	// A held pop of any queue counts under queue id -1 (a notification
	// does not count, as in RocketMQ's PollingInfoProcessor).
	heldPop := dialRaw(t, b.Addr)
	defer heldPop.Close()
	popOp := heldPop.Send(t, popFrame(group, topic, -1, 1, time.Minute, 20*time.Second, false))
	wait.Equal(t, "one pop held", "1", func() string { return pollInfo("-1") })
	if n := pollInfo("0"); n != "0" {
		t.Fatalf("pollingNum of queue 0: %s", n)
	}
	sendMsgs(t, b, topic, primitive.NewMessage("", []byte("m0")), primitive.NewMessage("", []byte("m1")),
		primitive.NewMessage("", []byte("m2")))
	resp, err := held.Read(10 * time.Second)
	if err != nil || resp.Opaque != op || resp.Code != 0 || resp.ExtFields["hasMsg"] != "true" {
		t.Fatalf("held notification: %+v, %v", resp, err)
	}
	resp, err = heldPop.Read(10 * time.Second)
	if err != nil || resp.Opaque != popOp || resp.Code != 0 {
		t.Fatalf("held pop: %+v, %v", resp, err)
	}
	first := popBodies(resp)
	if len(first) != 1 || first[0] != "m0" {
		t.Fatalf("held pop got %v", first)
	}
	wait.Equal(t, "no pop held", "0", func() string { return pollInfo("-1") })

	// PEEK: what the next pops hand out, handed out to nobody.
	peek := request(3444, map[string]string{"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "32"}, nil)
	var peeked []string
	wait.For(t, "m1 and m2 peeked", func() error {
		resp := rc.Invoke(t, peek)
		peeked = popBodies(resp)
		if resp.Code != 0 || len(peeked) != 2 {
			return fmt.Errorf("code %d, %v", resp.Code, peeked)
		}
		return nil
	})
	if strings.Join(peeked, ",") != "m1,m2" {
		t.Fatalf("peeked %v", peeked)
	}
	resp = rc.Invoke(t, popFrame(group, topic, -1, 32, time.Minute, 0, false))
	if got := popBodies(resp); strings.Join(got, ",") != "m1,m2" {
		t.Fatalf("pop after the peek: %v", got)
	}
	if resp := rc.Invoke(t, peek); resp.Code != 19 || resp.ExtFields["restNum"] != "0" {
		t.Fatalf("peek with everything in flight: %d %v", resp.Code, resp.ExtFields)
	}
}

func TestPopExtrasBatchAckAndFIFOBatch(t *testing.T) {
	b := startBroker(t)
	topic, group := uniq("PB"), uniq("GPB")
	createTopic(t, b, topic, 1)
	var msgs []*primitive.Message
	for _, x := range [][2]string{{"A", "a1"}, {"A", "a2"}, {"B", "b1"}, {"A", "a3"}} {
		m := primitive.NewMessage("", []byte(x[1]))
		m.WithShardingKey(x[0])
		msgs = append(msgs, m)
	}
	sendMsgs(t, b, topic, msgs...)
	rc := dialRaw(t, b.Addr)
	defer rc.Close()
	// Another group's pops wait until the four messages are in the queue
	// (dispatch follows the send's answer).
	var seen []string
	wait.For(t, "four messages in the queue", func() error {
		seen = append(seen, popBodies(rc.Invoke(t, popFrame(group, topic, 0, 32, time.Minute, 0, false)))...)
		if len(seen) < 4 {
			return fmt.Errorf("%d popped", len(seen))
		}
		return nil
	})

	// An orderly pop of a fresh group hands out a1, a2 and b1 together
	// (consecutive messages of their groups), and a3 waits for a2.
	og := uniq("GPO")
	resp := rc.Invoke(t, popFrame(og, topic, 0, 3, time.Minute, 0, true))
	if got := popBodies(resp); resp.Code != 0 || strings.Join(got, ",") != "a1,a2,b1" {
		t.Fatalf("orderly pop: %d %v", resp.Code, got)
	}
	if r := rc.Invoke(t, popFrame(og, topic, 0, 32, time.Minute, 0, true)); r.Code != 19 {
		t.Fatalf("orderly pop while A and B are in flight: %d %v", r.Code, popBodies(r))
	}
	popTime, _ := strconv.ParseInt(resp.ExtFields["popTime"], 10, 64)
	if resp.ExtFields["reviveQid"] != "999" || popTime == 0 {
		t.Fatalf("orderly pop header: %v", resp.ExtFields)
	}
	start := strings.Fields(resp.ExtFields["startOffsetInfo"]) // "0 0 <start>"
	so, _ := strconv.ParseInt(start[len(start)-1], 10, 64)

	// BATCH_ACK a1 and a2 (bits 0 and 1): a3 comes next; b1 stays in flight.
	body, err := json.Marshal(map[string]any{"brokerName": "broker-a", "acks": []map[string]any{{
		"c": og, "t": topic, "r": "0", "so": so, "q": 0, "rq": 999, "pt": popTime, "it": 60000,
		"b": base64.StdEncoding.EncodeToString([]byte{0b011}),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := rc.Invoke(t, request(3543, nil, body)); r.Code != 0 {
		t.Fatalf("batch ack: %d %s", r.Code, r.Remark)
	}
	r := rc.Invoke(t, popFrame(og, topic, 0, 32, time.Minute, 0, true))
	if got := popBodies(r); r.Code != 0 || strings.Join(got, ",") != "a3" {
		t.Fatalf("orderly pop after the batch ack: %d %v", r.Code, got)
	}
	// A batch ack without acks: NO_MESSAGE (208), as RocketMQ answers.
	if r := rc.Invoke(t, request(3543, nil, []byte(`{"brokerName":"broker-a","acks":[]}`))); r.Code != 208 {
		t.Fatalf("empty batch ack: %d", r.Code)
	}
}

func TestPopExtrasRecall(t *testing.T) {
	b := startBroker(t)
	topic := uniq("RC")
	createTopic(t, b, topic, 1)
	rc := dialRaw(t, b.Addr)
	defer rc.Close()
	due := strconv.FormatInt(time.Now().Add(2*time.Second).UnixMilli(), 10)
	send := func(body, uniqKey string) *command {
		props := "UNIQ_KEY\x01" + uniqKey + "\x02TIMER_DELIVER_MS\x01" + due + "\x02"
		resp := rc.Invoke(t, request(10, map[string]string{"producerGroup": uniq("PG"), "topic": topic, "defaultTopic": "TBW102",
			"defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10),
			"flag": "0", "properties": props, "reconsumeTimes": "0", "unitMode": "false"}, []byte(body)))
		if resp.Code != 0 || resp.ExtFields["recallHandle"] == "" {
			t.Fatalf("timer send: %d %s %v", resp.Code, resp.Remark, resp.ExtFields)
		}
		return resp
	}
	recalled := send("recalled", "RID-"+uniq("r"))
	send("kept", "KID-"+uniq("k"))
	recall := func(topic, handle string) *command {
		return rc.Invoke(t, request(370, map[string]string{"producerGroup": "pg", "topic": topic, "recallHandle": handle}, nil))
	}
	if r := recall(topic, "garbage!"); r.Code != 604 {
		t.Fatalf("recall with a bad handle: %d %s", r.Code, r.Remark)
	}
	r := recall(topic, recalled.ExtFields["recallHandle"])
	if r.Code != 0 || !strings.HasPrefix(r.ExtFields["msgId"], "RID-") {
		t.Fatalf("recall: %d %s %v", r.Code, r.Remark, r.ExtFields)
	}
	// Both were due at the same time: once "kept" is delivered, "recalled"
	// would have been too.
	group := uniq("GRC")
	var got []string
	wait.For(t, "the kept timer message delivered", func() error {
		got = append(got, popBodies(rc.Invoke(t, popFrame(group, topic, 0, 32, time.Minute, 0, false)))...)
		for _, g := range got {
			if g == "kept" {
				return nil
			}
		}
		return fmt.Errorf("popped %v", got)
	})
	for _, g := range got {
		if g == "recalled" {
			t.Fatalf("the recalled message was delivered: %v", got)
		}
	}
}
