package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// createTopicReq is UPDATE_AND_CREATE_TOPIC with RocketMQ 5 attributes.
func createTopicReq(topic string, perm int32, attributes string) *protocol.Command {
	cmd := goRequest(protocol.ReqUpdateAndCreateTopic)
	(&protocol.CreateTopicRequest{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: 2, WriteQueueNums: 2, Perm: perm,
		TopicFilterType: "SINGLE_TAG", Attributes: attributes}).Encode(&cmd.Ext)
	return cmd
}

func TestTopicMessageTypes(t *testing.T) {
	h := featureHarness(t, func(o *Options) { o.Core.TransactionTimeout = time.Hour })
	cl := h.dial(nil)
	for topic, typ := range map[string]string{"TN": "NORMAL", "TF": "FIFO", "TD": "DELAY", "TT": "TRANSACTION", "TX": "mixed"} {
		if r := invoke(t, cl, createTopicReq(topic, 6, "+message.type="+typ)); r.Code != 0 {
			t.Fatalf("create %s: %d %s", topic, r.Code, r.Remark)
		}
	}
	normal := func(topic string) *protocol.Command { return sendRequest(topic, 0, []byte("n"), "") }
	fifo := func(topic string) *protocol.Command {
		return sendRequest(topic, 0, []byte("f"), props(message.PropJavaShardingKey, "k"))
	}
	delay := func(topic string) *protocol.Command { return sendRequest(topic, 0, []byte("d"), props("DELAY", "1")) }
	timer := func(topic string) *protocol.Command {
		return sendRequest(topic, 0, []byte("t"), props("TIMER_DELAY_MS", "50"))
	}
	tx := func(topic string) *protocol.Command { return halfSend(topic, 0, "x", "U"+topic, "pg") }
	// RocketMQ's broker does not check a message's type against its topic
	// on its remoting port (only its proxy does, which the gRPC front end
	// plays): every type is stored on every topic.
	for _, topic := range []string{"TN", "TF", "TD", "TT", "TX"} {
		for _, req := range []func(string) *protocol.Command{normal, fifo, delay, timer, tx} {
			if r := invoke(t, cl, req(topic)); r.Code != 0 {
				t.Errorf("%s, %s: %d %s", topic, ext(req(topic), "properties"), r.Code, r.Remark)
			}
		}
	}
	if r := invoke(t, cl, sendV2Request(protocol.ReqSendBatchMessage, "TD", 0, batchBody(batchEntry{"a", ""}), "")); r.Code != 0 {
		t.Errorf("batch to a DELAY topic: %d %s", r.Code, r.Remark)
	}
	// Per-type size limits: 64 KiB for delay and transactional messages.
	big := bytes.Repeat([]byte("x"), 64<<10+1)
	if r := invoke(t, cl, sendRequest("TD", 0, big, props("DELAY", "1"))); r.Code != protocol.RespMessageIllegal || !strings.Contains(string(r.Remark), "65536") {
		t.Errorf("65 KiB delay message: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, sendRequest("TN", 0, big, "")); r.Code != 0 {
		t.Errorf("65 KiB normal message: %d %s", r.Code, r.Remark)
	}
	// The attribute is stored, shown and persisted; -key removes it.
	if e := lookupTopic(h.b, "TD"); e.Attributes["message.type"] != "DELAY" {
		t.Fatalf("attributes %v", e.Attributes)
	}
	data, _ := os.ReadFile(filepath.Join(h.opts.Core.DataDir, "config", "topics.json"))
	if !bytes.Contains(data, []byte(`"message.type":"DELAY"`)) {
		t.Fatalf("topics.json lacks the attribute:\n%s", data)
	}
	if r := invoke(t, cl, createTopicReq("TD", 6, "-message.type")); r.Code != 0 {
		t.Fatalf("remove the attribute: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, normal("TD")); r.Code != 0 {
		t.Fatalf("normal send after the attribute's removal: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, createTopicReq("TD", 6, "")); r.Code != 0 || len(lookupTopic(h.b, "TD").Attributes) != 0 {
		t.Fatalf("update without attributes: %d %v", r.Code, lookupTopic(h.b, "TD").Attributes)
	}
	for _, bad := range []string{"+message.type=BULK", "+color=red", "message.type=FIFO", "+=x"} {
		if r := invoke(t, cl, createTopicReq("TB", 6, bad)); r.Code != protocol.RespInvalidParameter {
			t.Errorf("attributes %q: %d %s", bad, r.Code, r.Remark)
		}
	}
}

func TestTopicPermissions(t *testing.T) {
	h := featureHarness(t, nil)
	cl := h.dial(nil)
	invoke(t, cl, createTopicReq("RO", protocol.PermRead, ""))
	invoke(t, cl, createTopicReq("WO", protocol.PermWrite, ""))
	if r := invoke(t, cl, sendRequest("RO", 0, []byte("x"), "")); r.Code != protocol.RespNoPermission {
		t.Errorf("send to a read-only topic: %d %s", r.Code, r.Remark)
	}
	mustSend(t, cl, sendRequest("WO", 0, []byte("x"), ""))
	r := invoke(t, cl, pullRequest(pullArgs{group: "g", topic: "WO", sysFlag: protocol.PullFlagSubscription, sub: "*"}))
	if r.Code != protocol.RespNoPermission {
		t.Errorf("pull from a write-only topic: %d %s", r.Code, r.Remark)
	}
	r = invoke(t, cl, pullRequest(pullArgs{group: "g", topic: "RO", sysFlag: protocol.PullFlagSubscription, sub: "*"}))
	if r.Code != protocol.RespPullNotFound {
		t.Errorf("pull from a read-only topic: %d %s", r.Code, r.Remark)
	}
}

// groupReq is UPDATE_AND_CREATE_SUBSCRIPTIONGROUP.
func groupReq(t testing.TB, cfg protocol.SubscriptionGroupConfig) *protocol.Command {
	t.Helper()
	body, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := goRequest(protocol.ReqUpdateAndCreateSubscription)
	cmd.Body = body
	return cmd
}

func TestSubscriptionGroupSettings(t *testing.T) {
	dir := t.TempDir()
	mutate := func(o *Options) { o.Core.DelayLevels = fastLevels }
	h := startHarness(t, testOptions(t, dir), mutate)
	cl := h.dial(nil)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@1", "gs", map[string]string{"S": "*"}))
	mustSend(t, cl, sendRequest("S", 0, []byte("x"), ""))
	orig := pullN(t, cl, "S", 0, 0, 1, arrive)[0]

	// Retry policy: one retry at most, then the DLQ.
	cfg := protocol.DefaultSubscriptionGroupConfig("gs")
	cfg.RetryMaxTimes = 1
	cfg.GroupRetryPolicy = json.RawMessage(`{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[10,20,300,400]}}`)
	if r := invoke(t, cl, groupReq(t, cfg)); r.Code != 0 {
		t.Fatalf("update group: %d %s", r.Code, r.Remark)
	}
	sent := time.Now()
	invoke(t, cl, sendBackRequest("gs", orig.PhysicalOffset(), 0, -1, "S", ""))
	r1 := pullN(t, cl, "%RETRY%gs", 0, 0, 1, arrive)
	if len(r1) != 1 {
		t.Fatal("no retry under the group's policy")
	}
	// next[0+2] = 300 ms, through the timer wheel (not a delay level).
	if d := time.UnixMilli(r1[0].StoreTimestamp()).Sub(sent); d < 290*time.Millisecond {
		t.Errorf("retry after %v, the policy says 300 ms", d)
	}
	if prop(r1[0].View, timerwheel.PropTimerOutMS) == "" {
		t.Errorf("retry did not go through the timer wheel: %q", r1[0].Properties())
	}
	invoke(t, cl, sendBackRequest("gs", r1[0].PhysicalOffset(), 0, -1, "S", ""))
	if got := pullN(t, cl, "%DLQ%gs", 0, 0, 1, arrive); len(got) != 1 {
		t.Fatal("retryMaxTimes 1 did not send the second failure to the DLQ")
	}
	// Delivery order: an orderly group's failures go to the DLQ.
	cfg.ConsumeMessageOrderly = true
	invoke(t, cl, groupReq(t, cfg))
	invoke(t, cl, sendBackRequest("gs", orig.PhysicalOffset(), 0, -1, "S", ""))
	if got := pullN(t, cl, "%DLQ%gs", 0, 1, 1, arrive); len(got) != 1 {
		t.Fatal("an orderly group's failure did not go to the DLQ")
	}
	// Consumption disabled: pulls get NO_PERMISSION.
	cfg.ConsumeEnable = false
	invoke(t, cl, groupReq(t, cfg))
	if r := invoke(t, cl, pullRequest(pullArgs{group: "gs", topic: "S"})); r.Code != protocol.RespNoPermission {
		t.Fatalf("pull of a disabled group: %d %s", r.Code, r.Remark)
	}
	// Bad policies are refused.
	bad := cfg
	bad.GroupRetryPolicy = json.RawMessage(`{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":0}}`)
	if r := invoke(t, cl, groupReq(t, bad)); r.Code != protocol.RespInvalidParameter {
		t.Fatalf("bad policy: %d", r.Code)
	}
	// Persisted: after a restart the settings hold; 352 reads them, 207 deletes.
	h.close()
	h2 := startHarness(t, testOptions(t, dir), mutate)
	cl2 := h2.dial(nil)
	get := goRequest(protocol.ReqGetSubscriptionGroupConfig)
	get.Ext.SetString("group", "gs")
	r := invoke(t, cl2, get)
	var got protocol.SubscriptionGroupConfig
	if r.Code != 0 || json.Unmarshal(r.Body, &got) != nil || got.ConsumeEnable || got.RetryMaxTimes != 1 || !got.ConsumeMessageOrderly ||
		!bytes.Contains(got.GroupRetryPolicy, []byte("CUSTOMIZED")) {
		t.Fatalf("group after restart: %d %s", r.Code, r.Body)
	}
	del := goRequest(protocol.ReqDeleteSubscriptionGroup)
	del.Ext.SetString("groupName", "gs")
	if r := invoke(t, cl2, del); r.Code != 0 || lookupGroup(h2.b, "gs") != nil {
		t.Fatalf("delete group: %d", r.Code)
	}
	if r := invoke(t, cl2, get); r.Code != protocol.RespSubscriptionGroupNotExist {
		t.Fatalf("get a deleted group: %d", r.Code)
	}
}

// logCounter counts log records containing a text.
type logCounter struct {
	mu    sync.Mutex
	lines []string
}

func (l *logCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	return len(p), nil
}

func (l *logCounter) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, text) {
			n++
		}
	}
	return n
}

