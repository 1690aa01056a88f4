package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"golang.org/x/sys/unix"
)

var testHost = netip.MustParseAddrPort("127.0.0.1:10911")

// encode returns one encoded record whose body is body.
func encode(t testing.TB, topic string, body []byte) []byte {
	t.Helper()
	r := message.Record{Topic: topic, BornHost: testHost, StoreHost: testHost, BornTimestamp: 1, Body: body}
	b, err := message.AppendRecord(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func bodyOf(i, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i*7 + j)
	}
	copy(b, fmt.Sprintf("rec-%d-", i))
	return b
}

// mustFlush syncs everything written to l (retention deletes only synced
// segments).
func mustFlush(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func openLog(t testing.TB, o Options) *Log {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = MinSegmentSize
	}
	if o.Logger == nil {
		o.Logger = testlog.New(t, "commitlog")
	}
	l, _, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// readAll walks the log from its minimum offset and returns every record's body.
func readAll(t testing.TB, l *Log) [][]byte {
	t.Helper()
	var out [][]byte
	c := l.NewCursor(l.MinOffset())
	defer c.Close()
	for {
		rec, _, err := c.Next()
		if errors.Is(err, ErrOffsetNotWritten) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		v, err := message.Decode(rec, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(v.Body()))
	}
}

func TestAppendReadAcrossSegments(t *testing.T) {
	l := openLog(t, Options{})
	defer l.Close()
	var res Result
	var want [][]byte
	var offsets []int64
	for i := 0; i < 500; i++ {
		body := bodyOf(i, 100+i%700)
		rec := encode(t, "T", body)
		res.Offsets = res.Offsets[:0]
		if err := l.Append(rec, nil, &res); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
		offsets = append(offsets, res.Offsets[0])
		if res.End != res.Offsets[0]+int64(len(rec)) {
			t.Fatalf("end %d, offset %d, size %d", res.End, res.Offsets[0], len(rec))
		}
	}
	if n := len(l.Segments()); n < 3 {
		t.Fatalf("%d segments, want the records to span several", n)
	}
	for i, off := range offsets {
		v, err := l.ReadRecord(off)
		if err != nil {
			t.Fatalf("record %d at %d: %v", i, off, err)
		}
		m, err := message.Decode(v.Bytes(), true)
		if err != nil {
			t.Fatal(err)
		}
		if m.PhysicalOffset() != off || !bytes.Equal(m.Body(), want[i]) {
			t.Fatalf("record %d: offset %d body %q", i, m.PhysicalOffset(), m.Body()[:8])
		}
		if (off / l.SegmentSize()) != (off+int64(m.TotalSize())-1)/l.SegmentSize() {
			t.Fatalf("record %d at %d spans two segments", i, off)
		}
		v.Release()
	}
	got := readAll(t, l)
	if len(got) != len(want) {
		t.Fatalf("cursor read %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("cursor record %d differs", i)
		}
	}
}

func TestReadPastWrittenFails(t *testing.T) {
	l := openLog(t, Options{})
	defer l.Close()
	if _, err := l.Read(0, 1); !errors.Is(err, ErrOffsetNotWritten) {
		t.Fatalf("read of an empty log = %v, want ErrOffsetNotWritten", err)
	}
	var res Result
	rec := encode(t, "T", []byte("x"))
	if err := l.Append(rec, nil, &res); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(0, len(rec)+1); !errors.Is(err, ErrOffsetNotWritten) {
		t.Fatalf("read past the end = %v", err)
	}
	if _, err := l.ReadRecord(res.End); !errors.Is(err, ErrOffsetNotWritten) {
		t.Fatalf("ReadRecord at the end = %v", err)
	}
	if _, err := l.Read(1<<40, 1); !errors.Is(err, ErrOffsetNotWritten) {
		t.Fatalf("read far past the end = %v", err)
	}
	v, err := l.Read(0, len(rec))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.Bytes(), rec) {
		t.Fatal("view differs from the appended (patched) record")
	}
	v.Release()
}

