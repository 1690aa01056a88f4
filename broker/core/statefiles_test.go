package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/wait"
)

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteFileAtomicKeepsPreviousVersion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	bak := path + BakSuffix
	if err := WriteConfigFile(path, []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bak); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a first write made a .bak: %v", err)
	}
	for v := 2; v <= 3; v++ {
		if err := WriteConfigFile(path, []byte(`{"v":`+string(rune('0'+v))+`}`)); err != nil {
			t.Fatal(err)
		}
		if got, want := readFile(t, path), `{"v":`+string(rune('0'+v))+`}`; got != want {
			t.Fatalf("file after write %d: %s", v, got)
		}
		if got, want := readFile(t, bak), `{"v":`+string(rune('0'+v-1))+`}`; got != want {
			t.Fatalf(".bak after write %d: %s", v, got)
		}
	}
	// The .bak is a file of its own: replacing the file leaves it alone.
	if err := WriteConfigFile(path, []byte(`{"v":4}`)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, bak); got != `{"v":3}` {
		t.Fatalf(".bak: %s", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "state.json" && e.Name() != "state.json.bak" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	// (Without hard links the previous version is copied: internal/durable's
	// TestWriteFileBackupWithoutHardLinks.)
}

type stateV struct {
	V int `json:"v"`
}

func parseStateV(b []byte) (stateV, error) {
	var s stateV
	if err := json.Unmarshal(b, &s); err != nil {
		return s, err
	}
	if s.V <= 0 {
		return s, errors.New("v must be positive") // contents that parse but cannot be used
	}
	return s, nil
}

func TestLoadStateFileFallsBack(t *testing.T) {
	const (
		good    = `{"v":2}`
		older   = `{"v":1}`
		damaged = `{"v":2,"topicConfigTa`
	)
	for _, tc := range []struct {
		name        string
		cur, bak    *string // nil: absent
		want        int     // 0: not found
		fellBack    bool
		errHas      []string
		damagedCopy bool
		warn        string
	}{
		{name: "current", cur: ptr(good), bak: ptr(older), want: 2},
		{name: "current without bak", cur: ptr(good), want: 2},
		{name: "neither", want: 0},
		{name: "damaged", cur: ptr(damaged), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "empty", cur: ptr(""), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "unusable", cur: ptr(`{"v":-1}`), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "missing", bak: ptr(older), want: 1, fellBack: true, warn: "state file missing"},
		{name: "both damaged", cur: ptr(damaged), bak: ptr("garbage"), errHas: []string{"state.json does not parse", "state.json.bak"}},
		{name: "damaged without bak", cur: ptr(damaged), errHas: []string{"state.json does not parse", "no previous version", "state.json.bak"}},
		{name: "missing and bak damaged", bak: ptr("garbage"), errHas: []string{"state.json is missing", "state.json.bak"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			if tc.cur != nil {
				if err := os.WriteFile(path, []byte(*tc.cur), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.bak != nil {
				if err := os.WriteFile(path+BakSuffix, []byte(*tc.bak), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			logs := &logCounter{}
			v, found, fellBack, err := loadStateFile(vfs.Default, path, slog.New(slog.NewTextHandler(logs, nil)), parseStateV)
			if len(tc.errHas) > 0 {
				if err == nil {
					t.Fatalf("loaded %+v", v)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				if _, serr := os.Stat(path + damagedSuffix); serr == nil {
					t.Error("a file was moved aside although the load failed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if found != (tc.want != 0) || v.V != tc.want || fellBack != tc.fellBack {
				t.Fatalf("got %+v found=%v fellBack=%v", v, found, fellBack)
			}
			wantLines := 0
			if tc.warn != "" {
				wantLines = 1
			}
			if len(logs.lines) != wantLines || wantLines == 1 && (logs.count("level=WARN") != 1 || logs.count(tc.warn) != 1) {
				t.Fatalf("log: %q", logs.lines)
			}
			_, serr := os.Stat(path + damagedSuffix)
			if tc.damagedCopy != (serr == nil) {
				t.Fatalf("damaged copy: %v", serr)
			}
			if tc.damagedCopy {
				if got := readFile(t, path+damagedSuffix); got != *tc.cur {
					t.Fatalf("damaged copy holds %q", got)
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatal("the damaged file is still in place")
				}
				// The next write does not make the damaged file the .bak.
				if err := WriteConfigFile(path, []byte(`{"v":3}`)); err != nil {
					t.Fatal(err)
				}
				if got := readFile(t, path+BakSuffix); got != *tc.bak {
					t.Fatalf(".bak after the next write: %q", got)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }

// fakeState is a state with a change count, persisted by counting writes.
type fakeState struct {
	mu        sync.Mutex
	changes   int
	persisted int
	writes    atomic.Int32
	fail      atomic.Bool
	block     chan struct{} // when set, a write waits for it
}

func (s *fakeState) change() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes++
	return s.changes
}

func (s *fakeState) persist() error {
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	c := s.changes
	s.mu.Unlock()
	if s.fail.Load() {
		return errors.New("injected")
	}
	s.writes.Add(1)
	s.mu.Lock()
	s.persisted = max(s.persisted, c)
	s.mu.Unlock()
	return nil
}

func (s *fakeState) covered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.persisted
}

// The state writer's tests run in synctest bubbles: its gaps are virtual
// time, so "a burst within one gap" and "a sync that does not wait out the
// gap" are exact, whatever the load on the machine.

func TestStateWriterCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeState{}
		var errs atomic.Int32
		w := newStateWriter(s.persist, func(error) { errs.Add(1) })
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); w.run(stop) }()

		// Many changes in a burst: one write when the first is asked
		// for, and one after the gap covering all the rest.
		const n = 2000
		for i := 0; i < n; i++ {
			s.change()
			w.request()
		}
		time.Sleep(stateWriteGap)
		synctest.Wait()
		if got, c := s.writes.Load(), s.covered(); got > 2 || c != n {
			t.Fatalf("a burst of %d changes: %d writes a gap later, covering %d", n, got, c)
		}
		// sync returns only after a write that covers what was changed before it.
		c := s.change()
		if err := w.sync(); err != nil {
			t.Fatal(err)
		}
		if s.covered() < c {
			t.Fatalf("sync returned before change %d was written (covered %d)", c, s.covered())
		}

		// A failing write is reported, retried, and reported to sync.
		s.fail.Store(true)
		s.change()
		if err := w.sync(); err == nil {
			t.Fatal("sync: no error from a failing write")
		}
		wait.For(t, "a retry", func() error {
			if n := errs.Load(); n < 2 {
				return fmt.Errorf("%d failed writes reported", n)
			}
			return nil
		})
		s.fail.Store(false)
		c = s.change()
		wait.For(t, "recovery after failures", func() error {
			if got := s.covered(); got < c {
				return fmt.Errorf("covered %d of %d changes", got, c)
			}
			return nil
		})

		close(stop)
		<-done
		// After run: finish writes, then sync writes by itself.
		c = s.change()
		if err := w.finish(s.persist); err != nil || s.covered() < c {
			t.Fatalf("finish: %v, covered %d of %d", err, s.covered(), c)
		}
		c = s.change()
		if err := w.sync(); err != nil || s.covered() < c {
			t.Fatalf("sync after finish: %v", err)
		}
	})
}

// A request waits out the gap after a write; a sync does not.
func TestStateWriterSyncSkipsTheGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeState{}
		w := newStateWriter(s.persist, func(error) {})
		w.minGap = time.Hour
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); w.run(stop) }()
		defer func() { close(stop); <-done }()
		s.change()
		w.request() // the first write has no gap before it
		synctest.Wait()
		if n := s.writes.Load(); n != 1 {
			t.Fatalf("%d writes after the first request, want 1", n)
		}
		c := s.change()
		w.request() // waits an hour
		start := time.Now()
		for i := 0; i < 3; i++ {
			if err := w.sync(); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("sync waited %v for the gap", d)
		}
		if s.covered() < c || s.writes.Load() < 2 {
			t.Fatalf("sync did not write through the gap: %d writes, covered %d of %d", s.writes.Load(), s.covered(), c)
		}
	})
}

// A sync that arrives while no writer runs any more is answered by finish.
func TestStateWriterFinishAnswersWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeState{}
		w := newStateWriter(s.persist, func(error) {})
		stop := make(chan struct{})
		close(stop)
		w.run(stop) // returns at once
		got := make(chan error, 1)
		c := s.change()
		go func() { got <- w.sync() }()
		synctest.Wait() // the caller of sync is parked
		w.mu.Lock()
		waiting := w.next != nil
		w.mu.Unlock()
		if !waiting {
			t.Fatal("sync is parked without a round to wait for")
		}
		if err := w.finish(s.persist); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-got:
			if err != nil || s.covered() < c {
				t.Fatalf("sync: %v", err)
			}
		default:
			t.Fatal("sync not answered by finish")
		}
	})
}
