package protocol

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// decodeFixture decodes a JSON header fixture into a fresh Command.
func decodeFixture(t testing.TB, header string) *Command {
	t.Helper()
	var c Command
	if err := DecodeFrame(frameOf(SerializeJSON, []byte(header), nil)[4:], &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestSendMessageRequestGoC(t *testing.T) {
	c := decodeFixture(t, gocSendHeader)
	var h SendMessageRequest
	if err := h.Decode(&c.Ext); err != nil {
		t.Fatal(err)
	}
	if string(h.ProducerGroup) != "pg" || string(h.Topic) != "TopicTest" || h.QueueID != 3 || h.SysFlag != 0 ||
		h.BornTimestamp != 1700000000123 || h.Flag != 0 || h.ReconsumeTimes != 0 || h.UnitMode ||
		h.MaxReconsumeTimes != 0 || string(h.DefaultTopic) != "TBW102" || h.DefaultTopicQueueNums != 4 ||
		h.Batch || string(h.BrokerName) != "broker-a" ||
		string(h.Properties) != "KEYS\x01k1\x02UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02TAGS\x01tagA\x02WAIT\x01true\x02" {
		t.Fatalf("decoded %+v", h)
	}
}

func TestSendMessageRequestV1V2(t *testing.T) {
	in := SendMessageRequest{
		ProducerGroup: []byte("pg"), Topic: []byte("T"), DefaultTopic: []byte("TBW102"), DefaultTopicQueueNums: 4,
		QueueID: 7, SysFlag: 5, BornTimestamp: 1700000000000, Flag: -3, Properties: []byte("a\x01b\x02"),
		ReconsumeTimes: 2, UnitMode: true, MaxReconsumeTimes: 16, HasMaxReconsumeTimes: true, Batch: true, BrokerName: []byte("b1"),
	}
	for _, v2 := range []bool{false, true} {
		var c Command
		c.InitRequest(ReqSendBatchMessage, 1)
		if v2 {
			in.EncodeV2(&c.Ext)
			if _, ok := c.Ext.Get("b"); !ok || c.Ext.Has("topic") {
				t.Fatal("EncodeV2 did not write short keys")
			}
		} else {
			in.Encode(&c.Ext)
			if _, ok := c.Ext.Get("topic"); !ok || c.Ext.Has("b") {
				t.Fatal("Encode did not write long keys")
			}
		}
		for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
			c.SerializeType = st
			f, err := AppendFrame(nil, &c)
			if err != nil {
				t.Fatal(err)
			}
			var d Command
			if err := DecodeFrame(f[4:], &d); err != nil {
				t.Fatal(err)
			}
			var out SendMessageRequest
			if err := out.Decode(&d.Ext); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(in, out) {
				t.Fatalf("v2=%v %v:\n in %+v\nout %+v", v2, st, in, out)
			}
		}
	}
}

// TestSendMessageRequestPresence: maxReconsumeTimes is written only when
// HasMaxReconsumeTimes says so (as Java writes a null Integer: not at all), and
// Decode reports whether it came with a value, in either key set.
func TestSendMessageRequestPresence(t *testing.T) {
	in := SendMessageRequest{ProducerGroup: []byte("pg"), Topic: []byte("%RETRY%g"), BornTimestamp: 1, MaxReconsumeTimes: 3}
	for _, v2 := range []bool{false, true} {
		encode, key := in.Encode, "maxReconsumeTimes"
		if v2 {
			encode, key = in.EncodeV2, "l"
		}
		var e ExtFields
		encode(&e)
		if e.Has(key) {
			t.Fatalf("v2=%v: %s written without HasMaxReconsumeTimes", v2, key)
		}
		var out SendMessageRequest
		if err := out.Decode(&e); err != nil || out.HasMaxReconsumeTimes || out.MaxReconsumeTimes != 0 {
			t.Fatalf("v2=%v: decoded %+v, %v", v2, out, err)
		}
		for _, tc := range []struct {
			value string
			has   bool
			n     int32
		}{{"0", true, 0}, {"16", true, 16}, {"", false, 0}} {
			e.SetString(key, tc.value)
			if err := out.Decode(&e); err != nil || out.HasMaxReconsumeTimes != tc.has || out.MaxReconsumeTimes != tc.n {
				t.Fatalf("v2=%v %s=%q: decoded has=%v n=%d, %v", v2, key, tc.value, out.HasMaxReconsumeTimes, out.MaxReconsumeTimes, err)
			}
		}
	}
}

// TestSendMessageRequestEncodeOverExisting encodes into a header that already
// holds some of the keys (and one other): the encoder sets them, as Set does,
// instead of appending duplicates as it does into a fresh header.
func TestSendMessageRequestEncodeOverExisting(t *testing.T) {
	in := SendMessageRequest{ProducerGroup: []byte("pg"), Topic: []byte("T"), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 4, QueueID: 7, BornTimestamp: 1700000000000, Properties: []byte("a\x01b\x02")}
	for _, v2 := range []bool{false, true} {
		encode, topicKey := in.Encode, "topic"
		if v2 {
			encode, topicKey = in.EncodeV2, "b"
		}
		var fresh, used ExtFields
		encode(&fresh)
		used.SetString(topicKey, "stale-topic-value")
		used.SetString("other", "kept")
		encode(&used)
		if used.Len() != fresh.Len()+1 {
			t.Fatalf("v2=%v: %d pairs over an existing header, want %d (no duplicates)", v2, used.Len(), fresh.Len()+1)
		}
		var out SendMessageRequest
		if err := out.Decode(&used); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("v2=%v:\n in %+v\nout %+v", v2, in, out)
		}
		if v, _ := used.GetString("other"); v != "kept" {
			t.Fatalf("v2=%v: other = %q", v2, v)
		}
	}
}

