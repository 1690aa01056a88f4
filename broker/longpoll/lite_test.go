package longpoll

import (
	"testing"
	"testing/synctest"
	"time"
)

func liteWait(client string, ticket uint64) Wait {
	return Wait{Group: "G", Queue: AnyQueue, Client: client, Lite: true, Ticket: ticket}
}

// A lite receive waits on its client: Notified(client) wakes it and no
// other client's; arrivals and revives of topics do not.
func TestLiteWokenByNotified(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		deadline := time.Now().Add(time.Minute)
		tk := h.Ticket()
		h.Park(liteWait("a", tk), deadline, item{1})
		h.Park(liteWait("b", tk), deadline, item{2})
		h.Arrived("", 0, 5)
		h.Revived("G", "", 0, time.Now())
		synctest.Wait()
		if c := f.took(); len(c) != 0 {
			t.Fatalf("calls: %s", describe(c))
		}
		f.set(1, true, time.Time{})
		h.Notified("a")
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].id != 1 || c[0].kind != "run" {
			t.Fatalf("calls: %s", describe(c))
		}
		st := h.Stats()
		if st.Pops.Held != 1 || st.Held != 1 {
			t.Fatalf("stats %+v", st)
		}
		h.Forget("a")
		time.Sleep(2 * time.Minute) // synctest's fake clock: b expires
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].id != 2 || c[0].kind != "expire" {
			t.Fatalf("calls: %s", describe(c))
		}
	})
}

// A Notified between the look (its ticket) and the park is not lost: the
// receive runs at once.
func TestLiteNotifiedBeforePark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		f.set(1, true, time.Time{})
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		tk := h.Ticket()
		h.Notified("a")
		h.Notified("b") // another client's: no effect on a's next park
		h.Park(liteWait("a", tk), time.Now().Add(time.Minute), item{1})
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].id != 1 || c[0].kind != "run" {
			t.Fatalf("calls: %s", describe(c))
		}
		// A park with a fresh ticket waits.
		h.Park(liteWait("b", h.Ticket()), time.Now().Add(time.Minute), item{2})
		synctest.Wait()
		if c := f.took(); len(c) != 0 {
			t.Fatalf("calls: %s", describe(c))
		}
	})
}

// A lite receive's WakeAt (a batch of its client visible again) runs it.
func TestLiteRunsAtWakeAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPopFake()
		f.set(1, true, time.Time{})
		h := New[item](f, Options{})
		h.Start()
		defer h.Stop()
		w := liteWait("a", h.Ticket())
		w.WakeAt = time.Now().Add(time.Second)
		h.Park(w, time.Now().Add(time.Minute), item{1})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if c := f.took(); len(c) != 1 || c[0].id != 1 || c[0].kind != "run" {
			t.Fatalf("calls: %s", describe(c))
		}
	})
}
