package consumequeue

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// forgetCleanShutdown removes the record Close leaves, so that the next
// OpenSet takes the crash path, as after a process or machine crash.
func forgetCleanShutdown(t testing.TB, root string) {
	t.Helper()
	if err := os.Remove(filepath.Join(root, cleanRecordName)); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryTail damages the tail of a queue on disk as a crash would and
// checks where OpenSet ends it, that the damage is zeroed, and that appends
// continue.
func TestRecoveryTail(t *testing.T) {
	const per = 64
	const n = 150 // files 0, 64, 128; the last holds entries 128..149
	lastFile := "00000000000000002560"
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, dir string)
		wantMax int64
	}{
		{"clean", func(*testing.T, string) {}, n},
		{"torn last entry: offset written, size not", func(t *testing.T, dir string) {
			writeRawAt(t, filepath.Join(dir, lastFile), 149-128, encode(Entry{CommitLogOffset: ent(149).CommitLogOffset}))
		}, 149},
		{"torn last entry: half of the offset", func(t *testing.T, dir string) {
			raw := make([]byte, EntrySize)
			raw[3] = 0x44
			writeRawAt(t, filepath.Join(dir, lastFile), 149-128, raw)
		}, 149},
		{"negative commitlog offset", func(t *testing.T, dir string) {
			writeRawAt(t, filepath.Join(dir, lastFile), 140-128, encode(Entry{CommitLogOffset: -5, Size: 10}))
		}, 140},
		{"commitlog offset goes backwards", func(t *testing.T, dir string) {
			writeRawAt(t, filepath.Join(dir, lastFile), 145-128, encode(ent(3)))
		}, 145},
		{"blank after messages", func(t *testing.T, dir string) {
			writeRawAt(t, filepath.Join(dir, lastFile), 146-128, encode(blankEntry))
		}, 146},
		{"zeroed tail", func(t *testing.T, dir string) {
			writeRawAt(t, filepath.Join(dir, lastFile), 135-128, make([]byte, 15*EntrySize))
		}, 135},
		{"zeroed whole last file", func(t *testing.T, dir string) {
			writeRawAt(t, filepath.Join(dir, lastFile), 0, make([]byte, per*EntrySize))
		}, 128},
		{"garbage after a zero entry", func(t *testing.T, dir string) {
			writeRawAt(t, filepath.Join(dir, lastFile), 149-128, make([]byte, EntrySize))
			writeRawAt(t, filepath.Join(dir, lastFile), 150-128, encode(ent(150)))
			writeRawAt(t, filepath.Join(dir, lastFile), 160-128, encode(Entry{CommitLogOffset: 7}))
		}, 149},
		{"last file empty", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, lastFile), 0); err != nil {
				t.Fatal(err)
			}
		}, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			s := openSet(t, root, per)
			appendRange(t, mustQueue(t, s, "T", 0), 0, n)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			forgetCleanShutdown(t, root)
			dir := queueDir(root, "T", 0)
			tc.damage(t, dir)
			s = openSet(t, root, per)
			if d := s.Damaged(); len(d) != 0 {
				t.Fatalf("damaged: %+v", d)
			}
			q := mustQueue(t, s, "T", 0)
			checkRange(t, q, 0, tc.wantMax)
			if got, want := s.MaxCommitLogEnd(), ent(tc.wantMax-1).End(); got != want {
				t.Fatalf("max commitlog end %d, want %d", got, want)
			}
			raw, err := os.ReadFile(filepath.Join(dir, lastFile))
			if err != nil {
				t.Fatal(err)
			}
			if len(raw) != per*EntrySize {
				t.Fatalf("last file is %d bytes after recovery", len(raw))
			}
			if tail := raw[(tc.wantMax-128)*EntrySize:]; !bytes.Equal(tail, make([]byte, len(tail))) {
				t.Fatal("bytes after the recovered end are not zero")
			}
			appendRange(t, q, tc.wantMax, n+20)
			s.Close()
			s = openSet(t, root, per)
			checkRange(t, mustQueue(t, s, "T", 0), 0, n+20)
		})
	}
}

func TestRecoveryDamaged(t *testing.T) {
	const per = 16
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"missing middle file", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "00000000000000000640")); err != nil {
				t.Fatal(err)
			}
		}},
		{"middle file short", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "00000000000000000320"), 100); err != nil {
				t.Fatal(err)
			}
		}},
		{"misaligned file name", func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "00000000000000001280"), filepath.Join(dir, "00000000000000001290")); err != nil {
				t.Fatal(err)
			}
		}},
		{"last file too long", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "00000000000000001280"), 2*per*EntrySize); err != nil {
				t.Fatal(err)
			}
		}},
		{"last file cut short (not a crash: files are sized in one ftruncate)", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "00000000000000001280"), 3*EntrySize+7); err != nil {
				t.Fatal(err)
			}
		}},
		// An empty last file after an unwritten end is what a power loss
		// leaves: see TestPowerLossTornTailAcrossFiles.
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			s := openSet(t, root, per)
			appendRange(t, mustQueue(t, s, "T", 0), 0, 70) // 5 files
			appendRange(t, mustQueue(t, s, "T", 1), 0, 70)
			s.Close()
			forgetCleanShutdown(t, root)
			tc.damage(t, queueDir(root, "T", 0))
			s = openSet(t, root, per)
			d := s.Damaged()
			if len(d) != 1 || d[0].Topic != "T" || d[0].QueueID != 0 || !errors.Is(d[0].Err, ErrDamaged) {
				t.Fatalf("damaged: %+v", d)
			}
			t.Logf("reported: %v", d[0].Err)
			if _, err := s.Queue("T", 0); !errors.Is(err, ErrDamaged) {
				t.Fatalf("Queue on damaged: %v", err)
			}
			if _, ok := s.Lookup("T", 0); ok {
				t.Fatal("damaged queue listed")
			}
			checkRange(t, mustQueue(t, s, "T", 1), 0, 70) // the other queue is fine
			// The store drops it and rebuilds from the commitlog.
			if err := s.DropQueue("T", 0); err != nil {
				t.Fatal(err)
			}
			if len(s.Damaged()) != 0 {
				t.Fatal("still damaged after drop")
			}
			q := mustQueue(t, s, "T", 0)
			appendRange(t, q, 0, 70)
			s.Close()
			s = openSet(t, root, per)
			checkRange(t, mustQueue(t, s, "T", 0), 0, 70)
		})
	}
}