func TestSendMessageRequestErrors(t *testing.T) {
	base := map[string]string{"producerGroup": "pg", "topic": "T", "queueId": "1", "sysFlag": "0", "bornTimestamp": "1", "flag": "0"}
	cases := []struct {
		name   string
		change map[string]string
		drop   string
		want   error
		field  string
	}{
		{"ok", nil, "", nil, ""},
		{"missing-topic", nil, "topic", ErrMissingField, "topic"},
		{"empty-topic", map[string]string{"topic": ""}, "", ErrMissingField, "topic"},
		{"missing-bornTimestamp", nil, "bornTimestamp", ErrMissingField, "bornTimestamp"},
		{"bad-queueId", map[string]string{"queueId": "x"}, "", ErrBadField, "queueId"},
		{"queueId-overflow", map[string]string{"queueId": "2147483648"}, "", ErrBadField, "queueId"},
		{"bad-short-key", map[string]string{"e": "1.5"}, "", ErrBadField, "e"},
		{"bad-bool", map[string]string{"unitMode": "yes"}, "", ErrBadField, "unitMode"},
		{"bool-case", map[string]string{"batch": "TRUE"}, "", nil, ""},
		{"empty-optional-int", map[string]string{"reconsumeTimes": ""}, "", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e ExtFields
			for k, v := range base {
				if k != tc.drop {
					e.SetString(k, v)
				}
			}
			for k, v := range tc.change {
				e.SetString(k, v)
			}
			var h SendMessageRequest
			err := h.Decode(&e)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var fe *FieldError
			if tc.want != nil && (!errors.As(err, &fe) || fe.Field != tc.field || fe.Header != "SendMessageRequest" ||
				!strings.Contains(err.Error(), tc.field)) {
				t.Fatalf("error %v does not name field %q", err, tc.field)
			}
		})
	}
}

