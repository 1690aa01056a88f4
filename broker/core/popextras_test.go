package core

import (
	"net/netip"
	"testing"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

func TestRecallHandleRoundTrip(t *testing.T) {
	h := AppendRecallHandle(nil, "T", []byte("ID1"), 1234)
	topic, id, off, ok := ParseRecallHandle(h)
	if !ok || topic != "T" || id != "ID1" || off != 1234 {
		t.Fatalf("parsed %q %q %d %v", topic, id, off, ok)
	}
	for _, bad := range []string{"", "!!", "VCBJRDE", "VCBJRDEgLTE" /* "T ID1 -1" */, "VCBJRDEgMSAy" /* 4 fields */} {
		if _, _, _, ok := ParseRecallHandle([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestPopLooksAndBatchAck(t *testing.T) {
	c := newTestCore(t, nil)
	if err := c.Admin().CreateTopic(&TopicRequest{Topic: "T", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	var look PopLook
	if _, err := c.HasPopMessage([]byte("G"), []byte("T"), -1, false, &look); Code(err) != protocol.RespSubscriptionGroupNotExist {
		t.Fatalf("a look of an unknown group: %v", err)
	}
	var sr SendResult
	for _, b := range []string{"m0", "m1", "m2"} {
		if err := c.Send(&SendRequest{Topic: []byte("T"), QueueID: 0, Body: []byte(b),
			Properties: message.AppendProperty(nil, message.PropUniqKey, b)}, &sr); err != nil {
			t.Fatal(err)
		}
		if len(sr.RecallHandle) != 0 {
			t.Fatal("a normal message got a recall handle")
		}
	}
	waitDispatched(t, c, "T", 0, 3)
	var res PopResult
	if err := c.Pop(&PopRequest{Group: []byte("G"), Topic: []byte("T"), QueueID: -1, MaxMsgs: 3, InvisibleTime: 60000,
		FromFirst: true, Consumer: netip.MustParseAddrPort("127.0.0.1:1")}, &res); err != nil || len(res.Msgs) != 3 {
		t.Fatalf("pop: %d, %v", len(res.Msgs), err)
	}
	if has, err := c.HasPopMessage([]byte("G"), []byte("T"), -1, false, &look); err != nil || has || look.NextVisible != res.PopTime+60000 {
		t.Fatalf("look with everything in flight: %v %v, next visible %d", has, err, look.NextVisible)
	}
	var peek PopResult
	if err := c.Peek([]byte("G"), []byte("T"), -1, 32, &peek.Result); err != nil || len(peek.Msgs) != 0 {
		t.Fatalf("peek with everything in flight: %d, %v", len(peek.Msgs), err)
	}
	n, err := c.AckBatch([]byte("G"), []byte("T"), 0, res.PopTime, []int64{0, 2, 7})
	if err != nil || n != 2 {
		t.Fatalf("batch ack: %d acked, %v", n, err)
	}
	if _, err := c.AckBatch([]byte("G"), []byte("NOPE"), 0, res.PopTime, []int64{1}); Code(err) != protocol.RespTopicNotExist {
		t.Fatalf("batch ack of an unknown topic: %v", err)
	}
	if err := c.Ack([]byte("G"), []byte("T"), 0, 1, Receipt{QueueID: 0, PopTime: res.PopTime}); err != nil {
		t.Fatalf("m1, not in the batch, is still in flight: %v", err)
	}
}
