package pop

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/message"
)

func peekBodies(t *testing.T, m *Manager, queue int32, limit int) (string, int64) {
	t.Helper()
	var res Result
	if err := m.Peek("G", "T", queue, 1, limit, &res); err != nil {
		t.Fatal(err)
	}
	var out []got
	for i := range res.Msgs {
		v, err := message.Decode(res.Record(i), false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got{body: string(v.Body())})
	}
	return bodiesOf(out), res.Rest
}

func TestPeekChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		h.sendN("T", 0, 4)
		m := newManager(h)
		// A group the manager does not know: from the queue's first message.
		if b, rest := peekBodies(t, m, 0, 3); b != "[m0 m1 m2]" || rest != 4 {
			t.Fatalf("peek of a new group: %s, rest %d", b, rest)
		}
		if b, _ := peekBodies(t, m, -1, 32); b != "[m0 m1 m2 m3]" {
			t.Fatalf("peek of every queue: %s", b)
		}
		if st := m.Stats(); st.Pops != 0 || st.InFlight != 0 {
			t.Fatalf("peek changed the state: %+v", st)
		}
		// Peeking twice sees the same; a pop then gets the same messages.
		ps := doPop(t, m, req(0, 2, time.Second))
		if bodiesOf(ps) != "[m0 m1]" {
			t.Fatalf("pop after peeks: %s", bodiesOf(ps))
		}
		// In flight: not peeked; once visible again, peeked first.
		if b, rest := peekBodies(t, m, 0, 32); b != "[m2 m3]" || rest != 2 {
			t.Fatalf("peek with two in flight: %s, rest %d", b, rest)
		}
		time.Sleep(time.Second)
		if b, _ := peekBodies(t, m, 0, 32); b != "[m0 m1 m2 m3]" {
			t.Fatalf("peek with two visible again: %s", b)
		}
		var res Result
		if err := m.Peek("G", "T", 0, 1, 0, &res); err == nil {
			t.Fatal("peek of 0 messages accepted")
		}
	})
}

func TestHasMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t)
		m := newManager(h)
		if has, nv := m.HasMessage("G", "T", -1, 1, false); has || nv != 0 {
			t.Fatalf("empty topic: %v %d", has, nv)
		}
		h.send("T", 0, "A1", message.PropShardingKey, "A")
		h.send("T", 0, "A2", message.PropShardingKey, "A")
		if has, _ := m.HasMessage("G", "T", 0, 1, true); !has {
			t.Fatal("a new message not seen")
		}
		r := req(0, 1, time.Minute)
		r.Orderly = true
		doPop(t, m, r) // A1 in flight: A2 is held back for an orderly pop, not for another
		has, nv := m.HasMessage("G", "T", 0, 1, true)
		if has || nv != time.Now().UnixMilli()+60000 {
			t.Fatalf("orderly, group blocked: %v, next visible in %d ms", has, nv-time.Now().UnixMilli())
		}
		if has, _ := m.HasMessage("G", "T", 0, 1, false); !has {
			t.Fatal("unordered: A2 not seen")
		}
		h.send("T", 0, "B1", message.PropShardingKey, "B")
		if has, _ := m.HasMessage("G", "T", -1, 1, true); !has {
			t.Fatal("orderly: B1 of a free group not seen")
		}
		time.Sleep(time.Minute)
		doPop(t, m, req(0, 32, time.Minute)) // everything in flight
		if has, _ := m.HasMessage("G", "T", 0, 1, false); has {
			t.Fatal("everything in flight, yet a message seen")
		}
		time.Sleep(time.Minute)
		if has, _ := m.HasMessage("G", "T", 0, 1, false); !has {
			t.Fatal("a redelivery not seen")
		}
	})
}
