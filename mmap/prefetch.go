package mmap

import "unsafe"

// PrefetchAll asks the CPU to start loading the cache lines at addrs (zero
// entries are skipped), so that stores or loads there a little later do not
// stall on memory. It is only a hint: it never faults (an address may even
// lie in a region being unmapped), never blocks, and does nothing on
// architectures with no prefetch instruction wired here.
//
// The store's dispatcher uses it because the consume queues' tail entries are
// cold: with thousands of queues, every append lands in a page the CPU last
// touched megabytes of commit log ago, and on a virtual machine the page-table
// walk for it costs hundreds of nanoseconds (see docs/benchmarks.md). Issued
// back to back from one tight loop, the prefetches all fit in the CPU's
// reorder window, so their walks and line fills overlap one another and the
// work that follows, instead of each stalling the code around it.
func PrefetchAll(addrs []uintptr) {
	if len(addrs) > 0 {
		prefetchAll(unsafe.SliceData(addrs), len(addrs))
	}
}

// Addr returns the address of b[0] for PrefetchAll, or 0 if b is empty.
func Addr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
