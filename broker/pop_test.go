package broker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/pop"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// popped is a record of a pop response with its receipt handle.
type popped struct {
	v      message.View
	handle string
}

type popArgs struct {
	group, topic string
	queue        int32
	max          int32
	invisible    time.Duration
	poll         time.Duration
	order        bool
	exp          string
}

func popCmd(a popArgs) *protocol.Command {
	cmd := goRequest(protocol.ReqPopMessage)
	h := protocol.PopMessageRequest{ConsumerGroup: []byte(a.group), Topic: []byte(a.topic), QueueID: a.queue,
		MaxMsgNums: a.max, InvisibleTime: a.invisible.Milliseconds(), PollTime: a.poll.Milliseconds(),
		BornTime: time.Now().UnixMilli(), InitMode: popInitMin, Order: a.order, Exp: []byte(a.exp)}
	if a.exp != "" {
		h.ExpType = []byte("TAG")
	}
	h.Encode(&cmd.Ext)
	return cmd
}

// doPop pops and returns the records with the handles a client builds from
// the response headers (as the Java client does), or nil on PULL_NOT_FOUND.
func doPop(t testing.TB, cl *remoting.Client, a popArgs) []popped {
	t.Helper()
	resp := invoke(t, cl, popCmd(a))
	if resp.Code == protocol.RespPullNotFound {
		return nil
	}
	if resp.Code != protocol.RespSuccess {
		t.Fatalf("pop: code %d %s", resp.Code, resp.Remark)
	}
	var h protocol.PopMessageResponse
	if err := h.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	starts := map[int32]int64{}
	for _, part := range splitInfo(string(h.StartOffsetInfo)) {
		var q int32
		var off int64
		if _, err := fmt.Sscanf(part, "0 %d %d", &q, &off); err != nil {
			t.Fatalf("startOffsetInfo %q: %v", h.StartOffsetInfo, err)
		}
		starts[q] = off
	}
	var out []popped
	body := append([]byte(nil), resp.Body...)
	for _, v := range decodeBody(t, body) {
		x := protocol.ExtraInfo{CkQueueOffset: starts[v.QueueID()], PopTime: h.PopTime, InvisibleTime: h.InvisibleTime,
			ReviveQid: h.ReviveQid, BrokerName: []byte("broker-a"), QueueID: v.QueueID(), QueueOffset: v.QueueOffset()}
		out = append(out, popped{v: v, handle: string(protocol.AppendExtraInfo(nil, &x))})
	}
	return out
}

func splitInfo(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ';' {
			i++
		}
		out = append(out, s[:i])
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}

func ackRequest(group, topic string, p popped) *protocol.Command {
	cmd := goRequest(protocol.ReqAckMessage)
	(&protocol.AckMessageRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: p.v.QueueID(),
		ExtraInfo: []byte(p.handle), Offset: p.v.QueueOffset()}).Encode(&cmd.Ext)
	return cmd
}

func changeRequest(group, topic string, p popped, d time.Duration) *protocol.Command {
	cmd := goRequest(protocol.ReqChangeMessageInvisibleTime)
	(&protocol.ChangeInvisibleTimeRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: p.v.QueueID(),
		ExtraInfo: []byte(p.handle), Offset: p.v.QueueOffset(), InvisibleTime: d.Milliseconds()}).Encode(&cmd.Ext)
	return cmd
}

// changeTo changes p's invisible time and returns p with its new handle.
func changeTo(t testing.TB, cl *remoting.Client, group, topic string, p popped, d time.Duration) popped {
	t.Helper()
	resp := mustCode(t, cl, changeRequest(group, topic, p, d), protocol.RespSuccess)
	var ch protocol.ChangeInvisibleTimeResponse
	if err := ch.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	x, err := protocol.ParseExtraInfo([]byte(p.handle))
	if err != nil {
		t.Fatal(err)
	}
	x.PopTime, x.InvisibleTime = ch.PopTime, ch.InvisibleTime
	return popped{v: p.v, handle: string(protocol.AppendExtraInfo(nil, &x))}
}

