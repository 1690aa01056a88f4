package protocol

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// gocHeartbeat is the heartbeat body rocketmq-client-go sends (reference §7.1).
const gocHeartbeat = `{"clientID":"10.0.0.1@1234","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[{"groupName":"cg","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"a || b","tagsSet":["a","b"],"codeSet":["97","98"],"subVersion":1700000000000000001,"expressionType":"TAG"},{"classFilterMode":false,"topic":"%RETRY%cg","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`

// javaHeartbeat is shaped like a Java client's (fastjson, alphabetical, numeric codeSet).
const javaHeartbeat = `{"clientID":"10.0.0.2@5678#123","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"jg","messageModel":"BROADCASTING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[97,-1234567890],"expressionType":"TAG","subString":"a","subVersion":1700000000000,"tagsSet":["a"],"topic":"T"}],"unitMode":false}],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}`

func TestHeartbeatDecode(t *testing.T) {
	var h HeartbeatData
	if err := h.Decode([]byte(gocHeartbeat)); err != nil {
		t.Fatal(err)
	}
	want := HeartbeatData{
		ClientID:        "10.0.0.1@1234",
		ProducerDataSet: []ProducerData{{GroupName: "pg"}},
		ConsumerDataSet: []ConsumerData{{
			GroupName: "cg", ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING", ConsumeFromWhere: "CONSUME_FROM_LAST_OFFSET",
			SubscriptionDataSet: []SubscriptionData{
				{Topic: "T", SubString: "a || b", TagsSet: []string{"a", "b"}, CodeSet: []int32{97, 98}, SubVersion: 1700000000000000001, ExpressionType: "TAG"},
				{Topic: "%RETRY%cg", SubString: "*", TagsSet: []string{}, SubVersion: 1, ExpressionType: "TAG"},
			},
		}},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", h, want)
	}

	if err := h.Decode([]byte(javaHeartbeat)); err != nil {
		t.Fatal(err)
	}
	s := h.ConsumerDataSet[0].SubscriptionDataSet[0]
	if !reflect.DeepEqual(s.CodeSet, []int32{97, -1234567890}) || s.SubVersion != 1700000000000 || h.ProducerDataSet[0].GroupName != "CLIENT_INNER_PRODUCER" {
		t.Fatalf("java heartbeat %+v", h)
	}

	// Lenient: subVersion as a string, odd codeSet entries skipped, 64-bit codes wrap.
	odd := `{"clientID":"c","consumerDataSet":[{"subscriptionDataSet":[{"codeSet":["x",null,"4294967297",1.5],"subVersion":"42"}]}]}`
	if err := h.Decode([]byte(odd)); err != nil {
		t.Fatal(err)
	}
	s = h.ConsumerDataSet[0].SubscriptionDataSet[0]
	if !reflect.DeepEqual(s.CodeSet, []int32{1}) || s.SubVersion != 42 {
		t.Fatalf("lenient %+v", s)
	}
	for _, bad := range []string{``, `{`, `[]`, `{"clientID":5}`, `{"consumerDataSet":[{"subscriptionDataSet":[{"subVersion":1.5e18}]}]}`,
		`{"consumerDataSet":[{"subscriptionDataSet":[{"subVersion":"abc"}]}]}`} {
		if err := h.Decode([]byte(bad)); !errors.Is(err, ErrBadBody) {
			t.Errorf("Decode(%q) = %v, want ErrBadBody", bad, err)
		}
	}
}

