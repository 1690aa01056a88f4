package longpoll

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Inline runs (Options.InlineArrivals) and Flusher: these tests check
// that the pulls an Arrived wakes run on its caller's goroutine when they
// are few and the loop is idle, that POPs never do, and that the
// guarantees of the package doc hold for them: each item answered once,
// Cancel, Stop's drain, the counts, and a Flush on every goroutine after
// the answers it made.

// goid returns the calling goroutine's id (from its stack's first line).
func goid() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	f := strings.Fields(string(buf[:n]))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

type gcall struct {
	kind string // "run" or "expire"
	id   int
	off  int64
	g    uint64
}

// flushHost records each call with its goroutine, and, per goroutine, the
// answers not yet followed by a Flush there. run decides what Run answers
// (default: answer); max is MaxOffset for every queue.
type flushHost struct {
	run func(it *item, at Wait) (int64, bool)
	max atomic.Int64

	mu        sync.Mutex
	calls     []gcall
	done      map[int]int
	unflushed map[uint64]int
	flushes   int
}

func newFlushHost() *flushHost {
	return &flushHost{done: map[int]int{}, unflushed: map[uint64]int{}}
}

func (f *flushHost) Run(it *item, w *Wait) bool {
	g := goid()
	at := *w
	next, wait := int64(0), false
	if f.run != nil {
		next, wait = f.run(it, at)
	}
	if wait {
		w.Offset = next
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, gcall{"run", it.id, at.Offset, g})
	if !wait {
		f.done[it.id]++
		f.unflushed[g]++
	}
	return wait
}

func (f *flushHost) Expire(it *item, w *Wait) {
	g := goid()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, gcall{"expire", it.id, w.Offset, g})
	f.done[it.id]++
	f.unflushed[g]++
}

func (f *flushHost) MaxOffset(string, int32) int64 { return f.max.Load() }

func (f *flushHost) Flush() {
	g := goid()
	f.mu.Lock()
	delete(f.unflushed, g)
	f.flushes++
	f.mu.Unlock()
}

// took returns the calls made since the last took.
func (f *flushHost) took() []gcall {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// checkFlushed fails when a goroutine made answers no Flush followed.
func (f *flushHost) checkFlushed(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.unflushed) != 0 {
		t.Fatalf("answers without a Flush after them, by goroutine: %v", f.unflushed)
	}
}

// on splits calls into those made on goroutine g and the others.
func on(calls []gcall, g uint64) (mine, others []gcall) {
	for _, c := range calls {
		if c.g == g {
			mine = append(mine, c)
		} else {
			others = append(others, c)
		}
	}
	return mine, others
}

// Up to InlineArrivals woken pulls run on Arrived's goroutine, before it
// returns and followed by a Flush there; the other woken pulls and every
// POP go to the loop.
func TestInlineRunsOnArrivedsGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFlushHost()
		h := New[item](f, Options{InlineArrivals: 2})
		h.Start()
		defer h.Stop()
		far := time.Now().Add(time.Hour)
		for id := 1; id <= 3; id++ {
			h.Park(pos("T", 0, 0), far, item{id})
		}
		h.Park(Wait{Topic: "T", Queue: 0, Group: "g"}, far, item{4}) // a POP
		h.Park(pos("T", 0, 5), far, item{5})                         // not past 5
		me := goid()
		h.Arrived("T", 0, 1)
		f.mu.Lock()
		mine, _ := on(f.calls, me) // the loop may be running the others meanwhile
		unflushed := f.unflushed[me]
		f.mu.Unlock()
		if len(mine) != 2 || mine[0].kind != "run" || mine[1].kind != "run" || mine[0].id > 3 || mine[1].id > 3 {
			t.Fatalf("inline calls: %+v", mine)
		}
		if unflushed != 0 {
			t.Fatal("Arrived returned before flushing its answers")
		}
		synctest.Wait()
		mine, others := on(f.took(), me)
		if len(mine) != 2 || len(others) != 2 {
			t.Fatalf("after the loop: mine %+v, the loop's %+v", mine, others)
		}
		for _, id := range []int{1, 2, 3, 4} {
			if f.done[id] != 1 {
				t.Fatalf("answers: %v", f.done)
			}
		}
		st := h.Stats()
		if st.Inline != 2 || st.Woken != 4 || st.Held != 1 || st.Pops.Inline != 0 || st.Pops.Woken != 1 {
			t.Fatalf("stats %+v", st)
		}
		f.checkFlushed(t)
	})
}

// InlineArrivals 0 (the default) runs nothing on Arrived's goroutine.
func TestInlineOffByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFlushHost()
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		h.Park(pos("T", 0, 0), time.Now().Add(time.Hour), item{1})
		me := goid()
		h.Arrived("T", 0, 1)
		synctest.Wait()
		if mine, others := on(f.took(), me); len(mine) != 0 || len(others) != 1 {
			t.Fatalf("mine %+v, the loop's %+v", mine, others)
		}
		if st := h.Stats(); st.Inline != 0 || st.Woken != 1 {
			t.Fatalf("stats %+v", st)
		}
		f.checkFlushed(t)
	})
}