// popUntil pops until a pop returns messages (within internal/wait's bound). The
// tests make messages visible again by changing their invisible time to
// 1 ms rather than by sleeping through it; the timing itself is broker/pop's
// unit tests' (synctest).
func popUntil(t testing.TB, cl *remoting.Client, a popArgs) []popped {
	t.Helper()
	var ps []popped
	wait.Until(t, "a pop with messages", func() bool {
		ps = doPop(t, cl, a)
		return len(ps) > 0
	})
	return ps
}

func mustCode(t testing.TB, cl *remoting.Client, req *protocol.Command, code int32) *protocol.Command {
	t.Helper()
	resp := invoke(t, cl, req)
	if resp.Code != code {
		t.Fatalf("request %d: code %d (%s), want %d", req.Code, resp.Code, resp.Remark, code)
	}
	return resp
}

// popTopic creates a topic with n queues and sends the bodies to queue 0,
// each with the properties of the same index (if any).
func popTopic(t testing.TB, h *harness, cl *remoting.Client, topic string, n int32, bodies []string, properties []string) {
	t.Helper()
	mustCreateTopic(t, h.b, topic, n)
	for i, body := range bodies {
		p := ""
		if i < len(properties) {
			p = properties[i]
		}
		mustSend(t, cl, sendRequest(topic, 0, []byte(body), p))
	}
	h.waitMax(topic, 0, int64(len(bodies)))
}

func bodies(ps []popped) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p.v.Body()))
	}
	return out
}

func TestPopAckRedeliver(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, []string{"m0", "m1", "m2"}, nil)
	a := popArgs{group: "G", topic: "T", queue: -1, max: 10, invisible: time.Minute}

	first := doPop(t, cl, a)
	if got := fmt.Sprint(bodies(first)); got != "[m0 m1 m2]" {
		t.Fatalf("first pop: %s", got)
	}
	if again := doPop(t, cl, a); len(again) != 0 {
		t.Fatalf("invisible messages popped again: %v", bodies(again))
	}
	mustCode(t, cl, ackRequest("G", "T", first[0]), protocol.RespSuccess)
	mustCode(t, cl, ackRequest("G", "T", first[0]), protocol.RespSuccess) // already done: still success

	// m1 and m2 are not acked: visible again once their time passes.
	changeTo(t, cl, "G", "T", first[1], time.Millisecond)
	changeTo(t, cl, "G", "T", first[2], time.Millisecond)
	var second []popped
	wait.For(t, "m1 and m2 visible again", func() error {
		second = append(second, doPop(t, cl, a)...)
		if len(second) < 2 {
			return fmt.Errorf("popped %v", bodies(second))
		}
		return nil
	})
	if got := fmt.Sprint(bodies(second)); got != "[m1 m2]" {
		t.Fatalf("redelivery: %s", got)
	}
	for _, p := range second {
		if p.v.ReconsumeTimes() != 1 {
			t.Fatalf("redelivered reconsumeTimes = %d", p.v.ReconsumeTimes())
		}
	}
	// The first delivery's handle is stale now.
	mustCode(t, cl, ackRequest("G", "T", first[1]), protocol.RespNoMessage)
	for _, p := range second {
		mustCode(t, cl, ackRequest("G", "T", p), protocol.RespSuccess)
	}
	if off, ok := h.b.core.CommittedOffset("T", "G", 0); !ok || off != 3 {
		t.Fatalf("committed offset %d %v, want 3", off, ok)
	}
	if again := doPop(t, cl, a); len(again) != 0 {
		t.Fatalf("acked messages popped again: %v", bodies(again))
	}
}

