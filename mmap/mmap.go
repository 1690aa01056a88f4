package mmap

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Mode selects how a region is mapped.
type Mode int

const (
	// ReadOnly maps the region PROT_READ, MAP_SHARED: a stray write faults
	// instead of corrupting the file.
	ReadOnly Mode = iota
	// ReadWrite maps the region PROT_READ|PROT_WRITE, MAP_SHARED: writes reach the
	// page cache at once and the file when synced.
	ReadWrite
)

// Advice is a hint about how a region will be accessed.
type Advice int

const (
	// Normal resets any earlier hint.
	Normal Advice = iota
	// Sequential: read ahead aggressively, drop pages soon after use.
	Sequential
	// Random: no read-ahead.
	Random
	// WillNeed: start reading the range in now.
	WillNeed
	// DontNeed: the range's pages may be dropped; a later access re-reads the file.
	DontNeed
)

// ErrClosed is returned when a mapping is used after its last reference was released.
var ErrClosed = errors.New("mmap: mapping is closed")

// Mapping is a reference-counted mapped region of a file.
type Mapping struct {
	data       []byte
	refs       atomic.Int64
	mode       Mode
	afterUnmap func()
}

// pageSize is the system page size, read once.
var pageSize = os.Getpagesize()

// PageSize returns the system page size.
func PageSize() int { return pageSize }

// Map maps length bytes of f starting at offset, which must be a multiple of the
// page size. The returned Mapping holds one reference, owned by the caller.
// The file must already be at least offset+length bytes long.
func Map(f *os.File, offset int64, length int, mode Mode) (*Mapping, error) {
	if length <= 0 {
		return nil, fmt.Errorf("mmap: map %s: length %d must be positive", f.Name(), length)
	}
	if offset%int64(pageSize) != 0 {
		return nil, fmt.Errorf("mmap: map %s: offset %d is not page aligned", f.Name(), offset)
	}
	prot := unix.PROT_READ
	if mode == ReadWrite {
		prot |= unix.PROT_WRITE
	}
	data, err := unix.Mmap(int(f.Fd()), offset, length, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: map %s [%d,+%d): %w", f.Name(), offset, length, err)
	}
	m := &Mapping{data: data, mode: mode}
	m.refs.Store(1)
	return m, nil
}

// Bytes returns the mapped region. The slice is valid only while the caller
// holds a reference (see the package doc).
func (m *Mapping) Bytes() []byte { return m.data }

// Len returns the length of the mapped region.
func (m *Mapping) Len() int { return len(m.data) }

// Mode returns the protection the region was mapped with.
func (m *Mapping) Mode() Mode { return m.mode }

// Refs returns the current number of references, for tests and statistics.
func (m *Mapping) Refs() int64 { return m.refs.Load() }

