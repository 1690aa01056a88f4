package commitlog

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

// faultRun is one run of the fault-injection workload: the records each
// log acknowledged (WaitFlushed returned nil for them), by offset, and every
// error the log returned.
type faultRun struct {
	t      *testing.T
	fsys   *errorfs.FS
	errs   []error
	failed bool // a call returned ErrLogFailed: every later one must too
}

// note checks an error a log call returned: nil, or the injected failure
// (wrapped with its cause). After ErrLogFailed every call must fail with it.
func (r *faultRun) note(what string, err error) bool {
	r.t.Helper()
	if err == nil {
		if r.failed && what != "close" && what != "retain" {
			r.t.Fatalf("%s succeeded after the log failed: ErrLogFailed must be sticky", what)
		}
		return true
	}
	if !errors.Is(err, errorfs.ErrInjected) {
		r.t.Fatalf("%s: %v: not the injected failure, or its cause was lost", what, err)
	}
	if r.failed && what != "close" && what != "retain" && !errors.Is(err, ErrLogFailed) {
		r.t.Fatalf("%s after the log failed: %v, want ErrLogFailed", what, err)
	}
	if errors.Is(err, ErrLogFailed) {
		r.failed = true
	}
	if f := r.fsys.Fired(); f != nil && f.Op == errorfs.OpMSync && isSegment(f.Path) && what == "wait" && !errors.Is(err, ErrLogFailed) {
		r.t.Fatalf("a failed sync of a segment surfaced as %v, want ErrLogFailed", err)
	}
	r.errs = append(r.errs, err)
	return false
}

func isSegment(path string) bool {
	_, ok := parseSegmentName(filepath.Base(path))
	return ok
}

// appendSome appends n records (bodies seq, seq+1, ...) and waits for them
// every 4, recording the acknowledged ones in acked.
func (r *faultRun) appendSome(l *Log, seq, n int, acked map[int64][]byte) {
	var pending [][2]any
	for i := seq; i < seq+n; i++ {
		rec := encode(r.t, "T", bodyOf(i, 3000))
		var res Result
		if !r.note("append", l.Append(rec, nil, &res)) {
			continue
		}
		pending = append(pending, [2]any{res.Offsets[0], rec})
		if len(pending) == 4 || i == seq+n-1 {
			if r.note("wait", l.WaitFlushed(res.End)) {
				for _, p := range pending {
					acked[p[0].(int64)] = p[1].([]byte)
				}
			}
			pending = pending[:0]
		}
	}
}

// settleAllocator waits until the background allocator has prepared the
// next segment (or given up), so that a copy of the directory does not
// catch a segment file half created.
func settleAllocator(t testing.TB, l *Log) {
	t.Helper()
	wait.Until(t, "the allocator to prepare the next segment or give up", func() bool {
		l.allocMu.Lock()
		defer l.allocMu.Unlock()
		return l.prepared != nil || l.allocErr != nil
	})
}

