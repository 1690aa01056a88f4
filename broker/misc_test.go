package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

func TestSendValidation(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	// Create the topic (4 queues, from TBW102 and defaultTopicQueueNums 4).
	if r := invoke(t, cl, sendRequest("Valid", 0, []byte("x"), "")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	bigProps := props("k", strings.Repeat("v", message.MaxPropertiesSize-10))
	nearLimit := props("k", strings.Repeat("v", message.MaxPropertiesSize-20)) // fits, but not with CLUSTER added

	tests := []struct {
		name   string
		req    *protocol.Command
		code   int32
		remark string
	}{
		{"bad topic name", sendRequest("bad topic!", 0, []byte("x"), ""), protocol.RespSystemError, "illegal characters"},
		{"topic too long", sendRequest(strings.Repeat("t", 128), 0, []byte("x"), ""), protocol.RespSystemError, "longer than"},
		{"blank topic", sendRequest("", 0, []byte("x"), ""), protocol.RespSystemError, "topic"},
		{"reserved topic", sendRequest("SCHEDULE_TOPIC_XXXX", 0, []byte("x"), ""), protocol.RespNoPermission, "forbidden"},
		{"oversized body", sendRequest("Valid", 0, make([]byte, 1<<20+1), ""), protocol.RespMessageIllegal, "exceeds"},
		{"properties with a stray 0x01", sendRequest("Valid", 0, []byte("x"), "a\x01b\x01c\x02"), protocol.RespMessageIllegal, "properties"},
		{"properties without a key", sendRequest("Valid", 0, []byte("x"), "\x01b\x02"), protocol.RespMessageIllegal, "properties"},
		{"properties too long", sendRequest("Valid", 0, []byte("x"), bigProps+"x\x01y\x02"), protocol.RespMessageIllegal, "properties"},
		{"properties too long with CLUSTER", sendRequest("Valid", 0, []byte("x"), nearLimit), protocol.RespMessageIllegal, "32767"},
		{"queue id out of range", sendRequest("Valid", 4, []byte("x"), ""), protocol.RespSystemError, "queueId[4] is illegal"},
		{"queue id far out of range", sendRequest("Valid", 1000, []byte("x"), ""), protocol.RespSystemError, "is illegal"},
		{"negative queue id picks one", sendRequest("Valid", -1, []byte("x"), ""), 0, ""},
		{"batch to a retry topic", sendV2Request(protocol.ReqSendBatchMessage, "%RETRY%g", 0, batchBody(batchEntry{"a", ""}), ""), protocol.RespMessageIllegal, "retry"},
		{"batch with DELAY", sendV2Request(protocol.ReqSendBatchMessage, "Valid", 0, batchBody(batchEntry{"a", ""}), props("DELAY", "3")), protocol.RespMessageIllegal, "delay"},
		{"malformed batch body", sendV2Request(protocol.ReqSendBatchMessage, "Valid", 0, []byte{0, 0, 0, 30, 1, 2}, ""), protocol.RespMessageIllegal, "batch"},
		{"empty batch", sendV2Request(protocol.ReqSendBatchMessage, "Valid", 0, nil, ""), protocol.RespMessageIllegal, "empty batch"},
		{"bad batch entry properties", sendV2Request(protocol.ReqSendBatchMessage, "Valid", 0, batchBody(batchEntry{"a", "\x01\x01"}), ""), protocol.RespMessageIllegal, "properties"},
	}
	bad := sendRequest("Valid", 0, []byte("x"), "")
	bad.Ext.SetString("queueId", "abc")
	tests = append(tests, struct {
		name   string
		req    *protocol.Command
		code   int32
		remark string
	}{"non-numeric queueId", bad, protocol.RespSystemError, "queueId"})

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := invoke(t, cl, tc.req)
			if r.Code != tc.code {
				t.Fatalf("code %d (%s), want %d", r.Code, r.Remark, tc.code)
			}
			if !strings.Contains(string(r.Remark), tc.remark) {
				t.Fatalf("remark %q lacks %q", r.Remark, tc.remark)
			}
		})
	}
}

