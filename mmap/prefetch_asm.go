//go:build amd64 || arm64

package mmap

// prefetch issues the architecture's prefetch instruction for addr
// (PREFETCHT0 on amd64, PRFM PSTL1KEEP on arm64). Neither faults.
func prefetch(addr uintptr)
