package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// waitMax waits until (topic, queue) holds n dispatched messages: a send
// is answered once its message is stored, and dispatch makes it visible
// after that.
func (h *harness) waitMax(topic string, q int32, n int64) {
	h.t.Helper()
	wait.For(h.t, fmt.Sprintf("%d messages of %s/%d dispatched", n, topic, q), func() error {
		if got := h.b.Store().MaxOffset(topic, q); got < n {
			return fmt.Errorf("%d dispatched", got)
		}
		return nil
	})
}

func TestSendAndPull(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	const topic = "TopicA"

	// Single message, V1 long keys, auto-creating the topic from TBW102.
	uniq := "C0A8000100002A9F0000000000000001"
	resp := invoke(t, cl, sendRequest(topic, 1, []byte("hello"), props("UNIQ_KEY", uniq, "TAGS", "tagA", "KEYS", "k1 k2")))
	if resp.Code != 0 {
		t.Fatalf("send: code %d %s", resp.Code, resp.Remark)
	}
	for k, want := range map[string]string{"queueId": "1", "queueOffset": "0", "transactionId": uniq,
		"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"} {
		if got := ext(resp, k); got != want {
			t.Errorf("send response %s = %q, want %q", k, got, want)
		}
	}
	msgID := ext(resp, "msgId")
	if len(msgID) != 32 {
		t.Fatalf("msgId %q", msgID)
	}
	if tc := lookupTopic(h.b, topic); tc == nil || tc.WriteQueueNums != 4 || tc.Perm != 6 {
		t.Fatalf("auto-created topic config %+v", tc)
	}

	// V2 short keys, same queue.
	resp = invoke(t, cl, sendV2Request(protocol.ReqSendMessageV2, topic, 1, []byte("v2"), props("TAGS", "tagB")))
	if resp.Code != 0 || ext(resp, "queueOffset") != "1" {
		t.Fatalf("send v2: code %d %s offset %s", resp.Code, resp.Remark, ext(resp, "queueOffset"))
	}
	// A batch of three into the same queue.
	resp = invoke(t, cl, sendV2Request(protocol.ReqSendBatchMessage, topic, 1,
		batchBody(batchEntry{"b0", props("TAGS", "tagA")}, batchEntry{"b1", ""}, batchEntry{"b2", props("KEYS", "kb")}), ""))
	if resp.Code != 0 || ext(resp, "queueOffset") != "2" {
		t.Fatalf("send batch: code %d %s offset %s", resp.Code, resp.Remark, ext(resp, "queueOffset"))
	}
	batchIDs := strings.Split(ext(resp, "msgId"), ",")
	if len(batchIDs) != 3 {
		t.Fatalf("batch msgId %q", ext(resp, "msgId"))
	}

	h.waitMax(topic, 1, 5)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@1", "cg", map[string]string{topic: "*"}))
	resp = invoke(t, cl, pullRequest(pullArgs{group: "cg", topic: topic, queueID: 1, sysFlag: protocol.PullFlagSuspend, suspendMs: 1000}))
	if resp.Code != 0 {
		t.Fatalf("pull: code %d %s", resp.Code, resp.Remark)
	}
	hdr := pullHeaders(t, resp)
	if hdr.NextBeginOffset != 5 || hdr.MinOffset != 0 || hdr.MaxOffset != 5 {
		t.Fatalf("pull headers %+v", hdr)
	}
	recs := decodeBody(t, resp.Body)
	wantBodies := []string{"hello", "v2", "b0", "b1", "b2"}
	if len(recs) != len(wantBodies) {
		t.Fatalf("pulled %d records", len(recs))
	}
	ids := append([]string{msgID, ""}, batchIDs...)
	for i, v := range recs {
		if string(v.Body()) != wantBodies[i] || v.QueueOffset() != int64(i) || v.QueueID() != 1 || string(v.Topic()) != topic {
			t.Errorf("record %d: body %q offset %d queue %d topic %q", i, v.Body(), v.QueueOffset(), v.QueueID(), v.Topic())
		}
		if c, _ := v.Property(message.PropCluster); string(c) != core.DefaultClusterName {
			t.Errorf("record %d: CLUSTER = %q", i, c)
		}
		if ids[i] != "" && string(v.AppendOffsetMsgID(nil)) != ids[i] {
			t.Errorf("record %d: offset msgId %s, send said %s", i, v.AppendOffsetMsgID(nil), ids[i])
		}
	}
	if u := recs[0].UniqKey(); string(u) != uniq {
		t.Errorf("UNIQ_KEY %q", u)
	}
	if tags := recs[2].Tags(); string(tags) != "tagA" {
		t.Errorf("batch entry TAGS %q", tags)
	}

	// The heartbeat subscription filters by tag on the broker.
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@1", "cgA", map[string]string{topic: "tagA"}))
	resp = invoke(t, cl, pullRequest(pullArgs{group: "cgA", topic: topic, queueID: 1, sysFlag: protocol.PullFlagSuspend, suspendMs: 1000}))
	recs = decodeBody(t, resp.Body)
	if resp.Code != 0 || len(recs) != 2 || string(recs[0].Body()) != "hello" || string(recs[1].Body()) != "b0" {
		t.Fatalf("tag-filtered pull: code %d, %d records", resp.Code, len(recs))
	}
	// A subscription carried by the pull (sysFlag bit 2), SQL92.
	resp = invoke(t, cl, pullRequest(pullArgs{group: "pull", topic: topic, queueID: 1, sysFlag: 6, suspendMs: 1000,
		sub: "TAGS = 'tagB'", expr: "SQL92"}))
	recs = decodeBody(t, resp.Body)
	if resp.Code != 0 || len(recs) != 1 || string(recs[0].Body()) != "v2" {
		t.Fatalf("SQL92 pull: code %d %s, %d records", resp.Code, resp.Remark, len(recs))
	}
}

