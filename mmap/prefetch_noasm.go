//go:build !amd64 && !arm64

package mmap

// prefetch does nothing where no prefetch instruction is wired.
func prefetch(addr uintptr) {}
