package litequeue

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

// ent is entry k of lite topic l: values a reader can check.
func ent(l, k int) Entry {
	return Entry{CommitLogOffset: int64(k)*1000 + int64(l)*10 + 1, Size: int32(100 + l), TagCode: int64(l)<<32 | int64(k)}
}

// expLite is what a lite topic must hold after a reopen: at least flushed
// entries (durable) and at most acked (appended); deleted ones may be gone
// or whole.
type expLite struct {
	acked, flushed int
	deleted        bool
	deleteFlushed  bool
}

// lqRun is a run of TestFaults: its checker and what the lite topics must
// hold.
type lqRun struct {
	*errorfs.Checker
	t     *testing.T
	lites []string
	exp   []expLite
	// offset committed and flushed (-1: none)
	offFlushed int64
}

// appendN appends n entries to every lite topic still appendable.
func (r *lqRun) appendN(x *Index, n int) {
	for i := 0; i < n; i++ {
		for l, name := range r.lites {
			e := &r.exp[l]
			if e.deleted || e.acked < 0 {
				continue
			}
			k := e.acked
			if !r.Retry("append", func() error {
				_, err := x.Append([]byte("P"), []byte(name), ent(l, k), 1)
				return err
			}) {
				e.acked = -e.acked - 1 // stuck: no more appends (decoded by acked())
				continue
			}
			e.acked++
		}
	}
}

func acked(e expLite) int {
	if e.acked < 0 {
		return -e.acked - 1
	}
	return e.acked
}

func (r *lqRun) flush(x *Index) {
	if r.OK("flush", x.Flush()) {
		for l := range r.exp {
			r.exp[l].flushed = acked(r.exp[l])
			if r.exp[l].deleted {
				r.exp[l].deleteFlushed = true
			}
		}
	}
}

// check opens dir with the real file system and checks it against exp.
func (r *lqRun) check(dir string, exp []expLite, offFlushed int64) {
	t := r.t
	t.Helper()
	x, _, err := Open(dir, Options{FileSize: testFileSize})
	if err != nil {
		t.Fatalf("reopen %s: %v", dir, err)
	}
	defer x.Close()
	for l, name := range r.lites {
		e := exp[l]
		mn, mx, ok := x.Offsets("P", name)
		switch {
		case !ok && (e.flushed == 0 || e.deleted):
			continue
		case !ok:
			t.Fatalf("%s missing, %d entries flushed", name, e.flushed)
		case e.deleteFlushed:
			t.Fatalf("%s still there after its deletion was flushed", name)
		}
		if mx < int64(e.flushed) || mx > int64(acked(e)) {
			t.Fatalf("%s: max %d, flushed %d, acked %d", name, mx, e.flushed, acked(e))
		}
		got, _, _, _, err := x.Read("P", name, mn, make([]Entry, 0, mx-mn))
		if err != nil || int64(len(got)) != mx-mn {
			t.Fatalf("%s: read %d of %d..%d: %v", name, len(got), mn, mx, err)
		}
		for i, g := range got {
			if k := int(mn) + i; g != ent(l, k) {
				t.Fatalf("%s at %d: %+v, want %+v", name, k, g, ent(l, k))
			}
		}
	}
	if offFlushed >= 0 {
		if off, ok := x.Offset("g", "P", r.lites[0]); !ok || off != offFlushed {
			t.Fatalf("offset %d %v, flushed %d", off, ok, offFlushed)
		}
	}
}

// TestFaults fails every file operation of a workload, one at a time, once
// (a transient fault) and for good. The workload: open; four lite topics
// filled over two block files with flushes between; an offset committed;
// a lite topic deleted; retention (DeleteBelow) freeing early blocks; a
// copy of the directory as a crash leaves it; Close (TABLE). Then the
// directory (clean path) and the copy (rebuild path) are reopened through
// the faulty file system, appended to and closed. After each run both are
// opened with the real file system, and:
//
//   - every error returned is the injected one, with its cause, and after a
//     transient fault the same call succeeds when tried again;
//   - each lite topic holds every entry up to the last Flush that succeeded
//     and no more than it acknowledged, each the right one;
//   - an offset flushed is there; a deletion flushed holds;
//   - no file, mapping or goroutine outlives Close (or a failed Open).
func TestFaults(t *testing.T) {
	modes := []errorfs.Mode{errorfs.Once, errorfs.Stop}
	errorfs.Walk(t, vfs.Default, modes, func(t *testing.T, fsys *errorfs.FS, dir string) {
		goroutines := runtime.NumGoroutine()
		r := &lqRun{Checker: errorfs.NewChecker(t, fsys), t: t, lites: []string{"a", "b", "c", "d"}, offFlushed: -1}
		r.exp = make([]expLite, len(r.lites))
		opts := Options{FileSize: testFileSize, FS: fsys}
		dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		var expB []expLite
		offB := int64(-1)
		if x, _, err := Open(dirA, opts); r.OK("open", err) {
			r.appendN(x, 500) // 21 blocks each: 84, past the first file's 128 with the next
			r.flush(x)
			if r.OK("commit", x.CommitOffset("g", "P", "a", 7)) {
				if x.Flush() == nil {
					r.offFlushed = 7
					for l := range r.exp {
						r.exp[l].flushed = acked(r.exp[l])
					}
				}
			}
			r.appendN(x, 700)
			if _, err := x.Delete("P", "d"); r.OK("delete", err) {
				r.exp[3].deleted = true
			}
			r.OK("delete below", x.DeleteBelow(ent(0, 400).CommitLogOffset))
			r.flush(x)
			r.appendN(x, 30)
			errorfs.CopyTree(t, dirA, dirB)
			expB, offB = append([]expLite(nil), r.exp...), r.offFlushed
			if r.OK("close", x.Close()) {
				for l := range r.exp {
					r.exp[l].flushed = acked(r.exp[l])
					if r.exp[l].deleted {
						r.exp[l].deleteFlushed = true
					}
				}
			}
		}
		fsys.CheckReleased(t, goroutines)
		for _, d := range []struct {
			dir string
			exp *[]expLite
		}{{dirA, &r.exp}, {dirB, &expB}} {
			if *d.exp == nil {
				continue
			}
			r.exp, *d.exp = *d.exp, r.exp
			if x, _, err := Open(d.dir, opts); r.OK("reopen", err) {
				// What the reopen found is the new truth for these appends.
				for l, name := range r.lites {
					_, mx, ok := x.Offsets("P", name)
					if !r.exp[l].deleted && int(mx) < r.exp[l].flushed {
						t.Fatalf("reopen: %s has %d entries (%v), %d flushed", name, mx, ok, r.exp[l].flushed)
					}
					if ok && !r.exp[l].deleted && r.exp[l].acked >= 0 {
						r.exp[l].acked = int(mx)
					}
				}
				r.appendN(x, 10)
				if r.OK("close", x.Close()) {
					for l := range r.exp {
						r.exp[l].flushed = acked(r.exp[l])
					}
				}
			}
			fsys.CheckReleased(t, goroutines)
			r.exp, *d.exp = *d.exp, r.exp
		}
		r.check(dirA, r.exp, r.offFlushed)
		if expB != nil {
			r.check(dirB, expB, offB)
		}
	})
}
