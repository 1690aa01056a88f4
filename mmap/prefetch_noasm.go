//go:build !amd64 && !arm64

package mmap

// prefetchAll does nothing where no prefetch instruction is wired.
func prefetchAll(addrs *uintptr, n int) {}
