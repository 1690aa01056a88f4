package mmap

import "unsafe"

// Prefetch asks the CPU to start loading the cache line that holds b[0], so
// that a store or load there a little later does not stall on memory. It is
// only a hint: it never faults (b may even lie in a region being unmapped),
// never blocks, and does nothing when b is empty or the architecture has no
// prefetch instruction wired here.
//
// The consume queues use it because their tail entries are cold: with
// thousands of queues, every append lands in a page the CPU last touched
// megabytes of commit log ago, and on a virtual machine the page-table walk
// for it costs hundreds of nanoseconds (see docs/benchmarks.md). Issued a few
// records ahead, the walk and the line fill overlap other work.
func Prefetch(b []byte) {
	if len(b) > 0 {
		prefetch(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	}
}