func TestAutoCreateAndRetryTopics(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Core.DisableAutoCreateTopic = true })
	cl := h.dial(nil)
	r := invoke(t, cl, sendRequest("Unknown", 0, []byte("x"), ""))
	if r.Code != protocol.RespTopicNotExist || !strings.Contains(string(r.Remark), "not exist") {
		t.Fatalf("send to an unknown topic without auto-create: %d %s", r.Code, r.Remark)
	}
	if lookupTopic(h.b, "TBW102") != nil {
		t.Fatal("TBW102 kept with auto-create off")
	}
	// The Go client's send-back fallback writes to %RETRY%group: the group
	// must exist (its heartbeat creates it), as with RocketMQ.
	r = invoke(t, cl, sendRequest("%RETRY%cg", 0, []byte("x"), props("RETRY_TOPIC", "T", "DELAY", "3")))
	if r.Code != protocol.RespSubscriptionGroupNotExist {
		t.Fatalf("send to the retry topic of an unknown group: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, heartbeatRequest(t, "c1", "cg", map[string]string{"T": "*"})); r.Code != 0 {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
	r = invoke(t, cl, sendRequest("%RETRY%cg", 0, []byte("x"), props("RETRY_TOPIC", "T", "DELAY", "3")))
	if r.Code != 0 {
		t.Fatalf("send to a retry topic: %d %s", r.Code, r.Remark)
	}
	if tc := lookupTopic(h.b, "%RETRY%cg"); tc == nil || tc.ReadQueueNums != 1 || tc.Perm != 6 {
		t.Fatalf("retry topic %+v", tc)
	}
	sb := goRequest(protocol.ReqConsumerSendMsgBack)
	(&protocol.ConsumerSendMsgBackRequest{Group: "nogroup", Offset: 0, DelayLevel: 0, OriginTopic: "T"}).Encode(&sb.Ext)
	if r := invoke(t, cl, sb); r.Code != protocol.RespSubscriptionGroupNotExist {
		t.Fatalf("CONSUMER_SEND_MSG_BACK for an unknown group: %d %s", r.Code, r.Remark)
	}
}

func TestRoutesInEmbeddedRegistry(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	route := func(topic string) (int32, []byte) {
		req := goRequest(protocol.ReqGetRouteInfoByTopic)
		req.Ext.SetString("topic", topic)
		r := invoke(t, cl, req)
		return r.Code, r.Body
	}
	if code, body := route("TBW102"); code != 0 || !bytes.Contains(body, []byte(`"perm":7`)) || !bytes.Contains(body, []byte(h.addr)) {
		t.Fatalf("TBW102 route: %d %s", code, body)
	}
	if code, _ := route("Fresh"); code != protocol.RespTopicNotExist {
		t.Fatalf("route of an unknown topic: %d", code)
	}
	invoke(t, cl, sendRequest("Fresh", 0, []byte("x"), ""))
	code, body := route("Fresh")
	if code != 0 || !bytes.Contains(body, []byte(`"readQueueNums":4,"writeQueueNums":4,"perm":6`)) {
		t.Fatalf("route after auto-create: %d %s", code, body)
	}
}

func TestExternalNameServer(t *testing.T) {
	reg := namesrv.NewRegistry(namesrv.Options{Logger: testlog.New(t, "namesrv")})
	defer reg.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		namesrv.Serve(ctx, l, reg, &remoting.Options{Logger: testlog.New(t, "namesrv")})
	}()
	defer func() { cancel(); <-served }()

	h := newHarness(t, func(o *Options) { o.NamesrvAddrs = []string{l.Addr().String()} })
	wait.Until(t, "TBW102 at the external name server", func() bool {
		_, ok := reg.Route("TBW102")
		return ok
	})
	invoke(t, h.dial(nil), sendRequest("External", 0, []byte("x"), ""))
	wait.For(t, "the new topic at the external name server", func() error {
		if r, ok := reg.Route("External"); !ok || len(r.QueueDatas) != 1 || r.QueueDatas[0].WriteQueueNums != 4 {
			return fmt.Errorf("route %+v (found: %v)", r, ok)
		}
		return nil
	})
	h.close()
	wait.Until(t, "the broker to unregister", func() bool {
		_, ok := reg.Route("External")
		return !ok
	})
}

