package lite

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// Pop reads outside the registry's lock: what happens while it reads
// (docs/lite-topics.md, "Receive: reads outside the lock").

// during returns a ReadFunc that runs fn once, at its first call, while
// Pop holds no lock, then reads what the fake host holds.
func during(h *fakeHost, fn func()) ReadFunc {
	var once sync.Once
	read := h.reader("P")
	return func(l string, off int64, max int) (int64, int, error) {
		once.Do(fn)
		return read(l, off, max)
	}
}

// liteSetup subscribes c1 (and the other ids) of shared to L1 and sends n.
func liteSetup(t *testing.T, n int64, ids ...string) (*Registry, *fakeHost, time.Time) {
	t.Helper()
	h := newFakeHost()
	r := New(h, Options{})
	now := time.UnixMilli(1_000_000)
	for _, id := range append([]string{"c1"}, ids...) {
		if err := r.Sync(id, shared, PartialAdd, []string{"L1"}, OffsetOption{}, now); err != nil {
			t.Fatal(err)
		}
	}
	h.send(r, "P", "L1", n)
	return r, h, now
}

func TestPopReadsWithoutTheLock(t *testing.T) {
	r, h, now := liteSetup(t, 2)
	var seen Stats
	bs, _, _, err := r.Pop("c1", 32, time.Second, now, during(h, func() { seen = r.Stats() }))
	if err != nil || len(bs) != 1 || bs[0].N != 2 {
		t.Fatalf("pop: %+v %v", bs, err)
	}
	if seen.Clients != 1 {
		t.Fatalf("stats taken during the read: %+v", seen)
	}
}

