package consumequeue

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Readers racing a writer (and Sweep unmapping, and Flush syncing) never see an
// entry at or beyond the MaxOffset they could have observed, nor garbage.
func TestConcurrentReadersWhileAppending(t *testing.T) {
	const per, n = 64, 20000
	s, err := OpenSet(t.TempDir(), Options{EntriesPerFile: per, IdleUnmap: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := mustQueue(t, s, "T", 0)
	var done atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	errc := make(chan error, 8)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			buf := make([]Entry, 0, 32)
			for !done.Load() {
				hi := q.MaxOffset()
				off := rng.Int64N(hi + 1)
				got, err := q.Read(off, buf[:0])
				if err != nil {
					fail(err)
					return
				}
				for i, e := range got {
					if e != ent(off+int64(i)) {
						fail(errors.New("read garbage"))
						return
					}
				}
				// Nothing beyond max is readable, and what is there is right.
				next := q.MaxOffset()
				if e, err := q.Get(next + 1); err == nil && e != ent(next+1) {
					fail(errors.New("get beyond max returned garbage"))
					return
				} else if err != nil && !errors.Is(err, ErrOutOfRange) {
					fail(err)
					return
				}
				if e, ok := q.LastEntry(); ok && (e.CommitLogOffset-1000)%100 != 0 {
					fail(errors.New("last entry garbage"))
					return
				}
				reads.Add(1)
			}
		}(uint64(r))
	}
	wg.Add(1)
	go func() { // sweeps and flushes all along the appends, paced so as not to starve them
		defer wg.Done()
		for !done.Load() {
			s.Sweep(time.Now())
			if err := s.Flush(); err != nil {
				fail(err)
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	for i := int64(0); i < n; i++ {
		if err := q.Append(i, ent(i)); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	checkRange(t, q, 0, n)
	t.Logf("%d reader rounds", reads.Load())
}

// Cleanup deletes files under readers: they get ErrOutOfRange, never a crash
// or a wrong entry.
func TestDeleteBelowWithConcurrentReaders(t *testing.T) {
	const per, n = 16, 8000
	root := t.TempDir()
	s, err := OpenSet(root, Options{EntriesPerFile: per, IdleUnmap: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := mustQueue(t, s, "T", 0)
	appendRange(t, q, 0, 100)
	var done atomic.Bool
	var wg sync.WaitGroup
	var ok, outOfRange atomic.Int64
	errc := make(chan error, 8)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 2))
			buf := make([]Entry, 0, 32)
			for !done.Load() {
				lo, hi := q.MinOffset(), q.MaxOffset()
				off := lo + rng.Int64N(hi-lo+1)
				got, err := q.Read(off, buf[:0])
				switch {
				case errors.Is(err, ErrOutOfRange):
					outOfRange.Add(1)
					continue
				case err != nil:
					errc <- err
					return
				}
				for i, e := range got {
					if e != ent(off+int64(i)) {
						errc <- errors.New("read garbage")
						return
					}
				}
				ok.Add(1)
			}
		}(uint64(r))
	}
	removed := 0
	for i := int64(100); i < n; i++ {
		if err := q.Append(i, ent(i)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			k, err := s.DeleteBelow(ent(i - 60).CommitLogOffset)
			if err != nil {
				t.Fatal(err)
			}
			removed += k
			s.Sweep(time.Now())
		}
	}
	done.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if removed < n/per-10 {
		t.Fatalf("only %d files removed", removed)
	}
	checkRange(t, q, n-50-60, n) // the last cleanup was at i = n-50
	if got := len(listFiles(t, queueDir(root, "T", 0))); got != q.Files() {
		t.Fatalf("%d files on disk, queue has %d", got, q.Files())
	}
	t.Logf("%d files removed; reads: %d ok, %d out of range", removed, ok.Load(), outOfRange.Load())
}

// verEnt is entry i written in version v of a queue that is truncated and
// rewritten: internally consistent so a torn mix of two versions shows.
func verEnt(v, i int64) Entry {
	off := v<<32 + i*100
	return Entry{CommitLogOffset: off, Size: 90, TagCode: off*31 ^ i}
}

func checkVerEnt(i int64, e Entry) bool {
	return e.Size == 90 && e.TagCode == e.CommitLogOffset*31^i && e.CommitLogOffset&0xFFFFFFFF == i*100
}

// Truncation rewrites bytes below a published max; readers retry around it
// and never see a torn or mixed entry.
func TestTruncateWithConcurrentReaders(t *testing.T) {
	const per = 16
	s := openSet(t, t.TempDir(), per)
	q := mustQueue(t, s, "T", 0)
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 3))
			buf := make([]Entry, 0, 24)
			for !done.Load() {
				hi := q.MaxOffset()
				off := rng.Int64N(hi + 1)
				got, err := q.Read(off, buf[:0])
				if errors.Is(err, ErrOutOfRange) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				for j, e := range got {
					if !checkVerEnt(off+int64(j), e) || (j > 0 && e.CommitLogOffset <= got[j-1].CommitLogOffset) {
						errc <- errors.New("torn or mixed read")
						return
					}
				}
			}
		}(uint64(r))
	}
	rng := rand.New(rand.NewPCG(9, 9))
	max := int64(0)
	for v := int64(1); v <= 300; v++ {
		target := 20 + rng.Int64N(100)
		for ; max < target; max++ {
			if err := q.Append(max, verEnt(v, max)); err != nil {
				t.Fatal(err)
			}
		}
		k := rng.Int64N(max)
		end := int64(0)
		if k > 0 {
			e, err := q.Get(k - 1)
			if err != nil {
				t.Fatal(err)
			}
			end = e.End()
		}
		if err := q.TruncateAfter(end); err != nil {
			t.Fatal(err)
		}
		if q.MaxOffset() != k {
			t.Fatalf("truncated to %d, want %d", q.MaxOffset(), k)
		}
		max = k
	}
	done.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