func TestAdminTopics(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	create := func(topic string, r, w, perm int32) *protocol.Command {
		req := goRequest(protocol.ReqUpdateAndCreateTopic)
		(&protocol.CreateTopicRequest{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: r, WriteQueueNums: w,
			Perm: perm, TopicFilterType: "SINGLE_TAG"}).Encode(&req.Ext)
		return invoke(t, cl, req)
	}
	if r := create("Admin", 3, 2, 6); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	for _, tc := range []struct {
		topic      string
		r, w, perm int32
		code       int32
	}{
		{"TBW102", 8, 8, 6, protocol.RespSystemError},
		{"rmq_sys_x", 8, 8, 6, protocol.RespSystemError},
		{"bad name", 8, 8, 6, protocol.RespSystemError},
		{"Zero", 0, 8, 6, protocol.RespInvalidParameter},
		{"Huge", 8, 5000, 6, protocol.RespInvalidParameter},
		{"BadPerm", 8, 8, 64, protocol.RespInvalidParameter},
	} {
		if r := create(tc.topic, tc.r, tc.w, tc.perm); r.Code != tc.code {
			t.Errorf("create %s: code %d (%s), want %d", tc.topic, r.Code, r.Remark, tc.code)
		}
	}
	all := invoke(t, cl, goRequest(protocol.ReqGetAllTopicConfig))
	var w protocol.TopicConfigSerializeWrapper
	if err := w.Decode(all.Body); err != nil {
		t.Fatal(err)
	}
	if c := w.TopicConfigTable["Admin"]; c == nil || c.ReadQueueNums != 3 || c.WriteQueueNums != 2 || c.Perm != 6 {
		t.Fatalf("GET_ALL_TOPIC_CONFIG: %s", all.Body)
	}
	// Sends may use max(read, write) queue ids, pulls the read queues.
	if r := invoke(t, cl, sendRequest("Admin", 2, []byte("x"), "")); r.Code != 0 {
		t.Fatalf("send to queue 2: %d %s", r.Code, r.Remark)
	}
	h.waitMax("Admin", 2, 1)
	// A read-only topic refuses sends.
	if r := create("ReadOnly", 1, 1, 4); r.Code != 0 {
		t.Fatal(r.Code)
	}
	if r := invoke(t, cl, sendRequest("ReadOnly", 0, []byte("x"), "")); r.Code != protocol.RespNoPermission {
		t.Fatalf("send to a read-only topic: %d", r.Code)
	}

	// Offsets of the topic go with it.
	h.b.core.UpdateConsumerOffset([]byte("Admin"), []byte("g"), 2, 1)
	del := goRequest(protocol.ReqDeleteTopicInBroker)
	del.Ext.SetString("topic", "Admin")
	if r := invoke(t, cl, del); r.Code != 0 {
		t.Fatalf("delete: %d %s", r.Code, r.Remark)
	}
	if lookupTopic(h.b, "Admin") != nil || h.b.Store().MaxOffset("Admin", 2) != 0 {
		t.Fatal("topic still there after delete")
	}
	if _, ok := h.b.core.CommittedOffset("Admin", "g", 2); ok {
		t.Fatal("offsets survive the topic")
	}
	req := goRequest(protocol.ReqGetRouteInfoByTopic)
	req.Ext.SetString("topic", "Admin")
	if r := invoke(t, cl, req); r.Code != protocol.RespTopicNotExist {
		t.Fatalf("route after delete: %d", r.Code)
	}
	del.Ext.SetString("topic", "TBW102")
	if r := invoke(t, cl, del); r.Code != protocol.RespSystemError {
		t.Fatalf("delete TBW102: %d", r.Code)
	}

	invoke(t, cl, heartbeatRequest(t, "a@1", "grp", nil))
	invoke(t, cl, heartbeatRequest(t, "a@1", "grp", map[string]string{"T": "*"}))
	groups := invoke(t, cl, goRequest(protocol.ReqGetAllSubscriptionGroup))
	var gw protocol.SubscriptionGroupWrapper
	if err := gw.Decode(groups.Body); err != nil || gw.SubscriptionGroupTable["grp"] == nil || !gw.SubscriptionGroupTable["grp"].ConsumeEnable {
		t.Fatalf("GET_ALL_SUBSCRIPTIONGROUP_CONFIG: %s (%v)", groups.Body, err)
	}
	info := invoke(t, cl, goRequest(protocol.ReqGetBrokerRuntimeInfo))
	var kv protocol.KVTable
	if err := kv.Decode(info.Body); err != nil || kv.Table["msgPutTotalTodayNow"] != "1" || kv.Table["brokerVersionDesc"] == "" {
		t.Fatalf("GET_BROKER_RUNTIME_INFO: %s (%v)", info.Body, err)
	}
}

