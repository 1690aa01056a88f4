//go:build amd64 || arm64

package mmap

// prefetchAll prefetches each non-zero address of addrs[:n], n > 0, with the
// architecture's prefetch instruction (PREFETCHT0 on amd64, PRFM PSTL1KEEP on
// arm64). Neither faults.
func prefetchAll(addrs *uintptr, n int)