func TestOpenSetIgnoresStrangers(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"T/notanumber", "T/-1", "T/007", "T/1/readme.txt", "U"} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "file-at-root"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openSet(t, root, 16)
	n := 0
	s.ForEach(func(string, int32, *Queue) bool { n++; return true })
	if n != 0 || len(s.Damaged()) != 0 {
		t.Fatalf("%d queues, damaged %+v", n, s.Damaged())
	}
}

// A hole of zeros (pages lost in a power failure) straddling the validation
// window: recovery searches again below it; a hole further back is healed by
// re-dispatch.
func TestRecoveryHole(t *testing.T) {
	const per = 64
	root := t.TempDir()
	open := func() *Set {
		s, err := OpenSet(root, Options{EntriesPerFile: per, RecoveryWindow: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open()
	appendRange(t, mustQueue(t, s, "T", 0), 0, 150)
	s.Close()
	forgetCleanShutdown(t, root)
	last := filepath.Join(queueDir(root, "T", 0), "00000000000000002560")
	writeRawAt(t, last, 130-128, make([]byte, 16*EntrySize)) // entries 130..145
	s = open()
	q := mustQueue(t, s, "T", 0)
	checkRange(t, q, 0, 130)
	appendRange(t, q, 130, 160)
	s.Close()

	// A hole wholly before the window goes unseen by recovery ...
	forgetCleanShutdown(t, root)
	writeRawAt(t, last, 135-128, make([]byte, 5*EntrySize)) // entries 135..139
	s = open()
	q = mustQueue(t, s, "T", 0)
	if q.MaxOffset() != 160 {
		t.Fatalf("max %d", q.MaxOffset())
	}
	// ... and re-dispatch fills it in, where a differing entry is a conflict.
	if err := q.Append(120, ent(121)); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting re-dispatch: %v", err)
	}
	appendRange(t, q, 100, 160)
	checkRange(t, q, 0, 160)
	s.Close()
	s = open()
	checkRange(t, mustQueue(t, s, "T", 0), 0, 160)
}

// TestStrictRecoveryAfterCleanClose damages queue files after a clean Close,
// as an operator or bit rot would: recovery must not cut or zero the queue
// (a cut queue silently hides messages and reuses their offsets) but report
// it damaged, for the store to rebuild from the commitlog.
func TestStrictRecoveryAfterCleanClose(t *testing.T) {
	const per = 300
	const n = 250 // one file
	file := "00000000000000000000"
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, root, dir string)
	}{
		{"200 bytes zeroed in the middle", func(t *testing.T, _, dir string) {
			writeRawAt(t, filepath.Join(dir, file), 100, make([]byte, 200))
		}},
		{"200 bytes of garbage in the middle", func(t *testing.T, _, dir string) {
			writeRawAt(t, filepath.Join(dir, file), 100, bytes.Repeat([]byte{0xA5}, 200))
		}},
		{"file cut to 4,000 bytes", func(t *testing.T, _, dir string) {
			if err := os.Truncate(filepath.Join(dir, file), 4000); err != nil {
				t.Fatal(err)
			}
		}},
		{"torn last entry", func(t *testing.T, _, dir string) {
			writeRawAt(t, filepath.Join(dir, file), n-1, make([]byte, 7))
		}},
		{"entry after the end", func(t *testing.T, _, dir string) {
			writeRawAt(t, filepath.Join(dir, file), n+3, encode(ent(n+3)))
		}},
		{"queue directory removed", func(t *testing.T, _, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}},
		{"a long hole of zeros before the end", func(t *testing.T, _, dir string) {
			writeRawAt(t, filepath.Join(dir, file), 20, make([]byte, 220*EntrySize))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			s := openSet(t, root, per)
			appendRange(t, mustQueue(t, s, "T", 0), 0, n)
			appendRange(t, mustQueue(t, s, "T", 1), 0, n)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, root, queueDir(root, "T", 0))
			s = openSet(t, root, per)
			d := s.Damaged()
			if len(d) != 1 || d[0].Topic != "T" || d[0].QueueID != 0 || !errors.Is(d[0].Err, ErrDamaged) {
				t.Fatalf("damaged: %+v", d)
			}
			t.Logf("reported: %v", d[0].Err)
			checkRange(t, mustQueue(t, s, "T", 1), 0, n)
			// The record is used once: a crash now takes the crash path.
			if _, err := os.Stat(filepath.Join(root, cleanRecordName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("clean record still there after OpenSet: %v", err)
			}
		})
	}
	t.Run("undamaged", func(t *testing.T) {
		root := t.TempDir()
		s := openSet(t, root, per)
		appendRange(t, mustQueue(t, s, "T", 0), 0, n)
		s.Close()
		s = openSet(t, root, per)
		if d := s.Damaged(); len(d) != 0 {
			t.Fatalf("damaged: %+v", d)
		}
		checkRange(t, mustQueue(t, s, "T", 0), 0, n)
	})
}