// copyDir copies a log directory as the page cache holds it: what a crash
// of the process at this moment leaves. Retention may be unlinking segments
// (oldest first), so they are copied newest first: a state a crash can
// leave. The checkpoint goes before the segments (it trails them).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if (a == checkpointName) != (b == checkpointName) {
			if a == checkpointName {
				return -1
			}
			return 1
		}
		return strings.Compare(b, a)
	})
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(from, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile: as if before
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFaults fails every file operation of a workload, one at a time, once
// (a transient fault) and for good (the disk is gone from that operation
// on). The workload: open a new log, append and wait across three segments,
// pin a record, retain (the disk reported full: files unlinked), append,
// retain by age (the file goes to the recycling pool), append into the
// next segment while the allocator recycles the pool's file as the one
// after (registry write, renames), copy the directory as a crash would
// leave it (a recycled prepared segment in it), append into the recycled
// segment, close; then open the copy (recovery after a crash), append into
// a recycled segment again, close. After each run the directories are opened with the real
// file system, and:
//
//   - every error a call returned is the injected one, with its cause; a
//     failed sync of a segment is ErrLogFailed and every later append and
//     wait fails with it (sticky);
//   - after a transient fault that was not a failed sync, appends succeed
//     again;
//   - every acknowledged record not retained away is there, byte for byte,
//     and recovery reports no damage;
//   - every record the log serves validates (CRC, PHYSICALOFFSET) and is one
//     that was appended;
//   - no file, mapping or goroutine outlives Close (or a failed Open).
func TestFaults(t *testing.T) {
	modes := []errorfs.Mode{errorfs.Once, errorfs.Stop}
	errorfs.Walk(t, vfs.Default, modes, func(t *testing.T, fsys *errorfs.FS, dir string) {
		goroutines := runtime.NumGoroutine()
		fsys.Trace()
		r := &faultRun{t: t, fsys: fsys}
		fsys.SetDiskUsage(func(string) (float64, error) { return 0.99, nil })
		var skew atomic.Int64 // added to the logs' clock
		opts := func(d string) Options {
			return Options{Dir: d, FS: fsys, SegmentSize: MinSegmentSize, FlushMode: FlushSync,
				PrefaultAhead: -1, RetentionInterval: -1, CheckpointInterval: time.Nanosecond,
				Logger: testlog.New(t, "commitlog"),
				now:    func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}
		}
		dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		ackedA := map[int64][]byte{}
		var ackedB map[int64][]byte // what the crash copy holds, then what B acknowledged
		minA := int64(0)
		once := func() bool { p, _ := fsys.Point(); return p.Mode == errorfs.Once }

		if l, _, err := Open(opts(dirA)); r.note("open", err) {
			r.appendSome(l, 0, 48, ackedA) // three 64 KiB segments
			pinned, perr := l.ReadRecord(l.MinOffset())
			if _, err := l.RetainBelow(l.WrittenOffset()); r.note("retain", err) {
				minA = l.MinOffset()
			} else {
				minA = l.MinOffset() // what went before the failure is gone
			}
			if perr == nil {
				if _, err := message.Decode(pinned.Bytes(), true); err != nil {
					t.Fatalf("a pinned record went bad under retention: %v", err)
				}
				pinned.Release()
			}
			// Then retention by age (the clock moved on, the disk no longer
			// full): the file of the segment it deletes goes to the
			// recycling pool. Append into the segment prepared before,
			// while the allocator prepares the next one from the pool's
			// file: the copy below holds a recycled prepared segment.
			r.appendSome(l, 50, 24, ackedA)
			skew.Store(int64(100 * time.Hour))
			fsys.SetDiskUsage(func(string) (float64, error) { return 0.5, nil })
			_, err := l.RetainBelow(l.WrittenOffset())
			r.note("retain", err)
			minA = l.MinOffset() // what went before a failure is gone too
			r.appendSome(l, 75, 24, ackedA)
			settleAllocator(t, l)
			copyDir(t, dirA, dirB)
			ackedB = map[int64][]byte{}
			for off, rec := range ackedA {
				if off >= minA {
					ackedB[off] = rec
				}
			}
			r.appendSome(l, 100, 24, ackedA) // into the recycled segment
			if once() && fsys.Fired() != nil && !r.failed {
				// A transient fault that was not a failed sync must not
				// wedge the log.
				var res Result
				if err := l.Append(encode(t, "T", bodyOf(200, 3000)), nil, &res); err != nil {
					t.Fatalf("append after a transient fault: %v", err)
				}
				if err := l.WaitFlushed(res.End); err != nil {
					t.Fatalf("wait after a transient fault: %v", err)
				}
				ackedA[res.Offsets[0]] = nil // present, contents not checked
			}
			r.note("close", l.Close())
		}
		if err := fsys.Leaks(); err != nil {
			t.Fatal(err)
		}
		errorfs.CheckGoroutines(t, goroutines)
		if fsys.Fired() == nil {
			// Without a fault the workload renamed a pool file into place.
			recycled := false
			for _, op := range fsys.Traced() {
				recycled = recycled || strings.HasPrefix(op, "rename") && strings.Contains(op, string(filepath.Separator)+poolPrefix)
			}
			if !recycled {
				t.Fatal("the workload recycled no segment file")
			}
		}

		if ackedB != nil {
			r.failed = false
			if l, _, err := Open(opts(dirB)); r.note("open", err) {
				r.appendSome(l, 300, 24, ackedB) // recycles the pool's file again
				r.note("close", l.Close())
			}
			if err := fsys.Leaks(); err != nil {
				t.Fatal(err)
			}
			errorfs.CheckGoroutines(t, goroutines)
		}

		checkLog(t, dirA, minA, ackedA)
		if ackedB != nil {
			checkLog(t, dirB, 0, ackedB)
		}
	})
}

// checkLog opens dir with the real file system and checks that every
// acknowledged record at or above min is there, byte for byte, that recovery
// reports no damage, and that every record served validates and is one the
// workload appended.
func checkLog(t *testing.T, dir string, min int64, acked map[int64][]byte) {
	t.Helper()
	l, rep, err := Open(Options{Dir: dir, SegmentSize: MinSegmentSize, PrefaultAhead: -1, RetentionInterval: -1})
	if err != nil {
		t.Fatalf("reopen %s: %v", dir, err)
	}
	defer l.Close()
	if rep.Damaged() {
		t.Fatalf("reopen %s reports damage: %s", dir, rep)
	}
	for off, want := range acked {
		if off < min || off < l.MinOffset() {
			if off >= min {
				t.Fatalf("acknowledged record at %d below the log's minimum %d", off, l.MinOffset())
			}
			continue
		}
		v, err := l.ReadRecord(off)
		if err != nil {
			t.Fatalf("acknowledged record at %d: %v (%s)", off, err, rep)
		}
		if want != nil && !bytes.Equal(v.Bytes(), want) {
			t.Fatalf("record at %d differs from the one acknowledged", off)
		}
		v.Release()
	}
	c := l.NewCursor(l.MinOffset())
	defer c.Close()
	for {
		rec, off, err := c.Next()
		if errors.Is(err, ErrOffsetNotWritten) {
			break
		}
		if err != nil {
			t.Fatalf("cursor at %d: %v", c.Offset(), err)
		}
		v, err := message.Decode(rec, true)
		if err != nil || v.PhysicalOffset() != off {
			t.Fatalf("served record at %d does not validate: %v", off, err)
		}
		if len(v.Body()) != 3000 {
			t.Fatalf("served record at %d is not one the workload appended", off)
		}
	}
}