func TestLocks(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	mqs := []protocol.MessageQueue{{Topic: "T", BrokerName: "broker-a", QueueID: 0}, {Topic: "T", BrokerName: "broker-a", QueueID: 1}}
	lock := func(client string, mq ...protocol.MessageQueue) []protocol.MessageQueue {
		req := goRequest(protocol.ReqLockBatchMQ)
		req.Body, _ = (&protocol.LockBatchRequestBody{ConsumerGroup: "g", ClientID: client, MQSet: mq}).Encode()
		r := invoke(t, cl, req)
		var body protocol.LockBatchResponseBody
		if err := body.Decode(r.Body); err != nil || r.Code != 0 {
			t.Fatalf("lock: %d %v", r.Code, err)
		}
		return body.LockOKMQSet
	}
	unlock := func(client string, mq ...protocol.MessageQueue) {
		req := goRequest(protocol.ReqUnlockBatchMQ)
		req.Body, _ = (&protocol.UnlockBatchRequestBody{ConsumerGroup: "g", ClientID: client, MQSet: mq}).Encode()
		if r := invoke(t, cl, req); r.Code != 0 {
			t.Fatalf("unlock: %d", r.Code)
		}
	}
	if got := lock("A", mqs...); len(got) != 2 {
		t.Fatalf("A locks %v", got)
	}
	if got := lock("B", mqs...); len(got) != 0 {
		t.Fatalf("B got %v while A holds them", got)
	}
	if got := lock("A", mqs[0]); len(got) != 1 {
		t.Fatalf("A cannot re-lock: %v", got)
	}
	unlock("B", mqs...) // not B's: no effect
	if got := lock("B", mqs[0]); len(got) != 0 {
		t.Fatalf("B unlocked A's lock: %v", got)
	}
	unlock("A", mqs[0])
	if got := lock("B", mqs...); len(got) != 1 || got[0] != mqs[0] {
		t.Fatalf("B should get the released queue only: %v", got)
	}
	// Another group's locks are separate.
	req := goRequest(protocol.ReqLockBatchMQ)
	req.Body, _ = (&protocol.LockBatchRequestBody{ConsumerGroup: "other", ClientID: "C", MQSet: mqs}).Encode()
	var body protocol.LockBatchResponseBody
	if r := invoke(t, cl, req); body.Decode(r.Body) != nil || len(body.LockOKMQSet) != 2 {
		t.Fatalf("other group: %s", r.Body)
	}
	req.Body = []byte("{not json")
	if r := invoke(t, cl, req); r.Code != protocol.RespSystemError {
		t.Fatalf("bad lock body: %d", r.Code)
	}
}

func TestQueryAndViewMessage(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	uniq := "0A0000010000000000000000000000AB"
	r := invoke(t, cl, sendRequest("Q", 0, []byte("payload"), props("KEYS", "order-1 order-2", "UNIQ_KEY", uniq)))
	invoke(t, cl, sendRequest("Q", 1, []byte("other"), props("KEYS", "order-3")))
	msgID := ext(r, "msgId")
	h.waitMax("Q", 1, 1)

	query := func(key string, uniqFlag bool) *protocol.Command {
		req := goRequest(protocol.ReqQueryMessage)
		(&protocol.QueryMessageRequest{Topic: "Q", Key: key, MaxNum: 32, BeginTimestamp: 0, EndTimestamp: 1 << 62, UniqueKeyQuery: uniqFlag}).Encode(&req.Ext)
		return invoke(t, cl, req)
	}
	for _, key := range []string{"order-2", uniq} {
		r := query(key, key == uniq)
		recs := decodeBody(t, r.Body)
		if r.Code != 0 || len(recs) != 1 || string(recs[0].Body()) != "payload" {
			t.Fatalf("query %s: code %d, %d records", key, r.Code, len(recs))
		}
		if ext(r, "indexLastUpdateTimestamp") == "" || ext(r, "indexLastUpdatePhyoffset") == "" {
			t.Fatalf("query headers missing: %v", r)
		}
	}
	if r := query("nope", false); r.Code != protocol.RespQueryNotFound {
		t.Fatalf("query of a missing key: %d", r.Code)
	}

	_, off, err := message.ParseOffsetMsgID(msgID)
	if err != nil {
		t.Fatal(err)
	}
	view := func(off int64) *protocol.Command {
		req := goRequest(protocol.ReqViewMessageByID)
		(&protocol.ViewMessageByIDRequest{Offset: off}).Encode(&req.Ext)
		return invoke(t, cl, req)
	}
	r = view(off)
	recs := decodeBody(t, r.Body)
	if r.Code != 0 || len(recs) != 1 || string(recs[0].Body()) != "payload" || recs[0].PhysicalOffset() != off {
		t.Fatalf("view by id: %d, %d records", r.Code, len(recs))
	}
	if r := view(off + 3); r.Code != protocol.RespSystemError {
		t.Fatalf("view at a bad offset: %d", r.Code)
	}
}

