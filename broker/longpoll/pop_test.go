package longpoll

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// popFake is a host for POP waits: Run answers the items marked found and
// otherwise asks to wait again with the WakeAt set in next (zero: none).
type popFake struct {
	mu      sync.Mutex
	calls   []call
	found   map[int]bool
	next    map[int]time.Time
	during  func(it *item) // called inside Run, before it answers
	answers map[int]int
}

func newPopFake() *popFake {
	return &popFake{found: map[int]bool{}, next: map[int]time.Time{}, answers: map[int]int{}}
}

func (f *popFake) Run(it *item, w *Wait) bool {
	if f.during != nil {
		f.during(it)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{"run", it.id, *w, time.Now()})
	if f.found[it.id] {
		f.answers[it.id]++
		return false
	}
	w.WakeAt = f.next[it.id]
	return true
}

func (f *popFake) Expire(it *item, w *Wait) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{"expire", it.id, *w, time.Now()})
	f.answers[it.id]++
}

func (f *popFake) MaxOffset(string, int32) int64 { return 0 }

func (f *popFake) set(id int, found bool, next time.Time) {
	f.mu.Lock()
	f.found[id], f.next[id] = found, next
	f.mu.Unlock()
}

func (f *popFake) took() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func popWait(topic string, q int32, group string) Wait {
	return Wait{Topic: topic, Queue: q, Group: group}
}

func ids(calls []call) map[int]string {
	m := map[int]string{}
	for _, c := range calls {
		m[c.id] = c.kind
	}
	return m
}

// An arrival in a queue wakes the POPs of that queue and those of the
// whole topic, whatever their group; POPs of other queues keep waiting.
func TestPopWokenByArrivalInItsQueueOrTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		deadline := time.Now().Add(time.Minute)
		h.Park(popWait("T", AnyQueue, "G"), deadline, item{1})
		h.Park(popWait("T", 2, "H"), deadline, item{2})
		h.Park(popWait("T", 1, "G"), deadline, item{3})
		h.Park(popWait("U", AnyQueue, "G"), deadline, item{4})
		h.Park(pos("T", 2, 9), deadline, item{5}) // a pull past the arrival
		h.Arrived("T", 2, 5)
		synctest.Wait()
		got := ids(f.took())
		if len(got) != 2 || got[1] != "run" || got[2] != "run" {
			t.Fatalf("woken: %v", got)
		}
		st := h.Stats()
		if st.Pops.Woken != 2 || st.Pops.Reparked != 2 || st.Pops.Held != 4 || st.Held != 5 || st.Pops.Revived != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A revive event wakes only its group's POPs of that queue or of the whole
// topic, and counts as a revive.
func TestPopWokenByRevive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		f.set(1, true, time.Time{})
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		deadline := time.Now().Add(time.Minute)
		h.Park(popWait("T", AnyQueue, "G"), deadline, item{1})
		h.Park(popWait("T", AnyQueue, "H"), deadline, item{2})
		h.Park(popWait("T", 1, "G"), deadline, item{3})
		h.Park(popWait("U", 0, "G"), deadline, item{4})
		h.Revived("G", "T", 0, time.Now())
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].id != 1 || c[0].kind != "run" {
			t.Fatalf("calls: %s", describe(c))
		}
		st := h.Stats()
		if st.Pops.Revived != 1 || st.Pops.Woken != 0 || st.Pops.Held != 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A POP parked with a WakeAt is run exactly then (a message of its group
// becomes visible again: counted as a revive), with no look in between;
// waiting again without one, it expires at its deadline.
func TestPopRunsAtWakeAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		start := time.Now()
		w := popWait("T", AnyQueue, "G")
		w.WakeAt = start.Add(3 * time.Second)
		h.Park(w, start.Add(10*time.Second), item{1})
		w.WakeAt = start.Add(20 * time.Second) // after its deadline: never due
		h.Park(w, start.Add(5*time.Second), item{2})
		time.Sleep(3*time.Second - time.Nanosecond)
		synctest.Wait()
		if c := f.took(); len(c) != 0 {
			t.Fatalf("ran early: %s", describe(c))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		c := f.took()
		if len(c) != 1 || c[0].kind != "run" || c[0].id != 1 || !c[0].when.Equal(start.Add(3*time.Second)) {
			t.Fatalf("at the wake-up time: %s", describe(c))
		}
		if st := h.Stats(); st.Pops.Revived != 1 || st.Pops.Reparked != 1 || st.Pops.Woken != 0 {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(7 * time.Second)
		synctest.Wait()
		c = f.took()
		if len(c) != 2 || c[0].kind != "expire" || c[0].id != 2 || !c[0].when.Equal(start.Add(5*time.Second)) ||
			c[1].kind != "expire" || c[1].id != 1 || !c[1].when.Equal(start.Add(10*time.Second)) {
			t.Fatalf("expiries: %s", describe(c))
		}
	})
}

