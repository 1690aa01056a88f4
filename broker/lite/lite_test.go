package lite

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeHost keeps lite topics as max offsets and the groups' offsets in
// maps, and records the notices.
type fakeHost struct {
	mu       sync.Mutex
	max      map[string]int64 // parent/lite
	offsets  map[string]int64 // group/parent/lite
	notified []string
	unsubs   []string
}

func newFakeHost() *fakeHost {
	return &fakeHost{max: map[string]int64{}, offsets: map[string]int64{}}
}

func (h *fakeHost) LiteMax(parent, l string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max[parent+"/"+l]
}

func (h *fakeHost) Offset(group, parent, l string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o, ok := h.offsets[group+"/"+parent+"/"+l]
	return o, ok
}

func (h *fakeHost) Commit(group, parent, l string, off int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offsets[group+"/"+parent+"/"+l] = off
	return nil
}

func (h *fakeHost) Notify(c string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notified = append(h.notified, c)
}

func (h *fakeHost) Unsubscribed(c, group, parent, l string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unsubs = append(h.unsubs, c+":"+l)
}

// send grows a lite topic by n and reports it.
func (h *fakeHost) send(r *Registry, parent, l string, n int64) {
	h.mu.Lock()
	h.max[parent+"/"+l] += n
	m := h.max[parent+"/"+l]
	h.mu.Unlock()
	r.Arrived(parent, l, m)
}

// reader reads whatever the fake host holds.
func (h *fakeHost) reader(parent string) ReadFunc {
	return func(l string, off int64, max int) (int64, int, error) {
		n := int(min(int64(max), h.LiteMax(parent, l)-off))
		return off, n, nil
	}
}

var shared = Group{Name: "G", Parent: "P", Quota: 2}

func pop(t *testing.T, r *Registry, h *fakeHost, id string, max int, now time.Time) []Batch {
	t.Helper()
	bs, _, _, err := r.Pop(id, max, time.Second, now, h.reader("P"))
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func TestSubscribeStartsAtEndAndDeliversInOrder(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{})
	h.send(r, "P", "L1", 3) // before the subscription: not delivered
	now := time.UnixMilli(1_000_000)
	if err := r.Sync("c1", shared, PartialAdd, []string{"L1"}, OffsetOption{}, now); err != nil {
		t.Fatal(err)
	}
	if bs := pop(t, r, h, "c1", 32, now); len(bs) != 0 {
		t.Fatalf("delivered before any new message: %+v", bs)
	}
	h.send(r, "P", "L1", 2)
	h.send(r, "P", "L2", 1) // not subscribed
	bs := pop(t, r, h, "c1", 32, now)
	if len(bs) != 1 || bs[0] != (Batch{Lite: "L1", Offset: 3, N: 2, Attempts: 1}) {
		t.Fatalf("got %+v", bs)
	}
	// Blocked until acked: a new message waits.
	h.send(r, "P", "L1", 1)
	if bs := pop(t, r, h, "c1", 32, now); len(bs) != 0 {
		t.Fatalf("delivered past a batch in flight: %+v", bs)
	}
	if err := r.Ack("G", "P", "L1", 4, now.UnixMilli()); err != nil { // out of order: no commit yet
		t.Fatal(err)
	}
	if off, _ := h.Offset("G", "P", "L1"); off != 3 {
		t.Fatalf("offset %d after an out-of-order ack", off)
	}
	if err := r.Ack("G", "P", "L1", 3, now.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if off, _ := h.Offset("G", "P", "L1"); off != 5 {
		t.Fatalf("offset %d after the batch's acks", off)
	}
	if err := r.Ack("G", "P", "L1", 3, now.UnixMilli()); err != nil {
		t.Fatalf("second ack of a committed offset: %v", err)
	}
	if err := r.Ack("G", "P", "L1", 5, now.UnixMilli()); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("an ack of an offset never delivered: %v", err)
	}
	bs = pop(t, r, h, "c1", 32, now)
	if len(bs) != 1 || bs[0].Offset != 5 || bs[0].N != 1 {
		t.Fatalf("after the ack: %+v", bs)
	}
}