func TestPopChangeInvisibleTime(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, []string{"m0"}, nil)
	a := popArgs{group: "G", topic: "T", queue: 0, max: 1, invisible: time.Minute}
	ps := doPop(t, cl, a)
	if len(ps) != 1 {
		t.Fatalf("popped %d", len(ps))
	}
	resp := mustCode(t, cl, changeRequest("G", "T", ps[0], 2*time.Minute), protocol.RespSuccess)
	var ch protocol.ChangeInvisibleTimeResponse
	if err := ch.Decode(&resp.Ext); err != nil || ch.InvisibleTime != 120000 || ch.PopTime <= 0 || ch.ReviveQid != 0 {
		t.Fatalf("change response %+v %v", ch, err)
	}
	if again := doPop(t, cl, a); len(again) != 0 {
		t.Fatal("message visible again after the change of its invisible time")
	}
	mustCode(t, cl, ackRequest("G", "T", ps[0]), protocol.RespNoMessage) // the old handle
	x, _ := protocol.ParseExtraInfo([]byte(ps[0].handle))
	x.PopTime, x.InvisibleTime = ch.PopTime, ch.InvisibleTime
	renewed := popped{v: ps[0].v, handle: string(protocol.AppendExtraInfo(nil, &x))}
	mustCode(t, cl, ackRequest("G", "T", renewed), protocol.RespSuccess)
	mustCode(t, cl, changeRequest("G", "T", renewed, time.Second), protocol.RespNoMessage) // acked
}