func TestPullMessageRequestGoC(t *testing.T) {
	c := decodeFixture(t, gocPullHeader)
	var h PullMessageRequest
	if err := h.Decode(&c.Ext); err != nil {
		t.Fatal(err)
	}
	want := PullMessageRequest{
		ConsumerGroup: []byte("cg"), Topic: []byte("TopicTest"), QueueID: 1, QueueOffset: 1234, MaxMsgNums: 32,
		SysFlag: PullFlagCommitOffset | PullFlagSuspend, CommitOffset: 1200, SuspendTimeoutMillis: 20000,
		Subscription: []byte{}, SubVersion: 0, ExpressionType: []byte("TAG"), BrokerName: []byte("broker-a"),
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("decoded %+v\nwant %+v", h, want)
	}
	c.Ext.Delete("subVersion")
	if err := h.Decode(&c.Ext); !errors.Is(err, ErrMissingField) || !strings.Contains(err.Error(), "subVersion") {
		t.Fatalf("missing subVersion: %v", err)
	}
}

// roundTrip encodes a typed header into a fresh ExtFields, pushes it through a JSON frame
// and decodes it into out.
func roundTrip(t *testing.T, enc interface{ Encode(*ExtFields) }, dec interface{ Decode(*ExtFields) error }) {
	t.Helper()
	var c Command
	c.InitRequest(1, 1)
	enc.Encode(&c.Ext)
	f, err := AppendFrame(nil, &c)
	if err != nil {
		t.Fatal(err)
	}
	var d Command
	if err := DecodeFrame(f[4:], &d); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&d.Ext); err != nil {
		t.Fatalf("%T: %v", dec, err)
	}
}