// A revive that names a later time moves a POP's WakeAt earlier (never
// later); one for another group changes nothing.
func TestReviveMovesWakeAtEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		f.set(1, true, time.Time{})
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		start := time.Now()
		w := popWait("T", 3, "G")
		w.WakeAt = start.Add(8 * time.Second)
		h.Park(w, start.Add(time.Minute), item{1})
		h.Revived("G", "T", 3, start.Add(9*time.Second)) // later: ignored
		h.Revived("H", "T", 3, start.Add(time.Second))   // another group
		h.Revived("G", "T", 1, start.Add(time.Second))   // another queue
		h.Revived("G", "T", 3, start.Add(2*time.Second))
		time.Sleep(time.Minute)
		synctest.Wait()
		c := f.took()
		if len(c) != 1 || c[0].kind != "run" || !c[0].when.Equal(start.Add(2*time.Second)) {
			t.Fatalf("calls: %s", describe(c))
		}
	})
}

// An arrival or revive of the topic reported after the POP's Ticket (its
// look found nothing) and before its Park wakes it at once; with a current
// ticket it waits.
func TestPopTicketCatchesEventsBeforePark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		deadline := time.Now().Add(time.Minute)
		for i, event := range []func(){
			func() { h.Arrived("T0", 0, 1) },
			func() { h.Revived("G", "T1", 0, time.Now()) },
		} {
			w := popWait("T"+string(rune('0'+i)), AnyQueue, "G")
			w.Ticket = h.Ticket()
			event() // nobody parked yet
			h.Park(w, deadline, item{10 + i})
			w.Ticket = h.Ticket()
			h.Park(w, deadline, item{20 + i})
			synctest.Wait()
			if c := f.took(); len(c) != 1 || c[0].id != 10+i || c[0].kind != "run" {
				t.Fatalf("event %d: calls %s", i, describe(c))
			}
		}
		h.Arrived("U", 0, 1) // another topic's event does not wake a POP of T
		w := popWait("T", AnyQueue, "G")
		w.Ticket = h.Ticket() - 1
		h.Park(w, deadline, item{30})
		synctest.Wait()
		if c := f.took(); len(c) != 0 {
			t.Fatalf("calls %s", describe(c))
		}
	})
}

// An event of the topic reported while the POP's Run ran (it found the
// POP in no list) runs it again once Run asks to wait.
func TestPopEventDuringRunIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		var h *Holder[item]
		first := true
		f.during = func(it *item) {
			if first {
				first = false
				h.Revived("G", "T", 0, time.Now())
			}
		}
		h = New[item](f, Options{})
		h.Start()
		defer h.Stop()
		h.Park(popWait("T", AnyQueue, "G"), time.Now().Add(time.Minute), item{1})
		h.Arrived("T", 0, 1)
		synctest.Wait()
		if c := f.took(); len(c) != 2 || c[0].kind != "run" || c[1].kind != "run" {
			t.Fatalf("calls %s", describe(c))
		}
	})
}

// A POP woken at its WakeAt that finds nothing and names a time passed
// already does not spin: it waits for events and its deadline.
func TestPopPastWakeAtDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		start := time.Now()
		f.set(1, false, start.Add(time.Second)) // always the same time
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		w := popWait("T", AnyQueue, "G")
		w.WakeAt = start.Add(time.Second)
		h.Park(w, start.Add(time.Minute), item{1})
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if c := f.took(); len(c) != 1 {
			t.Fatalf("%d runs: %s", len(c), describe(c))
		}
	})
}