func TestInvisibleTimeAndSuspend(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{})
	now := time.UnixMilli(1_000_000)
	_ = r.Sync("c1", shared, PartialAdd, []string{"L1"}, OffsetOption{}, now)
	h.send(r, "P", "L1", 1)
	bs, popTime, next, _ := r.Pop("c1", 32, time.Second, now, h.reader("P"))
	if len(bs) != 1 || !next.Equal(now.Add(time.Second)) {
		t.Fatalf("got %+v next %v", bs, next)
	}
	later := now.Add(time.Second)
	if !r.HasEvents("c1", later) {
		t.Fatal("no event once the invisible time passed")
	}
	bs, popTime2, _, _ := r.Pop("c1", 32, time.Second, later, h.reader("P"))
	if len(bs) != 1 || bs[0].Attempts != 2 || bs[0].Offset != 0 {
		t.Fatalf("redelivery %+v", bs)
	}
	if err := r.Ack("G", "P", "L1", 0, popTime); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("ack of the first delivery: %v", err)
	}
	if err := r.ChangeInvisible("G", "P", "L1", 0, popTime2, 200*time.Millisecond, true, later); err != nil {
		t.Fatal(err)
	}
	bs, _, _, _ = r.Pop("c1", 32, time.Second, later.Add(200*time.Millisecond), h.reader("P"))
	if len(bs) != 1 || bs[0].Attempts != 2 {
		t.Fatalf("after a suspend: %+v (the attempt must not grow)", bs)
	}
}

func TestQuotas(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{MaxSubscriptions: 3})
	now := time.UnixMilli(1_000_000)
	if err := r.Sync("c1", shared, PartialAdd, []string{"A", "B"}, OffsetOption{}, now); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync("c2", shared, PartialAdd, []string{"A"}, OffsetOption{}, now); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync("c2", shared, PartialAdd, []string{"C"}, OffsetOption{}, now); !errors.Is(err, ErrSubscriptionQuota) {
		t.Fatalf("a fourth subscription: %v", err)
	}
	if err := r.Sync("c2", shared, PartialAdd, []string{"A"}, OffsetOption{}, now); err != nil {
		t.Fatalf("a subscription held already: %v", err)
	}
	big := make([]string, shared.Quota+QuotaBuffer+1)
	for i := range big {
		big[i] = fmt.Sprint("x", i)
	}
	if err := r.Sync("c3", shared, CompleteAdd, big, OffsetOption{}, now); !errors.Is(err, ErrSubscriptionQuota) {
		t.Fatalf("a set past the group's quota: %v", err)
	}
	if err := r.Sync("c1", shared, PartialRemove, []string{"B"}, OffsetOption{}, now); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync("c2", shared, PartialAdd, []string{"C"}, OffsetOption{}, now); err != nil {
		t.Fatalf("after a removal: %v", err)
	}
	if s := r.Stats(); s.Subscriptions != 3 || s.Clients != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestExclusiveEviction(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{})
	g := Group{Name: "X", Parent: "P", Exclusive: true}
	now := time.UnixMilli(1_000_000)
	_ = r.Sync("a", g, PartialAdd, []string{"L1"}, OffsetOption{}, now)
	_ = r.Sync("b", g, PartialAdd, []string{"L1"}, OffsetOption{}, now)
	if !slices.Equal(h.unsubs, []string{"a:L1"}) || r.Subscribed("a", "L1") || !r.Subscribed("b", "L1") {
		t.Fatalf("unsubscribed %v", h.unsubs)
	}
	h.send(r, "P", "L1", 1)
	if bs := pop(t, r, h, "a", 32, now); len(bs) != 0 {
		t.Fatalf("the evicted client received %+v", bs)
	}
	if bs := pop(t, r, h, "b", 32, now); len(bs) != 1 {
		t.Fatalf("the new subscriber received %+v", bs)
	}
}

