package broker

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

func peekCmd(group, topic string, queue, max int32) *protocol.Command {
	cmd := goRequest(protocol.ReqPeekMessage)
	(&protocol.PeekMessageRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: queue, MaxMsgNums: max}).Encode(&cmd.Ext)
	return cmd
}

func notifyCmd(group, topic string, queue int32, poll time.Duration, order bool) *protocol.Command {
	cmd := goRequest(protocol.ReqNotification)
	(&protocol.NotificationRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: queue,
		PollTime: poll.Milliseconds(), BornTime: time.Now().UnixMilli(), Order: order}).Encode(&cmd.Ext)
	return cmd
}

func pollingInfoCmd(group, topic string, queue int32) *protocol.Command {
	cmd := goRequest(protocol.ReqPollingInfo)
	(&protocol.PollingInfoRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: queue}).Encode(&cmd.Ext)
	return cmd
}

func hasMsg(t testing.TB, resp *protocol.Command) bool {
	t.Helper()
	if resp.Code != protocol.RespSuccess {
		t.Fatalf("notification: code %d %s", resp.Code, resp.Remark)
	}
	var h protocol.NotificationResponse
	if err := h.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	return h.HasMsg
}

func pollingNum(t testing.TB, cl *remoting.Client, group, topic string, queue int32) int32 {
	t.Helper()
	resp := mustCode(t, cl, pollingInfoCmd(group, topic, queue), protocol.RespSuccess)
	var h protocol.PollingInfoResponse
	if err := h.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	return h.PollingNum
}

func TestPeekMessage(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 2, []string{"m0", "m1", "m2"}, nil)
	// The group must exist (a pop creates it; a peek does not).
	mustCode(t, cl, peekCmd("G", "T", 0, 32), protocol.RespSubscriptionGroupNotExist)
	mustCode(t, cl, peekCmd("G", "NOPE", 0, 32), protocol.RespTopicNotExist)
	ps := doPop(t, cl, popArgs{group: "G", topic: "T", queue: 0, max: 1, invisible: time.Hour})
	if len(ps) != 1 {
		t.Fatalf("popped %d", len(ps))
	}
	resp := mustCode(t, cl, peekCmd("G", "T", -1, 32), protocol.RespSuccess)
	var hdr protocol.PopMessageResponse
	if err := hdr.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	got := decodeBody(t, append([]byte(nil), resp.Body...))
	if len(got) != 2 || string(got[0].Body()) != "m1" || string(got[1].Body()) != "m2" || hdr.RestNum != 2 {
		t.Fatalf("peek: %d messages, restNum %d", len(got), hdr.RestNum)
	}
	// Peeking handed nothing out: the next pop gets the same messages.
	if b := fmt.Sprint(bodies(doPop(t, cl, popArgs{group: "G", topic: "T", queue: 0, max: 32, invisible: time.Hour}))); b != "[m1 m2]" {
		t.Fatalf("pop after the peek: %s", b)
	}
	mustCode(t, cl, peekCmd("G", "T", 0, 32), protocol.RespPullNotFound)
	mustCode(t, cl, peekCmd("G", "T", 5, 32), protocol.RespInvalidParameter)
	mustCode(t, cl, peekCmd("G", "T", 0, 0), protocol.RespInvalidParameter)
}

