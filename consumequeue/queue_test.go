package consumequeue

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apogeemq/apogee/mmap"
)

func TestEntryEncodingGolden(t *testing.T) {
	e := Entry{CommitLogOffset: 0x0102030405060708, Size: 0x0A0B0C0D, TagCode: -2}
	want := []byte{
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
		0x0A, 0x0B, 0x0C, 0x0D,
		0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE,
	}
	if got := encode(e); !bytes.Equal(got, want) {
		t.Fatalf("encoded % x, want % x", got, want)
	}
	if got := getEntry(want); got != e {
		t.Fatalf("decoded %+v, want %+v", got, e)
	}
	blank := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0}
	if got := encode(blankEntry); !bytes.Equal(got, blank) {
		t.Fatalf("blank entry % x, want % x", got, blank)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		e    Entry
		want kind
	}{
		{Entry{}, kindZero},
		{blankEntry, kindBlank},
		{Entry{CommitLogOffset: 0, Size: 1}, kindMessage},
		{Entry{CommitLogOffset: 5, Size: 100, TagCode: -9}, kindMessage},
		{Entry{CommitLogOffset: 5}, kindBad},                  // torn: size not written
		{Entry{CommitLogOffset: -1, Size: 10}, kindBad},       // negative offset
		{Entry{CommitLogOffset: 5, Size: -3}, kindBad},        // negative size
		{Entry{CommitLogOffset: 5, Size: blankSize}, kindBad}, // blank size with an offset
		{Entry{TagCode: 1}, kindBad},
	} {
		if got := classify(tc.e); got != tc.want {
			t.Errorf("classify(%+v) = %d, want %d", tc.e, got, tc.want)
		}
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.EntriesPerFile != 300_000 || o.IdleUnmap != defaultIdleUnmap || o.RecoveryWindow != 4096 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	for _, bad := range []Options{{EntriesPerFile: -1}, {EntriesPerFile: maxEntriesPerFile + 1}, {RecoveryWindow: -5}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestAppendGetReadAcrossFiles(t *testing.T) {
	const per, n = 64, 1000
	root := t.TempDir()
	s := openSet(t, root, per)
	q := mustQueue(t, s, "TopicA", 3)
	if _, err := os.Stat(queueDir(root, "TopicA", 3)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("queue directory exists before the first append: %v", err)
	}
	appendRange(t, q, 0, n)
	checkRange(t, q, 0, n)
	if got, want := q.Files(), (n+per-1)/per; got != want {
		t.Fatalf("%d files, want %d", got, want)
	}
	names := listFiles(t, queueDir(root, "TopicA", 3))
	if names[0] != "00000000000000000000" || names[1] != "00000000000000001280" || names[15] != "00000000000000019200" {
		t.Fatalf("file names %v", names[:3])
	}
	// Byte-exact: entry 65 is the second entry of the second file.
	raw, err := os.ReadFile(filepath.Join(queueDir(root, "TopicA", 3), names[1]))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != per*EntrySize {
		t.Fatalf("file is %d bytes, want %d", len(raw), per*EntrySize)
	}
	if got := raw[EntrySize : 2*EntrySize]; !bytes.Equal(got, encode(ent(65))) {
		t.Fatalf("entry 65 on disk % x, want % x", got, encode(ent(65)))
	}
	// Reads of every length across boundaries.
	buf := make([]Entry, 0, 100)
	for _, tc := range []struct{ off, capacity, want int64 }{
		{0, 32, 32}, {50, 32, 32}, {63, 2, 2}, {60, 100, 100}, {990, 32, 10}, {1000, 32, 0}, {0, 0, 0},
	} {
		got, err := q.Read(tc.off, buf[:0:tc.capacity])
		if err != nil {
			t.Fatalf("read %d: %v", tc.off, err)
		}
		if int64(len(got)) != tc.want {
			t.Fatalf("read %d cap %d: %d entries, want %d", tc.off, tc.capacity, len(got), tc.want)
		}
		for i, e := range got {
			if e != ent(tc.off+int64(i)) {
				t.Fatalf("read %d: entry %d = %+v", tc.off, i, e)
			}
		}
	}
	// Read appends after what dst holds.
	pre := append(buf[:0], Entry{Size: 1})
	got, err := q.Read(10, pre[:1:4])
	if err != nil || len(got) != 4 || got[0] != (Entry{Size: 1}) || got[1] != ent(10) || got[3] != ent(12) {
		t.Fatalf("read into non-empty dst: %+v, %v", got, err)
	}
	if _, err := q.Read(n+1, buf[:0]); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read beyond max: %v", err)
	}
	if e, ok := q.LastEntry(); !ok || e != ent(n-1) {
		t.Fatalf("last entry %+v %v", e, ok)
	}
	if got, want := s.MaxCommitLogEnd(), ent(n-1).End(); got != want {
		t.Fatalf("max commitlog end %d, want %d", got, want)
	}
}

func TestAppendRules(t *testing.T) {
	s := openSet(t, t.TempDir(), 16)
	q := mustQueue(t, s, "T", 0)
	appendRange(t, q, 0, 20)
	for _, tc := range []struct {
		name string
		off  int64
		e    Entry
		want error
	}{
		{"redispatch identical", 5, ent(5), nil},
		{"redispatch identical in previous file", 17, ent(17), nil},
		{"redispatch differs", 5, ent(6), ErrConflict},
		{"gap", 21, ent(21), ErrGap},
		{"zero size", 20, Entry{CommitLogOffset: 5000}, ErrInvalidEntry},
		{"negative offset", 20, Entry{CommitLogOffset: -1, Size: 4}, ErrInvalidEntry},
		{"blank size", 20, Entry{CommitLogOffset: 9000, Size: blankSize}, ErrInvalidEntry},
		{"commitlog offset goes back", 20, Entry{CommitLogOffset: ent(19).End() - 1, Size: 4}, ErrInvalidEntry},
		{"negative queue offset", -1, ent(0), ErrInvalidEntry},
		{"dense", 20, ent(20), nil},
	} {
		err := q.Append(tc.off, tc.e)
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	checkRange(t, q, 0, 21)
}

// A new queue whose first append is at a non-zero offset starts there, with
// RocketMQ's blank entries before it in its first file.
func TestAppendRebase(t *testing.T) {
	const per = 16
	root := t.TempDir()
	s := openSet(t, root, per)
	q := mustQueue(t, s, "T", 1)
	appendRange(t, q, 100, 130)
	checkRange(t, q, 100, 130)
	names := listFiles(t, queueDir(root, "T", 1))
	if names[0] != "00000000000000001920" { // 96 * 20
		t.Fatalf("first file %s", names[0])
	}
	raw, err := os.ReadFile(filepath.Join(queueDir(root, "T", 1), names[0]))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if got := raw[i*EntrySize : (i+1)*EntrySize]; !bytes.Equal(got, encode(blankEntry)) {
			t.Fatalf("entry %d on disk % x, want blank", 96+i, got)
		}
	}
	if !bytes.Equal(raw[4*EntrySize:5*EntrySize], encode(ent(100))) {
		t.Fatal("entry 100 not after the blanks")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSet(t, root, per)
	q = mustQueue(t, s, "T", 1)
	checkRange(t, q, 100, 130)

	// Empty again (everything cleaned up), then re-dispatch far ahead: the
	// old files go and the queue restarts.
	if _, err := s.DeleteBelow(ent(1000).CommitLogOffset); err != nil {
		t.Fatal(err)
	}
	if q.MinOffset() != 130 || q.MaxOffset() != 130 {
		t.Fatalf("after cleanup [%d,%d)", q.MinOffset(), q.MaxOffset())
	}
	if err := q.Append(131, ent(131)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, q, 131, 132)
	if err := q.Append(500, ent(500)); !errors.Is(err, ErrGap) {
		t.Fatalf("gap in non-empty queue: %v", err)
	}
	q2 := mustQueue(t, s, "T", 2)
	appendRange(t, q2, 0, 3)
	if _, err := s.DeleteBelow(ent(1000).CommitLogOffset); err != nil {
		t.Fatal(err)
	}
	if err := q2.Append(200, ent(200)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, q2, 200, 201)
	if names := listFiles(t, queueDir(root, "T", 2)); len(names) != 1 || names[0] != "00000000000000003840" {
		t.Fatalf("files after restart %v", names)
	}
	s.Close()
	s = openSet(t, root, per)
	checkRange(t, mustQueue(t, s, "T", 2), 200, 201)
	checkRange(t, mustQueue(t, s, "T", 1), 131, 132)
}

func TestReopenSameState(t *testing.T) {
	const per = 64
	root := t.TempDir()
	s := openSet(t, root, per)
	for id := int32(0); id < 4; id++ {
		appendRange(t, mustQueue(t, s, "T", id), 0, int64(per*int(id)+10))
	}
	appendRange(t, mustQueue(t, s, "Other", 7), 0, 64) // ends exactly at a file end
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Queue("T", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("queue after close: %v", err)
	}
	s = openSet(t, root, per)
	if got := s.MappedFiles(); got != 0 {
		t.Fatalf("OpenSet mapped %d files", got)
	}
	if d := s.Damaged(); len(d) != 0 {
		t.Fatalf("damaged: %+v", d)
	}
	var seen []string
	s.ForEach(func(topic string, id int32, q *Queue) bool {
		seen = append(seen, topic+"/"+strconv.Itoa(int(id)))
		return true
	})
	if want := "[Other/7 T/0 T/1 T/2 T/3]"; fmt.Sprint(seen) != want {
		t.Fatalf("ForEach saw %v, want %s", seen, want)
	}
	for id := int32(0); id < 4; id++ {
		q, ok := s.Lookup("T", id)
		if !ok {
			t.Fatalf("queue %d missing", id)
		}
		checkRange(t, q, 0, int64(per*int(id)+10))
	}
	if got := s.MappedFiles(); got != 1+2+3+4 {
		t.Fatalf("%d files mapped after reading every queue, want 10", got)
	}
	q, _ := s.Lookup("Other", 7)
	checkRange(t, q, 0, 64)
	appendRange(t, q, 64, 70)
	checkRange(t, q, 0, 70)
	if got, want := s.MaxCommitLogEnd(), ent(per*3+9).End(); got != want {
		t.Fatalf("max commitlog end %d, want %d", got, want)
	}
}

func TestTruncateAfter(t *testing.T) {
	const per = 16
	for _, tc := range []struct {
		name      string
		n, keep   int64 // entries written, entries kept
		wantFiles int
	}{
		{"mid file", 100, 50, 4},
		{"file boundary", 100, 48, 4},
		{"just after boundary", 100, 49, 4},
		{"last entry only", 100, 99, 7},
		{"everything", 100, 0, 1},
		{"nothing", 100, 100, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			s := openSet(t, root, per)
			q := mustQueue(t, s, "T", 0)
			appendRange(t, q, 0, tc.n)
			end := int64(0)
			if tc.keep > 0 {
				end = ent(tc.keep - 1).End()
			}
			if err := s.TruncateAfter(end + 50); err != nil { // +50: inside the first dropped record
				t.Fatal(err)
			}
			checkRange(t, q, 0, tc.keep)
			if q.Files() != tc.wantFiles || len(listFiles(t, queueDir(root, "T", 0))) != tc.wantFiles {
				t.Fatalf("%d files (%d on disk), want %d", q.Files(), len(listFiles(t, queueDir(root, "T", 0))), tc.wantFiles)
			}
			if got := s.MaxCommitLogEnd(); got != end {
				t.Fatalf("max commitlog end %d, want %d", got, end)
			}
			// Re-dispatch rewrites the same offsets.
			appendRange(t, q, tc.keep, tc.n+5)
			checkRange(t, q, 0, tc.n+5)
			// And a truncation persists over a reopen.
			if err := q.TruncateAfter(end); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = openSet(t, root, per)
			checkRange(t, mustQueue(t, s, "T", 0), 0, tc.keep)
		})
	}
}

func TestDeleteBelow(t *testing.T) {
	const per = 16
	root := t.TempDir()
	s := openSet(t, root, per)
	q := mustQueue(t, s, "T", 0)
	appendRange(t, q, 0, 160) // 10 files
	q2 := mustQueue(t, s, "T", 1)
	appendRange(t, q2, 0, 5)

	// Commitlog now starts at entry 70's record: files 0..3 (entries 0..63) go.
	n, err := s.DeleteBelow(ent(70).CommitLogOffset)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("removed %d files, want 4", n)
	}
	checkRange(t, q, 70, 160)
	if got := listFiles(t, queueDir(root, "T", 0)); len(got) != 6 || got[0] != "00000000000000001280" {
		t.Fatalf("files left %v", got)
	}
	if q2.MinOffset() != 5 || q2.Files() != 1 {
		t.Fatalf("small queue: min %d, %d files", q2.MinOffset(), q2.Files())
	}
	// MinOffset inside a file is not persisted; DeleteBelow after open restores it.
	s.Close()
	s = openSet(t, root, per)
	q = mustQueue(t, s, "T", 0)
	checkRange(t, q, 64, 160)
	if n, err := s.DeleteBelow(ent(70).CommitLogOffset); err != nil || n != 0 {
		t.Fatalf("second DeleteBelow: %d, %v", n, err)
	}
	checkRange(t, q, 70, 160)
	// Everything is below: the last file stays, the queue is empty.
	if n, err := s.DeleteBelow(1 << 40); err != nil || n != 5 {
		t.Fatalf("DeleteBelow all: %d, %v", n, err)
	}
	checkRange(t, q, 160, 160)
	if q.Files() != 1 {
		t.Fatalf("%d files", q.Files())
	}
	appendRange(t, q, 160, 170)
	checkRange(t, q, 160, 170)
}