func TestTypedHeaderRoundTrips(t *testing.T) {
	cases := []struct {
		in, out any
	}{
		{&SendMessageResponse{MsgID: []byte("7F00000100002A9F0000000000000000"), QueueID: 2, QueueOffset: 99,
			TransactionID: []byte("tx"), Region: []byte("DefaultRegion"), TraceOn: true}, &SendMessageResponse{}},
		{&SendMessageResponse{MsgID: []byte("m"), QueueID: 0, QueueOffset: 0}, &SendMessageResponse{}},
		{&PullMessageRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), QueueID: 3, QueueOffset: 1 << 40, MaxMsgNums: 32,
			SysFlag: 6, CommitOffset: -1, SuspendTimeoutMillis: 20000, Subscription: []byte("a || b"), SubVersion: 1700000000000000000,
			ExpressionType: []byte("SQL92"), MaxMsgBytes: 1 << 20, BrokerName: []byte("b")}, &PullMessageRequest{}},
		{&PullMessageResponse{SuggestWhichBrokerID: 1, NextBeginOffset: 10, MinOffset: 0, MaxOffset: 1 << 50}, &PullMessageResponse{}},
		{&QueryConsumerOffsetRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), QueueID: 1, BrokerName: []byte("b")}, &QueryConsumerOffsetRequest{}},
		{&QueryConsumerOffsetResponse{Offset: -1}, &QueryConsumerOffsetResponse{}},
		{&UpdateConsumerOffsetRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), QueueID: 1, CommitOffset: 77}, &UpdateConsumerOffsetRequest{}},
		{&GetMaxOffsetRequest{Topic: []byte("T"), QueueID: 4, BrokerName: []byte("b")}, &GetMaxOffsetRequest{}},
		{&GetMinOffsetRequest{Topic: []byte("T"), QueueID: 0}, &GetMinOffsetRequest{}},
		{&GetEarliestMsgStoretimeRequest{Topic: []byte("T"), QueueID: 1}, &GetEarliestMsgStoretimeRequest{}},
		{&GetEarliestMsgStoretimeResponse{Timestamp: 1700000000000}, &GetEarliestMsgStoretimeResponse{}},
		{&SearchOffsetByTimestampRequest{Topic: []byte("T"), QueueID: 1, Timestamp: 1700000000000, BoundaryType: []byte("upper")}, &SearchOffsetByTimestampRequest{}},
		{&OffsetResponse{Offset: 12345}, &OffsetResponse{}},
		{&GetConsumerListByGroupRequest{ConsumerGroup: "g"}, &GetConsumerListByGroupRequest{}},
		{&NotifyConsumerIdsChangedRequest{ConsumerGroup: "g"}, &NotifyConsumerIdsChangedRequest{}},
		{&ConsumerSendMsgBackRequest{Group: "g", Offset: 1 << 33, DelayLevel: -1, OriginMsgID: "id", OriginTopic: "T",
			UnitMode: false, MaxReconsumeTimes: 16, HasMaxReconsumeTimes: true, BrokerName: "b"}, &ConsumerSendMsgBackRequest{}},
		{&ConsumerSendMsgBackRequest{Group: "g", Offset: 5, DelayLevel: 0}, &ConsumerSendMsgBackRequest{}},
		{&EndTransactionRequest{ProducerGroup: "pg", TranStateTableOffset: 3, CommitLogOffset: 1 << 35, CommitOrRollback: TransactionCommitType,
			FromTransactionCheck: true, MsgID: "u", TransactionID: "t", BrokerName: "b"}, &EndTransactionRequest{}},
		{&CheckTransactionStateRequest{TranStateTableOffset: 1, CommitLogOffset: 2, MsgID: "m", TransactionID: "t", OffsetMsgID: "o",
			Topic: "T", BrokerName: "b"}, &CheckTransactionStateRequest{}},
		{&QueryMessageRequest{Topic: "T", Key: "k", MaxNum: 32, BeginTimestamp: 1, EndTimestamp: 2, UniqueKeyQuery: true}, &QueryMessageRequest{}},
		{&QueryMessageResponse{IndexLastUpdateTimestamp: 9, IndexLastUpdatePhyoffset: 10}, &QueryMessageResponse{}},
		{&ViewMessageByIDRequest{Offset: 4096, Topic: "T"}, &ViewMessageByIDRequest{}},
		{&GetRouteInfoRequest{Topic: []byte("%RETRY%g"), AcceptStandardJSONOnly: true}, &GetRouteInfoRequest{}},
		{&RegisterBrokerRequest{BrokerName: "b", BrokerAddr: "10.0.0.1:10911", ClusterName: "c", HAServerAddr: "10.0.0.1:10912",
			BrokerID: 0, HeartbeatTimeoutMillis: 120000, EnableActingMaster: true, Compressed: true, BodyCRC32: 0x7FFFFFFF}, &RegisterBrokerRequest{}},
		{&RegisterBrokerResponse{HAServerAddr: "h", MasterAddr: "m"}, &RegisterBrokerResponse{}},
		{&UnregisterBrokerRequest{BrokerName: "b", BrokerAddr: "a", ClusterName: "c", BrokerID: 1}, &UnregisterBrokerRequest{}},
		{&CreateTopicRequest{Topic: "T", DefaultTopic: "TBW102", ReadQueueNums: 8, WriteQueueNums: 8, Perm: PermRead | PermWrite,
			TopicFilterType: "SINGLE_TAG", TopicSysFlag: 0, Order: true, Attributes: "+a=b", Force: true}, &CreateTopicRequest{}},
		{&DeleteTopicRequest{Topic: "T"}, &DeleteTopicRequest{}},
		{&UnregisterClientRequest{ClientID: "1.2.3.4@1", ProducerGroup: "pg", ConsumerGroup: "cg"}, &UnregisterClientRequest{}},
		{&ResetOffsetRequest{Topic: "T", Group: "g", Timestamp: 5, IsForce: true, QueueID: 2, Offset: 100}, &ResetOffsetRequest{}},
		{&ResetOffsetRequest{Topic: "T", Group: "g", Timestamp: 5, QueueID: -1, Offset: -1}, &ResetOffsetRequest{}},
		{&GetConsumerRunningInfoRequest{ConsumerGroup: "g", ClientID: "c", JstackEnable: true}, &GetConsumerRunningInfoRequest{}},
		{&ConsumeMessageDirectlyRequest{ConsumerGroup: "g", ClientID: "c", MsgID: "m", BrokerName: "b"}, &ConsumeMessageDirectlyRequest{}},
		{&GetConsumerStatusRequest{Topic: "T", Group: "g", ClientAddr: "1.2.3.4:5"}, &GetConsumerStatusRequest{}},
	}
	for _, tc := range cases {
		name := reflect.TypeOf(tc.in).Elem().Name()
		t.Run(name, func(t *testing.T) {
			roundTrip(t, tc.in.(interface{ Encode(*ExtFields) }), tc.out.(interface{ Decode(*ExtFields) error }))
			if !reflect.DeepEqual(normalize(tc.in), normalize(tc.out)) {
				t.Fatalf("round trip:\n in %+v\nout %+v", tc.in, tc.out)
			}
		})
	}
}