func TestOffsetQueries(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	var times []int64
	for range 3 {
		invoke(t, cl, sendRequest("Times", 0, []byte("x"), ""))
		// The next message's store time (in ms) must be later than this
		// one's, which is not later than now.
		sent := time.Now().UnixMilli()
		wait.Until(t, "the next millisecond", func() bool { return time.Now().UnixMilli() > sent })
	}
	h.waitMax("Times", 0, 3)
	// Store times, from the records themselves.
	invoke(t, cl, heartbeatRequest(t, "a@1", "g", map[string]string{"Times": "*"}))
	r := invoke(t, cl, pullRequest(pullArgs{group: "g", topic: "Times"}))
	for _, v := range decodeBody(t, r.Body) {
		times = append(times, v.StoreTimestamp())
	}
	if len(times) != 3 {
		t.Fatalf("%d records", len(times))
	}
	search := func(ts int64) string {
		req := goRequest(protocol.ReqSearchOffsetByTimestamp)
		(&protocol.SearchOffsetByTimestampRequest{Topic: []byte("Times"), QueueID: 0, Timestamp: ts}).Encode(&req.Ext)
		return ext(invoke(t, cl, req), "offset")
	}
	for _, tc := range []struct {
		ts   int64
		want string
	}{{times[0] - 1000, "0"}, {times[0], "0"}, {times[1], "1"}, {times[2], "2"}, {times[2] + 1000, "3"}} {
		if got := search(tc.ts); got != tc.want {
			t.Errorf("search %d: offset %s, want %s", tc.ts, got, tc.want)
		}
	}
	queueReq := func(code int32, q int32) *protocol.Command {
		req := goRequest(code)
		(&protocol.QueueRequest{Topic: []byte("Times"), QueueID: q}).Encode(&req.Ext)
		return invoke(t, cl, req)
	}
	if got := ext(queueReq(protocol.ReqGetMaxOffset, 0), "offset"); got != "3" {
		t.Errorf("max offset %s", got)
	}
	if got := ext(queueReq(protocol.ReqGetMinOffset, 0), "offset"); got != "0" {
		t.Errorf("min offset %s", got)
	}
	if got := ext(queueReq(protocol.ReqGetMaxOffset, 3), "offset"); got != "0" {
		t.Errorf("max offset of an empty queue %s", got)
	}
	if got := ext(queueReq(protocol.ReqGetEarliestMsgStoretime, 0), "timestamp"); got != itoa(times[0]) {
		t.Errorf("earliest store time %s, want %d", got, times[0])
	}
	if got := ext(queueReq(protocol.ReqGetEarliestMsgStoretime, 2), "timestamp"); got != "-1" {
		t.Errorf("earliest store time of an empty queue %s", got)
	}
}

func itoa(v int64) string { return string(protocolItoa(v)) }

func protocolItoa(v int64) []byte {
	var e protocol.ExtFields
	e.SetInt("v", v)
	b, _ := e.Get("v")
	return b
}