func TestNotificationAndPollingInfo(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, nil, nil)
	doPop(t, cl, popArgs{group: "G", topic: "T", queue: -1, max: 1, invisible: time.Hour}) // creates the group
	mustCode(t, cl, notifyCmd("NOGROUP", "T", -1, 0, false), protocol.RespSubscriptionGroupNotExist)
	mustCode(t, cl, pollingInfoCmd("G", "T", 3), protocol.RespSystemError)
	if hasMsg(t, invoke(t, cl, notifyCmd("G", "T", -1, 0, false))) {
		t.Fatal("hasMsg on an empty topic")
	}
	// Held until its pollTime: then answered with what it finds.
	if hasMsg(t, invoke(t, cl, notifyCmd("G", "T", -1, 50*time.Millisecond, false))) {
		t.Fatal("hasMsg after a poll on an empty topic")
	}
	if st := h.b.holds.Stats().Pops; st.Expired != 1 {
		t.Fatalf("holder: %+v", st)
	}

	// A held notification is answered by an arrival.
	held := make(chan *protocol.Command, 1)
	go func() {
		resp, err := cl.Invoke(context.Background(), notifyCmd("G", "T", 0, time.Minute, false))
		if err != nil {
			t.Error(err)
		}
		held <- resp
	}()
	wait.Equal(t, "the held notification", int64(2), func() int64 { return h.b.holds.Stats().Pops.Parked })
	mustSend(t, cl, sendRequest("T", 0, []byte("a"), ""))
	select {
	case resp := <-held:
		if !hasMsg(t, resp) {
			t.Fatal("woken without hasMsg")
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("the held notification was not answered")
	}

	// POLLING_INFO counts held pops by topic, group and queue id.
	pops := make(chan []popped, 2)
	for range 2 {
		go func() {
			pops <- doPop(t, cl, popArgs{group: "G", topic: "T", queue: -1, max: 1, invisible: time.Hour, poll: time.Minute})
		}()
	}
	// The first pop takes "a"; the second is held.
	first := <-pops
	if len(first) != 1 {
		t.Fatalf("first pop: %d", len(first))
	}
	wait.Equal(t, "one held pop", int32(1), func() int32 { return pollingNum(t, cl, "G", "T", -1) })
	if n := pollingNum(t, cl, "G", "T", 0); n != 0 {
		t.Fatalf("pollingNum of queue 0: %d (the pop is of any queue)", n)
	}
	mustSend(t, cl, sendRequest("T", 0, []byte("b"), ""))
	if second := <-pops; len(second) != 1 {
		t.Fatalf("held pop: %d", len(second))
	}
	wait.Equal(t, "no held pop", int32(0), func() int32 { return pollingNum(t, cl, "G", "T", -1) })

	// Orderly: a FIFO group with its message in flight holds its next back.
	g := props(message.PropShardingKey, "A")
	mustSend(t, cl, sendRequest("T", 0, []byte("A1"), g))
	mustSend(t, cl, sendRequest("T", 0, []byte("A2"), g))
	h.waitMax("T", 0, 4)
	o := doPop(t, cl, popArgs{group: "O", topic: "T", queue: 0, max: 3, invisible: time.Hour, order: true})
	if b := fmt.Sprint(bodies(o)); b != "[a b A1]" {
		t.Fatalf("orderly pop: %s", b)
	}
	if !hasMsg(t, invoke(t, cl, notifyCmd("O", "T", 0, 0, false))) {
		t.Fatal("unordered look: A2 not seen")
	}
	if hasMsg(t, invoke(t, cl, notifyCmd("O", "T", 0, 0, true))) {
		t.Fatal("orderly look: A2 seen while A1 is in flight")
	}
	mustCode(t, cl, ackRequest("O", "T", o[2]), protocol.RespSuccess)
	if !hasMsg(t, invoke(t, cl, notifyCmd("O", "T", 0, 0, true))) {
		t.Fatal("orderly look: A2 not seen after A1's ack")
	}
}