// normalize turns nil []byte fields into empty ones so that DeepEqual compares content.
func normalize(v any) any {
	rv := reflect.ValueOf(v).Elem()
	cp := reflect.New(rv.Type()).Elem()
	cp.Set(rv)
	for i := 0; i < cp.NumField(); i++ {
		if f := cp.Field(i); f.Kind() == reflect.Slice && f.Len() == 0 {
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		}
	}
	return cp.Interface()
}

func TestTypedHeaderRequiredFields(t *testing.T) {
	cases := []struct {
		dec   interface{ Decode(*ExtFields) error }
		field string
	}{
		{&SendMessageResponse{}, "msgId"},
		{&PullMessageRequest{}, "consumerGroup"},
		{&PullMessageResponse{}, "suggestWhichBrokerId"},
		{&QueryConsumerOffsetRequest{}, "consumerGroup"},
		{&UpdateConsumerOffsetRequest{}, "consumerGroup"},
		{&QueueRequest{}, "topic"},
		{&SearchOffsetByTimestampRequest{}, "topic"},
		{&OffsetResponse{}, "offset"},
		{&GetEarliestMsgStoretimeResponse{}, "timestamp"},
		{&GetConsumerListByGroupRequest{}, "consumerGroup"},
		{&NotifyConsumerIdsChangedRequest{}, "consumerGroup"},
		{&ConsumerSendMsgBackRequest{}, "group"},
		{&EndTransactionRequest{}, "producerGroup"},
		{&CheckTransactionStateRequest{}, "tranStateTableOffset"},
		{&QueryMessageRequest{}, "topic"},
		{&QueryMessageResponse{}, "indexLastUpdateTimestamp"},
		{&ViewMessageByIDRequest{}, "offset"},
		{&GetRouteInfoRequest{}, "topic"},
		{&RegisterBrokerRequest{}, "brokerName"},
		{&UnregisterBrokerRequest{}, "brokerName"},
		{&CreateTopicRequest{}, "topic"},
		{&DeleteTopicRequest{}, "topic"},
		{&UnregisterClientRequest{}, "clientID"},
		{&ResetOffsetRequest{}, "topic"},
		{&GetConsumerRunningInfoRequest{}, "consumerGroup"},
		{&ConsumeMessageDirectlyRequest{}, "consumerGroup"},
		{&GetConsumerStatusRequest{}, "topic"},
	}
	for _, tc := range cases {
		var e ExtFields
		err := tc.dec.Decode(&e)
		var fe *FieldError
		if !errors.Is(err, ErrMissingField) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%T on empty ext: %v, want missing %q", tc.dec, err, tc.field)
		}
	}
	// Bad numbers are reported by name, for string-typed headers too.
	var e ExtFields
	e.SetString("group", "g")
	e.SetString("offset", "12x")
	e.SetString("delayLevel", "0")
	var h ConsumerSendMsgBackRequest
	if err := h.Decode(&e); !errors.Is(err, ErrBadField) || !strings.Contains(err.Error(), `"offset"`) || !strings.Contains(err.Error(), "12x") {
		t.Fatalf("bad offset: %v", err)
	}
}

