package consumequeue

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRecover writes arbitrary bytes as a queue's last file and checks that
// OpenSet neither panics nor serves a bad entry, and that the recovered queue
// takes appends and reopens to the same state plus the append.
//
// mode bit 0: a full, valid first file precedes the fuzzed one;
// bit 1: the fuzzed file starts at a non-zero offset (a cleaned-up queue);
// bit 2: a 4-entry recovery window instead of the default.
func FuzzRecover(f *testing.F) {
	const per = 16
	valid := make([]byte, 0, per*EntrySize)
	for i := int64(0); i < 10; i++ {
		valid = append(valid, encode(ent(i))...)
	}
	f.Add(byte(0), valid)
	f.Add(byte(1), valid[:7*EntrySize+3])
	blanks := append(append(append([]byte{}, encode(blankEntry)...), encode(blankEntry)...), encode(ent(2))...)
	f.Add(byte(2), blanks)
	f.Add(byte(4), append(append(append([]byte{}, valid[:5*EntrySize]...), make([]byte, 3*EntrySize)...), valid[8*EntrySize:]...))
	f.Add(byte(5), []byte{})
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		if len(data) > per*EntrySize {
			data = data[:per*EntrySize]
		}
		root := t.TempDir()
		dir := filepath.Join(root, "T", "0")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		first := int64(0)
		if mode&2 != 0 {
			first = 5 * per
		}
		last := first
		if mode&1 != 0 {
			full := make([]byte, 0, per*EntrySize)
			for i := first; i < first+per; i++ {
				full = append(full, encode(ent(i))...)
			}
			if err := os.WriteFile(filepath.Join(dir, fileName(first*EntrySize)), full, 0o644); err != nil {
				t.Fatal(err)
			}
			last += per
		}
		if err := os.WriteFile(filepath.Join(dir, fileName(last*EntrySize)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		opts := Options{EntriesPerFile: per}
		if mode&4 != 0 {
			opts.RecoveryWindow = 4
		}
		s, err := OpenSet(root, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if d := s.Damaged(); len(d) > 0 {
			if !errors.Is(d[0].Err, ErrDamaged) {
				t.Fatalf("damage without ErrDamaged: %v", d[0].Err)
			}
			return
		}
		q, ok := s.Lookup("T", 0)
		if !ok {
			t.Fatal("queue not recovered")
		}
		lo, hi := q.MinOffset(), q.MaxOffset()
		if lo < first || hi < lo || hi > last+per {
			t.Fatalf("recovered [%d,%d) outside files [%d,%d)", lo, hi, first, last+per)
		}
		got := make([]Entry, 0, 2*per)
		got, err = q.Read(lo, got)
		if err != nil || int64(len(got)) != hi-lo {
			t.Fatalf("read [%d,%d): %d entries, %v", lo, hi, len(got), err)
		}
		// Recovery validates a window of entries before the end of the last
		// file's data (and, when the window reaches its start, against the
		// previous file). With the default window that is every entry here;
		// with the small one, at least the last entry served.
		checked := got
		if opts.RecoveryWindow > 0 && hi > last && len(got) > 0 {
			checked = got[len(got)-1:]
		}
		var prevEnd int64
		for i, e := range checked {
			if classify(e) != kindMessage || e.CommitLogOffset < prevEnd {
				t.Fatalf("entry %d served: %+v", hi-int64(len(checked))+int64(i), e)
			}
			prevEnd = e.End()
		}
		if end := s.MaxCommitLogEnd(); end != prevEnd && len(checked) > 0 {
			t.Fatalf("max commitlog end %d, last entry ends at %d", end, prevEnd)
		}
		next := Entry{CommitLogOffset: s.MaxCommitLogEnd(), Size: 10, TagCode: 1}
		if err := q.Append(hi, next); err != nil {
			t.Fatalf("append at %d: %v", hi, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2, err := OpenSet(root, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		q2, ok := s2.Lookup("T", 0)
		if opts.RecoveryWindow > 0 {
			// Entries before a small window were not validated; now that the
			// window moved over them, recovery may end the queue earlier.
			if ok && q2.MaxOffset() > hi+1 {
				t.Fatalf("reopened: max %d, more than %d", q2.MaxOffset(), hi+1)
			}
			return
		}
		if !ok || q2.MaxOffset() != hi+1 {
			t.Fatalf("reopened: %v, max %d, want %d", ok, q2.MaxOffset(), hi+1)
		}
		got2, err := q2.Read(lo, make([]Entry, 0, 2*per))
		if err != nil || len(got2) != len(got)+1 || got2[len(got)] != next {
			t.Fatalf("reopened: %d entries, %v", len(got2), err)
		}
		for i := range got {
			if got2[i] != got[i] {
				t.Fatalf("reopened: entry %d changed", lo+int64(i))
			}
		}
	})
}