func TestSearchByTime(t *testing.T) {
	s := openSet(t, t.TempDir(), 16)
	q := mustQueue(t, s, "T", 0)
	storeTime := func(e Entry) (int64, error) { // entry i was stored at 1000 + 10*i
		i := (e.CommitLogOffset - 1000) / 100
		return 1000 + 10*i, nil
	}
	if got, err := q.SearchByTime(5, storeTime); err != nil || got != 0 {
		t.Fatalf("empty queue: %d, %v", got, err)
	}
	appendRange(t, q, 0, 100)
	for _, tc := range []struct{ ts, want int64 }{
		{0, 0}, {1000, 0}, {1001, 1}, {1010, 1}, {1015, 2}, {1990, 99}, {1991, 100}, {1 << 50, 100},
	} {
		got, err := q.SearchByTime(tc.ts, storeTime)
		if err != nil || got != tc.want {
			t.Errorf("SearchByTime(%d) = %d, %v; want %d", tc.ts, got, err, tc.want)
		}
	}
	if _, err := s.DeleteBelow(ent(40).CommitLogOffset); err != nil {
		t.Fatal(err)
	}
	if got, _ := q.SearchByTime(0, storeTime); got != 40 {
		t.Fatalf("after cleanup, all newer: %d, want 40", got)
	}
	boom := errors.New("boom")
	if _, err := q.SearchByTime(1500, func(Entry) (int64, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("storeTime error: %v", err)
	}
}

func TestFlush(t *testing.T) {
	const per = 16
	root := t.TempDir()
	s, err := OpenSet(root, Options{EntriesPerFile: per, IdleUnmap: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := mustQueue(t, s, "T", 0)
	appendRange(t, q, 0, 40)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, 40, 50)
	// Unmapped files are synced with fdatasync instead.
	s.Sweep(timeAt(1))
	s.Sweep(timeAt(2))
	if s.MappedFiles() != 0 {
		t.Fatalf("%d mapped after sweeps", s.MappedFiles())
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(queueDir(root, "T", 0), "00000000000000000640"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw[(47-32)*EntrySize:(48-32)*EntrySize], encode(ent(47))) {
		t.Fatal("entry 47 not in the file")
	}
	checkRange(t, q, 0, 50)
}

func TestDropQueueAndTopic(t *testing.T) {
	root := t.TempDir()
	s := openSet(t, root, 16)
	q := mustQueue(t, s, "T", 0)
	appendRange(t, q, 0, 40)
	appendRange(t, mustQueue(t, s, "T", 1), 0, 3)
	appendRange(t, mustQueue(t, s, "U", 0), 0, 3)
	if err := s.DropQueue("T", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Get(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("get on dropped queue: %v", err)
	}
	if err := q.Append(40, ent(40)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append on dropped queue: %v", err)
	}
	if _, err := os.Stat(queueDir(root, "T", 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("queue dir still there: %v", err)
	}
	if _, ok := s.Lookup("T", 0); ok {
		t.Fatal("dropped queue still listed")
	}
	q = mustQueue(t, s, "T", 0) // a fresh, empty queue
	checkRange(t, q, 0, 0)
	if err := s.DeleteTopic("T"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "T")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("topic dir still there: %v", err)
	}
	if _, ok := s.Lookup("T", 1); ok {
		t.Fatal("queue of deleted topic still listed")
	}
	checkRange(t, mustQueue(t, s, "U", 0), 0, 3)
	if s.MappedFiles() != 1 {
		t.Fatalf("%d files mapped, want 1", s.MappedFiles())
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := s.Queue(bad, 0); err == nil {
			t.Errorf("topic %q accepted", bad)
		}
	}
	if _, err := s.Queue("T", -1); err == nil {
		t.Error("negative queue id accepted")
	}
}

func TestZeroAllocs(t *testing.T) {
	s := openSet(t, t.TempDir(), 1<<16)
	q := mustQueue(t, s, "T", 0)
	appendRange(t, q, 0, 64)
	next := int64(64)
	if a := testing.AllocsPerRun(1000, func() {
		if err := q.Append(next, ent(next)); err != nil {
			t.Fatal(err)
		}
		next++
	}); a != 0 {
		t.Errorf("Append: %v allocs", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := q.Get(7); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Get: %v allocs", a)
	}
	buf := make([]Entry, 0, 32)
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := q.Read(3, buf[:0]); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Read: %v allocs", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := q.Get(next + 5); !errors.Is(err, ErrOutOfRange) {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Get out of range: %v allocs", a)
	}
}

// TestTailAddr checks the address TailAddr gives for the next append, and
// that prefetching it or what it gives in odd states (no file yet, past the
// tail, beyond the file, a tail Sweep unmapped) never faults, allocates or
// changes what Append stores.
func TestTailAddr(t *testing.T) {
	const per, n = 64, 300
	s, err := OpenSet(t.TempDir(), Options{EntriesPerFile: per, IdleUnmap: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := mustQueue(t, s, "T", 0)
	if a := q.TailAddr(0); a != 0 {
		t.Fatalf("TailAddr with no file = %#x, want 0", a)
	}
	clock := 0
	for off := int64(0); off < n; off++ {
		addrs := []uintptr{q.TailAddr(off), q.TailAddr(off + 1), q.TailAddr(off + per), q.TailAddr(-1)}
		if off > 0 && off%per != 0 {
			// Inside the tail's first, written page: the address is exact.
			if sg := q.tail; (off-sg.start)*EntrySize+EntrySize <= sg.touched && sg.m.Load() != nil {
				want := mmap.Addr(sg.m.Load().Bytes()[(off-sg.start)*EntrySize:])
				if addrs[0] != want {
					t.Fatalf("TailAddr(%d) = %#x, want %#x", off, addrs[0], want)
				}
			}
		}
		if addrs[2] != 0 || addrs[3] != 0 {
			t.Fatalf("TailAddr beyond the tail file: %#x %#x", addrs[2], addrs[3])
		}
		mmap.PrefetchAll(addrs)
		if err := q.Append(off, ent(off)); err != nil {
			t.Fatal(err)
		}
		if off%50 == 49 {
			// Two sweeps with no access between them unmap the tail.
			clock++
			s.Sweep(timeAt(clock))
			clock++
			s.Sweep(timeAt(clock))
			if m := s.MappedFiles(); m != 0 {
				t.Fatalf("%d files still mapped after two idle sweeps", m)
			}
			if a := q.TailAddr(off + 1); a != 0 {
				t.Fatalf("TailAddr of an unmapped tail = %#x, want 0", a)
			}
		}
	}
	checkRange(t, q, 0, n)
	if a := testing.AllocsPerRun(100, func() { q.TailAddr(n) }); a != 0 {
		t.Errorf("TailAddr: %v allocs", a)
	}
}

// TestTailAddrs checks that the batched walk finds exactly what TailAddr
// finds, queue by queue, across queues with no file, unmapped tails and
// offsets past the tail, and that it allocates nothing once addrs has room.
func TestTailAddrs(t *testing.T) {
	const per = 64
	s, err := OpenSet(t.TempDir(), Options{EntriesPerFile: per, IdleUnmap: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var qs []*Queue
	for i := int32(0); i < 12; i++ {
		q := mustQueue(t, s, "T", i)
		for off := int64(0); off < int64(i)*10; off++ { // queue 0 has no file
			if err := q.Append(off, ent(off)); err != nil {
				t.Fatal(err)
			}
		}
		qs = append(qs, q)
	}
	check := func(what string) {
		t.Helper()
		var offs []int64
		var want []uintptr
		for i, q := range qs {
			off := int64(i)*10 + int64(i%3)*per // past the tail file for i%3 != 0
			offs = append(offs, off)
			if a := q.TailAddr(off); a != 0 {
				want = append(want, a)
			}
		}
		got := TailAddrs(qs, offs, make([]uintptr, 2, 64))
		if len(got) != 2+len(want) || !slices.Equal(got[2:], want) {
			t.Fatalf("%s: TailAddrs = %#x, want %#x after the two given", what, got, want)
		}
		if len(want) == 0 {
			t.Fatalf("%s: no queue has an address to compare", what)
		}
		buf := make([]uintptr, 0, 64)
		if a := testing.AllocsPerRun(100, func() { TailAddrs(qs, offs, buf) }); a != 0 {
			t.Errorf("%s: TailAddrs: %v allocs", what, a)
		}
	}
	check("mapped")
	// Two idle sweeps unmap every tail; an append maps the odd queues' back.
	s.Sweep(timeAt(1))
	s.Sweep(timeAt(2))
	for i := 1; i < len(qs); i += 2 {
		if err := qs[i].Append(int64(i)*10, ent(int64(i)*10)); err != nil {
			t.Fatal(err)
		}
	}
	check("half unmapped")
}
