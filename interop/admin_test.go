package interop

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/apogeemq/apogee/internal/wait"
)

// The admin protocol with the official Go client: its admin API
// (FetchAllTopicList, GetAllSubscriptionGroup, CreateTopic, DeleteTopic),
// and the requests an admin tool sends to a broker that the broker forwards
// to an official push consumer (GET_CONSUMER_RUNNING_INFO 307,
// CONSUME_MESSAGE_DIRECTLY 309), plus GET_CONSUME_STATS (208) after it
// consumed. Expected shapes: the Java tools' classes (ConsumerRunningInfo,
// ConsumeMessageDirectlyResult, ConsumeStats/OffsetWrapper in
// org.apache.rocketmq.remoting.protocol), and the Go client's
// internal/model.go encoders for what the consumer itself writes.
func TestAdminProtocolWithOfficialClient(t *testing.T) {
	b := startBroker(t)
	topic, group := uniq("AdmT"), uniq("AdmG")
	createTopic(t, b, topic, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	adm, err := admin.NewAdmin(admin.WithResolver(b.NameServer()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	tl, err := adm.FetchAllTopicList(ctx)
	if err != nil || !strings.Contains(strings.Join(tl.TopicList, ","), topic) {
		t.Fatalf("FetchAllTopicList: %v %v", tl, err)
	}

	p := newProducer(t, b)
	res, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("admin me")))
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	c, err := rocketmq.NewPushConsumer(consumerOpts(b, group)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		got.Add(int64(len(msgs)))
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	wait.Until(t, "the message consumed", func() bool { return got.Load() >= 1 })

	subs, err := adm.GetAllSubscriptionGroup(ctx, b.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := subs.SubscriptionGroupTable[group]; !ok {
		t.Fatalf("GetAllSubscriptionGroup lacks %s", group)
	}

	rc := dialRaw(t, b.Addr)
	defer rc.Close()
	resp := rc.Invoke(t, request(38, map[string]string{"consumerGroup": group}, nil))
	var ids struct {
		ConsumerIDList []string `json:"consumerIdList"`
	}
	if resp.Code != 0 || json.Unmarshal(resp.Body, &ids) != nil || len(ids.ConsumerIDList) != 1 {
		t.Fatalf("consumer list: %d %s", resp.Code, resp.Body)
	}
	clientID := ids.ConsumerIDList[0]

	// 307, forwarded: the body is what the Go consumer writes
	// (ConsumerRunningInfo.Encode: properties, statusTable, subscriptionSet,
	// mqTable with queue objects as keys, jstack), returned as it is.
	resp = rc.Invoke(t, request(307, map[string]string{"consumerGroup": group, "clientId": clientID, "jstackEnable": "false"}, nil))
	if resp.Code != 0 {
		t.Fatalf("GET_CONSUMER_RUNNING_INFO: %d %s", resp.Code, resp.Remark)
	}
	body := string(resp.Body)
	for _, want := range []string{`"properties":{`, `"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"`, `"statusTable":{`, `"` + topic + `":{"pullRT":`,
		`"subscriptionSet":[`, `"topic":"` + topic + `"`, `"mqTable":{{`, `"jstack":`} {
		if !strings.Contains(body, want) {
			t.Fatalf("running info lacks %s:\n%s", want, body)
		}
	}
	// An unknown client: SYSTEM_ERROR "The Consumer <g> <id> not online"
	// (AdminBrokerProcessor.callConsumer).
	resp = rc.Invoke(t, request(307, map[string]string{"consumerGroup": group, "clientId": "nobody@0"}, nil))
	if resp.Code != 1 || !strings.Contains(resp.Remark, "not online") {
		t.Fatalf("running info of an unknown client: %d %q", resp.Code, resp.Remark)
	}

	// 309: the broker reads the message by its offset id and forwards it;
	// ConsumeMessageDirectlyResult {order, autoCommit, consumeResult,
	// remark, spentTimeMills} comes back.
	resp = rc.Invoke(t, request(309, map[string]string{"consumerGroup": group, "clientId": clientID, "msgId": res.OffsetMsgID}, nil))
	if resp.Code != 0 {
		t.Fatalf("CONSUME_MESSAGE_DIRECTLY: %d %s", resp.Code, resp.Remark)
	}
	var cr map[string]any
	if err := json.Unmarshal(resp.Body, &cr); err != nil {
		t.Fatalf("direct result %s: %v", resp.Body, err)
	}
	for _, k := range []string{"order", "autoCommit", "consumeResult", "remark", "spentTimeMills"} {
		if _, ok := cr[k]; !ok {
			t.Fatalf("direct result lacks %s: %s", k, resp.Body)
		}
	}
	wait.Until(t, "the direct consumption", func() bool { return got.Load() >= 2 })

	// 208 once the consumer committed (it persists every 5 s):
	// ConsumeStats {consumeTps, offsetTable{MessageQueue: OffsetWrapper}}
	// in fastjson's shape, which the Java tools parse.
	entry := regexp.MustCompile(`\{"brokerName":"[^"]+","queueId":(\d),"topic":"` + topic + `"\}:\{"brokerOffset":(\d+),"consumerOffset":(\d+),"lastTimestamp":(\d+),"pullOffset":(\d+)\}`)
	wait.Until(t, "the committed offset in GET_CONSUME_STATS", func() bool {
		resp = rc.Invoke(t, request(208, map[string]string{"consumerGroup": group, "topic": topic}, nil))
		if resp.Code != 0 || !strings.HasPrefix(string(resp.Body), `{"consumeTps":`) {
			t.Fatalf("GET_CONSUME_STATS: %d %q %s", resp.Code, resp.Remark, resp.Body)
		}
		ms := entry.FindAllStringSubmatch(string(resp.Body), -1)
		if len(ms) != 2 {
			t.Fatalf("GET_CONSUME_STATS queues: %s", resp.Body)
		}
		for _, m := range ms {
			if m[2] != m[3] || (m[2] != "0" && m[4] == "0") {
				return false
			}
		}
		return true
	})
}