func TestOverflowFullDispatch(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{})
	g := Group{Name: "G", Parent: "P", MaxEvents: 10}
	now := time.UnixMilli(1_000_000)
	var ls []string
	for i := range 25 {
		ls = append(ls, fmt.Sprintf("L%02d", i))
	}
	_ = r.Sync("c", g, PartialAdd, ls, OffsetOption{}, now)
	for _, l := range ls {
		h.send(r, "P", l, 1)
	}
	seen := map[string]bool{}
	for range 5 {
		for _, b := range pop(t, r, h, "c", 32, now) {
			seen[b.Lite] = true
			if err := r.Ack("G", "P", b.Lite, b.Offset, now.UnixMilli()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(seen) != len(ls) {
		t.Fatalf("%d of %d lite topics delivered after an overflow", len(seen), len(ls))
	}
}

func TestDropRedispatches(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{ClientTimeout: time.Minute})
	now := time.UnixMilli(1_000_000)
	_ = r.Sync("a", shared, PartialAdd, []string{"L1"}, OffsetOption{}, now)
	_ = r.Sync("b", shared, PartialAdd, []string{"L1"}, OffsetOption{}, now.Add(time.Minute))
	h.send(r, "P", "L1", 1)
	r.Drop("a")
	bs := pop(t, r, h, "b", 32, now)
	if len(bs) != 1 {
		t.Fatalf("b after a's drop: %+v", bs)
	}
	if gone := r.Expire(now.Add(90 * time.Second)); len(gone) != 0 {
		t.Fatalf("expired %v", gone)
	}
	if gone := r.Expire(now.Add(3 * time.Minute)); !slices.Equal(gone, []string{"b"}) {
		t.Fatalf("expired %v", gone)
	}
	// b's batch was in flight when it went: its FIFO state goes once its
	// invisible time passed, nobody subscribing.
	if s := r.Stats(); s.Clients != 0 || s.Subscriptions != 0 || s.InFlight != 0 {
		t.Fatalf("stats after the expiry %+v", s)
	}
	r.mu.Lock()
	left := len(r.fifo)
	r.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d FIFO states left with no subscriber", left)
	}
}

func TestOffsetOptions(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{})
	now := time.UnixMilli(1_000_000)
	h.send(r, "P", "L1", 5)
	_ = r.Sync("c", shared, PartialAdd, []string{"L1"}, OffsetOption{Set: true, Policy: PolicyMin}, now)
	bs := pop(t, r, h, "c", 32, now)
	if len(bs) != 1 || bs[0].Offset != 0 || bs[0].N != 5 {
		t.Fatalf("MIN: %+v", bs)
	}
	_ = r.Sync("c", shared, PartialRemove, []string{"L1"}, OffsetOption{}, now)
	_ = r.Sync("c", shared, PartialAdd, []string{"L1"}, OffsetOption{Set: true, HasTailN: true, TailN: 2}, now)
	if off, _ := h.Offset("G", "P", "L1"); off != 0 {
		t.Fatalf("TAIL_N 2 from 0: offset %d", off)
	}
}

func TestConcurrentUse(t *testing.T) {
	h := newFakeHost()
	r := New(h, Options{})
	now := time.Now()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("c", i)
			_ = r.Sync(id, shared, PartialAdd, []string{"L1", "L2"}, OffsetOption{}, now)
			for range 100 {
				h.send(r, "P", "L1", 1)
				bs, pt, _, _ := r.Pop(id, 32, time.Minute, now, h.reader("P"))
				for _, b := range bs {
					for o := b.Offset; o < b.Offset+int64(b.N); o++ {
						_ = r.Ack("G", "P", b.Lite, o, pt)
					}
				}
			}
			r.Drop(id)
		}()
	}
	wg.Wait()
	if s := r.Stats(); s.Clients != 0 || s.Subscriptions != 0 {
		t.Fatalf("stats %+v", s)
	}
}
