package longpoll

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// item is what the tests park.
type item struct{ id int }

type call struct {
	kind string // "run" or "expire"
	id   int
	at   Wait
	when time.Time
}

// fakeHost records every call. run decides what Run answers (default:
// answer, no wait); it runs on the holder's goroutine. maxOf, when set, is
// MaxOffset; otherwise the max set with setMax (0 by default).
type fakeHost struct {
	run   func(it *item, at Wait) (int64, bool)
	maxOf func(topic string, queue int32) int64

	active  atomic.Int32
	overlap atomic.Bool

	mu    sync.Mutex
	calls []call
	done  map[int]int // id → times answered (Run without wait, or Expire)
	max   map[Wait]int64
}

func newFakeHost() *fakeHost { return &fakeHost{done: map[int]int{}, max: map[Wait]int64{}} }

// setMax sets what MaxOffset answers for (topic, queue), without reporting
// an arrival (as if the report had been missed).
func (f *fakeHost) setMax(topic string, q int32, m int64) {
	f.mu.Lock()
	f.max[pos(topic, q, 0)] = m
	f.mu.Unlock()
}

func (f *fakeHost) MaxOffset(topic string, q int32) int64 {
	if f.maxOf != nil {
		return f.maxOf(topic, q)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max[pos(topic, q, 0)]
}

func (f *fakeHost) enter() {
	if f.active.Add(1) > 1 {
		f.overlap.Store(true)
	}
}

func (f *fakeHost) Run(it *item, w *Wait) bool {
	f.enter()
	defer f.active.Add(-1)
	at := *w
	next, wait := int64(0), false
	if f.run != nil {
		next, wait = f.run(it, at)
	}
	if wait {
		w.Offset = next
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{"run", it.id, at, time.Now()})
	if !wait {
		f.done[it.id]++
	}
	f.mu.Unlock()
	return wait
}

func (f *fakeHost) Expire(it *item, w *Wait) {
	at := *w
	f.enter()
	defer f.active.Add(-1)
	f.mu.Lock()
	f.calls = append(f.calls, call{"expire", it.id, at, time.Now()})
	f.done[it.id]++
	f.mu.Unlock()
}

// took returns the calls made since the last took.
func (f *fakeHost) took() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func pos(topic string, q int32, off int64) Wait {
	return Wait{Topic: topic, Queue: q, Offset: off}
}

func describe(calls []call) string {
	s := ""
	for _, c := range calls {
		s += fmt.Sprintf("%s#%d@%s/%d/%d ", c.kind, c.id, c.at.Topic, c.at.Queue, c.at.Offset)
	}
	return s
}

// An arrival wakes exactly the items of its (topic, queue) whose offset is
// below the new max offset; the rest keep waiting.
func TestArrivalWakesItsQueueBelowMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		deadline := time.Now().Add(time.Minute)
		h.Park(pos("A", 0, 5), deadline, item{1})
		h.Park(pos("A", 0, 7), deadline, item{2})
		h.Park(pos("A", 1, 5), deadline, item{3})
		h.Park(pos("B", 0, 5), deadline, item{4})
		h.Park(pos("A", 3, 0), deadline, item{5})

		h.Arrived("A", 0, 5) // not past offset 5: nobody
		h.Arrived("A", 2, 9) // a queue nobody waits in
		h.Arrived("C", 0, 9) // a topic nobody waits in
		h.Arrived("A", 9, 9) // beyond the queues parked
		h.Arrived("A", -1, 9)
		synctest.Wait()
		if c := f.took(); len(c) != 0 {
			t.Fatalf("woken by arrivals elsewhere: %s", describe(c))
		}
		h.Arrived("A", 0, 6)
		synctest.Wait()
		c := f.took()
		if len(c) != 1 || c[0].kind != "run" || c[0].id != 1 || c[0].at != pos("A", 0, 5) {
			t.Fatalf("after A/0 reached 6: %s", describe(c))
		}
		if st := h.Stats(); st.Held != 4 || st.Woken != 1 || st.Parked != 5 {
			t.Fatalf("stats %+v", st)
		}
		h.Arrived("A", 0, 100)
		h.Arrived("B", 0, 6)
		synctest.Wait()
		c = f.took()
		if len(c) != 2 || c[0].id != 2 || c[1].id != 4 {
			t.Fatalf("after A/0 and B/0 grew: %s", describe(c))
		}
		if st := h.Stats(); st.Held != 2 || st.Woken != 3 || st.Expired != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// Items expire at their deadline, in deadline order, whatever the order
// they were parked in (an earlier deadline parked later moves the timer).
func TestDeadlinesExpireOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		start := time.Now()
		after := map[int]time.Duration{1: 30 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 4: 10 * time.Second}
		for id := 1; id <= 3; id++ {
			h.Park(pos("T", int32(id), 0), start.Add(after[id]), item{id})
		}
		synctest.Wait()
		time.Sleep(5 * time.Second)
		h.Park(pos("T", 0, 0), start.Add(after[4]), item{4}) // earlier than the 20 s and 30 s ones
		time.Sleep(10*time.Second - 5*time.Second - time.Nanosecond)
		synctest.Wait()
		if c := f.took(); len(c) != 0 {
			t.Fatalf("expired before their deadline: %s", describe(c))
		}
		time.Sleep(25 * time.Second)
		synctest.Wait()
		c := f.took()
		if len(c) != 4 {
			t.Fatalf("expired: %s", describe(c))
		}
		for i, c := range c {
			if c.kind != "expire" || c.when != start.Add(after[c.id]) {
				t.Errorf("call %d: %s at +%v, want expire at +%v", i, c.kind, c.when.Sub(start), after[c.id])
			}
		}
		for i := 1; i < len(c); i++ {
			if after[c[i].id] < after[c[i-1].id] {
				t.Errorf("call %d out of deadline order: %s", i, describe(c))
			}
		}
		if st := h.Stats(); st.Held != 0 || st.Expired != 4 || st.Woken != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A woken item whose Run asks to wait is parked again at the offset Run
// returned, with its original deadline, until an arrival past that offset
// or the deadline.
func TestRunWaitParksAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		f.run = func(it *item, at Wait) (int64, bool) {
			if at.Offset < 3 {
				return at.Offset + 1, true // one record scanned, not for this item
			}
			return 0, false
		}
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		start := time.Now()
		h.Park(pos("T", 0, 1), start.Add(10*time.Second), item{1})
		h.Arrived("T", 0, 2)
		synctest.Wait()
		if st := h.Stats(); st.Held != 1 || st.Woken != 1 || st.Reparked != 1 {
			t.Fatalf("after one wake: %+v", st)
		}
		h.Arrived("T", 0, 2) // not past the new offset 2
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].at.Offset != 1 {
			t.Fatalf("calls: %s", describe(c))
		}
		h.Arrived("T", 0, 3) // wakes at 2, parked again at 3
		synctest.Wait()
		f.took()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		c := f.took()
		if len(c) != 1 || c[0].kind != "expire" || c[0].at.Offset != 3 || !c[0].when.Equal(start.Add(10*time.Second)) {
			t.Fatalf("expiry after re-parking: %s at +%v", describe(c), c[0].when.Sub(start))
		}

		// Woken and answered at once.
		h.Park(pos("T", 0, 3), time.Now().Add(time.Second), item{2})
		h.Arrived("T", 0, 4)
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].kind != "run" || c[0].id != 2 {
			t.Fatalf("calls: %s", describe(c))
		}
		if f.done[1] != 1 || f.done[2] != 1 {
			t.Fatalf("answers: %v", f.done)
		}
	})
}