func TestHeartbeatRoundTrip(t *testing.T) {
	in := HeartbeatData{ClientID: "x@1", ConsumerDataSet: []ConsumerData{{GroupName: "g",
		SubscriptionDataSet: []SubscriptionData{{Topic: "T", SubString: "*", SubVersion: 1<<62 + 1}}}}}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"producerDataSet":[]`) || !strings.Contains(string(b), `"tagsSet":[],"codeSet":[]`) ||
		!strings.Contains(string(b), `"subVersion":4611686018427387905`) {
		t.Fatalf("encoded %s", b)
	}
	var out HeartbeatData
	if err := out.Decode(b); err != nil {
		t.Fatal(err)
	}
	if out.ConsumerDataSet[0].SubscriptionDataSet[0].SubVersion != 1<<62+1 || out.ClientID != "x@1" {
		t.Fatalf("round trip %+v", out)
	}
}

func sampleRoute() TopicRouteData {
	return TopicRouteData{
		QueueDatas: []QueueData{{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}},
		BrokerDatas: []BrokerData{{Cluster: "DefaultCluster", BrokerName: "broker-a",
			BrokerAddrs: map[int64]string{1: "192.168.1.11:10911", 0: "192.168.1.10:10911"}}},
	}
}

func TestTopicRouteDataGolden(t *testing.T) {
	r := sampleRoute()
	legacy := string(r.AppendJSON(nil, false))
	wantLegacy := `{"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],` +
		`"brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{0:"192.168.1.10:10911",1:"192.168.1.11:10911"}}],` +
		`"filterServerTable":{}}`
	if legacy != wantLegacy {
		t.Fatalf("legacy route:\n got %s\nwant %s", legacy, wantLegacy)
	}
	standard := string(r.AppendJSON(nil, true))
	if want := strings.Replace(strings.Replace(wantLegacy, `{0:`, `{"0":`, 1), `,1:`, `,"1":`, 1); standard != want {
		t.Fatalf("standard route:\n got %s\nwant %s", standard, want)
	}
	if !json.Valid([]byte(standard)) {
		t.Fatal("standard form is not valid JSON")
	}
	if strings.ContainsAny(standard, " \n\t") {
		t.Fatal("whitespace in route JSON")
	}
	// An empty route still has the arrays and brokerAddrs objects the Go client needs.
	empty := TopicRouteData{BrokerDatas: []BrokerData{{BrokerName: "b"}}}
	if got := string(empty.AppendJSON(nil, true)); got != `{"queueDatas":[],"brokerDatas":[{"cluster":"","brokerName":"b","brokerAddrs":{}}],"filterServerTable":{}}` {
		t.Fatalf("empty route %s", got)
	}
	if !RouteJSONStandard(VersionV4_9_4, false) || RouteJSONStandard(VersionV4_5_2, false) || !RouteJSONStandard(VersionV4_5_2, true) {
		t.Fatal("RouteJSONStandard")
	}
}

// gocParseBrokerAddrs mimics rocketmq-client-go's hand parser of one brokerData's
// brokerAddrs (reference §5.1). stripKeyQuotes selects the newer behaviour.
func gocParseBrokerAddrs(t *testing.T, route string, stripKeyQuotes bool) map[int64]string {
	t.Helper()
	i := strings.Index(route, `"brokerAddrs":`)
	if i < 0 {
		t.Fatal("no brokerAddrs")
	}
	raw := route[i+len(`"brokerAddrs":`):]
	raw = raw[:strings.IndexByte(raw, '}')+1]
	out := map[int64]string{}
	for _, s := range strings.Split(raw[1:len(raw)-1], ",") {
		j := strings.Index(s, ":")
		if j < 0 {
			continue
		}
		k := s[:j]
		if stripKeyQuotes {
			k = strings.ReplaceAll(k, `"`, "")
		}
		id, _ := strconv.ParseInt(k, 10, 64)
		out[id] = strings.ReplaceAll(s[j+1:], `"`, "")
	}
	return out
}

func TestTopicRouteDataGoCHandParser(t *testing.T) {
	r := sampleRoute()
	want := r.BrokerDatas[0].BrokerAddrs
	legacy := string(r.AppendJSON(nil, false))
	for _, strip := range []bool{false, true} {
		if got := gocParseBrokerAddrs(t, legacy, strip); !reflect.DeepEqual(got, want) {
			t.Fatalf("legacy form, strip=%v: GoC would read %v", strip, got)
		}
	}
	standard := string(r.AppendJSON(nil, true))
	if got := gocParseBrokerAddrs(t, standard, true); !reflect.DeepEqual(got, want) {
		t.Fatalf("standard form, new GoC would read %v", got)
	}
	// The reason old clients get the legacy form: they read quoted ids all as 0.
	if got := gocParseBrokerAddrs(t, standard, false); reflect.DeepEqual(got, want) {
		t.Fatal("expected old GoC to misread quoted ids")
	}
}

func TestTopicRouteDataDecode(t *testing.T) {
	r := sampleRoute()
	r.OrderTopicConf = "broker-a:4"
	r.FilterServerTable = map[string][]string{"192.168.1.10:10911": {"f1"}}
	r.BrokerDatas[0].ZoneName = "z"
	r.BrokerDatas[0].EnableActingMaster = true
	for _, standard := range []bool{false, true} {
		var out TopicRouteData
		if err := out.Decode(r.AppendJSON(nil, standard)); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out, r) {
			t.Fatalf("standard=%v:\n got %+v\nwant %+v", standard, out, r)
		}
	}
	// Java 5.x output: alphabetical keys, whitespace, extra keys, topicSynFlag typo.
	java := `{ "brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"b","cluster":"c","enableActingMaster":false}],
	  "filterServerTable":{}, "queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSynFlag":3,"writeQueueNums":8}],
	  "topicQueueMappingByBroker":null }`
	var out TopicRouteData
	if err := out.Decode([]byte(java)); err != nil {
		t.Fatal(err)
	}
	if out.BrokerDatas[0].BrokerAddrs[0] != "10.0.0.1:10911" || out.QueueDatas[0].TopicSysFlag != 3 || out.QueueDatas[0].ReadQueueNums != 8 {
		t.Fatalf("java route %+v", out)
	}
	for _, bad := range []string{``, `{"brokerDatas":[{"brokerAddrs":{"x":"a"}}]}`, `{"queueDatas":{}}`, `{"brokerDatas":[{"brokerAddrs":{0:}}]}`} {
		if err := out.Decode([]byte(bad)); !errors.Is(err, ErrBadBody) {
			t.Errorf("Decode(%q) = %v", bad, err)
		}
	}
}