func TestPopConsumersShareOneQueue(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	const n = 60
	var bs []string
	for i := range n {
		bs = append(bs, "m"+strconv.Itoa(i))
	}
	popTopic(t, h, cl, "T", 1, bs, nil)

	// Two consumers of a group take different messages of the single queue.
	c1, c2 := h.dial(nil), h.dial(nil)
	a := popArgs{group: "G", topic: "T", queue: 0, max: 3, invisible: time.Hour}
	p1, p2 := doPop(t, c1, a), doPop(t, c2, a)
	if got := fmt.Sprint(bodies(p1), bodies(p2)); got != "[m0 m1 m2] [m3 m4 m5]" {
		t.Fatalf("two consumers got %s", got)
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	per := [2]int{}
	for i, ps := range [][]popped{p1, p2} {
		conn := []*remoting.Client{c1, c2}[i]
		for _, p := range ps {
			seen[p.v.QueueOffset()]++
			per[i]++
			mustCode(t, conn, ackRequest("G", "T", p), protocol.RespSuccess)
		}
	}
	// Then both race for the rest.
	var wg sync.WaitGroup
	for c := range 2 {
		conn := h.dial(nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(wait.DefaultTimeout)
			for time.Now().Before(deadline) {
				mu.Lock()
				done := len(seen) == n
				mu.Unlock()
				if done {
					return
				}
				ps := doPop(t, conn, popArgs{group: "G", topic: "T", queue: 0, max: 3, invisible: time.Hour})
				for _, p := range ps {
					mu.Lock()
					seen[p.v.QueueOffset()]++
					per[c]++
					mu.Unlock()
					mustCode(t, conn, ackRequest("G", "T", p), protocol.RespSuccess)
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("received %d distinct messages, want %d", len(seen), n)
	}
	for off, k := range seen {
		if k != 1 {
			t.Fatalf("offset %d delivered %d times", off, k)
		}
	}
	t.Logf("messages per consumer: %v", per)
}

func TestPopFIFO(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, []string{"A1", "B1", "A2", "A3", "B2", "free"},
		[]string{props(message.PropShardingKey, "A"), props(message.PropJavaShardingKey, "B"), props(message.PropShardingKey, "A"),
			props(message.PropShardingKey, "A"), props(message.PropJavaShardingKey, "B"), ""})
	a := popArgs{group: "G", topic: "T", queue: -1, max: 3, invisible: time.Hour, order: true}
	// Consecutive messages of a group come in one answer (a batch, as
	// RocketMQ's orderly pop), each with its orderCountInfo.
	ps := doPop(t, cl, a)
	if got := fmt.Sprint(bodies(ps)); got != "[A1 B1 A2]" {
		t.Fatalf("first orderly pop: %s", got)
	}
	again := doPop(t, cl, a)
	if got := fmt.Sprint(bodies(again)); got != "[free]" {
		t.Fatalf("second orderly pop: %s (A and B are in flight)", got)
	}
	mustCode(t, cl, ackRequest("G", "T", ps[0]), protocol.RespSuccess)
	if more := doPop(t, cl, a); len(more) != 0 {
		t.Fatalf("A3 handed out while A2 is in flight: %v", bodies(more))
	}
	mustCode(t, cl, ackRequest("G", "T", ps[2]), protocol.RespSuccess)
	a3 := doPop(t, cl, a)
	if got := fmt.Sprint(bodies(a3)); got != "[A3]" {
		t.Fatalf("after acks of A1 and A2: %s", got)
	}
	mustCode(t, cl, ackRequest("G", "T", ps[1]), protocol.RespSuccess)
	b2 := doPop(t, cl, a)
	if got := fmt.Sprint(bodies(b2)); got != "[B2]" {
		t.Fatalf("after the ack of B1: %s", got)
	}
	// A group without order gets everything at once.
	all := doPop(t, cl, popArgs{group: "H", topic: "T", queue: -1, max: 10, invisible: time.Hour})
	if len(all) != 6 {
		t.Fatalf("unordered pop got %v", bodies(all))
	}
}

func TestPopFIFORedeliversInOrder(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, []string{"A1", "A2"}, []string{props(message.PropShardingKey, "A"), props(message.PropShardingKey, "A")})
	a := popArgs{group: "G", topic: "T", queue: 0, max: 10, invisible: time.Minute, order: true}
	first := doPop(t, cl, a)
	if got := fmt.Sprint(bodies(first)); got != "[A1 A2]" {
		t.Fatalf("first: %s", got)
	}
	changeTo(t, cl, "G", "T", first[0], time.Millisecond)
	again := popUntil(t, cl, a) // A1 not acked in time: it comes back; A2 is still invisible
	if got := fmt.Sprint(bodies(again)); got != "[A1]" || again[0].v.ReconsumeTimes() != 1 {
		t.Fatalf("redelivery: %s", got)
	}
}

func TestPopStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	h := startHarness(t, testOptions(t, dir), nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, []string{"m0", "m1", "m2", "m3"}, nil)
	a := popArgs{group: "G", topic: "T", queue: 0, max: 3, invisible: time.Minute}
	ps := doPop(t, cl, a)
	if len(ps) != 3 {
		t.Fatalf("popped %d", len(ps))
	}
	mustCode(t, cl, ackRequest("G", "T", ps[0]), protocol.RespSuccess)
	cl.Close()
	h.close()

	h2 := startHarness(t, testOptions(t, dir), nil)
	cl2 := h2.dial(nil)
	a.max = 10
	if got := fmt.Sprint(bodies(doPop(t, cl2, a))); got != "[m3]" {
		t.Fatalf("after restart: %s (in-flight messages must stay invisible, acked ones done)", got)
	}
	// Handles issued before the restart still work.
	mustCode(t, cl2, ackRequest("G", "T", ps[2]), protocol.RespSuccess)
	changeTo(t, cl2, "G", "T", ps[1], time.Millisecond)
	re := popUntil(t, cl2, a)
	if got := fmt.Sprint(bodies(re)); got != "[m1]" {
		t.Fatalf("redelivery after restart: %s", got)
	}
	// A handle from before the restart of a message redelivered since is stale;
	// the new ones work.
	mustCode(t, cl2, ackRequest("G", "T", ps[1]), protocol.RespNoMessage)
	for _, p := range re {
		mustCode(t, cl2, ackRequest("G", "T", p), protocol.RespSuccess)
	}
}

func TestPopDeadLetter(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, []string{"poison"}, nil)
	g := protocol.DefaultSubscriptionGroupConfig("G")
	g.RetryMaxTimes = 2
	if err := h.b.core.Admin().UpdateSubscriptionGroup(g); err != nil {
		t.Fatal(err)
	}
	a := popArgs{group: "G", topic: "T", queue: 0, max: 1, invisible: time.Millisecond}
	for i := range 3 { // 1 + RetryMaxTimes deliveries
		ps := popUntil(t, cl, a)
		if len(ps) != 1 || ps[0].v.ReconsumeTimes() != int32(i) {
			t.Fatalf("delivery %d: %d messages", i, len(ps))
		}
	}
	// The next pop after the last delivery's invisible time dead-letters it.
	wait.Until(t, "the dead letter", func() bool {
		if ps := doPop(t, cl, a); len(ps) != 0 {
			t.Fatal("delivered after the retries ran out")
		}
		return h.b.Store().MaxOffset("%DLQ%G", 0) > 0
	})
	got := pullN(t, cl, "%DLQ%G", 0, 0, 1, arrive)
	if len(got) != 1 || string(got[0].Body()) != "poison" || prop(got[0].View, message.PropRetryTopic) != "T" {
		t.Fatalf("dead-letter queue: %d records", len(got))
	}
	st := h.b.RuntimeInfo()
	if st["deadLetters"] != "1" || st["popDeadLetters"] != "1" || st["popMessages"] != "3" || st["popRedelivered"] != "2" ||
		st["innerPuts"] != "1" || st["popInFlight"] != "0" {
		t.Fatalf("runtime info: deadLetters %s popDeadLetters %s popMessages %s popRedelivered %s innerPuts %s popInFlight %s",
			st["deadLetters"], st["popDeadLetters"], st["popMessages"], st["popRedelivered"], st["innerPuts"], st["popInFlight"])
	}
}