// A message that arrived after the host looked and before Park linked the
// item was reported to nobody: Park reads the queue's max and wakes it.
func TestArrivalBeforeParkIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		f.setMax("T", 0, 6)
		h.Park(pos("T", 0, 6), time.Now().Add(time.Minute), item{1}) // nothing new
		h.Park(pos("T", 0, 5), time.Now().Add(time.Minute), item{2}) // message 5 arrived unreported
		synctest.Wait()
		c := f.took()
		if len(c) != 1 || c[0].kind != "run" || c[0].id != 2 || c[0].at.Offset != 5 {
			t.Fatalf("calls: %s", describe(c))
		}
		if st := h.Stats(); st.Held != 1 || st.Woken != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// An arrival reported while Run ran found the item in no list: parked
// again past the offset Run reached, the item is woken by the queue's max.
func TestArrivalDuringRunIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		h := New[item](f, Options{})
		f.run = func(it *item, at Wait) (int64, bool) {
			if at.Offset == 5 {
				f.setMax("T", 0, 7)  // message 6 arrives meanwhile...
				h.Arrived("T", 0, 7) // ...and is reported while the item is in no list
				return 6, true       // message 5 was not for this item
			}
			return 0, false
		}
		h.Start()
		defer h.Stop()
		f.setMax("T", 0, 5)
		h.Park(pos("T", 0, 5), time.Now().Add(time.Minute), item{1})
		f.setMax("T", 0, 6)
		h.Arrived("T", 0, 6)
		synctest.Wait()
		c := f.took()
		if len(c) != 2 || c[0].at.Offset != 5 || c[1].kind != "run" || c[1].at.Offset != 6 || f.done[1] != 1 {
			t.Fatalf("calls: %s", describe(c))
		}
		if st := h.Stats(); st.Held != 0 || st.Woken != 2 || st.Reparked != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A Run that asks to wait without moving the offset is not woken again by