func TestUnknownCodeAndGarbage(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	r := invoke(t, cl, goRequest(9999))
	if r.Code != protocol.RespRequestCodeNotSupported || !strings.Contains(string(r.Remark), "9999") {
		t.Fatalf("unknown code: %d %q", r.Code, r.Remark)
	}
	// Bodies and headers that do not decode get an error answer and the
	// connection keeps serving.
	hb := goRequest(protocol.ReqHeartBeat)
	hb.Body = []byte("\x00garbage")
	if r := invoke(t, cl, hb); r.Code != protocol.RespSystemError {
		t.Fatalf("garbage heartbeat: %d", r.Code)
	}
	for _, code := range []int32{10, 11, 12, 14, 15, 17, 29, 30, 31, 32, 33, 35, 38, 215, 310, 320} {
		req := goRequest(code)
		req.Ext.SetString("queueId", "not a number")
		req.Ext.SetString("offset", "x")
		if r := invoke(t, cl, req); r.Code != protocol.RespSystemError || len(r.Remark) == 0 {
			t.Errorf("code %d with a bad header: %d %q", code, r.Code, r.Remark)
		}
	}
	// Raw garbage on a socket: that connection is dropped, the broker serves on.
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	nc.SetReadDeadline(time.Now().Add(wait.DefaultTimeout))
	if _, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatal("garbage connection answered")
	}
	nc.Close()
	if r := invoke(t, h.dial(nil), sendRequest("StillHere", 0, []byte("x"), "")); r.Code != 0 {
		t.Fatalf("send after garbage: %d", r.Code)
	}
	if r := invoke(t, cl, sendRequest("StillHere", 0, []byte("x"), "")); r.Code != 0 {
		t.Fatalf("send on the first connection after garbage: %d", r.Code)
	}
}

func TestBackPressure(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Core.MaxInFlightBytes = 1000 })
	cl := h.dial(nil)
	if r := invoke(t, cl, sendRequest("BP", 0, make([]byte, 900), "")); r.Code != 0 {
		t.Fatalf("send under the limit: %d", r.Code)
	}
	if r := invoke(t, cl, sendRequest("BP", 0, make([]byte, 1001), "")); r.Code != protocol.RespSystemBusy {
		t.Fatalf("send over MaxInFlightBytes: %d %s", r.Code, r.Remark)
	}
	if runtimeInt(t, h.b, "sendInFlightBytes") != 0 {
		t.Fatalf("in-flight bytes leak: %d", runtimeInt(t, h.b, "sendInFlightBytes"))
	}
	// (A stalled store's SYSTEM_BUSY is broker/core's TestBackPressure.)
}