func TestPullStatuses(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	const topic = "Statuses"
	for i := range 3 {
		tags := "x"
		if i == 2 {
			tags = "y"
		}
		if r := invoke(t, cl, sendRequest(topic, 0, []byte("m"), props("TAGS", tags))); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	h.waitMax(topic, 0, 3)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@2", "cg", map[string]string{topic: "*"}))
	// A heartbeat declares all of a client's groups: another client for cgz.
	invoke(t, h.dial(nil), heartbeatRequest(t, "127.0.0.1@3", "cgz", map[string]string{topic: "z"}))

	tests := []struct {
		name       string
		a          pullArgs
		code       int32
		next       int64
		min, max   int64
		noHeaders  bool
		remarkPart string
	}{
		{name: "found", a: pullArgs{group: "cg", topic: topic}, code: 0, next: 3, max: 3},
		{name: "found capped by maxMsgNums", a: pullArgs{group: "cg", topic: topic, max: 2}, code: 0, next: 2, max: 3},
		{name: "offset == max", a: pullArgs{group: "cg", topic: topic, offset: 3}, code: 19, next: 3, max: 3},
		{name: "offset > max", a: pullArgs{group: "cg", topic: topic, offset: 9}, code: 21, next: 3, max: 3},
		{name: "negative offset", a: pullArgs{group: "cg", topic: topic, offset: -5}, code: 21, next: 0, max: 3},
		{name: "tag filter rejects all", a: pullArgs{group: "cgz", topic: topic}, code: 20, next: 3, max: 3},
		{name: "empty queue at 0", a: pullArgs{group: "cg", topic: topic, queueID: 3}, code: 19, next: 0},
		{name: "empty queue past 0", a: pullArgs{group: "cg", topic: topic, queueID: 3, offset: 7}, code: 21, next: 0},
		{name: "unknown topic", a: pullArgs{group: "cg", topic: "Nope"}, code: 17, noHeaders: true, remarkPart: "not exist"},
		{name: "queue out of range", a: pullArgs{group: "cg", topic: topic, queueID: 4}, code: 1, noHeaders: true, remarkPart: "illegal"},
		{name: "negative queue", a: pullArgs{group: "cg", topic: topic, queueID: -1}, code: 1, noHeaders: true},
		{name: "unknown group", a: pullArgs{group: "ghost", topic: topic}, code: 24, noHeaders: true},
		{name: "illegal group name", a: pullArgs{group: "bad group!", topic: topic, sysFlag: 4, sub: "*"}, code: 26, noHeaders: true},
		{name: "subscription not latest", a: pullArgs{group: "cg", topic: topic, subVersion: 1 << 62}, code: 25, noHeaders: true},
		{name: "bad SQL", a: pullArgs{group: "p", topic: topic, sysFlag: 4, sub: "a = ", expr: "SQL92"}, code: 23, noHeaders: true},
		{name: "bad expression type", a: pullArgs{group: "p", topic: topic, sysFlag: 4, sub: "*", expr: "XPATH"}, code: 23, noHeaders: true},
		{name: "request subscription tags", a: pullArgs{group: "p", topic: topic, sysFlag: 4, sub: "y"}, code: 0, next: 3, max: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := invoke(t, cl, pullRequest(tc.a))
			if resp.Code != tc.code {
				t.Fatalf("code %d (%s), want %d", resp.Code, resp.Remark, tc.code)
			}
			if tc.remarkPart != "" && !strings.Contains(string(resp.Remark), tc.remarkPart) {
				t.Errorf("remark %q lacks %q", resp.Remark, tc.remarkPart)
			}
			if tc.noHeaders {
				return
			}
			hdr := pullHeaders(t, resp)
			if hdr.NextBeginOffset != tc.next || hdr.MinOffset != tc.min || hdr.MaxOffset != tc.max {
				t.Errorf("headers %+v, want next %d min %d max %d", hdr, tc.next, tc.min, tc.max)
			}
			if tc.code != 0 && len(resp.Body) != 0 {
				t.Errorf("body of %d bytes on code %d", len(resp.Body), tc.code)
			}
		})
	}
}