// While the loop runs a round (here a POP whose Run waits), an arrival's
// pulls go to the loop too: the dispatcher does not take on work while a
// backlog is being run.
func TestInlineNotWhileLoopBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFlushHost()
		release := make(chan struct{})
		f.run = func(it *item, at Wait) (int64, bool) {
			if it.id == 9 {
				<-release
			}
			return 0, false
		}
		h := New[item](f, Options{InlineArrivals: 4})
		h.Start()
		defer h.Stop()
		far := time.Now().Add(time.Hour)
		h.Park(Wait{Topic: "P", Queue: 0, Group: "g"}, far, item{9})
		h.Arrived("P", 0, 1) // a POP: to the loop, which waits in its Run
		synctest.Wait()
		h.Park(pos("T", 0, 0), far, item{1})
		me := goid()
		h.Arrived("T", 0, 1)
		if mine, _ := on(f.took(), me); len(mine) != 0 {
			t.Fatalf("run inline while the loop was busy: %+v", mine)
		}
		close(release)
		synctest.Wait()
		if f.done[1] != 1 || f.done[9] != 1 {
			t.Fatalf("answers: %v", f.done)
		}
		if st := h.Stats(); st.Inline != 0 || st.Held != 0 {
			t.Fatalf("stats %+v", st)
		}
		f.checkFlushed(t)
	})
}

// An inline Run that asks to wait parks the item again (counted held and
// reparked); when it moved the offset below the queue's max, the item is
// woken again through the loop, not by a nested inline run.
func TestInlineRunWaitParksAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFlushHost()
		f.run = func(it *item, at Wait) (int64, bool) {
			switch at.Offset {
			case 0:
				return 1, true // message 0 was not for it
			case 1:
				return 2, true // nor message 1 (and 2 is there already)
			}
			return 0, false
		}
		h := New[item](f, Options{InlineArrivals: 4})
		h.Start()
		defer h.Stop()
		h.Park(pos("T", 0, 0), time.Now().Add(time.Hour), item{1})
		me := goid()
		f.max.Store(1)
		h.Arrived("T", 0, 1)
		if st := h.Stats(); st.Held != 1 || st.Reparked != 1 || st.Inline != 1 {
			t.Fatalf("after the first arrival: %+v", st)
		}
		f.max.Store(3)
		h.Arrived("T", 0, 3)
		synctest.Wait()
		c := f.took()
		if len(c) != 3 || c[0].g != me || c[1].g != me || c[2].g == me || c[2].off != 2 || f.done[1] != 1 {
			t.Fatalf("calls %+v (Arrived's goroutine %d)", c, me)
		}
		if st := h.Stats(); st.Held != 0 || st.Reparked != 2 || st.Inline != 2 || st.Woken != 3 {
			t.Fatalf("stats %+v", st)
		}
		f.checkFlushed(t)
	})
}

// An item an Arrived runs inline is the run's: Cancel reports false while
// it runs, and the item is answered once, by the run.
func TestInlineCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFlushHost()
		entered, release := make(chan struct{}), make(chan struct{})
		f.run = func(it *item, at Wait) (int64, bool) {
			if it.id == 1 {
				close(entered)
				<-release
			}
			return 0, false
		}
		h := New[item](f, Options{InlineArrivals: 1})
		h.Start()
		defer h.Stop()
		far := time.Now().Add(time.Hour)
		hd1, _ := h.Park(pos("T", 0, 0), far, item{1})
		arrived := make(chan struct{})
		go func() {
			h.Arrived("T", 0, 1)
			close(arrived)
		}()
		<-entered
		if h.Cancel(hd1) {
			t.Fatal("Cancel took back an item being run inline")
		}
		close(release)
		<-arrived
		synctest.Wait()
		if f.done[1] != 1 {
			t.Fatalf("answers: %v", f.done)
		}
		if st := h.Stats(); st.Cancelled != 0 || st.Inline != 1 || st.Held != 0 {
			t.Fatalf("stats %+v", st)
		}
		f.checkFlushed(t)
	})
}

// Stop waits for an inline run in progress; a run that then asks to wait
// goes to Expire (the holder is stopping), before Stop returns, on the
// goroutine that ran it, and is flushed there.
func TestStopWaitsForInlineRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFlushHost()
		entered, release := make(chan struct{}), make(chan struct{})
		f.run = func(it *item, at Wait) (int64, bool) {
			close(entered)
			<-release
			return 1, true
		}
		h := New[item](f, Options{InlineArrivals: 4})
		h.Start()
		h.Park(pos("T", 0, 0), time.Now().Add(time.Hour), item{1})
		var arriver atomic.Uint64
		go func() {
			arriver.Store(goid())
			h.Arrived("T", 0, 1)
		}()
		<-entered
		stopped := make(chan struct{})
		go func() { h.Stop(); close(stopped) }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("Stop returned while an item was being run inline")
		default:
		}
		close(release)
		<-stopped
		c := f.took()
		if len(c) != 2 || c[0].kind != "run" || c[1].kind != "expire" || c[1].g != arriver.Load() || f.done[1] != 1 {
			t.Fatalf("calls %+v", c)
		}
		if st := h.Stats(); st.Expired != 1 || st.Held != 0 || st.Reparked != 0 {
			t.Fatalf("stats %+v", st)
		}
		f.checkFlushed(t)
	})
}

