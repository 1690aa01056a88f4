package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// pushRecorder records requests the broker pushes to a client.
type pushRecorder struct{ ch chan *protocol.Command }

func (r *pushRecorder) ServeRemoting(_ *remoting.Conn, req *protocol.Command, _ *remoting.Response) remoting.Action {
	if req.Code == protocol.ReqResetConsumerClientOffset {
		cp := new(protocol.Command)
		cp.Code = req.Code
		cp.Ext.CopyFrom(&req.Ext)
		cp.Body = append([]byte(nil), req.Body...)
		r.ch <- cp
	}
	return remoting.NoReply
}

func resetReq(topic, group string, ts int64, force bool) *protocol.Command {
	cmd := goRequest(protocol.ReqInvokeBrokerToResetOffset)
	(&protocol.ResetOffsetRequest{Topic: topic, Group: group, Timestamp: ts, IsForce: force, QueueID: -1, Offset: -1}).Encode(&cmd.Ext)
	return cmd
}

func TestResetConsumerOffset(t *testing.T) {
	h := featureHarness(t, nil)
	rec := &pushRecorder{ch: make(chan *protocol.Command, 8)}
	cl := h.dial(rec)
	invoke(t, cl, createTopicReq("RS", 6, ""))
	before := time.Now().UnixMilli() - 1
	for i := 0; i < 10; i++ {
		mustSend(t, cl, sendRequest("RS", int32(i%2), []byte("m"), ""))
	}
	h.waitMax("RS", 0, 5)
	h.waitMax("RS", 1, 5)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@3", "rg", map[string]string{"RS": "*"}))
	for q := int32(0); q < 2; q++ {
		up := goRequest(protocol.ReqUpdateConsumerOffset)
		(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte("rg"), Topic: []byte("RS"), QueueID: q, CommitOffset: 4}).Encode(&up.Ext)
		invoke(t, cl, up)
	}
	committed := func(q int32) int64 {
		off, _ := h.b.core.CommittedOffset("RS", "rg", q)
		return off
	}
	// Back to the start: the offsets move back and the member is told.
	r := invoke(t, cl, resetReq("RS", "rg", before, false))
	want := `{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"RS"}:0,{"brokerName":"broker-a","queueId":1,"topic":"RS"}:0}}`
	if r.Code != 0 || string(r.Body) != want {
		t.Fatalf("reset: %d %s\n%s", r.Code, r.Remark, r.Body)
	}
	if committed(0) != 0 || committed(1) != 0 {
		t.Fatalf("committed offsets after the reset: %d %d", committed(0), committed(1))
	}
	select {
	case push := <-rec.ch:
		if ext(push, "topic") != "RS" || ext(push, "group") != "rg" || string(push.Body) != want {
			t.Fatalf("220: %v %s", push.Ext, push.Body)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("no RESET_CONSUMER_CLIENT_OFFSET pushed")
	}
	// To the end without force: offsets only move backwards, so they stay.
	if r := invoke(t, cl, resetReq("RS", "rg", -1, false)); r.Code != 0 || committed(0) != 0 {
		t.Fatalf("reset to the end without force: %d, offset %d", r.Code, committed(0))
	}
	if r := invoke(t, cl, resetReq("RS", "rg", -1, true)); r.Code != 0 || committed(0) != 5 || committed(1) != 5 {
		t.Fatalf("forced reset to the end: %d, offsets %d %d", r.Code, committed(0), committed(1))
	}
	// One queue to an explicit offset (RocketMQ 5).
	one := goRequest(protocol.ReqInvokeBrokerToResetOffset)
	(&protocol.ResetOffsetRequest{Topic: "RS", Group: "rg", Timestamp: 0, IsForce: true, QueueID: 1, Offset: 2}).Encode(&one.Ext)
	if r := invoke(t, cl, one); r.Code != 0 || committed(0) != 5 || committed(1) != 2 {
		t.Fatalf("per-queue reset: %d, offsets %d %d", r.Code, committed(0), committed(1))
	}
	if r := invoke(t, cl, resetReq("Nope", "rg", 0, true)); r.Code != protocol.RespSystemError || !strings.Contains(string(r.Remark), "no topic") {
		t.Fatalf("reset of an unknown topic: %d %s", r.Code, r.Remark)
	}
}

// TestQueryByUniqueKey checks QUERY_MESSAGE with the unique-key flag and
// VIEW_MESSAGE_BY_ID on messages that went through a delay.
func TestQueryByUniqueKey(t *testing.T) {
	h := featureHarness(t, nil)
	cl := h.dial(nil)
	mustSend(t, cl, sendRequest("Q", 0, []byte("later"), props("UNIQ_KEY", "QUNIQ1", "KEYS", "order-1 order-2", "DELAY", "1")))
	got := pullN(t, cl, "Q", 0, 0, 1, arrive)
	if len(got) != 1 {
		t.Fatal("not delivered")
	}
	for _, c := range []struct {
		key    string
		unique bool
	}{{"QUNIQ1", true}, {"order-2", false}} {
		q := goRequest(protocol.ReqQueryMessage)
		(&protocol.QueryMessageRequest{Topic: "Q", Key: c.key, MaxNum: 32, EndTimestamp: time.Now().Add(time.Minute).UnixMilli()}).Encode(&q.Ext)
		if c.unique {
			q.Ext.SetString("_UNIQUE_KEY_QUERY", "true")
		}
		r := invoke(t, cl, q)
		recs := decodeBody(t, r.Body)
		// One record in topic Q (the schedule topic's copy is not Q's).
		if r.Code != 0 || len(recs) != 1 || string(recs[0].Body()) != "later" {
			t.Fatalf("query %s: %d, %d records", c.key, r.Code, len(recs))
		}
	}
	v := goRequest(protocol.ReqViewMessageByID)
	v.Ext.SetInt("offset", got[0].PhysicalOffset())
	if r := invoke(t, cl, v); r.Code != 0 || len(decodeBody(t, r.Body)) != 1 {
		t.Fatalf("view by id: %d", r.Code)
	}
}
