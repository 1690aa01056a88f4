package consumequeue

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// ent is the deterministic entry test queues hold at queue offset i.
func ent(i int64) Entry {
	return Entry{CommitLogOffset: 1000 + i*100, Size: 90, TagCode: i*7 + 3}
}

func openSet(t testing.TB, dir string, per int) *Set {
	t.Helper()
	s, err := OpenSet(dir, Options{EntriesPerFile: per})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustQueue(t testing.TB, s *Set, topic string, id int32) *Queue {
	t.Helper()
	q, err := s.Queue(topic, id)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func appendRange(t testing.TB, q *Queue, from, to int64) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := q.Append(i, ent(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// checkRange asserts [min, max) of q and that every entry in it is ent(i).
func checkRange(t testing.TB, q *Queue, min, max int64) {
	t.Helper()
	if got := q.MinOffset(); got != min {
		t.Fatalf("min offset %d, want %d", got, min)
	}
	if got := q.MaxOffset(); got != max {
		t.Fatalf("max offset %d, want %d", got, max)
	}
	for i := min; i < max; i++ {
		e, err := q.Get(i)
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if e != ent(i) {
			t.Fatalf("get %d = %+v, want %+v", i, e, ent(i))
		}
	}
	if _, err := q.Get(max); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("get %d (max): err %v, want ErrOutOfRange", max, err)
	}
	if min > 0 {
		if _, err := q.Get(min - 1); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("get %d (min-1): err %v, want ErrOutOfRange", min-1, err)
		}
	}
}

func queueDir(root, topic string, id int) string {
	return filepath.Join(root, topic, strconv.Itoa(id))
}

func listFiles(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// writeEntryAt overwrites one entry of a file on disk (the set must be closed).
func writeRawAt(t testing.TB, path string, idx int64, raw []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(raw, idx*EntrySize); err != nil {
		t.Fatal(err)
	}
}

func encode(e Entry) []byte {
	b := make([]byte, EntrySize)
	putEntry(b, e)
	return b
}

// timeAt is a fake clock: n hours after the epoch.
func timeAt(n int) time.Time { return time.Unix(0, 0).Add(time.Duration(n) * time.Hour) }