// the queue's max (that could keep the loop busy until the deadline); it
// waits for an arrival or its deadline.
func TestRunWithoutProgressWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		f.run = func(it *item, at Wait) (int64, bool) { return at.Offset, true }
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		start := time.Now()
		f.setMax("T", 0, 9)
		h.Park(pos("T", 0, 5), start.Add(time.Second), item{1})
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].kind != "run" {
			t.Fatalf("calls: %s", describe(c))
		}
		h.Arrived("T", 0, 9)
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].kind != "run" {
			t.Fatalf("after an arrival: %s", describe(c))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].kind != "expire" || !c[0].when.Equal(start.Add(time.Second)) {
			t.Fatalf("at the deadline: %s", describe(c))
		}
	})
}

// A Run that asks to wait after the item's deadline passed (the run itself
// took that long) leads to Expire, not to another wait.
func TestRunWaitPastDeadlineExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		f.run = func(it *item, at Wait) (int64, bool) {
			time.Sleep(2 * time.Second)
			return at.Offset, true
		}
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		h.Park(pos("T", 0, 0), time.Now().Add(time.Second), item{1})
		h.Arrived("T", 0, 1)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		c := f.took()
		if len(c) != 2 || c[0].kind != "run" || c[1].kind != "expire" {
			t.Fatalf("calls: %s", describe(c))
		}
		if st := h.Stats(); st.Held != 0 || st.Reparked != 0 || st.Expired != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// Stop answers every held item before it returns: parked ones through
// Expire, a woken one through Run or Expire (whichever the loop reaches
// first); afterwards Park answers at once and arrivals do nothing.
func TestStopDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		release := make(chan struct{})
		f.run = func(it *item, at Wait) (int64, bool) {
			if it.id == 1 {
				<-release
			}
			return 0, false
		}
		h := New[item](f, Options{})
		h.Start()
		far := time.Now().Add(time.Hour)
		h.Park(pos("T", 0, 0), far, item{1})
		h.Park(pos("T", 1, 0), far, item{2})
		h.Park(pos("T", 2, 0), far, item{3})
		h.Arrived("T", 0, 1)
		synctest.Wait() // the loop is inside Run(1)
		h.Arrived("T", 1, 1)
		stopped := make(chan struct{})
		go func() { h.Stop(); close(stopped) }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("Stop returned while an item was being run")
		default:
		}
		close(release)
		<-stopped
		c := f.took()
		if len(c) != 3 || c[0].kind != "run" || c[0].id != 1 || c[2].kind != "expire" || c[2].id != 3 {
			t.Fatalf("calls: %s", describe(c))
		}
		expires := int64(1)
		if c[1].kind == "expire" {
			expires++
		}
		if f.done[1] != 1 || f.done[2] != 1 || f.done[3] != 1 {
			t.Fatalf("answers: %v", f.done)
		}
		if _, err := h.Park(pos("T", 0, 0), far, item{4}); err == nil {
			t.Fatal("Park accepted after Stop")
		}
		h.Arrived("T", 0, 9)
		h.Stop()
		c = f.took()
		if len(c) != 1 || c[0].kind != "expire" || c[0].id != 4 {
			t.Fatalf("after Stop: %s", describe(c))
		}
		if st := h.Stats(); st.Held != 0 || st.Parked != 3 || st.Expired != expires+1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// Without Start, Stop drains on the caller's goroutine.
func TestStopWithoutStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		h := New[item](f, Options{})
		h.Park(pos("T", 0, 0), time.Now().Add(time.Hour), item{1})
		h.Arrived("T", 0, 1) // woken, never run: no loop
		h.Park(pos("T", 0, 0), time.Now().Add(time.Hour), item{2})
		h.Stop()
		c := f.took()
		if len(c) != 2 || c[0].kind != "expire" || c[1].kind != "expire" {
			t.Fatalf("calls: %s", describe(c))
		}
		h.Start() // too late: no goroutine
		if _, err := h.Park(pos("T", 0, 0), time.Now().Add(time.Hour), item{3}); err == nil {
			t.Fatal("Park accepted after Stop")
		}
	})
}

// Host methods run outside the holder's lock: they may park, report
// arrivals and read stats.
func TestHostMayCallBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHost()
		var h *Holder[item]
		f.run = func(it *item, at Wait) (int64, bool) {
			_ = h.Stats()
			if it.id < 3 {
				h.Park(pos("T", 0, at.Offset+1), time.Now().Add(time.Second), item{it.id + 1})
				h.Arrived("T", 0, at.Offset+2) // wakes the item just parked
			}
			return 0, false
		}
		h = New[item](f, Options{})
		h.Start()
		defer h.Stop()
		h.Park(pos("T", 0, 0), time.Now().Add(time.Second), item{1})
		h.Arrived("T", 0, 1)
		synctest.Wait()
		c := f.took()
		if len(c) != 3 || c[2].id != 3 || c[2].kind != "run" {
			t.Fatalf("calls: %s", describe(c))
		}
	})
}

// The holder zeroes an item once it is answered, so a pooled entry does not
// keep what the item referenced.
func TestAnsweredItemsAreZeroed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var kept []*item
		f := newFakeHost()
		f.run = func(it *item, at Wait) (int64, bool) {
			kept = append(kept, it)
			return 0, false
		}
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		h.Park(pos("T", 0, 0), time.Now().Add(time.Second), item{7})
		h.Arrived("T", 0, 1)
		synctest.Wait()
		if len(kept) != 1 || kept[0].id != 0 {
			t.Fatalf("answered item left as %+v", kept)
		}
	})
}

