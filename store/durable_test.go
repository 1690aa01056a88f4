package store

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/mmap"
)

// recordingWaiter collects what OnDurable tells it.
type recordingWaiter struct {
	mu   sync.Mutex
	errs []error
	done chan struct{}
}

func newWaiter() *recordingWaiter { return &recordingWaiter{done: make(chan struct{})} }

func (w *recordingWaiter) Durable(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
	close(w.done)
}

func (w *recordingWaiter) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("never told")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) != 1 {
		t.Fatalf("told %d times", len(w.errs))
	}
	return w.errs[0]
}

func TestOnDurableSyncMode(t *testing.T) {
	o := testOptions(t.TempDir())
	o.FlushMode = FlushSync
	s := openStore(t, o)
	defer s.Close()
	var ws []*recordingWaiter
	for i := 0; i < 50; i++ {
		m := msg("T", 0, "x")
		m.NoWait = true // the caller waits through OnDurable
		r, err := s.Put(m)
		if err != nil {
			t.Fatal(err)
		}
		w := newWaiter()
		s.OnDurable(r.CommitLogOffset+int64(r.Size), w)
		ws = append(ws, w)
	}
	for i, w := range ws {
		if err := w.wait(t); err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	if s.DurableOffset() != s.WrittenOffset() {
		t.Fatalf("durable %d, written %d after every waiter was told", s.DurableOffset(), s.WrittenOffset())
	}
	if err := s.WaitDurable(s.WrittenOffset()); err != nil {
		t.Fatal(err)
	}
}

func TestOnDurableAsyncModeAnswersAtOnce(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	r, err := s.Put(msg("T", 0, "x"))
	if err != nil {
		t.Fatal(err)
	}
	w := newWaiter()
	s.OnDurable(r.CommitLogOffset+int64(r.Size), w)
	select {
	case <-w.done: // told on the caller's goroutine
	default:
		t.Fatal("an async-mode waiter was not told at once")
	}
	if err := w.wait(t); err != nil {
		t.Fatal(err)
	}
}

func TestOnDurableAfterCloseIsToldClosed(t *testing.T) {
	o := testOptions(t.TempDir())
	o.FlushMode = FlushSync
	s := openStore(t, o)
	s.Close()
	w := newWaiter()
	s.durable.add(1<<40, time.Now().Add(time.Minute), w)
	if err := w.wait(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("told %v after Close, want ErrClosed", err)
	}
}

// TestOnDurableOwnDeadline (issue 29, case 7): a SYNC_MASTER's waiter added
// while the notifier waits for an earlier one is told FLUSH_SLAVE_TIMEOUT
// at its own deadline (SyncFlushTimeout from its call), not at the end of a
// wait that began before it: the second send of a stalled replica used to
// be answered after twice the timeout. Virtual time (testing/synctest):
// the times are exact.
func TestOnDurableOwnDeadline(t *testing.T) {
	for _, mode := range []FlushMode{FlushAsync, FlushSync} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := replicatedOptions(t.TempDir())
				o.FlushMode = mode
				o.SyncFlushTimeout = 5 * time.Second
				s := openStore(t, o)
				defer s.Close()
				var mu sync.Mutex
				deadlines := map[int64][]time.Time{} // the deadlines each end was waited for with
				hook := func(end int64, deadline time.Time) {
					mu.Lock()
					deadlines[end] = append(deadlines[end], deadline)
					mu.Unlock()
				}
				s.testWaitHook.Store(&hook)
				r := s.AddReplica("stalled", 0) // connected, never acknowledges
				type sent struct {
					end   int64
					start time.Time
					w     *recordingWaiter
					told  time.Time
				}
				send := func(body string) *sent {
					x := &sent{end: putNoWait(t, s, body), start: time.Now(), w: newWaiter()}
					s.OnDurable(x.end, x.w)
					return x
				}
				a := send("a")
				time.Sleep(2 * time.Second) // the notifier is waiting for a
				synctest.Wait()
				b := send("b")
				time.Sleep(time.Second)
				c := send("c")
				for _, x := range []*sent{a, b, c} {
					err := x.w.wait(t)
					x.told = time.Now()
					if !errors.Is(err, ErrReplicaTimeout) {
						t.Fatalf("told %v, want ErrReplicaTimeout", err)
					}
					if took := x.told.Sub(x.start); took != o.SyncFlushTimeout {
						t.Errorf("a send waited %v, its bound is %v", took, o.SyncFlushTimeout)
					}
				}
				// The waits' deadlines were each send's own.
				mu.Lock()
				for _, x := range []*sent{a, b, c} {
					ds := deadlines[x.end]
					if len(ds) == 0 || !ds[len(ds)-1].Equal(x.start.Add(o.SyncFlushTimeout)) {
						t.Errorf("the wait for %d had deadlines %v, want %v", x.end, ds, x.start.Add(o.SyncFlushTimeout))
					}
				}
				mu.Unlock()
				// An acknowledgement still releases what comes after.
				d := send("d")
				time.Sleep(time.Second)
				r.Ack(d.end)
				if err := d.w.wait(t); err != nil {
					t.Fatalf("an acknowledged send: %v", err)
				}
				if took := time.Since(d.start); took != time.Second {
					t.Errorf("an acknowledged send was told after %v, its ack came after 1s", took)
				}
			})
		})
	}
}

// stallFS holds every msync (the commit log's sync) while its gate is set:
// a disk that stopped answering.
type stallFS struct {
	vfs.FS
	mu   sync.Mutex
	gate chan struct{} // nil: syncs pass
}

func (f *stallFS) MSync(name string, m *mmap.Mapping, off, n int) error {
	f.mu.Lock()
	g := f.gate
	f.mu.Unlock()
	if g != nil {
		<-g
	}
	return f.FS.MSync(name, m, off, n)
}

func (f *stallFS) stall(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case on && f.gate == nil:
		f.gate = make(chan struct{})
	case !on && f.gate != nil:
		close(f.gate)
		f.gate = nil
	}
}

// TestOnDurableOwnDeadlineFlush: case 7's rule for the disk: in sync flush
// mode with a stalled sync, a waiter added during the wait for an earlier
// one is told FLUSH_DISK_TIMEOUT at its own deadline. Virtual time.
func TestOnDurableOwnDeadlineFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &stallFS{FS: vfs.Default}
		o := testOptions(t.TempDir())
		o.FlushMode = FlushSync
		o.SyncFlushTimeout = 5 * time.Second
		o.FS = fs
		s := openStore(t, o)
		defer s.Close()
		defer fs.stall(false) // before Close: its final sync must pass
		fs.stall(true)
		type sent struct {
			start time.Time
			w     *recordingWaiter
		}
		send := func(body string) sent {
			x := sent{w: newWaiter()}
			end := putNoWait(t, s, body)
			x.start = time.Now()
			s.OnDurable(end, x.w)
			return x
		}
		a := send("a")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		b := send("b")
		for _, x := range []sent{a, b} {
			if err := x.w.wait(t); !errors.Is(err, ErrFlushTimeout) {
				t.Fatalf("told %v, want ErrFlushTimeout", err)
			}
			if took := time.Since(x.start); took != o.SyncFlushTimeout {
				t.Errorf("a send waited %v for a stalled disk, its bound is %v", took, o.SyncFlushTimeout)
			}
		}
		fs.stall(false)
		c := send("c")
		if err := c.w.wait(t); err != nil {
			t.Fatalf("after the disk came back: %v", err)
		}
	})
}
