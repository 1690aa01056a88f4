package pop

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// The tests run the manager against fakeHost, without a broker or a
// network. Everything time-based runs in a synctest bubble: time.Sleep
// advances the bubble's clock, so invisibility and the persister's interval
// are tested to the millisecond without waiting.

// newManager is a manager on h that logs to the test's log.
func newManager(h *fakeHost) *Manager { return New(h, Config{Logger: testlog.New(h.t, "pop")}) }

// got is what a test keeps of a popped message: its body, position,
// attempts, reconsumeTimes and the pop time its receipt handle carries.
type got struct {
	body     string
	queue    int32
	offset   int64
	attempts int32
	reconsum int32
	popTime  int64
}

func doPop(t *testing.T, m *Manager, r Request) []got {
	t.Helper()
	var res Result
	if err := m.Pop(&r, &res); err != nil {
		t.Fatalf("pop: %v", err)
	}
	var out []got
	body := res.Body
	for i, p := range res.Msgs {
		rec := res.Record(i)
		if len(body) < len(rec) || &body[0] != &rec[0] {
			t.Fatalf("record %d is not the next bytes of Body", i)
		}
		body = body[len(rec):]
		v, err := message.Decode(rec, true)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if v.QueueID() != p.QueueID || v.QueueOffset() != p.Offset {
			t.Fatalf("record %d is %d/%d, listed as %d/%d", i, v.QueueID(), v.QueueOffset(), p.QueueID, p.Offset)
		}
		out = append(out, got{body: string(v.Body()), queue: p.QueueID, offset: p.Offset, attempts: p.Attempts,
			reconsum: v.ReconsumeTimes(), popTime: res.PopTime})
	}
	if len(body) != 0 {
		t.Fatalf("%d bytes of Body belong to no message", len(body))
	}
	return out
}

func bodiesOf(gs []got) string {
	var s []string
	for _, g := range gs {
		s = append(s, g.body)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func ack(m *Manager, g got) error { return m.Ack("G", "T", g.queue, g.offset, g.popTime) }

func req(queue int32, max int, invisible time.Duration) Request {
	return Request{Group: "G", Topic: "T", QueueID: queue, Queues: 1, Max: max, Invisible: invisible,
		FromFirst: true, RetryMax: 16}
}

func TestInvisibleUntilTheirTimeThenRedelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 3)
		m := newManager(h)
		r := req(0, 10, 30*time.Second)

		first := doPop(t, m, r)
		if bodiesOf(first) != "[m0 m1 m2]" {
			t.Fatalf("first pop: %s", bodiesOf(first))
		}
		for _, g := range first {
			if g.attempts != 1 || g.reconsum != 0 || g.popTime != time.Now().UnixMilli() {
				t.Fatalf("first delivery: %+v", g)
			}
		}
		time.Sleep(30*time.Second - time.Millisecond)
		if again := doPop(t, m, r); len(again) != 0 {
			t.Fatalf("popped again 1 ms before the invisible time passed: %s", bodiesOf(again))
		}
		time.Sleep(time.Millisecond)
		second := doPop(t, m, r)
		if bodiesOf(second) != "[m0 m1 m2]" {
			t.Fatalf("redelivery: %s", bodiesOf(second))
		}
		for _, g := range second {
			if g.attempts != 2 || g.reconsum != 1 || g.popTime != first[0].popTime+30000 {
				t.Fatalf("redelivery: %+v", g)
			}
		}
		st := m.Stats()
		if st.Pops != 3 || st.Popped != 6 || st.Redelivered != 3 || st.InFlight != 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestAckAndReceiptHandles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 3)
		m := newManager(h)
		r := req(0, 10, time.Second)
		first := doPop(t, m, r)
		if err := ack(m, first[0]); err != nil {
			t.Fatal(err)
		}
		if err := ack(m, first[0]); err != nil {
			t.Fatalf("second ack of a done message: %v", err)
		}
		if got := h.committed("G", "T", 0); got != 1 {
			t.Fatalf("committed %d after the ack of offset 0, want 1", got)
		}
		time.Sleep(time.Second)
		second := doPop(t, m, r)
		if bodiesOf(second) != "[m1 m2]" {
			t.Fatalf("after the ack of m0: %s", bodiesOf(second))
		}
		if err := ack(m, first[1]); !errors.Is(err, ErrStaleHandle) {
			t.Fatalf("ack with the first delivery's handle: %v, want ErrStaleHandle", err)
		}
		if err := m.Ack("G", "T", 0, 7, second[0].popTime); !errors.Is(err, ErrNotInFlight) {
			t.Fatalf("ack of an offset never popped: %v", err)
		}
		if err := m.Ack("H", "T", 0, 1, second[0].popTime); !errors.Is(err, ErrNotInFlight) {
			t.Fatalf("ack by another group: %v", err)
		}
		for _, g := range second {
			if err := ack(m, g); err != nil {
				t.Fatal(err)
			}
		}
		if got := h.committed("G", "T", 0); got != 3 {
			t.Fatalf("committed %d, want 3", got)
		}
		time.Sleep(time.Hour)
		if again := doPop(t, m, r); len(again) != 0 {
			t.Fatalf("acked messages popped again: %s", bodiesOf(again))
		}
		if st := m.Stats(); st.Acks != 3 || st.StaleHandles != 1 || st.InFlight != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestCommittedOffsetIsTheLowestNotDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 4)
		m := newManager(h)
		ps := doPop(t, m, req(0, 10, time.Minute))
		for _, i := range []int{3, 1, 2} {
			if err := ack(m, ps[i]); err != nil {
				t.Fatal(err)
			}
			if got := h.committed("G", "T", 0); got != 0 {
				t.Fatalf("committed %d while offset 0 is in flight", got)
			}
		}
		if err := ack(m, ps[0]); err != nil {
			t.Fatal(err)
		}
		if got := h.committed("G", "T", 0); got != 4 {
			t.Fatalf("committed %d, want 4", got)
		}
	})
}

func TestChangeInvisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 1)
		m := newManager(h)
		r := req(0, 1, 10*time.Second)
		ps := doPop(t, m, r)
		p := ps[0]

		// In the same millisecond as the pop: the new pop time is the old + 1.
		pt, err := m.ChangeInvisible("G", "T", 0, p.offset, p.popTime, time.Minute)
		if err != nil || pt != p.popTime+1 {
			t.Fatalf("change: pop time %d %v, want %d", pt, err, p.popTime+1)
		}
		if err := ack(m, p); !errors.Is(err, ErrStaleHandle) {
			t.Fatalf("ack with the handle before the change: %v", err)
		}
		time.Sleep(30 * time.Second)
		// Now: the new pop time is now, and the message invisible for 5 s from now.
		pt2, err := m.ChangeInvisible("G", "T", 0, p.offset, pt, 5*time.Second)
		if err != nil || pt2 != time.Now().UnixMilli() {
			t.Fatalf("second change: %d %v, want now %d", pt2, err, time.Now().UnixMilli())
		}
		time.Sleep(5*time.Second - time.Millisecond)
		if again := doPop(t, m, r); len(again) != 0 {
			t.Fatal("visible before the changed invisible time passed")
		}
		time.Sleep(time.Millisecond)
		again := doPop(t, m, r)
		if len(again) != 1 || again[0].attempts != 2 {
			t.Fatalf("after the changed time: %+v", again)
		}
		if _, err := m.ChangeInvisible("G", "T", 0, p.offset, pt2, time.Minute); !errors.Is(err, ErrStaleHandle) {
			t.Fatalf("change with the handle of the previous delivery: %v", err)
		}
		if err := ack(m, again[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ChangeInvisible("G", "T", 0, p.offset, again[0].popTime, time.Minute); !errors.Is(err, ErrAcked) {
			t.Fatalf("change of an acked message: %v", err)
		}
		if _, err := m.ChangeInvisible("G", "T", 0, 5, again[0].popTime, time.Minute); !errors.Is(err, ErrNotInFlight) {
			t.Fatalf("change of an offset never popped: %v", err)
		}
		for _, d := range []time.Duration{0, time.Microsecond, -time.Second, MaxInvisible + time.Millisecond} {
			if _, err := m.ChangeInvisible("G", "T", 0, p.offset, again[0].popTime, d); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("change to %v: %v", d, err)
			}
		}
		if st := m.Stats(); st.Changes != 2 || st.StaleHandles != 2 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestDeadLetterAfterTheLastRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.send("T", 0, "poison", message.PropKeys, "k1")
		h.send("T", 0, "next")
		m := newManager(h)
		r := req(0, 1, time.Second)
		r.RetryMax = 2
		for i := range 3 { // 1 + RetryMax deliveries
			ps := doPop(t, m, r)
			if len(ps) != 1 || ps[0].body != "poison" || ps[0].reconsum != int32(i) {
				t.Fatalf("delivery %d: %+v", i, ps)
			}
			time.Sleep(time.Second)
		}
		// The fourth time the poison message is dead-lettered, and the pop
		// goes on with the next message.
		ps := doPop(t, m, r)
		if bodiesOf(ps) != "[next]" {
			t.Fatalf("after the retries ran out: %s", bodiesOf(ps))
		}
		if len(h.puts) != 1 {
			t.Fatalf("%d dead letters put", len(h.puts))
		}
		d := h.puts[0]
		props := message.ParseProperties(d.Properties)
		if d.Topic != "%DLQ%G" || d.QueueID != 0 || string(d.Body) != "poison" || !d.NoWait || d.ReconsumeTimes != 0 ||
			d.BornHost != testHost || d.BornTimestamp != 1 {
			t.Fatalf("dead letter %+v", d)
		}
		wantID := string(message.AppendOffsetMsgID(nil, testHost, 1000))
		if props[message.PropRetryTopic] != "T" || props[message.PropOriginMessageID] != wantID || props[message.PropKeys] != "k1" {
			t.Fatalf("dead letter's properties %v (origin id want %s)", props, wantID)
		}
		if got := h.committed("G", "T", 0); got != 1 {
			t.Fatalf("committed %d: the dead letter is done for the group", got)
		}
		if err := m.Ack("G", "T", 0, 0, ps[0].popTime); err != nil {
			t.Fatalf("ack of the dead-lettered message: %v, want nil (done)", err)
		}
		if st := m.Stats(); st.DeadLetters != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestDeadLetterFailureStillEndsTheMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(h *fakeHost)
	}{
		{"no dead-letter topic", func(h *fakeHost) { h.dlqErr = errors.New("topic table full") }},
		{"put fails", func(h *fakeHost) { h.putErr = errors.New("disk full") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newFakeHost(t)
				h.sendN("T", 0, 1)
				tc.set(h)
				m := newManager(h)
				r := req(0, 1, time.Second)
				r.RetryMax = 0
				doPop(t, m, r)
				time.Sleep(time.Second)
				if ps := doPop(t, m, r); len(ps) != 0 {
					t.Fatalf("delivered after the retries ran out: %+v", ps)
				}
				if st := m.Stats(); st.DeadLetters != 0 || st.InFlight != 0 || len(h.puts) != 0 {
					t.Fatalf("stats %+v, %d puts", st, len(h.puts))
				}
			})
		})
	}
}

func TestOrderlyPopBatchesAGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.send("T", 0, "A1", message.PropShardingKey, "A")
		h.send("T", 0, "B1", message.PropJavaShardingKey, "B")
		h.send("T", 0, "A2", message.PropShardingKey, "A")
		h.send("T", 0, "A3", message.PropShardingKey, "A")
		h.send("T", 0, "B2", message.PropJavaShardingKey, "B")
		h.send("T", 0, "free")
		m := newManager(h)
		r := req(-1, 3, 5*time.Second)
		r.Orderly = true
		// Consecutive messages of a group come in one answer, in order.
		ps := doPop(t, m, r)
		if bodiesOf(ps) != "[A1 B1 A2]" {
			t.Fatalf("first orderly pop: %s", bodiesOf(ps))
		}
		// A and B are in flight: their next messages wait; the message
		// without a group does not.
		again := doPop(t, m, r)
		if bodiesOf(again) != "[free]" {
			t.Fatalf("second orderly pop: %s", bodiesOf(again))
		}
		if err := ack(m, again[0]); err != nil {
			t.Fatal(err)
		}
		// Not acked in time: the batch comes again, before A3 and B2 (the
		// answer is full: they wait).
		time.Sleep(5 * time.Second)
		re := doPop(t, m, r)
		if bodiesOf(re) != "[A1 B1 A2]" || re[0].attempts != 2 || re[0].reconsum != 1 || re[2].attempts != 2 {
			t.Fatalf("orderly redelivery: %+v", re)
		}
		for _, g := range []got{re[0], re[2]} {
			if err := ack(m, g); err != nil {
				t.Fatal(err)
			}
		}
		// A is done up to A2: A3 comes; B1 is still in flight: B2 waits.
		if a3 := doPop(t, m, r); bodiesOf(a3) != "[A3]" || a3[0].attempts != 1 {
			t.Fatalf("after the acks of A1 and A2: %+v", a3)
		}
		// B1 comes again with B2 behind it in the same answer (and A3,
		// not acked either).
		time.Sleep(5 * time.Second)
		if b := doPop(t, m, r); bodiesOf(b) != "[B1 A3 B2]" || b[0].attempts != 3 || b[1].attempts != 2 || b[2].attempts != 1 {
			t.Fatalf("B1's redelivery with B2: %+v", b)
		}
		// A group popping without order gets everything at once.
		all := doPop(t, m, Request{Group: "H", Topic: "T", QueueID: -1, Queues: 1, Max: 10, Invisible: time.Second, FromFirst: true})
		if len(all) != 6 {
			t.Fatalf("unordered pop: %s", bodiesOf(all))
		}
	})
}

func TestFilterRejectedMessagesAreDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		for i, tag := range []string{"a", "b", "a", "b", "b"} {
			h.send("T", 0, fmt.Sprintf("%s%d", tag, i), message.PropTags, tag)
		}
		m := newManager(h)
		r := req(0, 10, time.Second)
		r.Filter = &tagFilter{tags: []string{"a"}}
		ps := doPop(t, m, r)
		if bodiesOf(ps) != "[a0 a2]" {
			t.Fatalf("filtered pop: %s", bodiesOf(ps))
		}
		for _, p := range ps {
			if err := ack(m, p); err != nil {
				t.Fatal(err)
			}
		}
		if got := h.committed("G", "T", 0); got != 5 {
			t.Fatalf("committed %d: rejected messages are done for the group", got)
		}
		// Nothing but rejected messages: the group moves past them.
		h.send("T", 0, "b5", message.PropTags, "b")
		if ps := doPop(t, m, r); len(ps) != 0 {
			t.Fatalf("popped %s", bodiesOf(ps))
		}
		if got := h.committed("G", "T", 0); got != 6 {
			t.Fatalf("committed %d after a pop that found only rejected messages", got)
		}
	})
}

func TestRetentionForgetsRemovedMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 4)
		m := newManager(h)
		r := req(0, 2, time.Second)
		ps := doPop(t, m, r) // m0, m1 in flight
		if bodiesOf(ps) != "[m0 m1]" {
			t.Fatal(bodiesOf(ps))
		}
		h.retain("T", 0, 3) // m0..m2 removed
		time.Sleep(time.Second)
		ps = doPop(t, m, r)
		if bodiesOf(ps) != "[m3]" {
			t.Fatalf("after retention: %s", bodiesOf(ps))
		}
		if st := m.Stats(); st.InFlight != 1 {
			t.Fatalf("stats %+v: removed messages still in flight", st)
		}
	})
}

func TestNewGroupStartsAtFirstLastOrCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 5)
		m := newManager(h)
		r := req(0, 10, time.Second)
		if ps := doPop(t, m, r); bodiesOf(ps) != "[m0 m1 m2 m3 m4]" {
			t.Fatalf("from first: %s", bodiesOf(ps))
		}
		r.Group, r.FromFirst = "Last", false
		if ps := doPop(t, m, r); bodiesOf(ps) != "[m4]" {
			t.Fatalf("from last: %s", bodiesOf(ps))
		}
		h.CommitOffset("Pushed", "T", 0, 3)
		r.Group, r.FromFirst = "Pushed", true
		if ps := doPop(t, m, r); bodiesOf(ps) != "[m3 m4]" {
			t.Fatalf("from the committed offset: %s", bodiesOf(ps))
		}
		r.Group, r.FromFirst = "Empty", false
		r.Topic = "Nothing"
		if ps := doPop(t, m, r); len(ps) != 0 {
			t.Fatalf("empty queue: %s", bodiesOf(ps))
		}
	})
}

func TestEveryQueueRoundRobinAndRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		for q := range int32(3) {
			h.sendN("T", q, 4)
		}
		m := newManager(h)
		r := req(-1, 6, time.Minute)
		r.Queues = 3
		var res Result
		if err := m.Pop(&r, &res); err != nil {
			t.Fatal(err)
		}
		// The first pop starts at queue 1 (the round-robin counter is 1).
		var where []string
		for _, p := range res.Msgs {
			where = append(where, fmt.Sprintf("%d/%d", p.QueueID, p.Offset))
		}
		if got := strings.Join(where, " "); got != "1/0 1/1 1/2 1/3 2/0 2/1" {
			t.Fatalf("popped %s", got)
		}
		if res.Rest != 6 { // 2 of queue 2, 4 of queue 0
			t.Fatalf("rest %d, want 6", res.Rest)
		}
		if err := m.Pop(&r, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Msgs) != 6 || res.Msgs[0].QueueID != 2 || res.Rest != 0 {
			t.Fatalf("second pop: %+v rest %d", res.Msgs, res.Rest)
		}
	})
}

func TestQueueAtMaxInflightHandsOutOnlyRedeliveries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, MaxInflight+5)
		m := newManager(h)
		r := req(0, MaxMessages, time.Minute)
		n := 0
		for n < MaxInflight {
			ps := doPop(t, m, r)
			if len(ps) == 0 {
				t.Fatalf("stopped at %d in flight", n)
			}
			n += len(ps)
		}
		if n != MaxInflight {
			t.Fatalf("%d in flight", n)
		}
		if ps := doPop(t, m, r); len(ps) != 0 {
			t.Fatalf("a queue at the limit handed out %d new messages", len(ps))
		}
		time.Sleep(time.Minute)
		ps := doPop(t, m, r)
		if len(ps) != MaxMessages || ps[0].offset != 0 || ps[0].attempts != 2 {
			t.Fatalf("redeliveries at the limit: %d, first %+v", len(ps), ps[0])
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	m := newManager(newFakeHost(t))
	for _, r := range []Request{
		{Group: "G", Topic: "T", Max: 0, Invisible: time.Second},
		{Group: "G", Topic: "T", Max: MaxMessages + 1, Invisible: time.Second},
		{Group: "G", Topic: "T", Max: 1, Invisible: 0},
		{Group: "G", Topic: "T", Max: 1, Invisible: MaxInvisible + time.Millisecond},
		{Group: "G", Topic: "T", QueueID: -1, Queues: 0, Max: 1, Invisible: time.Second},
		{Group: "G", Topic: "T", QueueID: -2, Queues: 1, Max: 1, Invisible: time.Second},
	} {
		var res Result
		if err := m.Pop(&r, &res); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("pop %+v: %v, want ErrInvalidArgument", r, err)
		}
	}
	if st := m.Stats(); st.Pops != 0 {
		t.Fatalf("refused pops counted: %+v", st)
	}
}

func TestStateSurvivesARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 4)
		m := newManager(h)
		if err := m.Load(); err != nil {
			t.Fatal(err)
		}
		m.Start()
		ps := doPop(t, m, req(0, 3, 90*time.Second))
		if err := ack(m, ps[0]); err != nil {
			t.Fatal(err)
		}
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)

		m2 := newManager(h)
		if err := m2.Load(); err != nil {
			t.Fatal(err)
		}
		r := req(0, 10, 90*time.Second)
		if got := bodiesOf(doPop(t, m2, r)); got != "[m3]" {
			t.Fatalf("after the restart: %s (in-flight messages stay invisible, acked ones are done)", got)
		}
		if err := ack(m2, ps[2]); err != nil {
			t.Fatalf("a handle issued before the restart: %v", err)
		}
		time.Sleep(30 * time.Second)
		re := doPop(t, m2, r)
		if bodiesOf(re) != "[m1]" || re[0].attempts != 2 {
			t.Fatalf("redelivery after the restart: %+v", re)
		}
		if err := ack(m2, ps[1]); !errors.Is(err, ErrStaleHandle) {
			t.Fatalf("a handle from before the restart of a message popped since: %v", err)
		}
		if err := m2.Stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLoadSkipsWhatIsOutOfBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 3)
		h.state = []byte(`{"queues":[
			{"group":"","topic":"T","queueId":0,"next":3},
			{"group":"G","topic":"","queueId":0,"next":3},
			{"group":"G","topic":"T","queueId":65536,"next":3},
			{"group":"G","topic":"T","queueId":-1,"next":3},
			{"group":"G","topic":"T","queueId":0,"next":2,"inflight":{
				"1":{"visibleAt":1,"popTime":5,"attempts":1},
				"2":{"visibleAt":1,"popTime":5,"attempts":1},
				"x":{"visibleAt":1,"popTime":5,"attempts":1},
				"-1":{"visibleAt":1,"popTime":5,"attempts":1}}}]}`)
		m := newManager(h)
		if err := m.Load(); err != nil {
			t.Fatal(err)
		}
		if st := m.Stats(); st.InFlight != 1 {
			t.Fatalf("%d in flight, want 1 (offset 1)", st.InFlight)
		}
		// Offset 1 is visible (visibleAt 1 ms after the epoch), then offset 2 is new.
		ps := doPop(t, m, req(0, 10, time.Second))
		if bodiesOf(ps) != "[m1 m2]" || ps[0].attempts != 2 || ps[1].attempts != 1 {
			t.Fatalf("after load: %+v", ps)
		}
	})
}

func TestLoadFallsBackAndFails(t *testing.T) {
	h := newFakeHost(t)
	h.sendN("T", 0, 2)
	h.state = []byte(`{"queues":[`) // torn
	h.bakState = []byte(`{"queues":[{"group":"G","topic":"T","queueId":0,"next":1}]}`)
	m := newManager(h)
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	if ps := doPop(t, m, req(0, 10, time.Second)); bodiesOf(ps) != "[m1]" {
		t.Fatalf("from the previous version: %s", bodiesOf(ps))
	}

	h.bakState = []byte(`[]`)
	if err := newManager(h).Load(); err == nil {
		t.Fatal("loaded a state whose versions both fail to parse")
	}
	h.loadErr = errors.New("permission denied")
	if err := newManager(h).Load(); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("load error %v", err)
	}
}

func TestPersisterWritesChangesEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 2)
		m := New(h, Config{FlushInterval: 500 * time.Millisecond, Logger: testlog.New(t, "pop")})
		m.Start()
		m.Start() // idempotent
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := h.stateWrites(); n != 0 {
			t.Fatalf("%d writes without a change", n)
		}
		ps := doPop(t, m, req(0, 1, time.Minute))
		time.Sleep(499 * time.Millisecond)
		synctest.Wait()
		if n := h.stateWrites(); n != 0 {
			t.Fatalf("written %d times before the interval", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := h.stateWrites(); n != 1 {
			t.Fatalf("%d writes after the interval, want 1", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := h.stateWrites(); n != 1 {
			t.Fatalf("%d writes, want 1: nothing changed since", n)
		}
		if err := ack(m, ps[0]); err != nil {
			t.Fatal(err)
		}
		// A failed write is retried at the next tick.
		h.mu.Lock()
		h.writeErr = errors.New("disk full")
		h.mu.Unlock()
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		h.mu.Lock()
		h.writeErr = nil
		h.mu.Unlock()
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if n := h.stateWrites(); n != 2 {
			t.Fatalf("%d writes, want 2 (the failed one retried)", n)
		}
		doPop(t, m, req(0, 1, time.Minute))
		if err := m.Stop(); err != nil { // the last change, written by Stop
			t.Fatal(err)
		}
		if n := h.stateWrites(); n != 3 {
			t.Fatalf("%d writes after Stop, want 3", n)
		}
		m.Start() // after Stop: nothing
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		if n := h.stateWrites(); n != 3 {
			t.Fatalf("%d writes after a second Stop without a change", n)
		}
		if err := m.Persist(true); err != nil || h.stateWrites() != 4 {
			t.Fatalf("forced persist: %v, %d writes", err, h.stateWrites())
		}
		// The bubble ends only when every goroutine has: Stop waited for the persister.
	})
}

func TestPersistError(t *testing.T) {
	h := newFakeHost(t)
	h.sendN("T", 0, 1)
	m := newManager(h)
	doPop(t, m, req(0, 1, time.Minute))
	h.writeErr = errors.New("disk full")
	if err := m.Stop(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("stop: %v", err)
	}
	h.writeErr = nil
	if err := m.Persist(false); err != nil || h.stateWrites() != 1 {
		t.Fatalf("the change was not kept for the next write: %v, %d writes", err, h.stateWrites())
	}
}

func TestReadErrorEndsThePop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 2)
		m := newManager(h)
		r := req(0, 1, time.Second)
		doPop(t, m, r)
		h.mu.Lock()
		h.readErr = store.ErrClosed
		h.mu.Unlock()
		time.Sleep(time.Second)
		if ps := doPop(t, m, r); len(ps) != 0 {
			t.Fatalf("popped %+v from a failing store", ps)
		}
	})
}

// TestConcurrentConsumers: several consumers of one group share a queue;
// with invisible times longer than the test, each message is delivered
// exactly once. Run with -race.
func TestConcurrentConsumers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		const n = 500
		h.sendN("T", 0, n/2)
		m := newManager(h)
		m.Start()
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					ps := doPop(t, m, req(0, 7, time.Hour))
					mu.Lock()
					for _, p := range ps {
						seen[p.offset]++
					}
					done := len(seen) == n
					mu.Unlock()
					for _, p := range ps {
						if err := ack(m, p); err != nil {
							t.Error(err)
						}
					}
					if done {
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		for i := n / 2; i < n; i++ {
			h.send("T", 0, fmt.Sprintf("m%d", i))
		}
		wg.Wait()
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		offs := make([]int64, 0, len(seen))
		for off, k := range seen {
			if k != 1 {
				t.Fatalf("offset %d delivered %d times", off, k)
			}
			offs = append(offs, off)
		}
		slices.Sort(offs)
		if len(offs) != n || offs[n-1] != n-1 {
			t.Fatalf("%d distinct offsets", len(offs))
		}
		if got := h.committed("G", "T", 0); got != n {
			t.Fatalf("committed %d", got)
		}
	})
}

// visibleEvent is one OnVisible report.
type visibleEvent struct {
	group, topic string
	queue        int32
	at           int64
}