func TestPopLongPolling(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 2, nil, nil)
	done := make(chan []popped, 1)
	// Polling 20 s (under LongPollMax): an answer with the message is the
	// wake, the poll's end would answer none.
	go func() {
		done <- doPop(t, cl, popArgs{group: "G", topic: "T", queue: -1, max: 4, invisible: time.Second, poll: 20 * time.Second})
	}()
	wait.Equal(t, "the pop held", 1, func() int64 { return int64(h.b.holds.Stats().Pops.Held) })
	mustSend(t, cl, sendRequest("T", 1, []byte("late"), ""))
	select {
	case ps := <-done:
		if len(ps) != 1 || string(ps[0].v.Body()) != "late" {
			t.Fatalf("held pop got %v", bodies(ps))
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("held pop not answered")
	}
	// Nothing arrives: the pop is answered PULL_NOT_FOUND once pollTime passes.
	start := time.Now()
	if ps := doPop(t, cl, popArgs{group: "G", topic: "T", queue: -1, max: 4, invisible: time.Second, poll: 100 * time.Millisecond}); len(ps) != 0 {
		t.Fatalf("got %v", bodies(ps))
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("not held: %v", d)
	}
	if n := int64(h.b.holds.Stats().Pops.Held); n != 0 {
		t.Fatalf("%d pops still counted as held", n)
	}
}