func TestBatchAck(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, []string{"m0", "m1", "m2", "m3"}, nil)
	ps := doPop(t, cl, popArgs{group: "G", topic: "T", queue: 0, max: 32, invisible: time.Hour})
	if len(ps) != 4 {
		t.Fatalf("popped %d", len(ps))
	}
	x, err := protocol.ParseExtraInfo([]byte(ps[0].handle))
	if err != nil {
		t.Fatal(err)
	}
	// Ack m0 and m2 (bits 0 and 2 from the pop's start offset), and an
	// entry of another pop time (stale: skipped) for m1.
	body := protocol.BatchAckMessageRequestBody{BrokerName: "broker-a", Acks: []protocol.BatchAck{
		{ConsumerGroup: "G", Topic: "T", Retry: "0", StartOffset: x.CkQueueOffset, QueueID: 0, ReviveQueueID: x.ReviveQid,
			PopTime: x.PopTime, InvisibleTime: x.InvisibleTime, BitSet: []byte{0b101}},
		{ConsumerGroup: "G", Topic: "T", StartOffset: 1, QueueID: 0, PopTime: x.PopTime - 1, BitSet: []byte{1}},
		{ConsumerGroup: "G", Topic: "NOPE", StartOffset: 0, QueueID: 0, PopTime: x.PopTime, BitSet: []byte{1}},
	}}
	enc, err := body.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cmd := goRequest(protocol.ReqBatchAckMessage)
	cmd.Body = enc
	mustCode(t, cl, cmd, protocol.RespSuccess)
	// m0 and m2 are done (their acks answer NO_MESSAGE? no: an ack of a
	// message done succeeds again); m1 and m3 are still in flight: a
	// change of m1's invisibility brings it back alone.
	changeTo(t, cl, "G", "T", ps[1], time.Millisecond)
	if b := fmt.Sprint(bodies(popUntil(t, cl, popArgs{group: "G", topic: "T", queue: 0, max: 32, invisible: time.Hour}))); b != "[m1]" {
		t.Fatalf("after the batch ack: %s", b)
	}
	// Acking m0 again with its handle succeeds (done); m3's ack too.
	mustCode(t, cl, ackRequest("G", "T", ps[0]), protocol.RespSuccess)
	mustCode(t, cl, ackRequest("G", "T", ps[3]), protocol.RespSuccess)
	// A body without acks: NO_MESSAGE; a body that does not parse: SYSTEM_ERROR.
	empty := goRequest(protocol.ReqBatchAckMessage)
	empty.Body = []byte(`{"brokerName":"broker-a","acks":[]}`)
	mustCode(t, cl, empty, protocol.RespNoMessage)
	bad := goRequest(protocol.ReqBatchAckMessage)
	bad.Body = []byte(`{"acks":[{"b":"!"}]}`)
	mustCode(t, cl, bad, protocol.RespSystemError)
}

func TestRecallOverRemoting(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	mustCreateTopic(t, h.b, "R", 1)
	at := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	resp := mustSend(t, cl, sendRequest("R", 0, []byte("later"), props("UNIQ_KEY", "RID1", "TIMER_DELIVER_MS", at)))
	var sh protocol.SendMessageResponse
	if err := sh.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	if len(sh.RecallHandle) == 0 {
		t.Fatal("a timer message's send answer has no recallHandle")
	}
	plain := mustSend(t, cl, sendRequest("R", 0, []byte("now"), props("UNIQ_KEY", "RID2")))
	if v, ok := plain.Ext.GetString("recallHandle"); ok {
		t.Fatalf("a normal message's send answer has a recallHandle %q", v)
	}
	recall := func(topic, handle string) *protocol.Command {
		cmd := goRequest(protocol.ReqRecallMessage)
		(&protocol.RecallMessageRequest{ProducerGroup: []byte("pg"), Topic: []byte(topic), RecallHandle: []byte(handle)}).Encode(&cmd.Ext)
		return cmd
	}
	mustCode(t, cl, recall("NOPE", string(sh.RecallHandle)), protocol.RespTopicNotExist)
	mustCode(t, cl, recall("R", "not-a-handle!"), protocol.RespIllegalOperation)
	mustCreateTopic(t, h.b, "R2", 1)
	mustCode(t, cl, recall("R2", string(sh.RecallHandle)), protocol.RespIllegalOperation)
	ok := mustCode(t, cl, recall("R", string(sh.RecallHandle)), protocol.RespSuccess)
	var rh protocol.RecallMessageResponse
	if err := rh.Decode(&ok.Ext); err != nil || string(rh.MsgID) != "RID1" {
		t.Fatalf("recall answer: %q, %v", rh.MsgID, err)
	}
}