// Park refuses beyond MaxParked and beyond MaxPerOwner per owner (the item
// is not taken: nothing calls the host), and counts the refusals; answered
// items make room again.
func TestParkBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		f.set(1, true, time.Time{})
		h := New[item](f, Options{MaxParked: 3, MaxPerOwner: 2})
		h.Start()
		defer h.Stop()
		deadline := time.Now().Add(time.Minute)
		park := func(id int, owner any) error {
			w := popWait("T", int32(id), "G")
			w.Owner = owner
			_, err := h.Park(w, deadline, item{id})
			return err
		}
		a, b := new(int), new(int)
		for i, tc := range []struct {
			owner any
			want  error
		}{{a, nil}, {a, nil}, {a, ErrOwnerFull}, {b, nil}, {b, ErrFull}, {nil, ErrFull}} {
			if err := park(i+1, tc.owner); !errors.Is(err, tc.want) {
				t.Fatalf("park %d: %v, want %v", i+1, err, tc.want)
			}
		}
		synctest.Wait()
		if c := f.took(); len(c) != 0 {
			t.Fatalf("refused items reached the host: %s", describe(c))
		}
		if st := h.Stats(); st.Held != 3 || st.Refused != 3 || st.Pops.Refused != 3 || st.Parked != 3 {
			t.Fatalf("stats %+v", st)
		}
		// Item 1 (owner a) is answered by a revive: a may park again.
		h.Revived("G", "T", 1, time.Now())
		synctest.Wait()
		f.took()
		if st := h.Stats(); st.Held != 2 || st.Pops.Revived != 1 {
			t.Fatalf("after the revive: %+v", st)
		}
		if err := park(7, a); err != nil {
			t.Fatalf("after an answer: %v", err)
		}
		if err := park(8, b); !errors.Is(err, ErrFull) {
			t.Fatalf("full again: %v", err)
		}
	})
}

// Park refuses beyond MaxPerClient per client, over the client's owners
// (connections), apart from the owner's bound; an answered item makes room.
func TestParkClientBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		f.set(1, true, time.Time{})
		h := New[item](f, Options{MaxParked: 10, MaxPerOwner: 2, MaxPerClient: 3})
		h.Start()
		defer h.Stop()
		deadline := time.Now().Add(time.Minute)
		park := func(id int, owner, client any) error {
			w := popWait("T", int32(id), "G")
			w.Owner, w.Client = owner, client
			_, err := h.Park(w, deadline, item{id})
			return err
		}
		c1, c2 := "client-1", "client-2"
		for i, tc := range []struct {
			owner, client any
			want          error
		}{{1, c1, nil}, {1, c1, nil}, {1, c1, ErrOwnerFull}, {2, c1, nil}, {2, c1, ErrClientFull}, {3, c1, ErrClientFull},
			{3, c2, nil}, {3, nil, nil}} {
			if err := park(i+1, tc.owner, tc.client); !errors.Is(err, tc.want) {
				t.Fatalf("park %d: %v, want %v", i+1, err, tc.want)
			}
		}
		if st := h.Stats(); st.Held != 5 || st.Refused != 3 {
			t.Fatalf("stats %+v", st)
		}
		// Item 1 (client 1) is answered: client 1 may park again.
		h.Revived("G", "T", 1, time.Now())
		synctest.Wait()
		f.took()
		if err := park(20, 4, c1); err != nil {
			t.Fatalf("after an answer: %v", err)
		}
	})
}

// Cancel takes back a waiting item, or a woken one not yet run (no host
// call, no longer held); it reports false for an item being run, answered
// or reused since.
func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		release := make(chan struct{})
		f.during = func(it *item) {
			if it.id == 2 {
				<-release
			}
		}
		f.set(2, true, time.Time{})
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		deadline := time.Now().Add(time.Minute)
		hd1, err := h.Park(popWait("T", 0, "G"), deadline, item{1})
		if err != nil {
			t.Fatal(err)
		}
		if !h.Cancel(hd1) {
			t.Fatal("Cancel of a waiting item failed")
		}
		if h.Cancel(hd1) {
			t.Fatal("a second Cancel succeeded")
		}
		hd2, _ := h.Park(popWait("T", 1, "G"), deadline, item{2})
		h.Arrived("T", 1, 1)
		synctest.Wait() // Run(2) blocks
		if h.Cancel(hd2) {
			t.Fatal("Cancel of an item being run succeeded")
		}
		// Woken while the loop is busy: still in the ready list.
		hd4, _ := h.Park(popWait("T", 2, "G"), deadline, item{4})
		h.Arrived("T", 2, 1)
		if !h.Cancel(hd4) {
			t.Fatal("Cancel of a woken item not yet run failed")
		}
		close(release)
		synctest.Wait()
		w3 := popWait("T", 0, "G")
		w3.Ticket = h.Ticket()
		h.Park(w3, deadline, item{3}) // reuses an earlier item's entry
		if h.Cancel(hd1) || h.Cancel(hd2) {
			t.Fatal("a stale handle cancelled a new item")
		}
		c := f.took()
		if len(c) != 1 || c[0].id != 2 {
			t.Fatalf("calls %s", describe(c))
		}
		if st := h.Stats(); st.Cancelled != 2 || st.Held != 1 || st.Woken != 2 {
			t.Fatalf("stats %+v", st)
		}
		if (Handle[item]{}) != (Handle[item]{}) || h.Cancel(Handle[item]{}) {
			t.Fatal("the zero handle")
		}
	})
}