// A pop held on a group is woken when a message the group did not ack
// becomes visible again (its invisible time ends, or a change of it moves
// that earlier), without any periodic look: the counters show one revive
// per held pop, no arrival, and exactly two looks each (the first, and the
// one the revive caused).
func TestPopHeldWokenByRevive(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 2, []string{"m0"}, nil)
	// The arrival is reported just after the queue grew: once the holder
	// has it, it cannot reach the held pops.
	wait.Until(t, "the arrival reported", func() bool { return h.b.holds.Ticket() >= 1 })
	held := func(invisible time.Duration) chan []popped {
		done := make(chan []popped, 1)
		// Polling 20 s: an answer with the message is the revive; the
		// poll's end would answer none.
		go func() {
			done <- doPop(t, cl, popArgs{group: "G", topic: "T", queue: -1, max: 4, invisible: invisible, poll: 20 * time.Second})
		}()
		return done
	}
	answer := func(done chan []popped, attempt int32) popped {
		t.Helper()
		select {
		case ps := <-done:
			if len(ps) != 1 || string(ps[0].v.Body()) != "m0" || ps[0].v.ReconsumeTimes() != attempt-1 {
				t.Fatalf("held pop got %v", bodies(ps))
			}
			return ps[0]
		case <-time.After(wait.DefaultTimeout):
			t.Fatal("held pop not answered")
		}
		return popped{}
	}
	looks := func() string { return h.b.RuntimeInfo()["popRequests"] }

	// Unacked, invisible for a second (the held pop's first look comes
	// well before): the held pop gets it back then.
	first := doPop(t, cl, popArgs{group: "G", topic: "T", queue: -1, max: 4, invisible: time.Second})
	if len(first) != 1 {
		t.Fatalf("first pop: %v", bodies(first))
	}
	done := held(time.Minute)
	p := answer(done, 2)
	st := h.b.holds.Stats().Pops
	if st.Parked != 1 || st.Revived != 1 || st.Woken != 0 || st.Expired != 0 || st.Held != 0 {
		t.Fatalf("holder after the invisible time ended: %+v", st)
	}
	if n := looks(); n != "3" {
		t.Fatalf("%s pop looks, want 3 (the first pop, the held one, its revive)", n)
	}

	// Invisible for a minute, then changed to 200 ms from now (a nack):
	// the held pop gets it back then.
	done = held(time.Minute)
	wait.Equal(t, "the pop held", 1, func() int { return h.b.holds.Stats().Pops.Held })
	changeTo(t, cl, "G", "T", p, 200*time.Millisecond)
	answer(done, 3)
	st = h.b.holds.Stats().Pops
	if st.Parked != 2 || st.Revived != 2 || st.Woken != 0 || st.Expired != 0 || st.Held != 0 {
		t.Fatalf("holder after the change: %+v", st)
	}
	if n := looks(); n != "5" {
		t.Fatalf("%s pop looks, want 5", n)
	}
	if ri := h.b.RuntimeInfo(); ri["popHeldRevived"] != "2" || ri["popHeldTotal"] != "2" || ri["popHeldNow"] != "0" {
		t.Fatalf("runtime info: popHeldRevived %s popHeldTotal %s popHeldNow %s", ri["popHeldRevived"], ri["popHeldTotal"], ri["popHeldNow"])
	}
}

// A held pop whose connection closed is not run again: the message that
// wakes it goes to a live consumer at once instead of becoming invisible
// in an answer nobody reads.
func TestPopHeldOnClosedConnectionTakesNothing(t *testing.T) {
	h := newHarness(t, nil)
	gone := h.dial(nil)
	popTopic(t, h, gone, "T", 1, nil, nil)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
		defer cancel()
		_, _ = gone.Invoke(ctx, popCmd(popArgs{group: "G", topic: "T", queue: -1, max: 1, invisible: time.Hour, poll: 20 * time.Second}))
	}()
	wait.Equal(t, "the pop held", 1, func() int { return h.b.holds.Stats().Pops.Held })
	gone.Close()
	wait.Until(t, "the broker saw the connection close", func() bool { return h.b.RuntimeInfo()["remotingConnections"] == "0" })
	cl := h.dial(nil)
	mustSend(t, cl, sendRequest("T", 0, []byte("m"), ""))
	wait.Equal(t, "the held pop woken", 0, func() int { return h.b.holds.Stats().Pops.Held })
	ps := doPop(t, cl, popArgs{group: "G", topic: "T", queue: -1, max: 1, invisible: time.Minute})
	if len(ps) != 1 || string(ps[0].v.Body()) != "m" {
		t.Fatalf("live consumer got %v", bodies(ps))
	}
}