func TestLongPollWokenBySend(t *testing.T) {
	const topic = "LongPoll"
	// The store reports an arrival to the broker's holder, then to the
	// options' own OnArrival: once queue 1's arrival is seen here, the
	// holder has already been told of it.
	queue1 := make(chan struct{}, 1)
	h := newHarness(t, func(o *Options) {
		o.Core.Store.OnArrival = func(tp string, q int32, _ int64) {
			if tp == topic && q == 1 {
				queue1 <- struct{}{}
			}
		}
	})
	puller, sender := h.dial(nil), h.dial(nil)
	invoke(t, sender, sendRequest(topic, 0, []byte("first"), ""))
	h.waitMax(topic, 0, 1)
	invoke(t, puller, heartbeatRequest(t, "127.0.0.1@3", "cg", map[string]string{topic: "*"}))

	type result struct {
		code int32
		body []byte
		hdr  protocol.PullMessageResponse
	}
	done := make(chan result, 1)
	// Held for an hour unless woken: an answer within the test is the wake.
	req := pullRequest(pullArgs{group: "cg", topic: topic, offset: 1, sysFlag: protocol.PullFlagSuspend, suspendMs: time.Hour.Milliseconds()})
	if err := puller.InvokeAsync(req, 2*time.Hour, func(resp *protocol.Command, err error) {
		if err != nil {
			t.Errorf("pull: %v", err)
			done <- result{}
			return
		}
		var hdr protocol.PullMessageResponse
		_ = hdr.Decode(&resp.Ext)
		done <- result{resp.Code, bytes.Clone(resp.Body), hdr}
	}); err != nil {
		t.Fatal(err)
	}
	h.waitHeld(1)

	// The held pull does not block the puller's connection.
	if r := invoke(t, puller, sendRequest(topic, 1, []byte("other queue"), "")); r.Code != 0 {
		t.Fatalf("send on the puller's connection: %d", r.Code)
	}
	select {
	case <-queue1:
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("no arrival reported for queue 1")
	}
	if st := h.b.holds.Stats(); st.Woken != 0 || st.Held != 1 {
		t.Fatalf("pull woken by a message in another queue: %+v", st)
	}
	if r := invoke(t, sender, sendRequest(topic, 0, []byte("wake"), "")); r.Code != 0 {
		t.Fatalf("send: %d", r.Code)
	}
	select {
	case r := <-done:
		if r.code != 0 {
			t.Fatalf("pull: code %d", r.code)
		}
		recs := decodeBody(t, r.body)
		if len(recs) != 1 || string(recs[0].Body()) != "wake" || r.hdr.NextBeginOffset != 2 || r.hdr.MaxOffset != 2 {
			t.Fatalf("woken pull: %d records, headers %+v", len(recs), r.hdr)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatalf("held pull not woken by the send: holder %+v", h.b.holds.Stats())
	}
	if st := h.b.holds.Stats(); st.Woken != 1 || st.Expired != 0 {
		t.Fatalf("holder after the wake: %+v", st)
	}
}

// TestLongPollTimeout checks, end to end, that the broker holds a pull for
// the client's suspendTimeoutMillis capped by LongPollMax. The holder's
// deadline semantics are tested exactly, with a fake clock, in
// broker/longpoll. Here each case makes the other bound an hour: the pull
// must be answered by its holder's expiry, not before the shorter bound
// (the clock checks that) and not after it (a pull held for the hour would
// reach invoke's bound and fail the test).
func TestLongPollTimeout(t *testing.T) {
	const topic = "Quiet"
	for _, tc := range []struct {
		name        string
		longPollMax time.Duration
		suspendMs   int64
		min         time.Duration
	}{
		{"client timeout", time.Hour, 60, 55 * time.Millisecond},
		{"capped by LongPollMax", 120 * time.Millisecond, time.Hour.Milliseconds(), 115 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(o *Options) { o.Core.LongPollMax = tc.longPollMax })
			cl := h.dial(nil)
			invoke(t, cl, sendRequest(topic, 0, []byte("x"), ""))
			h.waitMax(topic, 0, 1)
			invoke(t, cl, heartbeatRequest(t, "127.0.0.1@4", "cg", map[string]string{topic: "*"}))
			start := time.Now()
			resp := invoke(t, cl, pullRequest(pullArgs{group: "cg", topic: topic, offset: 1, sysFlag: protocol.PullFlagSuspend, suspendMs: tc.suspendMs}))
			el := time.Since(start)
			if resp.Code != protocol.RespPullNotFound {
				t.Fatalf("code %d %s", resp.Code, resp.Remark)
			}
			if hdr := pullHeaders(t, resp); hdr.NextBeginOffset != 1 || hdr.MaxOffset != 1 {
				t.Fatalf("headers %+v", hdr)
			}
			if el < tc.min {
				t.Fatalf("answered after %v, before %v", el, tc.min)
			}
			if st := h.b.holds.Stats(); st.Parked != 1 || st.Expired != 1 || st.Held != 0 {
				t.Fatalf("holder after the pull: %+v, want it parked once and expired", st)
			}

			// Without the suspend flag the answer is immediate: nothing
			// is parked.
			resp = invoke(t, cl, pullRequest(pullArgs{group: "cg", topic: topic, offset: 1, suspendMs: time.Hour.Milliseconds()}))
			if resp.Code != protocol.RespPullNotFound {
				t.Fatalf("non-suspending pull: code %d", resp.Code)
			}
			if st := h.b.holds.Stats(); st.Parked != 1 {
				t.Fatalf("a non-suspending pull was parked: %+v", st)
			}
		})
	}
}

