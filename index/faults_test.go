package index

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

// The fault workload's messages: message i has the key "k<i>" at commit-log
// offset 1000+100i, stored at ts0 + i seconds.
func faultKey(i int) string  { return fmt.Sprintf("k%d", i) }
func faultOff(i int) int64   { return 1000 + int64(i)*100 }
func faultTs(i int) int64    { return ts0 + int64(i)*1000 }
func faultMsg(off int64) int { return int((off - 1000) / 100) }

type idxRun struct {
	t      *testing.T
	sticky error // a failed sync: every later Put and Flush must fail
	acked  map[int]bool
	gone   map[int]bool // truncated away: must not be served
}

// ok checks a returned error: nil, or the injected failure with its cause.
func (r *idxRun) ok(what string, err error) bool {
	r.t.Helper()
	if err == nil {
		if r.sticky != nil && (what == "put" || what == "flush") {
			r.t.Fatalf("%s succeeded after a failed sync (%v): the failure must be sticky", what, r.sticky)
		}
		return true
	}
	if !errors.Is(err, errorfs.ErrInjected) {
		r.t.Fatalf("%s: %v: not the injected failure, or its cause was lost", what, err)
	}
	if what == "flush" {
		r.sticky = err
	}
	return false
}

func (r *idxRun) put(x *Index, from, to int) {
	for i := from; i < to; i++ {
		if r.ok("put", x.Put("T", faultKey(i), faultOff(i), faultTs(i))) {
			r.acked[i] = true
			delete(r.gone, i)
		}
	}
}

// query checks what a query for message i's key serves: every offset must be
// one of a message whose key has the same hash, never a truncated one.
func (r *idxRun) query(x *Index, i int) []int64 {
	got, err := x.Query("T", faultKey(i), 0, ts0+1e9, 100, nil)
	if !r.ok("query", err) {
		return nil
	}
	h := keyHash("T", faultKey(i))
	for _, off := range got {
		m := faultMsg(off)
		if off != faultOff(m) || keyHash("T", faultKey(m)) != h {
			r.t.Fatalf("query for %s served offset %d, which no message with that key hash has", faultKey(i), off)
		}
		if r.gone[m] {
			r.t.Fatalf("query for %s served offset %d, truncated away", faultKey(i), off)
		}
	}
	return got
}

func (r *idxRun) clone() *idxRun {
	c := &idxRun{t: r.t, acked: map[int]bool{}, gone: map[int]bool{}}
	for k, v := range r.acked {
		c.acked[k] = v
	}
	for k, v := range r.gone {
		c.gone[k] = v
	}
	return c
}

// TestFaults fails every file operation of a workload, one at a time, once
// (a transient fault) and for good. The workload: a new index of small
// files; 100 keys (four files, each roll syncing the full one) with a flush
// midway; queries; DeleteBefore; a copy of the directory as a crash leaves
// it; TruncateAfter through the newest files and the re-put a store makes
// from resumeFrom; close. Then the directory is reopened (the newest file
// rescanned) and the copy too, each put to across a roll and closed. After
// each run both are opened with the real file system, and:
//
//   - every error returned is the injected one, with its cause; after a
//     failed sync every Put and Flush fails (sticky);
//   - every acknowledged key that no DeleteBefore may have removed is found;
//   - no query serves an offset of another key's hash or of a truncated
//     message;
//   - no file, mapping or goroutine outlives Close (or a failed Open).
func TestFaults(t *testing.T) {
	modes := []errorfs.Mode{errorfs.Once, errorfs.Stop}
	errorfs.Walk(t, vfs.Default, modes, func(t *testing.T, fsys *errorfs.FS, dir string) {
		goroutines := runtime.NumGoroutine()
		o := Options{SlotCount: 16, MaxEntries: 32, FS: fsys}
		r := &idxRun{t: t, acked: map[int]bool{}, gone: map[int]bool{}}
		var rb *idxRun
		dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		truncated := false
		if x, err := Open(dirA, o); r.ok("open", err) {
			r.put(x, 0, 50)
			r.ok("flush", x.Flush())
			r.put(x, 50, 100)
			r.ok("flush", x.Flush())
			for _, i := range []int{3, 42, 77, 99} {
				r.query(x, i)
			}
			_, err := x.DeleteBefore(faultOff(40))
			r.ok("delete", err)
			copyTree(t, dirA, dirB)
			rb = r.clone()
			// The log was cut at message 80: what it held from there is gone.
			// resumeFrom holds even when an unlink failed (a file may then
			// come back at the next Open, for the store's next TruncateAfter).
			resume, err := x.TruncateAfter(faultOff(80))
			truncated = r.ok("truncate", err)
			if resume > faultOff(80) {
				t.Fatalf("TruncateAfter resumes at %d", resume)
			}
			for i := range r.acked {
				if faultOff(i) > resume { // back only if put again
					delete(r.acked, i)
				}
			}
			if truncated {
				for i := 80; i < 100; i++ {
					r.gone[i] = true
				}
			}
			r.put(x, max(faultMsg(resume), 0), 80)
			for _, i := range []int{42, 61, 79, 85} {
				r.query(x, i)
			}
			r.put(x, 200, 220)
			r.ok("close", x.Close())
		}
		fsys.CheckReleased(t, goroutines)
		if x, err := Open(dirA, o); r.ok("reopen", err) {
			r.sticky = nil
			r.put(x, 220, 260)
			r.ok("flush", x.Flush())
			r.query(x, 230)
			r.ok("close", x.Close())
		}
		fsys.CheckReleased(t, goroutines)
		if rb != nil {
			r.sticky = nil
			rb.t = t
			if x, err := Open(dirB, o); rb.ok("open copy", err) {
				rb.put(x, 100, 140)
				rb.ok("close", x.Close())
			}
			fsys.CheckReleased(t, goroutines)
		}
		checkIndex(t, dirA, r, 40)
		if rb != nil {
			checkIndex(t, dirB, rb, 40)
		}
	})
}

// checkIndex opens dir with the real file system and checks that every
// acknowledged key from message keep on is found, and that queries serve
// nothing wrong.
func checkIndex(t *testing.T, dir string, r *idxRun, keep int) {
	t.Helper()
	x, err := Open(dir, Options{SlotCount: 16, MaxEntries: 32})
	if err != nil {
		t.Fatalf("reopen %s: %v", dir, err)
	}
	defer x.Close()
	r.sticky = nil
	for i, ok := range r.acked {
		got := r.query(x, i)
		if ok && i >= keep && !slices.Contains(got, faultOff(i)) {
			t.Fatalf("%s: acknowledged key %s (offset %d) not found: %v", dir, faultKey(i), faultOff(i), got)
		}
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range listFiles(t, from) {
		b, err := os.ReadFile(filepath.Join(from, n))
		if err != nil {
			continue // a .tmp renamed while copying
		}
		if err := os.WriteFile(filepath.Join(to, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