// Many goroutines park and report arrivals at once (run it with -race):
// every item is answered exactly once, host calls never overlap, and
// nothing stays held.
func TestConcurrentParksAndArrivals(t *testing.T) {
	f := newFakeHost()
	f.run = func(it *item, at Wait) (int64, bool) {
		if it.id%3 == 0 && at.Offset < 2 {
			return at.Offset + 1, true
		}
		return 0, false
	}
	const parkers, each, queues = 4, 500, 4
	var max [queues]atomic.Int64
	f.maxOf = func(topic string, q int32) int64 { return max[q].Load() }
	h := New[item](f, Options{})
	h.Start()
	var wg sync.WaitGroup
	for p := range parkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(p), 1))
			for i := range each {
				q := int32(r.IntN(queues))
				h.Park(pos("T", q, max[q].Load()), time.Now().Add(time.Duration(r.IntN(20))*time.Millisecond), item{p*each + i})
			}
		}()
	}
	stopArrivals := make(chan struct{})
	arrivals := make(chan struct{})
	go func() {
		defer close(arrivals)
		for i := 0; ; i++ {
			select {
			case <-stopArrivals:
				return
			default:
			}
			q := int32(i % queues)
			h.Arrived("T", q, max[q].Add(1))
			if i%64 == 0 {
				// Pacing, not synchronisation: an arrival loop that never
				// pauses would take the CPU from the parkers it races.
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	wg.Wait()
	close(stopArrivals)
	<-arrivals
	h.Stop()
	if f.overlap.Load() {
		t.Error("host calls overlapped")
	}
	if len(f.done) != parkers*each {
		t.Fatalf("%d items answered, want %d", len(f.done), parkers*each)
	}
	for id, n := range f.done {
		if n != 1 {
			t.Fatalf("item %d answered %d times", id, n)
		}
	}
	st := h.Stats()
	if st.Held != 0 || st.Parked != parkers*each {
		t.Fatalf("stats %+v", st)
	}
}

// signalHost answers every Run and signals it (for the allocation test and
// the benchmark).
type signalHost struct{ ran chan struct{} }

func (s signalHost) Run(*item, *Wait) bool         { s.ran <- struct{}{}; return false }
func (s signalHost) Expire(*item, *Wait)           { s.ran <- struct{}{} }
func (s signalHost) MaxOffset(string, int32) int64 { return 0 }

// Park, an arrival and the run it causes do not allocate once the pool
// and the lists have grown.
func TestParkAndWakeDoNotAllocate(t *testing.T) {
	checkParkWakeAllocs(t, Options{})
}

// checkParkWakeAllocs fails unless a park, an arrival and the run it causes
// allocate nothing once the pool and the lists have grown, with opts; it
// returns the holder's stats after the runs.
func checkParkWakeAllocs(t *testing.T, opts Options) Stats {
	t.Helper()
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	s := signalHost{ran: make(chan struct{}, 1)}
	h := New[item](s, opts)
	h.Start()
	defer h.Stop()
	deadline := time.Now().Add(time.Hour)
	off := int64(0)
	cycle := func() {
		h.Park(pos("Allocs", 1, off), deadline, item{1})
		off++
		h.Arrived("Allocs", 1, off)
		<-s.ran
	}
	cycle()
	if allocs := testing.AllocsPerRun(1000, cycle); allocs != 0 {
		t.Fatalf("%v allocations per park and wake (%+v)", allocs, opts)
	}
	return h.Stats()
}

// BenchmarkParkWake measures one item parked, woken by an arrival and run
// by the holder's goroutine (the host signals the benchmark).
func BenchmarkParkWake(b *testing.B) { benchParkWake(b, Options{}) }

// benchParkWake is BenchmarkParkWake with the holder's options opts.
func benchParkWake(b *testing.B, opts Options) {
	s := signalHost{ran: make(chan struct{}, 1)}
	h := New[item](s, opts)
	h.Start()
	defer h.Stop()
	deadline := time.Now().Add(time.Hour)
	b.ReportAllocs()
	for i := range b.N {
		h.Park(pos("Bench", 0, int64(i)), deadline, item{i})
		h.Arrived("Bench", 0, int64(i)+1)
		<-s.ran
	}
}

// BenchmarkParkMany measures Park and Arrived with 10,000 items held in
// other queues (the heap and the map are not empty).
func BenchmarkParkMany(b *testing.B) {
	s := signalHost{ran: make(chan struct{}, 1)}
	h := New[item](s, Options{})
	h.Start()
	defer h.Stop()
	deadline := time.Now().Add(time.Hour)
	for i := range 10000 {
		h.Park(pos(fmt.Sprintf("Idle%d", i%100), int32(i%8), 0), deadline.Add(time.Duration(i)), item{i})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		h.Park(pos("Bench", 0, int64(i)), deadline.Add(-time.Duration(i%1000)), item{i})
		h.Arrived("Bench", 0, int64(i)+1)
		<-s.ran
	}
	b.StopTimer()
	// Stop drains the 10,000 idle items through Expire, which signals.
	go func() {
		for range s.ran {
		}
	}()
	h.Stop()
	close(s.ran)
}