type recordingAssigner struct{ offsets []int64 }

func (a *recordingAssigner) Assign(rec []byte, off int64) {
	message.SetQueueOffset(rec, int64(len(a.offsets)))
	a.offsets = append(a.offsets, off)
}

func TestBatchIsOneUnitInOneSegment(t *testing.T) {
	l := openLog(t, Options{})
	defer l.Close()
	var batch []byte
	for i := 0; i < 10; i++ {
		batch = append(batch, encode(t, "T", bodyOf(i, 1000))...)
	}
	var a recordingAssigner
	var res Result
	for round := 0; round < 20; round++ {
		res.Offsets = res.Offsets[:0]
		if err := l.Append(bytes.Clone(batch), &a, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Offsets) != 10 {
			t.Fatalf("%d offsets for a batch of 10", len(res.Offsets))
		}
		first, last := res.Offsets[0], res.End-1
		if first/l.SegmentSize() != last/l.SegmentSize() {
			t.Fatalf("batch [%d,%d) spans segments", first, res.End)
		}
	}
	for i, off := range a.offsets {
		v, err := l.ReadRecord(off)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := message.Decode(v.Bytes(), true)
		if m.QueueOffset() != int64(i) {
			t.Fatalf("record %d has queue offset %d: assigner patch lost", i, m.QueueOffset())
		}
		v.Release()
	}
}

func TestAppendRejectsBadInput(t *testing.T) {
	l := openLog(t, Options{})
	defer l.Close()
	var res Result
	if err := l.Append(nil, nil, &res); !errors.Is(err, ErrBadBatch) {
		t.Fatalf("empty = %v", err)
	}
	rec := encode(t, "T", []byte("abc"))
	if err := l.Append(rec[:len(rec)-1], nil, &res); !errors.Is(err, ErrBadBatch) {
		t.Fatalf("truncated = %v", err)
	}
	big := encode(t, "T", make([]byte, MinSegmentSize))
	if err := l.Append(big, nil, &res); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("oversized = %v", err)
	}
	if l.WrittenOffset() != 0 {
		t.Fatalf("written %d after rejected appends", l.WrittenOffset())
	}
}

func TestCleanReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir})
	var res Result
	for i := 0; i < 300; i++ {
		if err := l.Append(encode(t, "T", bodyOf(i, 500)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	end := l.WrittenOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, rep, err := Open(Options{Dir: dir, SegmentSize: MinSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if !rep.Clean || rep.End != end || rep.Lost() {
		t.Fatalf("reopen report %+v, want clean at %d", rep, end)
	}
	if got := readAll(t, l2); len(got) != 300 {
		t.Fatalf("%d records after reopen, want 300", len(got))
	}
	if err := l2.Append(encode(t, "T", []byte("after")), nil, &res); err != nil {
		t.Fatal(err)
	}
}

func TestSyncFlushGroupCommit(t *testing.T) {
	l := openLog(t, Options{FlushMode: FlushSync})
	defer l.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var res Result
			for i := 0; i < 50; i++ {
				res.Offsets = res.Offsets[:0]
				if err := l.Append(encode(t, "T", bodyOf(w*1000+i, 200)), nil, &res); err != nil {
					errs <- err
					return
				}
				if err := l.WaitFlushed(res.End); err != nil {
					errs <- err
					return
				}
				if l.FlushedOffset() < res.End {
					errs <- fmt.Errorf("flushed %d < end %d after WaitFlushed", l.FlushedOffset(), res.End)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if l.FlushedOffset() != l.WrittenOffset() {
		t.Fatalf("flushed %d, written %d", l.FlushedOffset(), l.WrittenOffset())
	}
}

func TestAsyncFlushCatchesUp(t *testing.T) {
	l := openLog(t, Options{FlushInterval: 5 * time.Millisecond, FlushLeastPages: 1})
	defer l.Close()
	var res Result
	for i := 0; i < 100; i++ {
		if err := l.Append(encode(t, "T", bodyOf(i, 300)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, "the async flusher to cover the appends", func() error {
		if f := l.FlushedOffset(); f < res.End {
			return fmt.Errorf("flushed %d, written %d", f, res.End)
		}
		return nil
	})
}

func TestFailedSyncIsSticky(t *testing.T) {
	fsys := errorfs.New(vfs.Default)
	l := openLog(t, Options{FlushMode: FlushSync, FS: fsys})
	defer l.Close()
	var res Result
	if err := l.Append(encode(t, "T", []byte("a")), nil, &res); err != nil {
		t.Fatal(err)
	}
	fsys.Arm(errorfs.Point{Op: errorfs.OpMSync, N: fsys.Counts()[errorfs.OpMSync] + 1})
	if err := l.WaitFlushed(res.End); !errors.Is(err, ErrLogFailed) || !errors.Is(err, unix.EIO) {
		t.Fatalf("wait after a failed sync = %v", err)
	}
	if err := l.Append(encode(t, "T", []byte("b")), nil, &res); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("append after a failed sync = %v", err)
	}
	if err := l.WaitFlushed(res.End); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("a second wait after a failed sync = %v: the failure must be sticky", err)
	}
}

func TestDiskFullRefusesThenRecovers(t *testing.T) {
	var full sync.Mutex
	diskFull := false
	fsys := errorfs.New(vfs.Default)
	fsys.FailWhen(func(op errorfs.Op, _ string) unix.Errno {
		full.Lock()
		defer full.Unlock()
		if diskFull && op == errorfs.OpAllocate {
			return unix.ENOSPC
		}
		return 0
	})
	l := openLog(t, Options{FS: fsys, PrefaultAhead: -1})
	defer l.Close()
	// Let the allocator prepare the next segment, then fill the disk and use
	// it up so that the one after cannot be created.
	settleAllocator(t, l)
	full.Lock()
	diskFull = true
	full.Unlock()
	var res Result
	var appended int
	var err error
	for i := 0; i < 1000; i++ {
		if err = l.Append(encode(t, "T", bodyOf(i, 4000)), nil, &res); err != nil {
			break
		}
		appended++
	}
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("append on a full disk = %v, want ErrDiskFull wrapping ENOSPC", err)
	}
	written := l.WrittenOffset()
	if err := l.Append(encode(t, "T", bodyOf(0, 4000)), nil, &res); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("second append on a full disk = %v", err)
	}
	if l.WrittenOffset() != written {
		t.Fatal("a refused append moved the written position")
	}
	if got := len(readAll(t, l)); got != appended {
		t.Fatalf("%d readable records, want the %d acknowledged", got, appended)
	}
	full.Lock()
	diskFull = false
	full.Unlock()
	if err := l.Append(encode(t, "T", bodyOf(0, 4000)), nil, &res); err != nil {
		t.Fatalf("append after space returned: %v", err)
	}
	if got := len(readAll(t, l)); got != appended+1 {
		t.Fatalf("%d readable records after recovery, want %d", got, appended+1)
	}
}

func TestRetentionWaitsForReaders(t *testing.T) {
	now := time.Now()
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	fsys := errorfs.New(vfs.Default)
	fsys.SetDiskUsage(func(string) (float64, error) { return 0.1, nil })
	l := openLog(t, Options{now: clock, RetentionInterval: -1, RetentionTime: time.Hour, FS: fsys})
	defer l.Close()
	var res Result
	for l.WrittenOffset() < 3*l.SegmentSize() {
		if err := l.Append(encode(t, "T", bodyOf(1, 4000)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	mustFlush(t, l)
	if n, err := l.Retain(); err != nil || len(n) != 0 {
		t.Fatalf("retain of fresh segments deleted %+v (%v)", n, err)
	}
	pinned, err := l.ReadRecord(0)
	if err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(l.Dir(), segmentName(0))
	clockMu.Lock()
	now = now.Add(2 * time.Hour)
	clockMu.Unlock()
	n, err := l.Retain()
	if err != nil || len(n) != 3 || n[0].Pressure || n[2].Base != 2*l.SegmentSize() || n[2].End != 3*l.SegmentSize() {
		t.Fatalf("retain deleted %+v (%v), want the 3 sealed segments, for their age", n, err)
	}
	if l.MinOffset() != 3*l.SegmentSize() {
		t.Fatalf("min offset %d after retention", l.MinOffset())
	}
	if _, err := l.ReadRecord(0); !errors.Is(err, ErrOffsetDeleted) {
		t.Fatalf("read below min = %v", err)
	}
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("segment file gone while a view pins it: %v", err)
	}
	if _, err := message.Decode(pinned.Bytes(), true); err != nil {
		t.Fatalf("pinned view unreadable after retention: %v", err)
	}
	pinned.Release()
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Fatalf("segment file still there after the last view was released: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir(), segmentName(l.SegmentSize()))); !os.IsNotExist(err) {
		t.Fatal("an unpinned deleted segment's file remains")
	}
}

func TestRetentionByDiskUsage(t *testing.T) {
	fsys := errorfs.New(vfs.Default)
	l := openLog(t, Options{RetentionInterval: -1, FS: fsys})
	defer l.Close()
	var res Result
	for l.WrittenOffset() < 2*l.SegmentSize() {
		if err := l.Append(encode(t, "T", bodyOf(1, 4000)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	mustFlush(t, l)
	calls := 0
	fsys.SetDiskUsage(func(string) (float64, error) {
		calls++
		if calls == 1 {
			return 0.9, nil
		}
		return 0.5, nil
	})
	n, err := l.Retain()
	if err != nil || len(n) != 1 || !n[0].Pressure || n[0].Usage != 0.9 || n[0].Base != 0 {
		t.Fatalf("retain over the usage ratio deleted %+v (%v), want the first segment, for disk pressure", n, err)
	}
	if l.MinOffset() != l.SegmentSize() {
		t.Fatalf("min offset %d", l.MinOffset())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger on another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRetentionLoopLogsFailures(t *testing.T) {
	var logged syncBuffer
	dir := filepath.Join(t.TempDir(), "log")
	l := openLog(t, Options{Dir: dir, RetentionInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	var res Result
	for l.WrittenOffset() < 2*l.SegmentSize() {
		if err := l.Append(encode(t, "T", bodyOf(1, 4000)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	// statfs of a directory that is not there fails: Retain cannot tell
	// how full the disk is, and the background run must say so.
	moved := dir + ".moved"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a retention failure logged", func() error {
		if s := logged.String(); !strings.Contains(s, "commitlog: retention failed") {
			return fmt.Errorf("log: %q", s)
		}
		return nil
	})
	if err := os.Rename(moved, dir); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCursorAtSegmentEnd checks that AtSegmentEnd is true exactly when the
// next Next moves to another segment (and so ends the earlier views), and
// that the views of one segment stay intact until then.
func TestCursorAtSegmentEnd(t *testing.T) {
	l := openLog(t, Options{})
	defer l.Close()
	var res Result
	for i := 0; i < 300; i++ {
		res.Offsets = res.Offsets[:0]
		if err := l.Append(encode(t, "T", bodyOf(i, 900)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	seg := l.SegmentSize()
	c := l.NewCursor(l.MinOffset())
	defer c.Close()
	var held [][]byte // views returned since the cursor last moved
	prev, segments := int64(-1), 0
	for {
		atEnd := c.AtSegmentEnd()
		rec, off, err := c.Next()
		if errors.Is(err, ErrOffsetNotWritten) {
			if atEnd {
				t.Error("AtSegmentEnd true at the written position")
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		moved := prev < 0 || off/seg != prev/seg
		if atEnd != moved {
			t.Fatalf("record at %d (previous at %d): AtSegmentEnd %v, moved %v", off, prev, atEnd, moved)
		}
		if moved {
			segments++
			held = held[:0]
		}
		for i, h := range held {
			if _, err := message.Decode(h, true); err != nil {
				t.Fatalf("held view %d of the segment went bad: %v", i, err)
			}
		}
		held = append(held, rec)
		prev = off
	}
	if segments < 4 {
		t.Fatalf("records spread over %d segments, want at least 4", segments)
	}
}

func TestRetainBelowKeepsSegmentsPastTheLimit(t *testing.T) {
	fsys := errorfs.New(vfs.Default)
	fsys.SetDiskUsage(func(string) (float64, error) { return 0.99, nil }) // always too full
	l := openLog(t, Options{RetentionInterval: -1, FS: fsys})
	defer l.Close()
	var res Result
	for l.WrittenOffset() < 3*l.SegmentSize()+100 {
		if err := l.Append(encode(t, "T", bodyOf(1, 4000)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	mustFlush(t, l)
	// A reader (the store's dispatcher) is in the second segment: only the
	// first may go, however full the disk.
	removed, err := l.RetainBelow(l.SegmentSize() + 10)
	if err != nil || len(removed) != 1 || removed[0].Base != 0 {
		t.Fatalf("RetainBelow removed %+v (%v), want only the first segment", removed, err)
	}
	if l.MinOffset() != l.SegmentSize() {
		t.Fatalf("min offset %d", l.MinOffset())
	}
}

// A segment file a crash left under TruncateTo's or RestartAt's temporary
// name is removed by the next Open (it is never part of the log, and it is a
// whole segment on disk); files that merely look alike are left alone, and
// the log's records are untouched.
func TestOpenRemovesUnfinishedSegments(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir})
	var res Result
	for i := 0; i < 50; i++ {
		if err := l.Append(encode(t, "T", bodyOf(i, 200)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	want := readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leftovers := []string{segmentName(0) + truncateSuffix, segmentName(MinSegmentSize) + restartSuffix}
	kept := []string{"notes" + truncateSuffix, segmentName(0) + ".bak"}
	for _, name := range append(leftovers, kept...) {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l = openLog(t, Options{Dir: dir})
	defer l.Close()
	for _, name := range leftovers {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", name, err)
		}
	}
	for _, name := range kept {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v, want it kept", name, err)
		}
	}
	if got := readAll(t, l); len(got) != len(want) {
		t.Fatalf("%d records after reopening, want %d", len(got), len(want))
	}
}

// Retention deletes a segment only once it is synced: an unlink is durable
// only with the directory's next sync, so after a power loss a deleted
// segment can come back holding what reached the disk, and an unsynced one
// may hold nothing, in the middle of the log (TestPowerLossAsyncFlush-
// LosesOnlyTheUnsyncedWindow saw it: a whole zeroed segment below the
// flushed offset, which the flusher had moved past once retention removed
// the segment).
func TestRetainKeepsUnsyncedSegments(t *testing.T) {
	l := openLog(t, Options{RetentionInterval: -1, RetentionTime: time.Nanosecond, FlushInterval: time.Hour, FlushThoroughInterval: time.Hour})
	defer l.Close()
	var res Result
	for l.WrittenOffset() < 3*l.SegmentSize()+100 {
		if err := l.Append(encode(t, "T", bodyOf(1, 4000)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := l.Retain(); err != nil || len(removed) != 0 {
		t.Fatalf("Retain before any sync removed %+v (%v), want nothing", removed, err)
	}
	mustFlush(t, l)
	if removed, err := l.Retain(); err != nil || len(removed) != 3 {
		t.Fatalf("Retain after a sync removed %+v (%v), want the 3 sealed segments", removed, err)
	}
}