// The clients here heartbeat once and must stay for the whole test: the
// default ClientTimeout (minutes). A silent client's expiry is
// TestSilentClientExpires's.
func TestHeartbeatConsumerListAndNotify(t *testing.T) {
	h := newHarness(t, nil)
	rec1, rec2 := newRecorder(), newRecorder()
	c1, c2 := h.dial(rec1), h.dial(rec2)
	subs := map[string]string{"T": "*"}

	resp := invoke(t, c1, heartbeatRequest(t, "10.0.0.1@1", "cg", subs))
	if resp.Code != 0 || resp.Version < 0 {
		t.Fatalf("heartbeat: code %d version %d", resp.Code, resp.Version)
	}
	rec1.waitNotify(t, "cg") // joining notifies the group, the newcomer included
	if tc := lookupTopic(h.b, "%RETRY%cg"); tc == nil || tc.WriteQueueNums != 1 {
		t.Fatalf("retry topic %+v", tc)
	}
	if lookupGroup(h.b, "cg") == nil {
		t.Fatal("subscription group not created")
	}

	list := func(cl interface {
		Invoke(context.Context, *protocol.Command) (*protocol.Command, error)
	}) []string {
		req := goRequest(protocol.ReqGetConsumerListByGroup)
		req.Ext.SetString("consumerGroup", "cg")
		ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
		defer cancel()
		resp, err := cl.Invoke(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var body protocol.ConsumerListBody
		_ = body.Decode(resp.Body)
		return body.ConsumerIDList
	}
	if got := list(c1); fmt.Sprint(got) != "[10.0.0.1@1]" {
		t.Fatalf("consumer list %v", got)
	}

	rec1.drain()
	invoke(t, c2, heartbeatRequest(t, "10.0.0.2@2", "cg", subs))
	rec1.waitNotify(t, "cg")
	rec2.waitNotify(t, "cg")
	if got := list(c2); fmt.Sprint(got) != "[10.0.0.1@1 10.0.0.2@2]" {
		t.Fatalf("consumer list %v", got)
	}

	// A repeated heartbeat changes nothing and notifies nobody. The
	// notification would be sent before the heartbeat's answer, so 100 ms
	// after the answer is only a margin for its delivery to c1: the window
	// is what is tested, not a wait for something.
	rec1.drain()
	invoke(t, c1, heartbeatRequest(t, "10.0.0.1@1", "cg", subs))
	select {
	case g := <-rec1.ch:
		t.Fatalf("unexpected notify for %s", g)
	case <-time.After(100 * time.Millisecond):
	}

	// Closing c2 removes its client and notifies c1.
	rec1.drain()
	c2.Close()
	rec1.waitNotify(t, "cg")
	wait.For(t, "c2 to leave", func() error {
		if ids := consumerIDs(h.b, "cg"); fmt.Sprint(ids) != "[10.0.0.1@1]" {
			return fmt.Errorf("members %v", ids)
		}
		return nil
	})
}

// A client silent for ClientTimeout is removed and its connection closed;
// the group is empty then.
func TestSilentClientExpires(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Core.ClientTimeout = 300 * time.Millisecond })
	c1 := h.dial(nil)
	if resp := invoke(t, c1, heartbeatRequest(t, "10.0.0.1@1", "cg", map[string]string{"T": "*"})); resp.Code != 0 {
		t.Fatalf("heartbeat: code %d", resp.Code)
	}
	select {
	case <-c1.Done():
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("silent client not disconnected")
	}
	if ids := consumerIDs(h.b, "cg"); len(ids) != 0 {
		t.Fatalf("expired client still listed: %v", ids)
	}
	c3 := h.dial(nil)
	req := goRequest(protocol.ReqGetConsumerListByGroup)
	req.Ext.SetString("consumerGroup", "cg")
	if resp := invoke(t, c3, req); resp.Code != protocol.RespSystemError {
		t.Fatalf("empty group list: code %d", resp.Code)
	}
}

