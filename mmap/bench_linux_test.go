package mmap

import (
	"fmt"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkStoresUnderStreaming is the dispatcher's pattern: a 20-byte store
// into one of 8,000 places, each in its own page, round robin, with 1 KiB of
// other memory streamed between two stores (the commit log passing through
// the caches). It compares the places being consume-queue file mappings (one
// 6 MB mapping each, as now) with the same 8,000 pages in one anonymous
// region, with and without transparent huge pages: what a per-queue tail
// buffer in memory would cost instead. Like Queue.Append, each store is
// followed by an atomic publish.
func BenchmarkStoresUnderStreaming(b *testing.B) {
	const n, pageSize = 8000, 4096
	stream := make([]byte, 64<<20)
	src := make([]byte, 1024)
	// Each place also has a published counter on a line of its own, stored
	// atomically after the entry as Queue.Append publishes its max offset:
	// the fence makes the store's miss the loop's cost.
	counters := make([]struct {
		max atomic.Int64
		_   [56]byte
	}, n)
	run := func(b *testing.B, page func(i int) []byte) {
		b.ResetTimer()
		off := 0
		for i := 0; i < b.N; i++ {
			p := page(i % n)
			pos := (i / n * 20) % 4000
			e := p[pos : pos+20]
			e[0], e[8], e[16] = byte(i), byte(i), 1
			counters[i%n].max.Store(int64(i))
			copy(stream[off:off+len(src)], src)
			if off += len(src); off == len(stream) {
				off = 0
			}
		}
	}
	b.Run("places=files", func(b *testing.B) {
		maps := mapQueueFiles(b, n)
		run(b, func(i int) []byte { return maps[i].Bytes() })
	})
	for _, huge := range []bool{false, true} {
		b.Run(fmt.Sprintf("places=anonymous/hugepages=%v", huge), func(b *testing.B) {
			size := n * pageSize
			size = (size + 2<<20 - 1) / (2 << 20) * (2 << 20)
			region, err := unix.Mmap(-1, 0, size+2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Munmap(region)
			// Align to 2 MiB so that huge pages can back the whole of it.
			start := (2<<20 - int(uintptr(unsafe.Pointer(&region[0])))%(2<<20)) % (2 << 20)
			area := region[start : start+size]
			advice := unix.MADV_NOHUGEPAGE
			if huge {
				advice = unix.MADV_HUGEPAGE
			}
			if err := unix.Madvise(area, advice); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < len(area); i += pageSize {
				area[i] = 1
			}
			run(b, func(i int) []byte { return area[i*pageSize : (i+1)*pageSize] })
		})
	}
}