func TestSyncFlushSends(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Core.Store.FlushMode = commitlog.FlushSync })
	cl := h.dial(nil)
	const n = 200
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range n {
		wg.Add(1)
		req := sendRequest("Sync", int32(i%4), []byte("durable"), props("UNIQ_KEY", "U"))
		if i%10 == 0 {
			req.Ext.SetString("properties", props("UNIQ_KEY", "U", "WAIT", "false"))
		}
		if err := cl.InvokeAsync(req, wait.DefaultTimeout, func(r *protocol.Command, err error) {
			defer wg.Done()
			if err != nil || r.Code != 0 || len(ext(r, "msgId")) != 32 || ext(r, "transactionId") != "U" {
				bad.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d bad answers", bad.Load())
	}
	if got := h.b.Store().Log().FlushedOffset(); got < h.b.Store().Log().WrittenOffset()-1<<20 {
		t.Fatalf("flushed %d", got)
	}
	wait.Equal(t, "in-flight bytes back to 0", 0, func() int64 { return runtimeInt(t, h.b, "sendInFlightBytes") })
}

func TestConfigWriteFailures(t *testing.T) {
	var fail atomic.Bool
	errDisk := errors.New("injected: disk on fire")
	h := newHarness(t, func(o *Options) {
		o.Core.WriteConfigFile = func(path string, data []byte) error {
			if fail.Load() {
				return errDisk
			}
			return core.WriteConfigFile(path, data)
		}
	})
	cl := h.dial(nil)
	fail.Store(true)
	// An auto-created topic still serves; the background write's failure is
	// logged and counted.
	if r := invoke(t, cl, sendRequest("NoDisk", 0, []byte("x"), "")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	wait.Until(t, "the failed background write counted", func() bool { return runtimeInt(t, h.b, "configPersistErrors") > 0 })
	req := goRequest(protocol.ReqUpdateAndCreateTopic)
	(&protocol.CreateTopicRequest{Topic: "Admin", DefaultTopic: "TBW102", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, TopicFilterType: "SINGLE_TAG"}).Encode(&req.Ext)
	if r := invoke(t, cl, req); r.Code != protocol.RespSystemError || !strings.Contains(string(r.Remark), "injected") {
		t.Fatalf("admin create with a failing disk: %d %s", r.Code, r.Remark)
	}
	h.b.core.UpdateConsumerOffset([]byte("NoDisk"), []byte("g"), 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	if err := h.b.Shutdown(ctx); !errors.Is(err, errDisk) {
		t.Fatalf("shutdown with failing config writes: %v", err)
	}
}

func TestShutdownAnswersHeldPulls(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	invoke(t, cl, sendRequest("Held", 0, []byte("x"), ""))
	h.waitMax("Held", 0, 1)
	invoke(t, cl, heartbeatRequest(t, "a@1", "g", map[string]string{"Held": "*"}))
	got := make(chan int32, 1)
	// Held for an hour: a Shutdown that waited for it would not return
	// within ctx.
	cl.InvokeAsync(pullRequest(pullArgs{group: "g", topic: "Held", offset: 1, sysFlag: protocol.PullFlagSuspend, suspendMs: time.Hour.Milliseconds()}),
		2*time.Hour, func(r *protocol.Command, err error) {
			if err != nil {
				got <- -1
				return
			}
			got <- r.Code
		})
	h.waitHeld(1)
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	if err := h.b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-got:
		if code != protocol.RespPullNotFound {
			t.Fatalf("held pull answered %d at shutdown", code)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("held pull not answered at shutdown")
	}
	if err := h.b.Shutdown(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("second shutdown: %v", err)
	}
}

// A handler on a remoting server of the caller's own, with ConnClosed wired.
func TestHandlerOnOwnServer(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.Core.AdvertiseAddr = "127.0.0.1:10911"
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(b.Handler(), &remoting.Options{Logger: testlog.New(t, "remoting")})
	srv.OnClose(b.ConnClosed)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, l.Addr().String(), &remoting.ClientOptions{Options: remoting.Options{Logger: testlog.New(t, "client")}})
	if err != nil {
		t.Fatal(err)
	}
	invoke(t, cl, heartbeatRequest(t, "x@1", "g", map[string]string{"T": "*"}))
	if ids := consumerIDs(b, "g"); len(ids) != 1 {
		t.Fatalf("ids %v", ids)
	}
	cl.Close()
	wait.For(t, "the client to leave", func() error {
		if ids := consumerIDs(b, "g"); len(ids) != 0 {
			return fmt.Errorf("members %v", ids)
		}
		return nil
	})
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Close()
}

func TestPullCaps(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	for range 40 {
		invoke(t, cl, sendRequest("Caps", 0, make([]byte, 1024), ""))
	}
	invoke(t, cl, sendRequest("Caps", 1, make([]byte, 100<<10), ""))
	for range 4 {
		invoke(t, cl, sendRequest("Caps", 1, make([]byte, 100<<10), ""))
	}
	h.waitMax("Caps", 0, 40)
	h.waitMax("Caps", 1, 5)
	// maxMsgNums is capped at 32, bytes at 256 KiB (at least one message).
	r := invoke(t, cl, pullRequest(pullArgs{group: "g", topic: "Caps", sysFlag: 4, sub: "*", max: 1000}))
	if n := len(decodeBody(t, r.Body)); r.Code != 0 || n != 32 {
		t.Fatalf("pull of 40 with maxMsgNums 1000: code %d, %d messages", r.Code, n)
	}
	r = invoke(t, cl, pullRequest(pullArgs{group: "g", topic: "Caps", queueID: 1, sysFlag: 4, sub: "*", max: 32}))
	if n := len(decodeBody(t, r.Body)); r.Code != 0 || n != 2 || pullHeaders(t, r).NextBeginOffset != 2 {
		t.Fatalf("pull of 100 KiB messages: code %d, %d messages", r.Code, n)
	}
}