// An ack of the delivery being delivered again lands while the new
// delivery reads: the read is dropped and the lite topic read again from
// the acked offset.
func TestPopRaceAck(t *testing.T) {
	r, h, now := liteSetup(t, 2)
	first := pop(t, r, h, "c1", 32, now)
	if len(first) != 1 {
		t.Fatalf("first: %+v", first)
	}
	h.send(r, "P", "L1", 1) // offset 2, behind the batch in flight
	later := now.Add(2 * time.Second)
	bs, _, _, err := r.Pop("c1", 32, time.Second, later, during(h, func() {
		for o := int64(0); o < 2; o++ {
			if err := r.Ack("G", "P", "L1", o, now.UnixMilli()); err != nil {
				t.Errorf("ack %d: %v", o, err)
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Offset != 2 || bs[0].N != 1 || bs[0].Attempts != 1 || bs[0].Read != 1 {
		t.Fatalf("after the racing ack: %+v (want offset 2, one message, first attempt, the second read)", bs)
	}
	if off, _ := h.Offset("G", "P", "L1"); off != 2 {
		t.Fatalf("offset %d", off)
	}
	// The acked delivery's handles are committed; the new one holds 2.
	if err := r.Ack("G", "P", "L1", 2, later.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.InFlight != 0 {
		t.Fatalf("in flight after all acks: %+v", s)
	}
}

// A change of invisibility of the delivery being delivered again lands
// while it reads: the batch stays invisible with its pop time, and the
// read is not delivered.
func TestPopRaceChangeInvisible(t *testing.T) {
	r, h, now := liteSetup(t, 2)
	pop(t, r, h, "c1", 32, now)
	later := now.Add(2 * time.Second)
	bs, _, next, err := r.Pop("c1", 32, time.Second, later, during(h, func() {
		if err := r.ChangeInvisible("G", "P", "L1", 0, now.UnixMilli(), 10*time.Second, false, later); err != nil {
			t.Errorf("change: %v", err)
		}
	}))
	if err != nil || len(bs) != 0 {
		t.Fatalf("delivered through a change of invisibility: %+v %v", bs, err)
	}
	if want := later.Add(10 * time.Second); !next.Equal(want) {
		t.Fatalf("next visible %v, want %v", next, want)
	}
	if !r.InFlight("G", "L1", 1, now.UnixMilli()) {
		t.Fatal("the changed delivery is no longer in flight")
	}
	if err := r.Ack("G", "P", "L1", 0, now.UnixMilli()); err != nil {
		t.Fatalf("ack of the changed delivery: %v", err)
	}
}

// The client unsubscribes from the lite topic while its receive reads it.
func TestPopRaceUnsubscribe(t *testing.T) {
	r, h, now := liteSetup(t, 2)
	bs, _, _, err := r.Pop("c1", 32, time.Second, now, during(h, func() {
		if err := r.Sync("c1", shared, PartialRemove, []string{"L1"}, OffsetOption{}, now); err != nil {
			t.Errorf("sync: %v", err)
		}
	}))
	if err != nil || len(bs) != 0 {
		t.Fatalf("delivered after the unsubscription: %+v %v", bs, err)
	}
	if s := r.Stats(); s.InFlight != 0 || s.Subscriptions != 0 {
		t.Fatalf("stats: %+v", s)
	}
	// Subscribing again finds the messages (the group's offset did not move).
	if err := r.Sync("c1", shared, PartialAdd, []string{"L1"}, OffsetOption{}, now); err != nil {
		t.Fatal(err)
	}
	if bs := pop(t, r, h, "c1", 32, now); len(bs) != 1 || bs[0].Offset != 0 || bs[0].N != 2 {
		t.Fatalf("after subscribing again: %+v", bs)
	}
}

// The client is dropped (connection loss), or its lite topic forgotten
// (expiry), or the client expired, while its receive reads.
func TestPopRaceDropAndExpiry(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(r *Registry, now time.Time)
	}{
		{"drop", func(r *Registry, _ time.Time) { r.Drop("c1") }},
		{"forget", func(r *Registry, _ time.Time) { r.ForgetLite("P", "L1") }},
		{"expire", func(r *Registry, now time.Time) { r.Expire(now.Add(time.Hour)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, h, now := liteSetup(t, 2)
			bs, _, _, err := r.Pop("c1", 32, time.Second, now, during(h, func() { tc.fn(r, now) }))
			if err != nil || len(bs) != 0 {
				t.Fatalf("delivered: %+v %v", bs, err)
			}
			if s := r.Stats(); s.InFlight != 0 {
				t.Fatalf("in flight: %+v", s)
			}
			if off, _ := h.Offset("G", "P", "L1"); off != 0 {
				t.Fatalf("offset %d", off)
			}
		})
	}
}

// Another client's receive passes over the lite topic while it is read
// (its event was given during the read); the reader found nothing (the
// message came after its read), so it re-arms the event.
func TestPopRaceReservedRearms(t *testing.T) {
	r, h, now := liteSetup(t, 0, "c2")
	// An event for c1 (a message), consumed so that c1 reads an empty
	// lite topic: the read returns nothing, and meanwhile a message
	// arrives whose event c2's receive passes over.
	h.send(r, "P", "L1", 1)
	owner := "c1"
	if !r.HasEvents("c1", now) {
		owner = "c2"
	}
	other := map[string]string{"c1": "c2", "c2": "c1"}[owner]
	var inner []Batch
	var once sync.Once
	bs, _, _, err := r.Pop(owner, 32, time.Second, now, func(l string, off int64, max int) (int64, int, error) {
		once.Do(func() { passOver(t, r, h, other, &inner) })
		return off, 0, nil // read before the message
	})
	if err != nil || len(bs) != 0 || len(inner) != 0 {
		t.Fatalf("pops: %+v %+v %v", bs, inner, err)
	}
	if !r.HasEvents("c1", now) && !r.HasEvents("c2", now) {
		t.Fatal("the passed-over event was lost: no client has one")
	}
}

// passOver adds a message to L1 and runs other's receive with L1's event
// (as if the arrival gave it to other) while L1 is reserved.
func passOver(t *testing.T, r *Registry, h *fakeHost, other string, inner *[]Batch) {
	now := time.UnixMilli(1_000_000)
	empty := func(l string, off int64, max int) (int64, int, error) { return off, 0, nil }
	h.mu.Lock()
	h.max["P/L1"]++
	h.mu.Unlock()
	// The arrival gives its event to one of the two; make sure the
	// other receive sees it while the lite topic is reserved.
	r.mu.Lock()
	oc := r.clients[other]
	r.eventLocked(oc, "L1", new([]notice))
	r.mu.Unlock()
	var err error
	*inner, _, _, err = r.Pop(other, 32, time.Second, now, empty)
	if err != nil {
		t.Error(err)
	}
}

// An ack that completes a batch re-arms the lite topic at once when more
// messages came meanwhile: the next receive gets them with no new arrival.
func TestAckRearmsAtOnce(t *testing.T) {
	r, h, now := liteSetup(t, 2)
	pop(t, r, h, "c1", 32, now)
	h.send(r, "P", "L1", 3) // blocked: no event
	if r.HasEvents("c1", now) {
		t.Fatal("an event while the batch is in flight")
	}
	for o := int64(0); o < 2; o++ {
		if err := r.Ack("G", "P", "L1", o, now.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	if !r.HasEvents("c1", now) {
		t.Fatal("no event after the batch's ack")
	}
	if bs := pop(t, r, h, "c1", 32, now); len(bs) != 1 || bs[0].Offset != 2 || bs[0].N != 3 {
		t.Fatalf("after the ack: %+v", bs)
	}
}

// Receives, acks, changes of invisibility, unsubscriptions and arrivals
// from many goroutines (run with -race): every message is acked once in
// the end, each lite topic delivered in order, at most one batch of a
// lite topic in flight.
func TestPopConcurrentStress(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{})
	const (
		nLite    = 20
		nClients = 4
		perLite  = 50
	)
	lites := make([]string, nLite)
	for i := range lites {
		lites[i] = fmt.Sprintf("L%02d", i)
	}
	g := Group{Name: "G", Parent: "P"}
	base := time.Now()
	for c := 0; c < nClients; c++ {
		if err := r.Sync(fmt.Sprintf("c%d", c), g, CompleteAdd, lites, OffsetOption{}, base); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	delivered := map[string]int64{} // lite → next offset expected at first attempt
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the producer
		defer wg.Done()
		for i := 0; i < perLite; i++ {
			for _, l := range lites {
				h.send(r, "P", l, 1)
			}
		}
	}()
	for c := 0; c < nClients; c++ {
		id := fmt.Sprintf("c%d", c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(len(id)), uint64(id[1])))
			for {
				select {
				case <-stop:
					return
				default:
				}
				now := time.Now()
				if rng.IntN(50) == 0 { // churn: drop a lite topic and take it again
					l := lites[rng.IntN(nLite)]
					_ = r.Sync(id, g, PartialRemove, []string{l}, OffsetOption{}, now)
					_ = r.Sync(id, g, PartialAdd, []string{l}, OffsetOption{}, now)
				}
				bs, popTime, _, err := r.Pop(id, 8, 50*time.Millisecond, now, h.reader("P"))
				if err != nil {
					t.Error(err)
					return
				}
				for _, b := range bs {
					mu.Lock()
					if b.Offset > delivered[b.Lite] {
						t.Errorf("%s delivered from %d, past %d: a gap", b.Lite, b.Offset, delivered[b.Lite])
					}
					delivered[b.Lite] = max(delivered[b.Lite], b.Offset+int64(b.N))
					mu.Unlock()
					if rng.IntN(10) == 0 {
						_ = r.ChangeInvisible("G", "P", b.Lite, b.Offset, popTime, time.Millisecond, rng.IntN(2) == 0, time.Now())
						continue
					}
					for o := b.Offset; o < b.Offset+int64(b.N); o++ {
						if err := r.Ack("G", "P", b.Lite, o, popTime); err != nil && !errors.Is(err, ErrStaleHandle) {
							t.Error(err)
						}
					}
				}
			}
		}()
	}
	wait.For(t, "every message acked", func() error {
		for _, l := range lites {
			if off, _ := h.Offset("G", "P", l); off != perLite {
				return fmt.Errorf("%s at %d of %d; %+v", l, off, perLite, r.Stats())
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	if s := r.Stats(); s.InFlight != 0 {
		t.Fatalf("in flight at the end: %+v", s)
	}
}