func TestClusterInfo(t *testing.T) {
	ci := ClusterInfo{
		BrokerAddrTable: map[string]BrokerData{
			"b2": {Cluster: "c", BrokerName: "b2", BrokerAddrs: map[int64]string{0: "h2:1"}},
			"b1": {Cluster: "c", BrokerName: "b1", BrokerAddrs: map[int64]string{0: "h1:1", 2: "h1:2"}},
		},
		ClusterAddrTable: map[string][]string{"c": {"b1", "b2"}},
	}
	got := string(ci.AppendJSON(nil, true))
	want := `{"brokerAddrTable":{"b1":{"cluster":"c","brokerName":"b1","brokerAddrs":{"0":"h1:1","2":"h1:2"}},` +
		`"b2":{"cluster":"c","brokerName":"b2","brokerAddrs":{"0":"h2:1"}}},"clusterAddrTable":{"c":["b1","b2"]}}`
	if got != want {
		t.Fatalf("cluster info\n got %s\nwant %s", got, want)
	}
	for _, standard := range []bool{false, true} {
		var out ClusterInfo
		if err := out.Decode(ci.AppendJSON(nil, standard)); err != nil || !reflect.DeepEqual(out, ci) {
			t.Fatalf("round trip standard=%v: %+v %v", standard, out, err)
		}
	}
}