// A pop that finds nothing tells when the first of the group's invisible
// messages becomes visible again (Result.NextVisible), and OnVisible's
// listeners hear of what moves that time or frees messages sooner: a
// changed invisible time, an ack that unblocks a FIFO message group, an
// ack in a queue at MaxInflight. Other acks and pops report nothing.
func TestNextVisibleAndVisibleEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.send("T", 0, "m0")
		h.send("T", 0, "m1")
		m := newManager(h)
		var events []visibleEvent
		m.OnVisible(func(group, topic string, queue int32, at int64) {
			events = append(events, visibleEvent{group, topic, queue, at})
		})
		var res Result
		r := req(0, 1, 5*time.Second)
		start := time.Now().UnixMilli()
		ps := doPop(t, m, r)
		time.Sleep(time.Second)
		ps = append(ps, doPop(t, m, r)...)
		if bodiesOf(ps) != "[m0 m1]" {
			t.Fatalf("pops: %s", bodiesOf(ps))
		}
		if err := m.Pop(&r, &res); err != nil || len(res.Msgs) != 0 || res.NextVisible != start+5000 {
			t.Fatalf("empty pop: err %v, %d messages, NextVisible %+d ms", err, len(res.Msgs), res.NextVisible-start)
		}
		if len(events) != 0 {
			t.Fatalf("pops reported %+v", events)
		}
		// m0's invisible time moved to 1 s from now: reported, and the
		// next empty pop names it.
		now := time.Now().UnixMilli()
		pt, err := m.ChangeInvisible("G", "T", 0, ps[0].offset, ps[0].popTime, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if want := (visibleEvent{"G", "T", 0, now + 1000}); len(events) != 1 || events[0] != want {
			t.Fatalf("events %+v, want %+v", events, want)
		}
		if err := m.Pop(&r, &res); err != nil || len(res.Msgs) != 0 || res.NextVisible != now+1000 {
			t.Fatalf("empty pop after the change: %d messages, NextVisible %+d ms", len(res.Msgs), res.NextVisible-now)
		}
		// An ordinary ack reports nothing; a pop that finds messages sets
		// no NextVisible.
		if err := m.Ack("G", "T", 0, ps[0].offset, pt); err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 {
			t.Fatalf("the ack reported %+v", events[1:])
		}
		time.Sleep(5 * time.Second)
		if err := m.Pop(&r, &res); err != nil || len(res.Msgs) != 1 || res.NextVisible != 0 {
			t.Fatalf("redelivery of m1: %d messages, NextVisible %d", len(res.Msgs), res.NextVisible)
		}
		if err := m.Pop(&r, &res); err != nil || len(res.Msgs) != 0 || res.NextVisible != time.Now().UnixMilli()+5000 {
			t.Fatalf("empty pop: NextVisible %+d ms", res.NextVisible-time.Now().UnixMilli())
		}

		// FIFO: the ack of A1 unblocks A2 (reported now); the ack of B1,
		// with nothing waiting behind it, reports nothing.
		events = nil
		h.send("T", 1, "A1", message.PropShardingKey, "A")
		h.send("T", 1, "B1", message.PropShardingKey, "B")
		h.send("T", 1, "A2", message.PropShardingKey, "A")
		o := req(1, 2, time.Minute)
		o.Orderly = true
		fifo := doPop(t, m, o)
		if bodiesOf(fifo) != "[A1 B1]" {
			t.Fatalf("orderly pop: %s", bodiesOf(fifo))
		}
		if err := m.Pop(&o, &res); err != nil || len(res.Msgs) != 0 || res.NextVisible != time.Now().UnixMilli()+60000 {
			t.Fatalf("blocked orderly pop: %d messages, NextVisible %d", len(res.Msgs), res.NextVisible)
		}
		if err := ack(m, fifo[1]); err != nil {
			t.Fatal(err)
		}
		if len(events) != 0 {
			t.Fatalf("the ack of B1 reported %+v", events)
		}
		if err := ack(m, fifo[0]); err != nil {
			t.Fatal(err)
		}
		if want := (visibleEvent{"G", "T", 1, time.Now().UnixMilli()}); len(events) != 1 || events[0] != want {
			t.Fatalf("the ack of A1: events %+v, want %+v", events, want)
		}

		// A queue at MaxInflight: an ack makes room, reported now.
		events = nil
		h.sendN("T", 2, MaxInflight+1)
		full := req(2, MaxMessages, time.Minute)
		var first []got
		for len(first) < MaxInflight {
			first = append(first, doPop(t, m, full)...)
		}
		if err := ack(m, first[0]); err != nil {
			t.Fatal(err)
		}
		if want := (visibleEvent{"G", "T", 2, time.Now().UnixMilli()}); len(events) != 1 || events[0] != want {
			t.Fatalf("the ack in a full queue: events %+v, want %+v", events, want)
		}
	})
}