// Every goroutine that answers flushes after: the loop after its round
// and Stop's drain, Park after its Expire once stopped.
func TestFlushAfterLoopDrainAndStoppedPark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFlushHost()
		h := New[item](f, Options{})
		h.Start()
		start := time.Now()
		h.Park(pos("T", 0, 0), start.Add(time.Second), item{1})
		h.Park(pos("T", 1, 0), start.Add(time.Hour), item{2})
		h.Park(pos("T", 2, 0), start.Add(time.Hour), item{3})
		h.Arrived("T", 1, 1)
		time.Sleep(time.Second) // item 1 expires
		synctest.Wait()
		f.checkFlushed(t)
		h.Stop() // item 3 expires in the drain
		f.checkFlushed(t)
		if _, err := h.Park(pos("T", 0, 0), start.Add(time.Hour), item{4}); !errors.Is(err, ErrStopped) {
			t.Fatalf("Park after Stop: %v", err)
		}
		f.checkFlushed(t)
		for id := 1; id <= 4; id++ {
			if f.done[id] != 1 {
				t.Fatalf("answers: %v", f.done)
			}
		}
	})
}

// Many goroutines park, cancel and report arrivals at once, with inline
// runs (run it with -race): every item is answered exactly once (or taken
// back by a Cancel that reported true), every answer is followed by a
// Flush on its goroutine, and nothing stays held.
func TestInlineConcurrentParksArrivalsCancels(t *testing.T) {
	f := newFlushHost()
	f.run = func(it *item, at Wait) (int64, bool) {
		if it.id%3 == 0 && at.Offset < 2 {
			return at.Offset + 1, true
		}
		return 0, false
	}
	const parkers, each, queues = 4, 500, 4
	var max [queues]atomic.Int64
	h := New[item](hostWithMax{f, &max}, Options{InlineArrivals: 2})
	h.Start()
	var cmu sync.Mutex
	cancelled := map[int]int{}
	var wg sync.WaitGroup
	for p := range parkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(p), 2))
			for i := range each {
				q := int32(r.IntN(queues))
				id := p*each + i
				hd, err := h.Park(pos("T", q, max[q].Load()), time.Now().Add(time.Duration(r.IntN(20))*time.Millisecond), item{id})
				if err != nil {
					t.Errorf("Park: %v", err)
					return
				}
				if r.IntN(4) == 0 && h.Cancel(hd) {
					cmu.Lock()
					cancelled[id]++
					cmu.Unlock()
				}
			}
		}()
	}
	arrivers := make(chan struct{})
	stopArrivals := make(chan struct{})
	var awg sync.WaitGroup
	for a := range 2 {
		awg.Add(1)
		go func() {
			defer awg.Done()
			for i := a; ; i += 2 {
				select {
				case <-stopArrivals:
					return
				default:
				}
				q := int32(i % queues)
				h.Arrived("T", q, max[q].Add(1))
				if i%64 < 2 {
					// Pacing, not synchronisation (as in
					// TestConcurrentParksAndArrivals).
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	go func() { awg.Wait(); close(arrivers) }()
	wg.Wait()
	close(stopArrivals)
	<-arrivers
	h.Stop()
	for id := range parkers * each {
		if n := f.done[id] + cancelled[id]; n != 1 {
			t.Fatalf("item %d answered %d times, cancelled %d times", id, f.done[id], cancelled[id])
		}
	}
	st := h.Stats()
	if st.Held != 0 || st.Parked != parkers*each || st.Cancelled != int64(len(cancelled)) {
		t.Fatalf("stats %+v, %d cancelled", st, len(cancelled))
	}
	t.Logf("stats %+v", st)
	f.checkFlushed(t)
}

// hostWithMax is a flushHost whose MaxOffset is per queue.
type hostWithMax struct {
	*flushHost
	max *[4]atomic.Int64
}

func (h hostWithMax) MaxOffset(_ string, q int32) int64 { return h.max[q].Load() }

// Park, an arrival and the inline run it causes do not allocate once the
// pool and the lists have grown.
func TestInlineParkAndWakeDoNotAllocate(t *testing.T) {
	if st := checkParkWakeAllocs(t, Options{InlineArrivals: 4}); st.Inline == 0 {
		t.Fatalf("nothing run inline: %+v", st)
	}
}

// BenchmarkParkWakeInline is BenchmarkParkWake with the woken item run on
// Arrived's goroutine (no hand-off to the loop).
func BenchmarkParkWakeInline(b *testing.B) { benchParkWake(b, Options{InlineArrivals: 4}) }
