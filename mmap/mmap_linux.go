//go:build linux

package mmap

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14).
const madvPopulateWrite = 23

// populateWrite asks the kernel to fault in b's pages writable, with
// readahead off for the call. It reports false when the kernel does not
// support the call.
//
// Without MADV_RANDOM a fault on a file mapping reads ahead (8 MiB on this
// project's test machine): for preallocated blocks that hold no data yet
// that means zero-filling large folios, allocated at high order, ahead of the
// range. On a VM whose balloon reports free memory to the host, those
// high-order blocks are exactly the ones the host has taken back, and every
// page of them faults in the host as well: populating fresh commit-log pages
// cost 5-10 µs per 4 KiB page that way against 2.4-3.4 µs with readahead off
// (docs/benchmarks.md, "The push, measured on a quiet machine"), and the
// broker's CPU per produced message fell by a fifth. The price is order-0
// pages in the page cache, which a consumer reading a backlog faults back
// 16 at a time (0.1-0.35 µs more per consumed message). The advice is
// restored to normal afterwards so that readers of the same pages later keep
// their readahead.
func populateWrite(b []byte) bool {
	random := unix.Madvise(b, unix.MADV_RANDOM) == nil
	ok := unix.Madvise(b, madvPopulateWrite) == nil
	if random {
		_ = unix.Madvise(b, unix.MADV_NORMAL)
	}
	return ok
}

// populateWriteData is populateWrite for pages that hold data on disk:
// readahead is asked for the whole range first (MADV_WILLNEED) and left on,
// so that pages not in the page cache are read in large sequential reads
// instead of one 4 KiB read per fault. It reports false when the kernel
// does not support the populate.
func populateWriteData(b []byte) bool {
	_ = unix.Madvise(b, unix.MADV_WILLNEED)
	return unix.Madvise(b, madvPopulateWrite) == nil
}

// residentPages counts the pages of b (page aligned) that are in memory
// (mincore(2)).
func residentPages(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	vec := make([]byte, (len(b)+pageSize-1)/pageSize)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return 0, fmt.Errorf("mmap: mincore: %w", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n, nil
}

// Fallocate reserves disk blocks for [off, off+n) of f and extends the file to
// cover them, so that later writes through a mapping cannot fail for lack of
// space. On a full disk it returns an error wrapping unix.ENOSPC.
func Fallocate(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	err := fallocateRetry(f, 0, off, n)
	if err == unix.EOPNOTSUPP {
		return fallocateByWrite(f, off, n)
	}
	if err != nil {
		return fmt.Errorf("mmap: fallocate %s [%d,+%d): %w", f.Name(), off, n, err)
	}
	return nil
}

func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// ZeroRange makes [off, off+n) of f read as zeros while keeping its blocks
// reserved (FALLOC_FL_ZERO_RANGE, a metadata operation on ext4 and xfs). Where
// the file system lacks it, a hole is punched and the range reserved again;
// where it lacks that too, zeros are written. Pages of the range cached for a
// mapping of f are dropped, so the mapping sees zeros too.
func ZeroRange(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	err := fallocateRetry(f, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == unix.EOPNOTSUPP {
		return zeroByPunch(f, off, n)
	}
	if err != nil {
		return fmt.Errorf("mmap: zero range %s [%d,+%d): %w", f.Name(), off, n, err)
	}
	return nil
}

// zeroByPunch is ZeroRange where FALLOC_FL_ZERO_RANGE is missing (tmpfs,
// among others): the range is punched out, then reserved again. Where
// punching is missing too, zeros are written.
func zeroByPunch(f *os.File, off, n int64) error {
	err := fallocateRetry(f, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == unix.EOPNOTSUPP {
		return zeroByWrite(f, off, n)
	}
	if err == nil {
		err = fallocateRetry(f, unix.FALLOC_FL_KEEP_SIZE, off, n)
	}
	if err != nil {
		return fmt.Errorf("mmap: zero range %s [%d,+%d) by punching a hole: %w", f.Name(), off, n, err)
	}
	return nil
}

// fallocateRetry is fallocate(2), retried when a signal interrupts it.
func fallocateRetry(f *os.File, mode uint32, off, n int64) error {
	for {
		if err := unix.Fallocate(int(f.Fd()), mode, off, n); err != unix.EINTR {
			return err
		}
	}
}
