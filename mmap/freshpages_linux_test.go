package mmap

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkFreshPages compares the two ways of getting 1 KiB records into a
// new commit-log segment on this machine, per 4 KiB page (issue 31, item 3),
// in CPU of the whole process (rusage), one 16 MiB file per op:
//
//   - mapping: what the commit log does: the file is mapped, populated
//     writable ahead of the writer (MADV_POPULATE_WRITE, readahead off, as
//     populateWrite) and the records are copied into the mapping.
//   - zeroed-mapping: zeros written over the range with pwrite first (they
//     dirty the pages: every page then goes to disk twice).
//   - read-mapping: the range read with pread first (the page cache fills
//     a chunk per call, clean). Cheaper here, dearer in the broker: tried
//     in the commit log's allocator and reverted (docs/benchmarks.md,
//     "Fresh pages: reads ahead").
//   - willneed-mapping: posix_fadvise(WILLNEED) over the file first.
//   - pwrite: RocketMQ's transient store pool: the records are copied into
//     a reused, already-faulted 1 MiB buffer, committed to the file by
//     pwrite a buffer at a time, and the readers' mapping of the file is
//     then populated readable (MADV_POPULATE_READ: each page's table entry,
//     the cost a consumer reading through the mapping pays on first touch).
//   - pwrite-noread: the same without the readers' populate (what it costs
//     when nothing reads the data through the mapping, or reads it with
//     pread).
//
// The file is fallocated first (the commit log's segments are) or left
// sparse. File creation, fallocate and removal are outside the measure.
func BenchmarkFreshPages(b *testing.B) {
	const fileSize, recSize, chunk = 16 << 20, 1024, 1 << 20
	rec := make([]byte, recSize)
	for i := range rec {
		rec[i] = byte(i)
	}
	pool := make([]byte, chunk)
	for i := range pool {
		pool[i] = 1 // faulted once, reused for every chunk
	}
	dir := b.TempDir()
	newFile := func(b *testing.B, falloc bool) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, "seg"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		if falloc {
			if err := unix.Fallocate(int(f.Fd()), 0, 0, fileSize); err != nil {
				b.Fatal(err)
			}
		} else if err := f.Truncate(fileSize); err != nil {
			b.Fatal(err)
		}
		return f
	}
	cpu := func() int64 {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	viaMapping := func(f *os.File) {
		m, err := Map(f, 0, fileSize, ReadWrite)
		if err != nil {
			b.Fatal(err)
		}
		defer m.Release()
		_ = m.Prefault(0, fileSize)
		data := m.Bytes()
		for off := 0; off+recSize <= fileSize; off += recSize {
			copy(data[off:], rec)
		}
	}
	// chunksThenMapping runs io over the file a chunk at a time (pwrite or
	// pread), then writes the records through the mapping.
	chunksThenMapping := func(io func(*os.File, []byte, int64) (int, error)) func(*os.File) {
		buf := make([]byte, chunk)
		return func(f *os.File) {
			for base := 0; base < fileSize; base += chunk {
				if _, err := io(f, buf, int64(base)); err != nil {
					b.Fatal(err)
				}
			}
			viaMapping(f)
		}
	}
	viaZeroedMapping := chunksThenMapping((*os.File).WriteAt) // buf stays zeros
	viaReadMapping := chunksThenMapping((*os.File).ReadAt)
	viaWillNeedMapping := func(f *os.File) {
		if err := unix.Fadvise(int(f.Fd()), 0, fileSize, unix.FADV_WILLNEED); err != nil {
			b.Fatal(err)
		}
		viaMapping(f)
	}
	viaPwrite := func(read bool) func(f *os.File) {
		return func(f *os.File) {
			for base := 0; base < fileSize; base += chunk {
				for off := 0; off < chunk; off += recSize {
					copy(pool[off:], rec)
				}
				if _, err := f.WriteAt(pool, int64(base)); err != nil {
					b.Fatal(err)
				}
			}
			if !read {
				return
			}
			m, err := Map(f, 0, fileSize, ReadOnly)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Release()
			if err := unix.Madvise(m.Bytes(), unix.MADV_POPULATE_READ); err != nil {
				touchPages(m.Bytes())
			}
		}
	}
	for _, way := range []struct {
		name  string
		write func(*os.File)
	}{{"mapping", viaMapping}, {"zeroed-mapping", viaZeroedMapping},
		{"read-mapping", viaReadMapping}, {"willneed-mapping", viaWillNeedMapping}, {"pwrite", viaPwrite(true)}, {"pwrite-noread", viaPwrite(false)}} {
		for _, falloc := range []bool{true, false} {
			name := way.name + "/sparse"
			if falloc {
				name = way.name + "/fallocated"
			}
			b.Run(name, func(b *testing.B) {
				var spent int64
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					f := newFile(b, falloc)
					b.StartTimer()
					start := cpu()
					way.write(f)
					spent += cpu() - start
					b.StopTimer()
					f.Close()
					_ = os.Remove(f.Name())
					b.StartTimer()
				}
				pages := float64(b.N) * fileSize / 4096
				b.ReportMetric(float64(spent)/pages, "cpu-ns/page")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/pages, "ns/page")
			})
		}
	}
}

// BenchmarkFirstTouch measures what the first write to a page of anonymous
// memory costs this machine, per 4 KiB page: a fault, a zeroed page, and on
// a VM whose balloon reports free memory to its host (free page reporting)
// the host's own fault for every page it had taken back. Each op maps
// $APOGEE_BENCH_TOUCH_GIB GiB (default 1), writes one byte per page and
// unmaps it. The first op draws on whatever free memory the kernel hands
// out; later ones reuse what the previous op freed, unless the balloon
// reported it in between. Compare op 1 (-benchtime 1x) with the mean over
// several, and with /sys/module/page_reporting/parameters/reported_kib
// before and after, where the kernel has it.
func BenchmarkFirstTouch(b *testing.B) {
	gib := 1
	if v := os.Getenv("APOGEE_BENCH_TOUCH_GIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("APOGEE_BENCH_TOUCH_GIB=%q: want a whole number of GiB", v)
		}
		gib = n
	}
	size := gib << 30
	pages := size / 4096
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < size; off += 4096 {
			m[off] = 1
		}
		b.StopTimer()
		if err := unix.Munmap(m); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pages), "ns/page")
}
