package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The admin codes the official Go client has no API for, against a broker
// process, through raw requests: each body checked key by key against the
// Java class the tools decode it into (named in each case; the sources are
// apache/rocketmq's remoting/protocol/{admin,body,header} classes and
// broker/processor/AdminBrokerProcessor.java). fastjson writes fields in
// alphabetical order and MessageQueue map keys as objects; the tools parse
// exactly that.
func TestAdminCodesBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := remoting.Dial(ctx, b.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(code int32, ext map[string]string, body []byte) *protocol.Command {
		t.Helper()
		var req protocol.Command
		req.InitRequest(code, 0)
		for k, v := range ext {
			req.Ext.SetString(k, v)
		}
		req.Body = body
		resp, err := conn.Invoke(ctx, &req)
		if err != nil {
			t.Fatalf("request %d: %v", code, err)
		}
		return resp
	}
	okCall := func(code int32, ext map[string]string, body []byte) string {
		t.Helper()
		resp := call(code, ext, body)
		if resp.Code != 0 {
			t.Fatalf("request %d %v: %d %s", code, ext, resp.Code, resp.Remark)
		}
		return string(resp.Body)
	}
	like := func(what, body, pattern string) {
		t.Helper()
		if !regexp.MustCompile(pattern).MatchString(body) {
			t.Fatalf("%s: body %s\ndoes not match %s", what, body, pattern)
		}
	}

	// Data: a topic with 2 queues, 3 messages, a group with committed offsets.
	okCall(protocol.ReqUpdateAndCreateTopic, map[string]string{"topic": "PT", "defaultTopic": "TBW102", "readQueueNums": "2",
		"writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG"}, nil)
	p, err := client.NewProducer(client.NameServer(b.ns), client.ProducerGroup("PPG"), client.InstanceName("pt-producer"),
		client.Selector(client.ManualSelector()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	var offID string
	for i := 0; i < 3; i++ {
		r, err := p.SendSync(ctx, &client.Message{Topic: "PT", Body: []byte("m"), Tags: "TagA",
			Queue: &client.MessageQueue{Topic: "PT", BrokerName: "broker-a", QueueID: 0}})
		if err != nil {
			t.Fatal(err)
		}
		offID = r.OffsetMsgID()
	}
	// Dispatch to the consume queue is asynchronous: wait until it shows.
	wait.Equal(t, "the messages dispatched (GET_MAX_OFFSET)", "3", func() string {
		v, _ := call(protocol.ReqGetMaxOffset, map[string]string{"topic": "PT", "queueId": "0"}, nil).Ext.GetString("offset")
		return v
	})
	okCall(protocol.ReqUpdateAndCreateSubscription, nil, []byte(`{"groupName":"PG","consumeEnable":true,"retryQueueNums":1,"retryMaxTimes":16}`))
	okCall(protocol.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "PG", "topic": "PT", "queueId": "0", "commitOffset": "2"}, nil)

	// GET_ALL_CONSUMER_OFFSET (43): ConsumerOffsetManager's JSON,
	// {"offsetTable":{"topic@group":{queueId:offset}}} (+ dataVersion).
	like("43", okCall(protocol.ReqGetAllConsumerOffset, nil, nil), `"offsetTable":\{"PT@PG":\{"0":2\}\}`)

	// GET_TOPIC_STATS_INFO (202): TopicStatsTable {offsetTable{MessageQueue:
	// TopicOffset{lastUpdateTimestamp, maxOffset, minOffset}}, topicPutTps}.
	body := okCall(protocol.ReqGetTopicStatsInfo, map[string]string{"topic": "PT"}, nil)
	like("202", body, `^\{"offsetTable":\{\{"brokerName":"broker-a","queueId":0,"topic":"PT"\}:\{"lastUpdateTimestamp":[1-9]\d+,"maxOffset":3,"minOffset":0\},`+
		`\{"brokerName":"broker-a","queueId":1,"topic":"PT"\}:\{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0\}\},"topicPutTps":\d+\.\d+\}$`)
	if resp := call(protocol.ReqGetTopicStatsInfo, map[string]string{"topic": "nope"}, nil); resp.Code != protocol.RespTopicNotExist {
		t.Fatalf("202 of an unknown topic: %d", resp.Code)
	}

	// GET_PRODUCER_CONNECTION_LIST (204): ProducerConnection
	// {connectionSet[Connection{clientAddr, clientId, language, version}]}.
	like("204", okCall(protocol.ReqGetProducerConnectionList, map[string]string{"producerGroup": "PPG"}, nil),
		`^\{"connectionSet":\[\{"clientAddr":"127\.0\.0\.1:\d+","clientId":"[^"]+@pt-producer","language":"GO","version":\d+\}\]\}$`)

	// GET_ALL_PRODUCER_INFO (328): ProducerTableInfo {data{group:[ProducerInfo{
	// clientId, lastUpdateTimestamp, language, remoteIP, version}]}}.
	like("328", okCall(protocol.ReqGetAllProducerInfo, nil, nil),
		`"PPG":\[\{"clientId":"[^"]+@pt-producer","lastUpdateTimestamp":[1-9]\d+,"language":"GO","remoteIP":"127\.0\.0\.1:\d+","version":\d+\}\]`)

	// GET_CONSUME_STATS (208): ConsumeStats {consumeTps, offsetTable{MessageQueue:
	// OffsetWrapper{brokerOffset, consumerOffset, lastTimestamp, pullOffset}}}.
	like("208", okCall(protocol.ReqGetConsumeStats, map[string]string{"consumerGroup": "PG", "topic": "PT"}, nil),
		`^\{"consumeTps":0\.0,"offsetTable":\{\{"brokerName":"broker-a","queueId":0,"topic":"PT"\}:\{"brokerOffset":3,"consumerOffset":2,"lastTimestamp":[1-9]\d+,"pullOffset":2\},`+
			`\{"brokerName":"broker-a","queueId":1,"topic":"PT"\}:\{"brokerOffset":0,"consumerOffset":0,"lastTimestamp":0,"pullOffset":0\}\}\}$`)

	// QUERY_TOPIC_CONSUME_BY_WHO (300): GroupList {groupList}.
	like("300", okCall(protocol.ReqQueryTopicConsumeByWho, map[string]string{"topic": "PT"}, nil), `^\{"groupList":\["PG"\]\}$`)

	// QUERY_CONSUME_TIME_SPAN (303): QueryConsumeTimeSpanBody
	// {consumeTimeSpanSet[QueueTimeSpan{consumeTimeStamp, delayTime,
	// maxTimeStamp, messageQueue, minTimeStamp}]}.
	like("303", okCall(protocol.ReqQueryConsumeTimeSpan, map[string]string{"topic": "PT", "group": "PG"}, nil),
		`^\{"consumeTimeSpanSet":\[\{"consumeTimeStamp":[1-9]\d+,"delayTime":\d+,"maxTimeStamp":[1-9]\d+,"messageQueue":\{"topic":"PT","brokerName":"broker-a","queueId":0\},"minTimeStamp":[1-9]\d+\},`)

	// GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305): TopicList {topicList}.
	like("305", okCall(protocol.ReqGetSystemTopicListFromBroker, nil, nil), `"topicList":\[[^\]]*"SCHEDULE_TOPIC_XXXX"`)

	// CLONE_GROUP_OFFSET (314): header srcGroup, destGroup, topic, offline.
	okCall(protocol.ReqCloneGroupOffset, map[string]string{"srcGroup": "PG", "destGroup": "PG2", "topic": "PT", "offline": "true"}, nil)
	like("314 then 43", okCall(protocol.ReqGetAllConsumerOffset, nil, nil), `"PT@PG2":\{"0":2\}`)

	// VIEW_BROKER_STATS_DATA (315): BrokerStatsData {statsDay, statsHour,
	// statsMinute}, each BrokerStatsItem {avgpt, sum, tps}; an unknown key is
	// SYSTEM_ERROR "The stats <name> <key> not exist".
	like("315", okCall(protocol.ReqViewBrokerStatsData, map[string]string{"statsName": "TOPIC_PUT_NUMS", "statsKey": "PT"}, nil),
		`^\{"statsDay":\{"avgpt":[\d.]+,"sum":\d+,"tps":[\d.]+\},"statsHour":\{"avgpt":[\d.]+,"sum":\d+,"tps":[\d.]+\},"statsMinute":\{"avgpt":[\d.]+,"sum":\d+,"tps":[\d.]+\}\}$`)
	if resp := call(protocol.ReqViewBrokerStatsData, map[string]string{"statsName": "TOPIC_PUT_NUMS", "statsKey": "nope"}, nil); resp.Code != 1 ||
		!strings.Contains(string(resp.Remark), "The stats <TOPIC_PUT_NUMS> <nope> not exist") {
		t.Fatalf("315 of an unknown key: %d %s", resp.Code, resp.Remark)
	}

	// GET_BROKER_CONSUME_STATS (317): ConsumeStatsList {brokerAddr,
	// consumeStatsList[{group:[ConsumeStats]}], totalDiff, totalInflightDiff}.
	like("317", okCall(protocol.ReqGetBrokerConsumeStats, map[string]string{"isOrder": "false"}, nil),
		`^\{"brokerAddr":"`+regexp.QuoteMeta(b.addr)+`","consumeStatsList":\[.*\{"PG":\[\{"consumeTps":0\.0,"offsetTable":\{.*"totalDiff":2,"totalInflightDiff":0\}$`) // PG and PG2, 1 each

	// QUERY_CONSUME_QUEUE (321): QueryConsumeQueueResponseBody {maxQueueIndex,
	// minQueueIndex, queueData[ConsumeQueueData{eval, physicOffset,
	// physicSize, tagsCode}]}.
	like("321", okCall(protocol.ReqQueryConsumeQueue, map[string]string{"topic": "PT", "queueId": "0", "index": "1", "count": "5"}, nil),
		`^\{"maxQueueIndex":3,"minQueueIndex":0,"queueData":\[\{"eval":false,"physicOffset":\d+,"physicSize":\d+,"tagsCode":\d+\},\{[^}]+\}\]\}$`)

	// QUERY_TOPICS_BY_CONSUMER (343): TopicList {brokerAddr, topicList}.
	like("343", okCall(protocol.ReqQueryTopicsByConsumer, map[string]string{"group": "PG"}, nil), `"topicList":\["PT"\]`)

	// GET_TOPIC_CONFIG (351): TopicConfig's fields.
	like("351", okCall(protocol.ReqGetTopicConfig, map[string]string{"topic": "PT"}, nil), `"topicName":"PT","readQueueNums":2,"writeQueueNums":2,"perm":6`)

	// GET_BROKER_CONFIG (26): properties text, header version (DataVersion
	// JSON); UPDATE_BROKER_CONFIG (25): properties text body.
	resp := call(protocol.ReqGetBrokerConfig, nil, nil)
	if v, _ := resp.Ext.GetString("version"); resp.Code != 0 || !strings.Contains(string(resp.Body), "brokerName=broker-a\n") ||
		!json.Valid([]byte(v)) {
		t.Fatalf("26: %d %q version %q", resp.Code, resp.Body, v)
	}
	okCall(protocol.ReqUpdateBrokerConfig, nil, []byte("brokerPermission=4\n"))
	if resp := call(protocol.ReqSendMessage, map[string]string{"producerGroup": "x", "topic": "PT", "defaultTopic": "TBW102",
		"defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0"}, []byte("b")); resp.Code != protocol.RespNoPermission {
		t.Fatalf("send to a broker with brokerPermission=4: %d %s", resp.Code, resp.Remark)
	}
	okCall(protocol.ReqUpdateBrokerConfig, nil, []byte("brokerPermission=6\n"))

	// The maintenance codes (306, 316, 329): one retention pass, SUCCESS.
	for _, code := range []int32{protocol.ReqCleanExpiredConsumeQueue, protocol.ReqCleanUnusedTopic, protocol.ReqDeleteExpiredCommitLog} {
		okCall(code, nil, nil)
	}

	// WIPE/ADD_WRITE_PERM_OF_BROKER (205, 327) on the name server: headers
	// wipeTopicCount / addTopicCount.
	for _, c := range []struct {
		code int32
		key  string
	}{{protocol.ReqWipeWritePermOfBroker, "wipeTopicCount"}, {protocol.ReqAddWritePermOfBroker, "addTopicCount"}} {
		resp := call(c.code, map[string]string{"brokerName": "broker-a"}, nil)
		if n, _ := resp.Ext.GetString(c.key); resp.Code != 0 || n == "" || n == "0" {
			t.Fatalf("%d: %d %s=%q", c.code, resp.Code, c.key, n)
		}
	}

	// GET_BROKER_RUNTIME_INFO (28): the keys the Java tools read.
	var kv protocol.KVTable
	if err := kv.Decode([]byte(okCall(protocol.ReqGetBrokerRuntimeInfo, nil, nil))); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"putTps", "getTransferredTps", "getTransferedTps", "msgPutTotalTodayMorning", "msgPutTotalYesterdayMorning",
		"msgGetTotalTodayNow", "commitLogDiskRatio", "consumeQueueDiskRatio", "dispatchBehindBytes", "commitLogDirCapacity",
		"earliestMessageTimeStamp", "sendThreadPoolQueueSize", "brokerVersionDesc"} {
		if _, ok := kv.Table[k]; !ok {
			t.Fatalf("runtime info lacks %s", k)
		}
	}
	if f := strings.Fields(kv.Table["putTps"]); len(f) != 3 {
		t.Fatalf("putTps %q: want three rates (10 s, 1 min, 10 min)", kv.Table["putTps"])
	}
	_ = offID
}
