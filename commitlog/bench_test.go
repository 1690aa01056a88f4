package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/benchcpu"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/mmap"
	"golang.org/x/sys/unix"
)

// The benchmarks use the default 1 GiB segments unless APOGEE_BENCH_SEGMENT
// says otherwise, so that a run of over a GiB exercises segment rolls.
func benchSegmentSize() int64 {
	if s := os.Getenv("APOGEE_BENCH_SEGMENT"); s != "" {
		var v int64
		fmt.Sscan(s, &v)
		return v
	}
	return 1 << 30
}

func benchLog(b *testing.B, mode FlushMode) *Log {
	b.Helper()
	l, _, err := Open(Options{Dir: b.TempDir(), SegmentSize: benchSegmentSize(), FlushMode: mode, RetentionInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func benchRecord(b *testing.B, size int) []byte {
	b.Helper()
	r := message.Record{Topic: "bench", BornHost: testHost, StoreHost: testHost, Body: make([]byte, size)}
	for i := range r.Body {
		r.Body[i] = byte(i)
	}
	// size is the body size; the record adds 91 bytes and the topic.
	rec, err := message.AppendRecord(nil, &r)
	if err != nil {
		b.Fatal(err)
	}
	return rec
}

// BenchmarkAppend measures async appends of one encoded record per call,
// encoding (with CRC) included, from 1 and 4 goroutines.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{128, 1024, 4096} {
		for _, writers := range []int{1, 4} {
			b.Run(fmt.Sprintf("size=%d/writers=%d", size, writers), func(b *testing.B) {
				l := benchLog(b, FlushAsync)
				proto := benchRecord(b, size)
				b.SetBytes(int64(len(proto)))
				b.ReportAllocs()
				b.ResetTimer()
				var next atomic.Int64
				var wg sync.WaitGroup
				for w := 0; w < writers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := message.Record{Topic: "bench", BornHost: testHost, StoreHost: testHost, Body: proto[len(proto)-size-2-len("bench")-1 : len(proto)-2-len("bench")-1]}
						buf := make([]byte, 0, len(proto))
						res := Result{Offsets: make([]int64, 0, 1)}
						for next.Add(1) <= int64(b.N) {
							buf, _ = message.AppendRecord(buf[:0], &r)
							res.Offsets = res.Offsets[:0]
							if err := l.Append(buf, nil, &res); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			})
		}
	}
}

// BenchmarkSyncAppend measures acknowledged appends in sync mode (group
// commit): each writer appends a 1 KiB record and waits for its flush.
func BenchmarkSyncAppend(b *testing.B) {
	for _, writers := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("size=1024/writers=%d", writers), func(b *testing.B) {
			l := benchLog(b, FlushSync)
			proto := benchRecord(b, 1024)
			b.SetBytes(int64(len(proto)))
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := append([]byte(nil), proto...)
					res := Result{Offsets: make([]int64, 0, 1)}
					for next.Add(1) <= int64(b.N) {
						res.Offsets = res.Offsets[:0]
						if err := l.Append(buf, nil, &res); err != nil {
							b.Error(err)
							return
						}
						if err := l.WaitFlushed(res.End); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			st := l.Stats()
			if st.SyncRounds > 0 {
				b.ReportMetric(float64(b.N)/float64(st.SyncRounds), "records/sync")
				b.ReportMetric(float64(st.SyncTime.Microseconds())/float64(st.SyncRounds), "µs/sync")
			}
		})
	}
}

// BenchmarkReadViews walks 1 KiB records sequentially through views.
func BenchmarkReadViews(b *testing.B) {
	l := benchLog(b, FlushAsync)
	rec := benchRecord(b, 1024)
	const n = 100_000
	offsets := make([]int64, 0, n)
	var res Result
	for i := 0; i < n; i++ {
		res.Offsets = res.Offsets[:0]
		if err := l.Append(rec, nil, &res); err != nil {
			b.Fatal(err)
		}
		offsets = append(offsets, res.Offsets[0])
	}
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	b.ResetTimer()
	var sum byte
	for i := 0; i < b.N; i++ {
		v, err := l.Read(offsets[i%n], len(rec))
		if err != nil {
			b.Fatal(err)
		}
		sum += v.Bytes()[len(rec)-1]
		v.Release()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	_ = sum
}

// BenchmarkLimitMemcpy is the machine's limit for async appends: copying the
// same record sizes into a pre-faulted shared mapping, nothing else.
func BenchmarkLimitMemcpy(b *testing.B) {
	for _, size := range []int{128 + 97, 1024 + 97, 4096 + 97} {
		b.Run(fmt.Sprintf("record=%d", size), func(b *testing.B) {
			const span = 1 << 30
			f, err := os.Create(filepath.Join(b.TempDir(), "limit"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if err := mmap.Fallocate(f, 0, span); err != nil {
				b.Fatal(err)
			}
			m, err := mmap.Map(f, 0, span, mmap.ReadWrite)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Release()
			m.Prefault(0, span)
			src := make([]byte, size)
			data := m.Bytes()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			off := 0
			for i := 0; i < b.N; i++ {
				if off+size > span {
					off = 0
				}
				copy(data[off:], src)
				off += size
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkLimitWriteFdatasync is the machine's limit for sync appends:
// pwrite of one group-commit batch (1, 16 or 128 records of 1 KiB) into a
// preallocated file followed by fdatasync.
func BenchmarkLimitWriteFdatasync(b *testing.B) {
	const rec = 1024 + 97
	for _, batch := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const span = 1 << 30
			f, err := os.Create(filepath.Join(b.TempDir(), "limit"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if err := mmap.Fallocate(f, 0, span); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, batch*rec)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			writeAndSync(b, f, buf, span)
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkRecoverSegment measures abnormal recovery of one full segment of
// 1 KiB records (1 GiB by default): open after a crash, validating every
// record's CRC.
func BenchmarkRecoverSegment(b *testing.B) {
	dir := b.TempDir()
	size := benchSegmentSize()
	l, _, err := Open(Options{Dir: dir, SegmentSize: size, RetentionInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	rec := benchRecord(b, 1024)
	var res Result
	for l.WrittenOffset()+int64(len(rec))+8 <= size {
		res.Offsets = res.Offsets[:0]
		if err := l.Append(rec, nil, &res); err != nil {
			b.Fatal(err)
		}
	}
	records := len(res.Offsets)
	_ = records
	l.simulateCrash()
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, rep, err := Open(Options{Dir: dir, SegmentSize: size, RetentionInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Clean || rep.ScannedBytes < size/2 {
			b.Fatalf("recovery did not scan: %s", rep)
		}
		b.StopTimer()
		l.simulateCrash()
		b.StartTimer()
	}
}

// BenchmarkLimitSyncPrepared is LimitWriteFdatasync (128 records per write)
// over a file prepared two ways: fallocated, as segments are (each sync also
// converts unwritten extents, a journal commit), and written with zeros
// first (data-only syncs). It measures what writing every segment twice
// would buy; docs/benchmarks.md has the answer.
func BenchmarkLimitSyncPrepared(b *testing.B) {
	const rec, batch = 1024 + 97, 128
	const span = 256 << 20
	for _, prep := range []string{"fallocate", "zeroed"} {
		b.Run("prepared="+prep, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "limit"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if prep == "fallocate" {
				err = mmap.Fallocate(f, 0, span)
			} else {
				zeros := make([]byte, 1<<20)
				for off := int64(0); off < span && err == nil; off += int64(len(zeros)) {
					_, err = f.WriteAt(zeros, off)
				}
			}
			if err == nil {
				err = mmap.Fdatasync(f)
			}
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, batch*rec)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			writeAndSync(b, f, buf, span)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/sync")
		})
	}
}

// writeAndSync writes buf b.N times at consecutive offsets of f (wrapping at
// span), each write followed by fdatasync: the Limit benchmarks' timed loop.
func writeAndSync(b *testing.B, f *os.File, buf []byte, span int64) {
	var off int64
	for i := 0; i < b.N; i++ {
		if off+int64(len(buf)) > span {
			off = 0
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
		if err := mmap.Fdatasync(f); err != nil {
			b.Fatal(err)
		}
		off += int64(len(buf))
	}
}

// evictPool drops the page-cache pages of the recycling pool's files
// (synced first, so that every page is clean and can go): the case of a
// retired file whose pages the kernel evicted before it was reused.
func evictPool(b *testing.B, dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), poolPrefix) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // the allocator took it meanwhile
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkSteadyStateRecycle measures the CPU per 1 KiB async append of a
// log in its steady state: retention keeps the last two segments (the
// benchmark calls RetainBelow itself whenever a segment fills), so every
// new segment is either a retired file renamed into place (recycle=1) or a
// new file created and fallocated (recycle=-1). Segments are 64 MiB unless
// APOGEE_BENCH_SEGMENT says otherwise; three segments are written before
// the timer starts, so that the first retention has happened. cpu-ns/op is
// the whole process's CPU time (the allocator's pre-faulting and the
// flusher's syncs included) per append. recycle=1-cold evicts the retired
// file's pages from the page cache before it is reused (a broker whose
// retention time is long enough for that), so they are read back from disk.
func BenchmarkSteadyStateRecycle(b *testing.B) {
	seg := int64(64 << 20)
	if os.Getenv("APOGEE_BENCH_SEGMENT") != "" {
		seg = benchSegmentSize()
	}
	for _, c := range []struct {
		name    string
		recycle int
		cold    bool
	}{{"recycle=1", 1, false}, {"recycle=1-cold", 1, true}, {"recycle=-1", -1, false}} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			l, _, err := Open(Options{Dir: dir, SegmentSize: seg, FlushMode: FlushAsync,
				RetentionInterval: -1, RetentionTime: time.Nanosecond, RecycleSegments: c.recycle})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			rec := benchRecord(b, 1024)
			res := Result{Offsets: make([]int64, 0, 1)}
			nextRetain := seg
			appendOne := func() {
				res.Offsets = res.Offsets[:0]
				if err := l.Append(rec, nil, &res); err != nil {
					b.Fatal(err)
				}
				if res.End >= nextRetain {
					// Keep the active segment and the one before it.
					if _, err := l.RetainBelow(nextRetain - seg); err != nil {
						b.Fatal(err)
					}
					nextRetain += seg
					if c.cold {
						evictPool(b, dir)
					}
				}
			}
			for l.WrittenOffset() < 3*seg+seg/2 {
				appendOne()
			}
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			b.ResetTimer()
			done := benchcpu.Report(b)
			for i := 0; i < b.N; i++ {
				appendOne()
			}
			done()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