func TestSimpleBodiesGolden(t *testing.T) {
	cases := []struct {
		name string
		enc  interface{ Encode() ([]byte, error) }
		want string
		dec  interface{ Decode([]byte) error }
	}{
		{"consumer-list", &ConsumerListBody{ConsumerIDList: []string{"10.0.0.5@12345", "10.0.0.6@1"}},
			`{"consumerIdList":["10.0.0.5@12345","10.0.0.6@1"]}`, &ConsumerListBody{}},
		{"consumer-list-empty", &ConsumerListBody{}, `{"consumerIdList":[]}`, &ConsumerListBody{}},
		{"lock-request", &LockBatchRequestBody{ConsumerGroup: "g", ClientID: "ip@pid", MQSet: []MessageQueue{{Topic: "T", BrokerName: "b", QueueID: 0}}},
			`{"consumerGroup":"g","clientId":"ip@pid","onlyThisBroker":false,"mqSet":[{"topic":"T","brokerName":"b","queueId":0}]}`, &LockBatchRequestBody{}},
		{"unlock-request", &UnlockBatchRequestBody{ConsumerGroup: "g", ClientID: "c"},
			`{"consumerGroup":"g","clientId":"c","onlyThisBroker":false,"mqSet":[]}`, &UnlockBatchRequestBody{}},
		{"lock-response", &LockBatchResponseBody{LockOKMQSet: []MessageQueue{{Topic: "T", BrokerName: "b", QueueID: 3}}},
			`{"lockOKMQSet":[{"topic":"T","brokerName":"b","queueId":3}]}`, &LockBatchResponseBody{}},
		{"lock-response-empty", &LockBatchResponseBody{}, `{"lockOKMQSet":[]}`, &LockBatchResponseBody{}},
		{"topic-list", &TopicList{TopicList: []string{"T1", "T2"}}, `{"topicList":["T1","T2"]}`, &TopicList{}},
		{"kv-table", &KVTable{Table: map[string]string{"b": "2", "a": "1"}}, `{"table":{"a":"1","b":"2"}}`, &KVTable{}},
		{"register-broker", &RegisterBrokerBody{TopicConfigSerializeWrapper: TopicConfigSerializeWrapper{
			TopicConfigTable: map[string]*TopicConfig{"T": {TopicName: "T", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6, TopicFilterType: "SINGLE_TAG", Attributes: map[string]string{"k": "v"}}},
			DataVersion:      DataVersion{Timestamp: 1700000000000, Counter: 1}}},
			`{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":8,"writeQueueNums":8,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,"attributes":{"k":"v"}}},"dataVersion":{"stateVersion":0,"timestamp":1700000000000,"counter":1}},"filterServerList":[]}`,
			&RegisterBrokerBody{}},
		{"topic-config-wrapper-empty", &TopicConfigSerializeWrapper{}, `{"topicConfigTable":{},"dataVersion":{"stateVersion":0,"timestamp":0,"counter":0}}`, &TopicConfigSerializeWrapper{}},
		{"subscription-groups", &SubscriptionGroupWrapper{SubscriptionGroupTable: map[string]*SubscriptionGroupConfig{"g": ptr(DefaultSubscriptionGroupConfig("g"))}},
			`{"subscriptionGroupTable":{"g":{"groupName":"g","consumeEnable":true,"consumeFromMinEnable":true,"consumeBroadcastEnable":true,"consumeMessageOrderly":false,"retryQueueNums":1,"retryMaxTimes":16,"brokerId":0,"whichBrokerWhenConsumeSlowly":1,"notifyConsumerIdsChangedEnable":true,"groupSysFlag":0,"consumeTimeoutMinute":15}},"dataVersion":{"stateVersion":0,"timestamp":0,"counter":0}}`,
			&SubscriptionGroupWrapper{}},
		{"consumer-offsets", &ConsumerOffsetSerializeWrapper{OffsetTable: map[string]map[int32]int64{OffsetTableKey("T", "g"): {1: 98, 0: 123}}, DataVersion: DataVersion{Counter: 5}},
			`{"offsetTable":{"T@g":{"0":123,"1":98}},"dataVersion":{"stateVersion":0,"timestamp":0,"counter":5}}`, &ConsumerOffsetSerializeWrapper{}},
		{"delay-offsets", &DelayOffsetSerializeWrapper{OffsetTable: map[int32]int64{2: 7, 1: 5}}, `{"offsetTable":{"1":5,"2":7}}`, &DelayOffsetSerializeWrapper{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.enc.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("encoded\n got %s\nwant %s", b, tc.want)
			}
			if err := tc.dec.Decode(b); err != nil {
				t.Fatal(err)
			}
			again, err := tc.dec.(interface{ Encode() ([]byte, error) }).Encode()
			if err != nil || string(again) != tc.want {
				t.Fatalf("re-encoded after decode:\n got %s\nwant %s (%v)", again, tc.want, err)
			}
			if err := tc.dec.Decode([]byte(`{"x":`)); !errors.Is(err, ErrBadBody) {
				t.Fatalf("truncated body: %v", err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestFastjsonUnquotedKeys(t *testing.T) {
	var w ConsumerOffsetSerializeWrapper
	in := `{"offsetTable":{"T@g":{0:123,1:98},"%RETRY%g@g":{0:0}},"dataVersion":{"counter":2,"stateVersion":0,"timestamp":1700000000000}}`
	if err := w.Decode([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if w.OffsetTable["T@g"][1] != 98 || w.OffsetTable["%RETRY%g@g"][0] != 0 || w.DataVersion.Counter != 2 {
		t.Fatalf("%+v", w)
	}
	topic, group, ok := SplitOffsetTableKey("%RETRY%g@g@x")
	if !ok || topic != "%RETRY%g" || group != "g@x" {
		t.Fatalf("split %q %q %v", topic, group, ok)
	}
	var d DelayOffsetSerializeWrapper
	if err := d.Decode([]byte(`{"offsetTable":{1:5,18:0},"dataVersion":{"counter":1}}`)); err != nil || d.OffsetTable[1] != 5 || d.DataVersion.Counter != 1 {
		t.Fatalf("%+v %v", d, err)
	}
	for _, tc := range []struct{ in, want string }{
		{`{0:"a",1:"b"}`, `{"0":"a","1":"b"}`},
		{`{ -1 : 2 }`, `{ "-1" : 2 }`},
		{`{"a":[1,2,{3:4}],"b":"{5:6}"}`, `{"a":[1,2,{"3":4}],"b":"{5:6}"}`},
		{`{"a\"{7:":{8:9}}`, `{"a\"{7:":{"8":9}}`},
		{`[1,{2:3}]`, `[1,{"2":3}]`},
		{`{"x":1}`, `{"x":1}`},
		{`}}]]{`, `}}]]{`},
	} {
		if got := string(quoteBareKeys([]byte(tc.in))); got != tc.want {
			t.Errorf("quoteBareKeys(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