func TestGroupConsistency(t *testing.T) {
	logs := &logCounter{}
	h := featureHarness(t, func(o *Options) { o.Core.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	a, b := h.dial(nil), h.dial(nil)
	beat := func(cl *remoting.Client, id string, subs map[string]string) {
		if r := invoke(t, cl, heartbeatRequest(t, id, "gc", subs)); r.Code != 0 {
			t.Fatalf("heartbeat: %d", r.Code)
		}
	}
	const differ = "subscribe differently"
	beat(a, "10.0.0.1@1", map[string]string{"T1": "tagA"})
	beat(b, "10.0.0.2@2", map[string]string{"T1": "tagA"})
	if info, ok := h.b.ConsumerGroupInfo("gc"); !ok || !info.Consistent || len(info.Connections) != 2 {
		t.Fatalf("alike members: %+v", info)
	}
	// b subscribes another tag and another topic: reported once, however
	// many heartbeats repeat it.
	for i := 0; i < 3; i++ {
		beat(b, "10.0.0.2@2", map[string]string{"T1": "tagB", "T2": "*"})
		beat(a, "10.0.0.1@1", map[string]string{"T1": "tagA"})
	}
	info, _ := h.b.ConsumerGroupInfo("gc")
	if info.Consistent || !strings.Contains(info.Inconsistency, "10.0.0.1@1") || !strings.Contains(info.Inconsistency, "tagB") {
		t.Fatalf("inconsistent members: %+v", info)
	}
	if n := logs.count(differ); n != 1 {
		t.Fatalf("logged %d times", n)
	}
	// The admin view (203).
	req := goRequest(protocol.ReqGetConsumerConnectionList)
	req.Ext.SetString("consumerGroup", "gc")
	r := invoke(t, a, req)
	var view ConsumerGroupInfo
	if r.Code != 0 || json.Unmarshal(r.Body, &view) != nil || view.Consistent || len(view.Connections) != 2 ||
		view.Connections[0].Language != "GO" || len(view.Connections[1].Subscriptions) != 3 || view.MessageModel != "CLUSTERING" {
		t.Fatalf("203: %d %s", r.Code, r.Body)
	}
	req.Ext.SetString("consumerGroup", "nobody")
	if r := invoke(t, a, req); r.Code != protocol.RespConsumerNotOnline {
		t.Fatalf("203 for an unknown group: %d", r.Code)
	}
	// Alike again: logged once more; b leaving a changed group, too.
	beat(b, "10.0.0.2@2", map[string]string{"T1": "tagA"})
	if info, _ := h.b.ConsumerGroupInfo("gc"); !info.Consistent {
		t.Fatalf("alike again: %+v", info)
	}
	if n := logs.count("subscribe alike again"); n != 1 {
		t.Fatalf("recovery logged %d times", n)
	}
	beat(b, "10.0.0.2@2", map[string]string{"T9": "*"})
	b.Close()
	wait.For(t, "b to leave", func() error {
		if info, _ := h.b.ConsumerGroupInfo("gc"); len(info.Connections) != 1 {
			return fmt.Errorf("%d connections", len(info.Connections))
		}
		return nil
	})
	if info, _ := h.b.ConsumerGroupInfo("gc"); !info.Consistent {
		t.Fatalf("one member left: %+v", info)
	}
	if n := logs.count(differ); n != 2 {
		t.Fatalf("second divergence logged %d times in all", n)
	}
}
