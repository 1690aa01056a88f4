package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// TestSendBackRetryAndDLQ walks a message through CONSUMER_SEND_MSG_BACK as
// the Go client's push consumer drives it: two retries through the delay
// levels (the broker's 3 + reconsumeTimes, then the client's level), then
// the dead-letter queue once maxReconsumeTimes is reached.
func TestSendBackRetryAndDLQ(t *testing.T) {
	h := featureHarness(t, nil)
	cl := h.dial(nil)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@1", "cg", map[string]string{"T": "*"}))
	uniq := "C0A8000100002A9F00000000000000AA"
	sent := mustSend(t, cl, sendRequest("T", 2, []byte("payload"), props("UNIQ_KEY", uniq, "TAGS", "tagA", "KEYS", "k1")))
	orig := pullN(t, cl, "T", 2, 0, 1, arrive)
	if len(orig) != 1 {
		t.Fatal("original message not pulled")
	}
	o := orig[0]
	if got := string(o.AppendOffsetMsgID(nil)); got != ext(sent, "msgId") {
		t.Fatalf("offset id %s, send said %s", got, ext(sent, "msgId"))
	}

	// First failure: delay level 0 means the broker's 3 + reconsumeTimes.
	if r := invoke(t, cl, sendBackRequest("cg", o.PhysicalOffset(), 0, 3, "T", uniq)); r.Code != 0 {
		t.Fatalf("send-back: %d %s", r.Code, r.Remark)
	}
	if tc := lookupTopic(h.b, "%RETRY%cg"); tc == nil || tc.WriteQueueNums != 1 || tc.Perm != 6 {
		t.Fatalf("retry topic %+v", tc)
	}
	r1 := pullN(t, cl, "%RETRY%cg", 0, 0, 1, arrive)
	if len(r1) != 1 {
		t.Fatal("first retry never arrived")
	}
	checkRetry := func(v pulled, reconsume int32) {
		t.Helper()
		if string(v.Body()) != "payload" || v.ReconsumeTimes() != reconsume || string(v.Topic()) != "%RETRY%cg" || v.QueueID() != 0 {
			t.Fatalf("retry: body %q reconsumeTimes %d topic %s queue %d", v.Body(), v.ReconsumeTimes(), v.Topic(), v.QueueID())
		}
		for k, want := range map[string]string{
			message.PropRetryTopic: "T", message.PropOriginMessageID: ext(sent, "msgId"), message.PropUniqKey: uniq,
			message.PropTags: "tagA", message.PropKeys: "k1", message.PropDelay: "", message.PropWait: "false",
			message.PropRealTopic: "%RETRY%cg",
		} {
			if got := prop(v.View, k); got != want {
				t.Errorf("retry (reconsumeTimes %d): %s = %q, want %q", reconsume, k, got, want)
			}
		}
		if v.BornTimestamp() != o.BornTimestamp() || v.BornHost() != o.BornHost() {
			t.Errorf("born fields changed: %d %v, original %d %v", v.BornTimestamp(), v.BornHost(), o.BornTimestamp(), o.BornHost())
		}
	}
	checkRetry(r1[0], 1)
	if d := storeDelay(o.View, r1[0].View); d < levelDelay(3) {
		t.Errorf("first retry came back after %v, before level 3 (%v)", d, levelDelay(3))
	}
	// The tag code is restored: a tag subscription on the retry topic finds it.
	if got := pullSub(t, cl, "tags", "%RETRY%cg", 0, 0, 1, arrive, "tagA", "TAG"); len(got) != 1 {
		t.Fatal("retried message not found by its tag")
	}

	// Second failure with the client's own level 6.
	if r := invoke(t, cl, sendBackRequest("cg", r1[0].PhysicalOffset(), 6, 3, "T", uniq)); r.Code != 0 {
		t.Fatalf("send-back 2: %d %s", r.Code, r.Remark)
	}
	r2 := pullN(t, cl, "%RETRY%cg", 0, 1, 1, arrive)
	if len(r2) != 1 {
		t.Fatal("second retry never arrived")
	}
	checkRetry(r2[0], 2)
	if d := storeDelay(r1[0].View, r2[0].View); d < levelDelay(6) {
		t.Errorf("second retry came back after %v, before level 6 (%v)", d, levelDelay(6))
	}

	// Third: reconsumeTimes 2 with maxReconsumeTimes 2 goes to the DLQ, at once.
	if r := invoke(t, cl, sendBackRequest("cg", r2[0].PhysicalOffset(), 0, 2, "T", uniq)); r.Code != 0 {
		t.Fatalf("send-back 3: %d %s", r.Code, r.Remark)
	}
	dlq := pullN(t, cl, "%DLQ%cg", 0, 0, 1, arrive)
	if len(dlq) != 1 {
		t.Fatal("nothing in the DLQ")
	}
	d := dlq[0]
	if string(d.Body()) != "payload" || d.ReconsumeTimes() != 3 || prop(d.View, message.PropRetryTopic) != "T" ||
		prop(d.View, message.PropOriginMessageID) != ext(sent, "msgId") || prop(d.View, message.PropDelay) != "" {
		t.Fatalf("DLQ record: body %q reconsumeTimes %d props %q", d.Body(), d.ReconsumeTimes(), d.Properties())
	}
	if tc := lookupTopic(h.b, "%DLQ%cg"); tc == nil || tc.WriteQueueNums != 1 || tc.Perm != 6 {
		t.Fatalf("DLQ topic %+v", tc)
	}
	if n := h.b.Store().MaxOffset("%RETRY%cg", 0); n != 2 {
		t.Fatalf("retry queue holds %d messages, want 2", n)
	}

	// A negative level (the orderly consumer's) goes to the DLQ whatever the count.
	if r := invoke(t, cl, sendBackRequest("cg", o.PhysicalOffset(), -1, 16, "T", uniq)); r.Code != 0 {
		t.Fatalf("send-back -1: %d %s", r.Code, r.Remark)
	}
	if got := pullN(t, cl, "%DLQ%cg", 0, 1, 1, arrive); len(got) != 1 || got[0].ReconsumeTimes() != 1 {
		t.Fatalf("level -1 did not go to the DLQ: %d records", len(got))
	}
	// Without maxReconsumeTimes the group's retryMaxTimes (16) applies.
	if r := invoke(t, cl, sendBackRequest("cg", r2[0].PhysicalOffset(), 1, -1, "T", uniq)); r.Code != 0 {
		t.Fatalf("send-back without max: %d %s", r.Code, r.Remark)
	}
	if got := pullN(t, cl, "%RETRY%cg", 0, 2, 1, arrive); len(got) != 1 || got[0].ReconsumeTimes() != 3 {
		t.Fatal("send-back without maxReconsumeTimes did not retry")
	}
	if st := h.b.RuntimeInfo(); st["sendBacks"] != "5" || st["deadLetters"] != "2" {
		t.Errorf("counters: sendBacks %s deadLetters %s", st["sendBacks"], st["deadLetters"])
	}
}

