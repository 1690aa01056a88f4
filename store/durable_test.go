package store

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
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
	s.durable.add(1<<40, w)
	if err := w.wait(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("told %v after Close, want ErrClosed", err)
	}
}