func TestPopBadRequests(t *testing.T) {
	h := newHarness(t, nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 2, []string{"m0"}, nil)
	ps := doPop(t, cl, popArgs{group: "G", topic: "T", queue: 0, max: 1, invisible: time.Minute})
	good := ps[0]
	edit := func(req *protocol.Command, f func(e *protocol.ExtFields)) *protocol.Command { f(&req.Ext); return req }
	okPop := func() *protocol.Command {
		return popCmd(popArgs{group: "G", topic: "T", queue: 0, max: 1, invisible: time.Minute})
	}
	tests := []struct {
		name string
		req  *protocol.Command
		code int32
	}{
		{"pop without group", edit(okPop(), func(e *protocol.ExtFields) { e.Delete("consumerGroup") }), protocol.RespSystemError},
		{"pop bad invisibleTime", edit(okPop(), func(e *protocol.ExtFields) { e.SetString("invisibleTime", "soon") }), protocol.RespSystemError},
		{"pop zero invisibleTime", edit(okPop(), func(e *protocol.ExtFields) { e.SetString("invisibleTime", "0") }), protocol.RespInvalidParameter},
		{"pop too many", edit(okPop(), func(e *protocol.ExtFields) { e.SetString("maxMsgNums", "33") }), protocol.RespInvalidParameter},
		{"pop unknown topic", edit(okPop(), func(e *protocol.ExtFields) { e.SetString("topic", "Nope") }), protocol.RespTopicNotExist},
		{"pop bad queue", edit(okPop(), func(e *protocol.ExtFields) { e.SetString("queueId", "7") }), protocol.RespSystemError},
		{"pop bad group name", edit(okPop(), func(e *protocol.ExtFields) { e.SetString("consumerGroup", "a b") }), protocol.RespSubscriptionGroupNotExist},
		{"pop bad filter", edit(okPop(), func(e *protocol.ExtFields) { e.SetString("expType", "SQL92"); e.SetString("exp", "a >") }), protocol.RespSubscriptionParseFailed},
		{"ack without offset", edit(ackRequest("G", "T", good), func(e *protocol.ExtFields) { e.Delete("offset") }), protocol.RespSystemError},
		{"ack bad handle", edit(ackRequest("G", "T", good), func(e *protocol.ExtFields) { e.SetString("extraInfo", "1 2 x") }), protocol.RespInvalidParameter},
		{"ack other queue", edit(ackRequest("G", "T", good), func(e *protocol.ExtFields) { e.SetString("queueId", "1") }), protocol.RespInvalidParameter},
		{"ack queue out of range", edit(ackRequest("G", "T", good), func(e *protocol.ExtFields) { e.SetString("queueId", "9") }), protocol.RespMessageIllegal},
		{"ack unknown topic", edit(ackRequest("G", "T", good), func(e *protocol.ExtFields) { e.SetString("topic", "Nope") }), protocol.RespTopicNotExist},
		{"ack never popped", edit(ackRequest("G", "T", good), func(e *protocol.ExtFields) { e.SetString("offset", "5") }), protocol.RespNoMessage},
		{"ack other group", ackRequest("H", "T", good), protocol.RespNoMessage},
		{"change without invisibleTime", edit(changeRequest("G", "T", good, time.Second), func(e *protocol.ExtFields) { e.Delete("invisibleTime") }), protocol.RespSystemError},
		{"change negative invisibleTime", changeRequest("G", "T", good, -time.Second), protocol.RespInvalidParameter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustCode(t, cl, tt.req, tt.code)
		})
	}
	mustCode(t, cl, ackRequest("G", "T", good), protocol.RespSuccess) // still in flight after all that
}

func TestPopShutdownAnswersHeldPops(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Core.LongPollMax = time.Hour })
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, nil, nil)
	done := make(chan *protocol.Command, 1)
	// Polling an hour: a shutdown that waited for the poll's end would
	// fail h.close's bound.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
		defer cancel()
		resp, _ := cl.Invoke(ctx, popCmd(popArgs{group: "G", topic: "T", queue: 0, max: 1, invisible: time.Second, poll: time.Hour}))
		done <- resp
	}()
	wait.Equal(t, "the pop held", 1, func() int64 { return int64(h.b.holds.Stats().Pops.Held) })
	h.close()
	select {
	case resp := <-done:
		if resp != nil && resp.Code != protocol.RespPullNotFound {
			t.Fatalf("held pop answered %d", resp.Code)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("held pop never answered")
	}
}

