package consumequeue

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkAppend appends entries to one queue with the default 300,000-entry
// files: file creation (fallocate + map) every 300,000 entries is included.
// Every 3,000,000 entries the queue is truncated back to empty, outside the
// timer, to bound the disk used.
func BenchmarkAppend(b *testing.B) {
	s, err := OpenSet(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	q, err := s.Queue("BenchTopic", 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(EntrySize)
	var off int64
	for b.Loop() {
		if off == 3_000_000 {
			b.StopTimer()
			if err := q.TruncateAfter(0); err != nil {
				b.Fatal(err)
			}
			off = 0
			b.StartTimer()
		}
		if err := q.Append(off, Entry{CommitLogOffset: off * 256, Size: 200, TagCode: off}); err != nil {
			b.Fatal(err)
		}
		off++
	}
}

// benchQueue returns a queue of n entries in files of per entries.
func benchQueue(b *testing.B, per int, n int64) (*Set, *Queue) {
	s, err := OpenSet(b.TempDir(), Options{EntriesPerFile: per})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	q, err := s.Queue("BenchTopic", 0)
	if err != nil {
		b.Fatal(err)
	}
	for i := int64(0); i < n; i++ {
		if err := q.Append(i, ent(i)); err != nil {
			b.Fatal(err)
		}
	}
	return s, q
}

// BenchmarkRead32 reads 32 entries per op (a pull's batch), walking a
// 1,000,000-entry queue (four default files) sequentially.
func BenchmarkRead32(b *testing.B) {
	const n = 1_000_000
	_, q := benchQueue(b, 0, n)
	buf := make([]Entry, 0, 32)
	b.ReportAllocs()
	b.SetBytes(32 * EntrySize)
	var off int64
	for b.Loop() {
		got, err := q.Read(off, buf[:0])
		if err != nil || len(got) != 32 {
			b.Fatal(len(got), err)
		}
		off += 32
		if off > n-32 {
			off = 0
		}
	}
}

// BenchmarkGet reads single entries at pseudo-random offsets.
func BenchmarkGet(b *testing.B) {
	const n = 1_000_000
	_, q := benchQueue(b, 0, n)
	b.ReportAllocs()
	var x uint64 = 1
	for b.Loop() {
		x = x*6364136223846793005 + 1442695040888963407
		if _, err := q.Get(int64(x>>33) % n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead32WhileAppending: one goroutine appends while the benchmark
// loop reads the newest 32 entries, as a tailing consumer does.
func BenchmarkRead32WhileAppending(b *testing.B) {
	_, q := benchQueue(b, 0, 64)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for off := q.MaxOffset(); ; off++ {
			select {
			case <-stop:
				return
			default:
			}
			if off == 3_000_000 {
				return
			}
			if err := q.Append(off, ent(off)); err != nil {
				panic(err)
			}
		}
	}()
	buf := make([]Entry, 0, 32)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := q.Read(max(0, q.MaxOffset()-32), buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	close(stop)
	<-done
}

// BenchmarkOpenSet2000Queues measures recovery of 2,000 queues of three
// 64-entry files each (directory listings, binary searches, tail windows).
func BenchmarkOpenSet2000Queues(b *testing.B) {
	root := b.TempDir()
	s, err := OpenSet(root, Options{EntriesPerFile: 64})
	if err != nil {
		b.Fatal(err)
	}
	for id := int32(0); id < 2000; id++ {
		q, err := s.Queue("T"+strconv.Itoa(int(id%20)), id)
		if err != nil {
			b.Fatal(err)
		}
		for i := int64(0); i < 150; i++ {
			if err := q.Append(i, ent(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := OpenSet(root, Options{EntriesPerFile: 64, IdleUnmap: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if n := len(s.snapshot()); n != 2000 {
			b.Fatalf("%d queues", n)
		}
		s.Close()
	}
}