// Acquire adds a reference. It returns false if the mapping has already been
// released by its last holder; the caller must then not touch Bytes.
func (m *Mapping) Acquire() bool {
	for {
		n := m.refs.Load()
		if n <= 0 {
			return false
		}
		if m.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release drops a reference and unmaps the region when it was the last one.
// Releasing more often than acquiring returns ErrClosed.
func (m *Mapping) Release() error {
	n := m.refs.Add(-1)
	switch {
	case n > 0:
		return nil
	case n < 0:
		return ErrClosed
	}
	data := m.data
	err := unix.Munmap(data)
	if m.afterUnmap != nil {
		m.afterUnmap()
	}
	if err != nil {
		return fmt.Errorf("mmap: munmap: %w", err)
	}
	return nil
}

// AfterUnmap registers fn to run once, right after the region is unmapped by
// the last Release. The owner sets it before sharing the mapping (it is not
// synchronised with Release); a segment uses it to close and delete its file
// only when the last reader has let go.
func (m *Mapping) AfterUnmap(fn func()) { m.afterUnmap = fn }

// pageRange widens [off, off+n) to whole pages inside the mapping.
func (m *Mapping) pageRange(off, n int) ([]byte, error) {
	if off < 0 || n < 0 || off+n > len(m.data) {
		return nil, fmt.Errorf("mmap: range [%d,+%d) outside mapping of %d bytes", off, n, len(m.data))
	}
	start := off &^ (pageSize - 1)
	end := off + n
	return m.data[start:end], nil
}

// Sync writes the pages covering [off, off+n) back to the file and waits for
// the write (msync MS_SYNC).
func (m *Mapping) Sync(off, n int) error {
	if n == 0 {
		return nil
	}
	b, err := m.pageRange(off, n)
	if err != nil {
		return err
	}
	if err := unix.Msync(b, unix.MS_SYNC); err != nil {
		return fmt.Errorf("mmap: msync [%d,+%d): %w", off, n, err)
	}
	return nil
}

// Advise passes an access hint for [off, off+n). Hints the platform does not
// know are ignored.
func (m *Mapping) Advise(off, n int, a Advice) error {
	if n == 0 {
		return nil
	}
	b, err := m.pageRange(off, n)
	if err != nil {
		return err
	}
	adv, ok := adviceFlag(a)
	if !ok {
		return nil
	}
	if err := unix.Madvise(b, adv); err != nil {
		return fmt.Errorf("mmap: madvise %d [%d,+%d): %w", a, off, n, err)
	}
	return nil
}

func adviceFlag(a Advice) (int, bool) {
	switch a {
	case Normal:
		return unix.MADV_NORMAL, true
	case Sequential:
		return unix.MADV_SEQUENTIAL, true
	case Random:
		return unix.MADV_RANDOM, true
	case WillNeed:
		return unix.MADV_WILLNEED, true
	case DontNeed:
		return unix.MADV_DONTNEED, true
	}
	return 0, false
}

// Prefault makes the pages of [off, off+n) resident so that later accesses do
// not take major faults. A read-write mapping uses MADV_POPULATE_WRITE where
// the kernel has it (Linux 5.14+), which also spares later writes their minor
// faults, and is meant for pages about to be written: it turns readahead off
// for the call (see populateWrite), so on a range of cold data already on
// disk it reads page by page. Elsewhere, and for read-only mappings, it reads
// one byte per page: a read never races with a concurrent writer of the same
// bytes, so Prefault is safe to run ahead of a writer.
func (m *Mapping) Prefault(off, n int) error {
	if n == 0 {
		return nil
	}
	b, err := m.pageRange(off, n)
	if err != nil {
		return err
	}
	if m.mode == ReadWrite && populateWrite(b) {
		return nil
	}
	touchPages(b)
	return nil
}

// PrefaultData is Prefault for a read-write mapping of a file whose blocks
// already hold data that is about to be overwritten (a reused file, such as
// a recycled commit-log segment). Prefault turns readahead off, which is
// right for freshly allocated blocks (nothing to read) but makes a range
// whose pages are not in the page cache read back one page per fault.
// PrefaultData first hands the range to readahead (MADV_WILLNEED: large
// sequential reads, started at once) and then populates it writable, so
// cached pages cost a page-table entry each and cold ones a share of a
// sequential read. Elsewhere it reads one byte per page, as Prefault does.
func (m *Mapping) PrefaultData(off, n int) error {
	if n == 0 {
		return nil
	}
	b, err := m.pageRange(off, n)
	if err != nil {
		return err
	}
	if m.mode == ReadWrite && populateWriteData(b) {
		return nil
	}
	touchPages(b)
	return nil
}

// Resident reports how many of the mapping's pages are in memory (on Linux,
// mincore(2)), and how many pages it spans. For a shared file mapping a page
// counts when it is in the page cache, mapped by this process or not. It
// fails with errors.ErrUnsupported where the system has no such call.
func (m *Mapping) Resident() (resident, pages int, err error) {
	pages = (len(m.data) + pageSize - 1) / pageSize
	resident, err = residentPages(m.data)
	return resident, pages, err
}

// touchPages reads one byte of each page of b.
func touchPages(b []byte) {
	var sink byte
	for i := 0; i < len(b); i += pageSize {
		sink += b[i]
	}
	touchSink.Add(int64(sink))
}

// touchSink keeps the reads of touchPages from being optimised away.
var touchSink atomic.Int64

// Lock pins the region's pages in memory (mlock).
func (m *Mapping) Lock() error {
	if err := unix.Mlock(m.data); err != nil {
		return fmt.Errorf("mmap: mlock: %w", err)
	}
	return nil
}

// Unlock undoes Lock.
func (m *Mapping) Unlock() error {
	if err := unix.Munlock(m.data); err != nil {
		return fmt.Errorf("mmap: munlock: %w", err)
	}
	return nil
}

// Fdatasync flushes f's data (and pages dirtied through shared mappings of it,
// on Linux) to stable storage.
func Fdatasync(f *os.File) error {
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("mmap: fdatasync %s: %w", f.Name(), err)
	}
	return nil
}