func TestUnregisterClient(t *testing.T) {
	h := newHarness(t, nil)
	rec := newRecorder()
	c1, c2 := h.dial(rec), h.dial(nil)
	invoke(t, c1, heartbeatRequest(t, "a@1", "cg", map[string]string{"T": "*"}))
	invoke(t, c2, heartbeatRequest(t, "b@1", "cg", map[string]string{"T": "*"}))
	rec.drain()
	req := goRequest(protocol.ReqUnregisterClient)
	(&protocol.UnregisterClientRequest{ClientID: "b@1", ConsumerGroup: "cg", ProducerGroup: "pg"}).Encode(&req.Ext)
	if resp := invoke(t, c2, req); resp.Code != 0 {
		t.Fatalf("unregister: %d", resp.Code)
	}
	rec.waitNotify(t, "cg")
	if ids := consumerIDs(h.b, "cg"); fmt.Sprint(ids) != "[a@1]" {
		t.Fatalf("after unregister: %v", ids)
	}
}

func queryOffset(t *testing.T, cl interface {
	Invoke(context.Context, *protocol.Command) (*protocol.Command, error)
}, group, topic string, q int32) (int32, string) {
	t.Helper()
	req := goRequest(protocol.ReqQueryConsumerOffset)
	(&protocol.QueryConsumerOffsetRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: q}).Encode(&req.Ext)
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Code, ext(resp, "offset")
}

func TestOffsetsPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	h := startHarness(t, testOptions(t, dir), nil)
	cl := h.dial(nil)
	const topic = "Offsets"
	invoke(t, cl, sendRequest(topic, 0, []byte("a"), ""))
	h.waitMax(topic, 0, 1)

	// No offset yet: the Java quirk answers 0 for a young queue whose first
	// message is in memory, and for an empty queue.
	if code, off := queryOffset(t, cl, "g", topic, 0); code != 0 || off != "0" {
		t.Fatalf("query before commit: code %d offset %q", code, off)
	}
	if code, off := queryOffset(t, cl, "g", topic, 2); code != 0 || off != "0" {
		t.Fatalf("query of an empty queue: code %d offset %q", code, off)
	}

	upd := goRequest(protocol.ReqUpdateConsumerOffset)
	(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte("g"), Topic: []byte(topic), QueueID: 0, CommitOffset: 1}).Encode(&upd.Ext)
	if resp := invoke(t, cl, upd); resp.Code != 0 {
		t.Fatalf("update: %d", resp.Code)
	}
	// A pull with the commit flag stores its commitOffset too.
	invoke(t, cl, heartbeatRequest(t, "c@1", "g2", map[string]string{topic: "*"}))
	invoke(t, cl, pullRequest(pullArgs{group: "g2", topic: topic, sysFlag: protocol.PullFlagCommitOffset, commitOffset: 1}))
	if code, off := queryOffset(t, cl, "g", topic, 0); code != 0 || off != "1" {
		t.Fatalf("query after commit: code %d offset %q", code, off)
	}
	h.close()

	raw, err := os.ReadFile(statePath(h.b, core.ConsumerOffsetFile))
	if err != nil || !bytes.Contains(raw, []byte(`"Offsets@g":{"0":1}`)) || !bytes.Contains(raw, []byte(`"Offsets@g2":{"0":1}`)) {
		t.Fatalf("consumerOffset.json: %s (%v)", raw, err)
	}

	h2 := startHarness(t, testOptions(t, dir), nil)
	cl2 := h2.dial(nil)
	for _, g := range []string{"g", "g2"} {
		if code, off := queryOffset(t, cl2, g, topic, 0); code != 0 || off != "1" {
			t.Fatalf("%s after restart: code %d offset %q", g, code, off)
		}
	}
	if tc := lookupTopic(h2.b, topic); tc == nil {
		t.Fatal("topic lost across restart")
	}
	if lookupGroup(h2.b, "g2") == nil {
		t.Fatal("subscription group lost across restart")
	}
}

func TestOffsetFileAcceptsBareKeys(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	if err := core.WriteConfigFile(dir+"/config/consumerOffset.json", nil); err == nil {
		t.Fatal("expected an error writing into a missing directory")
	}
	h := startHarness(t, opts, nil)
	h.close()
	if err := core.WriteConfigFile(statePath(h.b, core.ConsumerOffsetFile), []byte(`{"offsetTable":{"T@g":{0:7,3:9}},"dataVersion":{"timestamp":1,"counter":2}}`)); err != nil {
		t.Fatal(err)
	}
	h2 := startHarness(t, opts, nil)
	for q, want := range map[int32]int64{0: 7, 3: 9} {
		if off, ok := h2.b.core.CommittedOffset("T", "g", q); !ok || off != want {
			t.Fatalf("queue %d: %d %v", q, off, ok)
		}
	}
}

// A held pull woken by a message its filter rejects stays parked, at the
// offset the scan reached, until a matching one arrives.
func TestLongPollFilteredWake(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	const topic = "Filtered"
	invoke(t, cl, heartbeatRequest(t, "a@1", "g", map[string]string{topic: "wanted"}))
	invoke(t, cl, sendRequest(topic, 0, []byte("seed"), props("TAGS", "wanted")))
	h.waitMax(topic, 0, 1)
	type result struct {
		code int32
		body []byte
		next int64
	}
	done := make(chan result, 1)
	// Held for an hour unless woken: an answer within the test is a wake.
	req := pullRequest(pullArgs{group: "g", topic: topic, offset: 1, sysFlag: protocol.PullFlagSuspend, suspendMs: time.Hour.Milliseconds()})
	cl.InvokeAsync(req, 2*time.Hour, func(r *protocol.Command, err error) {
		if err != nil {
			done <- result{code: -1}
			return
		}
		var hdr protocol.PullMessageResponse
		_ = hdr.Decode(&r.Ext)
		done <- result{r.Code, bytes.Clone(r.Body), hdr.NextBeginOffset}
	})
	h.waitHeld(1)
	invoke(t, cl, sendRequest(topic, 0, []byte("other"), props("TAGS", "unwanted")))
	// Woken by the unwanted message, re-run, and parked again (not answered).
	wait.Equal(t, "the pull parked again", 1, func() int64 { return h.b.holds.Stats().Reparked })
	if st := h.b.holds.Stats(); st.Held != 1 || st.Woken != 1 || st.Expired != 0 {
		t.Fatalf("holder after the unwanted message: %+v", st)
	}
	invoke(t, cl, sendRequest(topic, 0, []byte("match"), props("TAGS", "wanted")))
	select {
	case r := <-done:
		recs := decodeBody(t, r.body)
		if r.code != 0 || len(recs) != 1 || string(recs[0].Body()) != "match" || r.next != 3 {
			t.Fatalf("code %d, %d records, next %d", r.code, len(recs), r.next)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("not woken by the matching message")
	}
}