func TestQueueRequestOldGoCKeys(t *testing.T) {
	var e ExtFields
	e.SetString("Topic", "T")
	e.SetString("QueueId", "3")
	e.SetString("timestamp", "1600000000000")
	var h SearchOffsetByTimestampRequest
	if err := h.Decode(&e); err != nil || string(h.Topic) != "T" || h.QueueID != 3 || h.Timestamp != 1600000000000 {
		t.Fatalf("%+v %v", h, err)
	}
}

func TestExtFields(t *testing.T) {
	var e ExtFields
	e.SetString("a", "1")
	e.SetInt("b", -42)
	e.SetBool("c", true)
	e.Set("d", []byte("xyz"))
	if e.Len() != 4 {
		t.Fatalf("len %d", e.Len())
	}
	if n, err := e.GetInt64("b"); err != nil || n != -42 {
		t.Fatalf("b %d %v", n, err)
	}
	if n, err := e.GetInt32("a"); err != nil || n != 1 {
		t.Fatalf("a %d %v", n, err)
	}
	if b, err := e.GetBool("c"); err != nil || !b {
		t.Fatalf("c %v %v", b, err)
	}
	if _, err := e.GetInt64("zz"); !errors.Is(err, ErrMissingField) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := e.GetInt32("d"); !errors.Is(err, ErrBadField) {
		t.Fatalf("bad: %v", err)
	}
	if _, err := e.GetBool("d"); !errors.Is(err, ErrBadField) {
		t.Fatalf("bad bool: %v", err)
	}
	// Replace shorter (in place) and longer (appended); aliasing the own buffer works.
	e.SetString("d", "q")
	e.SetString("a", "a-much-longer-value")
	v, _ := e.Get("a")
	e.Set("b", v)
	if s, _ := e.GetString("b"); s != "a-much-longer-value" {
		t.Fatalf("b = %q", s)
	}
	if s, _ := e.GetString("d"); s != "q" {
		t.Fatalf("d = %q", s)
	}
	var keys []string
	e.ForEach(func(k, v []byte) bool {
		keys = append(keys, string(k)+"="+string(v))
		return len(keys) < 3
	})
	if strings.Join(keys, ",") != "a=a-much-longer-value,b=a-much-longer-value,c=true" {
		t.Fatalf("ForEach %v", keys)
	}
	if !e.Delete("c") || e.Delete("c") || e.Has("c") || e.Len() != 3 {
		t.Fatal("Delete")
	}
	var cp ExtFields
	cp.CopyFrom(&e)
	e.Reset()
	if cp.Len() != 3 || e.Len() != 0 {
		t.Fatal("CopyFrom/Reset")
	}
	if s, _ := cp.GetString("d"); s != "q" {
		t.Fatalf("copied d = %q", s)
	}
	for _, tc := range []struct {
		in   string
		n    int64
		okay bool
	}{
		{"0", 0, true}, {"+7", 7, true}, {"-9223372036854775808", -1 << 63, true}, {"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false}, {"", 0, false}, {"-", 0, false},
		{"1e3", 0, false}, {" 1", 0, false},
		// As Java's Long.parseLong: leading zeros, and other scripts' decimal digits.
		{"00000000000000000001", 1, true}, {"\u0661\u0662", 12, true},
	} {
		var x ExtFields
		x.SetString("n", tc.in)
		n, err := x.GetInt64("n")
		if (err == nil) != tc.okay || (err == nil && n != tc.n) {
			t.Errorf("GetInt64(%q) = %d %v", tc.in, n, err)
		}
	}
}