func TestSendBackErrors(t *testing.T) {
	h := featureHarness(t, nil)
	cl := h.dial(nil)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@1", "cg", map[string]string{"T": "*"}))
	mustSend(t, cl, sendRequest("T", 0, []byte("x"), ""))
	for _, c := range []struct {
		name string
		req  *protocol.Command
		code int32
		text string
	}{
		{"unknown group", sendBackRequest("nope", 0, 0, 16, "T", ""), protocol.RespSubscriptionGroupNotExist, "subscription group not exist"},
		{"no record there", sendBackRequest("cg", 1<<40, 0, 16, "T", ""), protocol.RespSystemError, "look message by offset failed"},
		{"missing offset", goRequest(protocol.ReqConsumerSendMsgBack), protocol.RespSystemError, ""},
	} {
		r := invoke(t, cl, c.req)
		if r.Code != c.code || !strings.Contains(string(r.Remark), c.text) {
			t.Errorf("%s: %d %q, want %d %q", c.name, r.Code, r.Remark, c.code, c.text)
		}
	}
}

// TestSendToRetryTopic covers the Go client's fallback: it sends the failed
// message itself to %RETRY%<group> with reconsumeTimes + 1 and DELAY.
func TestSendToRetryTopic(t *testing.T) {
	h := featureHarness(t, nil)
	cl := h.dial(nil)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@1", "cg", map[string]string{"T": "*"}))
	retry := func(body string, reconsume, max int32, properties string) *protocol.Command {
		req := sendRequest("%RETRY%cg", -1, []byte(body), properties)
		req.Ext.SetInt("reconsumeTimes", int64(reconsume))
		req.Ext.SetInt("maxReconsumeTimes", int64(max))
		return req
	}
	start := time.Now()
	mustSend(t, cl, retry("again", 1, 16, props("RETRY_TOPIC", "T", "DELAY", "4", "TAGS", "x")))
	got := pullN(t, cl, "%RETRY%cg", 0, 0, 1, arrive)
	if len(got) != 1 || string(got[0].Body()) != "again" || prop(got[0].View, "DELAY") != "" {
		t.Fatalf("delayed retry: %d records", len(got))
	}
	if d := time.Since(start); d < levelDelay(4) {
		t.Fatalf("retry delivered after %v, before level 4", d)
	}
	// reconsumeTimes > maxReconsumeTimes: straight to the DLQ, DELAY dropped.
	mustSend(t, cl, retry("dead", 3, 2, props("RETRY_TOPIC", "T", "DELAY", "5")))
	dlq := pullN(t, cl, "%DLQ%cg", 0, 0, 1, arrive)
	if len(dlq) != 1 || string(dlq[0].Body()) != "dead" || prop(dlq[0].View, "DELAY") != "" || dlq[0].ReconsumeTimes() != 3 {
		t.Fatalf("dead letter: %d records", len(dlq))
	}
	// A group holding orderly locks: retried messages go to the DLQ at once.
	h.b.core.LockQueues("cg", "127.0.0.1@1", []protocol.MessageQueue{{Topic: "T", BrokerName: "broker-a", QueueID: 0}})
	mustSend(t, cl, retry("orderly", 1, 16, props("RETRY_TOPIC", "T", "DELAY", "3")))
	if dlq := pullN(t, cl, "%DLQ%cg", 0, 1, 1, arrive); len(dlq) != 1 || string(dlq[0].Body()) != "orderly" {
		t.Fatalf("orderly retry: %d records in the DLQ", len(dlq))
	}
	// Batches to retry topics are refused (RocketMQ 5).
	r := invoke(t, cl, sendV2Request(protocol.ReqSendBatchMessage, "%RETRY%cg", 0, batchBody(batchEntry{"a", ""}), ""))
	if r.Code != protocol.RespMessageIllegal {
		t.Fatalf("batch to a retry topic: %d %s", r.Code, r.Remark)
	}
}
