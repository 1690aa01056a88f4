package consumequeue

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFillLostKeepsOffsetsDenseAndValid(t *testing.T) {
	root := t.TempDir()
	s := openSet(t, root, 64)
	q := mustQueue(t, s, "T", 0)
	appendRange(t, q, 0, 10)
	// Records 10..14 were lost: the next record has queue offset 15.
	if err := q.Append(15, ent(15)); !errors.Is(err, ErrGap) {
		t.Fatalf("append past a gap: %v, want ErrGap", err)
	}
	if err := q.FillLost(15); err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, 15, 20)
	for i := int64(10); i < 15; i++ {
		e, err := q.Get(i)
		if err != nil || !e.IsLost() || e.CommitLogOffset < ent(9).End() || e.End() > ent(15).CommitLogOffset {
			t.Fatalf("entry %d = %+v (%v): want a lost entry inside the gap", i, e, err)
		}
	}
	s.Close()
	// The lost entries are valid entries to recovery, strict and not.
	s = openSet(t, root, 64)
	if d := s.Damaged(); len(d) != 0 {
		t.Fatalf("damaged after a clean close: %+v", d)
	}
	s.Close()
	forgetCleanShutdown(t, root)
	s = openSet(t, root, 64)
	if q := mustQueue(t, s, "T", 0); q.MaxOffset() != 20 {
		t.Fatalf("max %d after a crash-path open, want 20", q.MaxOffset())
	}
}

func TestSearchCommitLogOffset(t *testing.T) {
	s := openSet(t, t.TempDir(), 16)
	q := mustQueue(t, s, "T", 0)
	if err := q.Append(5, ent(5)); err != nil { // blanks pre-fill 0..4
		t.Fatal(err)
	}
	appendRange(t, q, 6, 40)
	for _, tc := range []struct{ off, want int64 }{
		{0, 5}, {ent(5).CommitLogOffset, 5}, {ent(5).CommitLogOffset + 1, 6},
		{ent(20).CommitLogOffset, 20}, {ent(39).CommitLogOffset, 39}, {ent(39).End(), 40},
	} {
		if got, err := q.SearchCommitLogOffset(tc.off); err != nil || got != tc.want {
			t.Errorf("SearchCommitLogOffset(%d) = %d (%v), want %d", tc.off, got, err, tc.want)
		}
	}
}

func TestRepairRewritesOnlyWhatDiffers(t *testing.T) {
	root := t.TempDir()
	s := openSet(t, root, 64)
	q := mustQueue(t, s, "T", 0)
	appendRange(t, q, 0, 30)
	if wrote, err := q.Repair(7, ent(7)); err != nil || wrote {
		t.Fatalf("repair with the stored entry: wrote %v (%v)", wrote, err)
	}
	bad := ent(7)
	bad.TagCode++
	if wrote, err := q.Repair(7, bad); err != nil || !wrote {
		t.Fatalf("repair with another entry: wrote %v (%v)", wrote, err)
	}
	if e, _ := q.Get(7); e != bad {
		t.Fatalf("entry 7 = %+v after repair", e)
	}
	if _, err := q.Repair(30, ent(30)); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("repair at max: %v, want ErrOutOfRange", err)
	}
	q.Repair(7, ent(7))
	s.Close()
	s = openSet(t, root, 64)
	checkRange(t, mustQueue(t, s, "T", 0), 0, 30)
}

func TestReadOnlyReportsAndWritesNothing(t *testing.T) {
	root := t.TempDir()
	s := openSet(t, root, 64)
	appendRange(t, mustQueue(t, s, "T", 0), 0, 50)
	appendRange(t, mustQueue(t, s, "T", 1), 0, 50)
	s.Close()
	forgetCleanShutdown(t, root) // a crash: recovery would cut the torn tail
	file := filepath.Join(queueDir(root, "T", 0), "00000000000000000000")
	writeRawAt(t, file, 49, make([]byte, 9))
	before, _ := os.ReadFile(file)
	ro, err := OpenSet(root, Options{EntriesPerFile: 64, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	d := ro.Damaged()
	if len(d) != 1 || d[0].QueueID != 0 {
		t.Fatalf("damaged %+v, want queue 0 reported", d)
	}
	q, ok := ro.Lookup("T", 1)
	if !ok {
		t.Fatal("queue 1 missing")
	}
	checkRange(t, q, 0, 50)
	if err := q.Append(50, ent(50)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Append on a read-only set: %v", err)
	}
	if _, err := ro.Queue("U", 0); err == nil {
		t.Fatal("a read-only set created a queue")
	}
	ro.Close()
	after, _ := os.ReadFile(file)
	if !bytes.Equal(before, after) {
		t.Fatal("a read-only set changed a file")
	}
	if _, err := os.Stat(filepath.Join(root, cleanRecordName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a read-only set wrote a clean-shutdown record")
	}
}

// Past MaxMappedFiles the set unmaps files instead of holding a mapping per
// queue (a process dies when it runs out of mappings); every queue stays
// readable and writable.
func TestMaxMappedFilesBoundsMappings(t *testing.T) {
	s, err := OpenSet(t.TempDir(), Options{EntriesPerFile: 64, MaxMappedFiles: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const queues = 200
	peak := 0
	for round := int64(0); round < 3; round++ {
		for id := int32(0); id < queues; id++ {
			appendRange(t, mustQueue(t, s, "T", id), round*10, round*10+10)
			peak = max(peak, s.MappedFiles())
		}
	}
	if peak > 17 {
		t.Fatalf("%d files mapped at the peak, bound 16", peak)
	}
	if s.Relieved() == 0 {
		t.Fatal("the bound was never enforced")
	}
	for id := int32(0); id < queues; id++ {
		checkRange(t, mustQueue(t, s, "T", id), 0, 30)
	}
}
