package mmap

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkPrefaultFreshFile populates (Prefault on a read-write mapping) a
// new fallocated 256 MiB file per iteration and deletes it afterwards. The
// first iteration gets page-cache pages the machine has not used lately; the
// later ones reuse the pages the previous iteration freed. On a VM whose host
// takes freed memory back (free-page reporting) the two differ several-fold;
// docs/benchmarks.md reports both. Run with -benchtime 4x.
func BenchmarkPrefaultFreshFile(b *testing.B) {
	const size = 256 << 20
	dir := b.TempDir()
	var first, rest time.Duration
	for i := 0; i < b.N; i++ {
		path := filepath.Join(dir, fmt.Sprint("f", i))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		if err := Fallocate(f, 0, size); err != nil {
			b.Fatal(err)
		}
		m, err := Map(f, 0, size, ReadWrite)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := m.Prefault(0, size); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if i == 0 {
			first = d
		} else {
			rest += d
		}
		m.Release()
		os.Remove(path)
	}
	b.ReportMetric(size/first.Seconds()/1e6, "first-MB/s")
	if b.N > 1 {
		b.ReportMetric(float64(size)*float64(b.N-1)/rest.Seconds()/1e6, "later-MB/s")
	}
}

// BenchmarkStoresAcrossMappings stores one 20-byte consume-queue entry into
// each of n separately mapped files in turn, as a dispatcher does for n
// queues: the cost of the mappings and their TLB entries alone, without the
// rest of dispatch evicting the lines between two stores to one file.
func BenchmarkStoresAcrossMappings(b *testing.B) {
	for _, n := range []int{8, 8000} {
		b.Run(fmt.Sprintf("mappings=%d", n), func(b *testing.B) {
			maps := mapQueueFiles(b, n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m := maps[i%n]
				pos := (i / n * 20) % 4000
				e := m.Bytes()[pos : pos+20]
				e[0], e[8], e[16] = byte(i), byte(i), 1
			}
		})
	}
}

// mapQueueFiles creates n files the size of a consume-queue file (300,000
// entries), writes their first page and maps them read-write, released when
// the benchmark ends.
func mapQueueFiles(b *testing.B, n int) []*Mapping {
	const fileSize = 6_000_000
	dir := b.TempDir()
	maps := make([]*Mapping, n)
	for i := range maps {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Truncate(fileSize); err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, 4096), 0); err != nil {
			b.Fatal(err)
		}
		if maps[i], err = Map(f, 0, fileSize, ReadWrite); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.Cleanup(func() {
		for _, m := range maps {
			m.Release()
		}
	})
	return maps
}
