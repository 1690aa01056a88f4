//go:build !linux

package mmap

import (
	"errors"
	"os"
)

// populateWrite is not available outside Linux; callers fall back to touching pages.
func populateWrite(b []byte) bool { return false }

// populateWriteData is not available outside Linux either.
func populateWriteData(b []byte) bool { return false }

// Fallocate reserves [off, off+n) of f. Outside Linux there is no portable
// fallocate, so blocks are reserved by writing zeros.
func Fallocate(f *os.File, off, n int64) error { return fallocateByWrite(f, off, n) }

func fdatasync(f *os.File) error { return f.Sync() }

// ZeroRange makes [off, off+n) of f read as zeros by writing zeros.
func ZeroRange(f *os.File, off, n int64) error { return zeroByWrite(f, off, n) }

// residentPages is not available outside Linux.
func residentPages(b []byte) (int, error) { return 0, errors.ErrUnsupported }