// 2,000 queues of small files: Sweep keeps the number of mapped files, and of
// files held open for the writer, bounded by what was touched in the last two
// sweep intervals.
func TestSweepKeepsMappedFilesBounded(t *testing.T) {
	const per, queues, n, batch = 64, 2000, 150, 100
	const filesPerQueue = (n + per - 1) / per
	root := t.TempDir()
	s, err := OpenSet(root, Options{EntriesPerFile: per, IdleUnmap: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clock := 0
	sweep := func() {
		clock++
		s.Sweep(timeAt(clock))
	}
	bound := 2 * batch * filesPerQueue
	peak := 0
	for id := int32(0); id < queues; id++ {
		appendRange(t, mustQueue(t, s, "T", id), 0, n)
		if id%batch == batch-1 {
			peak = max(peak, s.MappedFiles())
			if s.MappedFiles() > bound {
				t.Fatalf("after %d queues: %d files mapped, bound %d", id+1, s.MappedFiles(), bound)
			}
			// One open file per queue at most (a roll closes the old tail's).
			if s.WriteFiles() > 2*batch {
				t.Fatalf("after %d queues: %d files open for writing, bound %d", id+1, s.WriteFiles(), 2*batch)
			}
			sweep()
		}
	}
	sweep()
	sweep()
	if got := s.MappedFiles(); got != 0 {
		t.Fatalf("%d files mapped after idle sweeps", got)
	}
	if got := s.WriteFiles(); got != 0 {
		t.Fatalf("%d files open for writing after idle sweeps", got)
	}
	// Reading everything back maps files again, still bounded.
	for id := int32(0); id < queues; id++ {
		q, ok := s.Lookup("T", id)
		if !ok {
			t.Fatalf("queue %d missing", id)
		}
		checkRange(t, q, 0, n)
		if id%batch == batch-1 {
			peak = max(peak, s.MappedFiles())
			if s.MappedFiles() > bound {
				t.Fatalf("reading, after %d queues: %d files mapped, bound %d", id+1, s.MappedFiles(), bound)
			}
			sweep()
		}
	}
	// Appending to a queue whose tail was unmapped maps it again.
	sweep()
	sweep()
	q, _ := s.Lookup("T", 5)
	appendRange(t, q, n, n+1)
	if s.MappedFiles() != 1 {
		t.Fatalf("%d files mapped after one append", s.MappedFiles())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.MappedFiles() != 0 || s.WriteFiles() != 0 {
		t.Fatalf("%d files mapped, %d open for writing after Close", s.MappedFiles(), s.WriteFiles())
	}
	t.Logf("%d files in %d queues; peak mapped %d (bound %d)", queues*filesPerQueue, queues, peak, bound)
}

// More queues than maxWriteFiles written at once, with no Sweep: the set keeps
// maxWriteFiles files open for their writers and writes the others by opening
// them each time; every entry reads back. Dropping a queue closes its file.
func TestWriteFilesCapped(t *testing.T) {
	const queues, n = maxWriteFiles + 100, 300 // 300 entries: two pages of a file
	s, err := OpenSet(t.TempDir(), Options{EntriesPerFile: 1024, IdleUnmap: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id := int32(0); id < queues; id++ {
		appendRange(t, mustQueue(t, s, "T", id), 0, n)
	}
	if got := s.WriteFiles(); got != maxWriteFiles {
		t.Fatalf("%d files open for writing, want the cap %d", got, maxWriteFiles)
	}
	for id := int32(0); id < queues; id++ {
		q, _ := s.Lookup("T", id)
		checkRange(t, q, 0, n)
	}
	if err := s.DropQueue("T", 0); err != nil {
		t.Fatal(err)
	}
	if got := s.WriteFiles(); got != maxWriteFiles-1 {
		t.Fatalf("%d files open for writing after a drop, want %d", got, maxWriteFiles-1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.WriteFiles(); got != 0 {
		t.Fatalf("%d files open for writing after Close", got)
	}
}