// popState.json goes through the core's state-file rules (popHost): a torn
// file falls back to its previous version with a WARN; when neither parses
// the broker refuses to start, naming both.
func TestPopStateFileFallsBackToPrevious(t *testing.T) {
	dir := t.TempDir()
	h := startHarness(t, testOptions(t, dir), nil)
	cl := h.dial(nil)
	popTopic(t, h, cl, "T", 1, []string{"m0", "m1"}, nil)
	ps := doPop(t, cl, popArgs{group: "G", topic: "T", queue: 0, max: 2, invisible: time.Minute})
	if err := h.b.core.Checkpoint(); err != nil { // popState.json's last-but-one write: both in flight
		t.Fatal(err)
	}
	mustCode(t, cl, ackRequest("G", "T", ps[0]), protocol.RespSuccess) // in the last write (Shutdown's) only
	cl.Close()
	h.close()

	p := filepath.Join(dir, core.ConfigDir, core.PopStateFile)
	data := readFile(t, p)
	if err := os.WriteFile(p, []byte(data[:len(data)/2]), 0o644); err != nil { // torn
		t.Fatal(err)
	}
	logs := &logCounter{}
	h2 := startHarness(t, testOptions(t, dir), func(o *Options) { o.Core.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	if n := logs.count("state file damaged; using its previous version"); n != 1 {
		t.Fatalf("%d fallback WARNs: %q", n, logs.lines)
	}
	cl2 := h2.dial(nil)
	// The previous version has m0 in flight still: its handle acks it.
	mustCode(t, cl2, ackRequest("G", "T", ps[0]), protocol.RespSuccess)
	if st := h2.b.RuntimeInfo(); st["popAcks"] != "1" || st["popInFlight"] != "1" {
		t.Fatalf("runtime info: popAcks %s popInFlight %s", st["popAcks"], st["popInFlight"])
	}
	cl2.Close()
	h2.close()

	for _, f := range []string{p, p + core.BakSuffix} {
		if err := os.WriteFile(f, []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := testOptions(t, dir)
	opts.Core.AdvertiseAddr = "127.0.0.1:1"
	b, err := New(opts)
	if err == nil {
		b.Shutdown(timeoutCtx(t))
		t.Fatal("started with both versions of popState.json damaged")
	}
	if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), p+core.BakSuffix) {
		t.Fatalf("error does not name both files: %v", err)
	}
}

func TestAppendPopInfo(t *testing.T) {
	msgs := []pop.Popped{
		{QueueID: 2, Offset: 7, Attempts: 3}, // a redelivery first
		{QueueID: 2, Offset: 9, Attempts: 1},
		{QueueID: 2, Offset: 5, Attempts: 2},
		{QueueID: 0, Offset: 4, Attempts: 1},
	}
	start, offs, counts := appendPopInfo(msgs, true)
	if got, want := string(start), "0 2 5;0 0 4"; got != want {
		t.Errorf("startOffsetInfo %q, want %q", got, want)
	}
	if got, want := string(offs), "0 2 7,9,5;0 0 4"; got != want {
		t.Errorf("msgOffsetInfo %q, want %q", got, want)
	}
	if got, want := string(counts), "0 qo2%7 2;0 qo2%9 0;0 qo2%5 1;0 qo0%4 0"; got != want {
		t.Errorf("orderCountInfo %q, want %q", got, want)
	}
	if _, _, counts := appendPopInfo(msgs, false); counts != nil {
		t.Errorf("orderCountInfo %q for an unordered pop", counts)
	}
	if s, o, c := appendPopInfo(nil, true); s != nil || o != nil || c != nil {
		t.Error("info for an empty pop")
	}

	// A priority pop: the new messages of queues 3 and 1, then the
	// redeliveries of both. Each queue is named once (the Java client
	// refuses a duplicate), its offsets in the messages' order.
	prio := []pop.Popped{
		{QueueID: 3, Offset: 10, Attempts: 1}, {QueueID: 1, Offset: 4, Attempts: 1},
		{QueueID: 3, Offset: 2, Attempts: 2}, {QueueID: 1, Offset: 0, Attempts: 3},
	}
	start, offs, _ = appendPopInfo(prio, false)
	if got, want := string(start), "0 3 2;0 1 0"; got != want {
		t.Errorf("priority pop's startOffsetInfo %q, want %q", got, want)
	}
	if got, want := string(offs), "0 3 10,2;0 1 4,0"; got != want {
		t.Errorf("priority pop's msgOffsetInfo %q, want %q", got, want)
	}
}
