package consumequeue

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

// errSegmentGone: the file was deleted or its queue dropped after the caller
// loaded the segment list. Callers turn it into ErrOutOfRange or ErrClosed.
var errSegmentGone = errors.New("consumequeue: file removed")

// segment is one file of a queue. Its mapping is created on first use (by the
// writer or a reader) and held by the segment itself (the "cache reference")
// until Sweep finds it idle or the file is retired. Everyone who touches the
// bytes holds a reference of their own for that time.
type segment struct {
	start int64  // queue offset of the file's first entry
	path  string // immutable

	writable atomic.Bool                  // the writer's tail: map it read-write
	used     atomic.Bool                  // touched since the last Sweep
	m        atomic.Pointer[mmap.Mapping] // nil when not mapped; non-nil => the cache reference is held

	// allocated is how many bytes from the file's start the writer has
	// reserved with fallocate; only the writer touches it. Files are created
	// sparse (a queue's 6 MB file would otherwise cost 6 MB of disk from its
	// first entry) and blocks are reserved a chunk ahead of the writer, so a
	// full disk fails an Append instead of faulting a write through the mapping.
	allocated int64
	// touched is how many bytes from the file's start lie in pages the
	// writer has already written (so they are in the page cache). The first
	// write into a page goes through pwrite: on ext4 a store into a mapped
	// page that is not yet cached takes a fault costing milliseconds on this
	// kind of machine, while pwrite costs microseconds and leaves the page
	// cached, after which stores through the mapping are cheap. Writer only.
	touched int64

	// wf is the file kept open for the writer's cold-page writes
	// (writeCold), so that each new page costs a pwrite rather than an open,
	// a pwrite and a close. Sweep closes it with the mapping once the segment
	// is idle, retire for good, and roll when the segment stops being the
	// tail. Changed under mu; the pointer is atomic for Sweep's quick check.
	wf atomic.Pointer[writeFile]

	mu        sync.Mutex // serialises mapping, unmapping, retiring and the writer's file
	dead      bool       // retired: never map again; under mu
	idleSince int64      // unix nanos of the Sweep that last saw it unused; under mu
}

// writeFile is a segment's open file for the writer's cold-page writes.
type writeFile struct{ vfs.File }

// segList is an immutable, contiguous list of a queue's files, published with
// an atomic pointer and replaced (copy on write) when files come or go.
type segList struct {
	base int64 // queue offset of segs[0].start (meaningless when empty)
	segs []*segment
}

// find returns the segment holding queue offset off, or nil.
func (l *segList) find(off int64, per int64) *segment {
	if len(l.segs) == 0 || off < l.base {
		return nil
	}
	i := (off - l.base) / per
	if i >= int64(len(l.segs)) {
		return nil
	}
	return l.segs[i]
}

// acquire returns the segment's mapping with a reference held for the caller,
// mapping the file first if needed. write asks for a read-write mapping.
// The fast path is two atomic loads and a CAS: no syscall, no allocation.
func (s *Set) acquire(sg *segment, write bool) (*mmap.Mapping, error) {
	if m := sg.m.Load(); m != nil && (!write || m.Mode() == mmap.ReadWrite) && m.Acquire() {
		if !sg.used.Load() {
			sg.used.Store(true)
		}
		return m, nil
	}
	m, err := s.acquireSlow(sg, write)
	if err == nil && s.mapped.Load() > int64(s.opts.MaxMappedFiles) {
		s.relieve()
	}
	return m, err
}

// relieve unmaps files until at most three quarters of MaxMappedFiles stay
// mapped: first those nobody touched since the last Sweep, then any. A file
// in use keeps its mapping for its users (they hold references); it is
// mapped again on its next use. One goroutine relieves at a time; others
// go on.
func (s *Set) relieve() {
	if !s.relieveMu.TryLock() {
		return
	}
	defer s.relieveMu.Unlock()
	target := int64(s.opts.MaxMappedFiles) * 3 / 4
	s.mu.RLock()
	qs := make([]*Queue, 0, len(s.queues))
	for _, q := range s.queues {
		qs = append(qs, q)
	}
	s.mu.RUnlock()
	s.relieved.Add(1)
	for _, evenUsed := range []bool{false, true} {
		for _, q := range qs {
			for _, sg := range q.segs.Load().segs {
				if s.mapped.Load() <= target {
					return
				}
				if sg.m.Load() == nil || !evenUsed && sg.used.Load() {
					continue
				}
				sg.mu.Lock()
				if m := sg.m.Load(); m != nil && (evenUsed || !sg.used.Load()) {
					sg.m.Store(nil)
					sg.used.Store(false)
					m.Release()
					s.mapped.Add(-1)
				}
				sg.mu.Unlock()
			}
		}
	}
}

func (s *Set) acquireSlow(sg *segment, write bool) (*mmap.Mapping, error) {
	sg.mu.Lock()
	defer sg.mu.Unlock()
	if sg.dead {
		return nil, errSegmentGone
	}
	old := sg.m.Load()
	if old != nil && (!write || old.Mode() == mmap.ReadWrite) {
		// The cache reference is only dropped under mu, so this cannot fail.
		if old.Acquire() {
			sg.used.Store(true)
			return old, nil
		}
	}
	rw := write || sg.writable.Load()
	flag, mode := os.O_RDONLY, mmap.ReadOnly
	if rw {
		flag, mode = os.O_RDWR, mmap.ReadWrite
	}
	f, err := s.fs.OpenFile(sg.path, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("consumequeue: open %s: %w", sg.path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("consumequeue: stat %s: %w", sg.path, err)
	}
	if st.Size() < s.fileSize {
		// Never map past the end of a file (SIGBUS). Recovery and creation
		// size every file, so this is a file changed behind our back.
		if !rw {
			return nil, fmt.Errorf("consumequeue: %s is %d bytes, want %d: %w", sg.path, st.Size(), s.fileSize, ErrDamaged)
		}
		if err := f.Truncate(s.fileSize); err != nil {
			return nil, fmt.Errorf("consumequeue: %w", err)
		}
	}
	m, err := f.Map(0, int(s.fileSize), mode)
	if err != nil {
		return nil, fmt.Errorf("consumequeue: %w", err)
	}
	m.Acquire() // the caller's reference; the creator's one is the cache reference
	if old != nil {
		// Upgrading a read-only mapping: readers holding it keep it alive.
		old.Release()
	} else {
		s.mapped.Add(1)
	}
	sg.m.Store(m)
	sg.used.Store(true)
	sg.idleSince = s.epoch.Load()
	return m, nil
}

// install stores a freshly created mapping (one reference, which becomes the
// cache reference) in a segment nobody else can see yet.
// The caller holds its queue's wmu (no segment's mu), which relieve may be
// called under (see the lock order in the package doc).
func (s *Set) install(sg *segment, m *mmap.Mapping) {
	sg.m.Store(m)
	sg.used.Store(true)
	sg.idleSince = s.epoch.Load()
	if s.mapped.Add(1) > int64(s.opts.MaxMappedFiles) {
		s.relieve()
	}
}

// retire marks sg dead and drops its cache reference; the mapping goes away
// when the last reader releases it. With unlink, the file is removed too
// (safe while mapped: the inode lives until the last mapping is gone).
func (s *Set) retire(sg *segment, unlink bool) error {
	sg.mu.Lock()
	sg.dead = true
	if m := sg.m.Swap(nil); m != nil {
		m.Release()
		s.mapped.Add(-1)
	}
	s.closeWriteFileLocked(sg)
	sg.mu.Unlock()
	if unlink {
		if err := s.fs.Remove(sg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("consumequeue: remove %s: %w", sg.path, err)
		}
	}
	return nil
}

// sweep drops sg's cache reference and closes its writer's file if nobody
// touched it for idle nanoseconds.
func (s *Set) sweep(sg *segment, now, idle int64) {
	if sg.m.Load() == nil && sg.wf.Load() == nil {
		return
	}
	sg.mu.Lock()
	defer sg.mu.Unlock()
	m := sg.m.Load()
	if m == nil && sg.wf.Load() == nil {
		return
	}
	if sg.used.Swap(false) {
		sg.idleSince = now
		return
	}
	if now-sg.idleSince < idle {
		return
	}
	if m != nil {
		sg.m.Store(nil)
		m.Release()
		s.mapped.Add(-1)
	}
	s.closeWriteFileLocked(sg)
}

// closeWriteFile closes sg's writer's file, if open.
func (s *Set) closeWriteFile(sg *segment) {
	sg.mu.Lock()
	s.closeWriteFileLocked(sg)
	sg.mu.Unlock()
}

func (s *Set) closeWriteFileLocked(sg *segment) {
	if f := sg.wf.Swap(nil); f != nil {
		f.Close() // opened for pwrite only: nothing is buffered, and durability is syncRange's
		s.writeFiles.Add(-1)
	}
}

// syncRange makes entries [from, to) of sg durable: msync through the mapping
// when it is mapped, fdatasync of the file otherwise.
func (s *Set) syncRange(sg *segment, from, to int64) error {
	if m := sg.m.Load(); m != nil && m.Acquire() {
		err := s.fs.MSync(sg.path, m, int((from-sg.start)*EntrySize), int((to-from)*EntrySize))
		m.Release()
		if err != nil {
			return fmt.Errorf("consumequeue: sync: %w", err)
		}
		return nil
	}
	f, err := s.fs.OpenFile(sg.path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // deleted meanwhile: nothing left to make durable
		}
		return fmt.Errorf("consumequeue: open %s: %w", sg.path, err)
	}
	defer f.Close()
	if err := f.Datasync(); err != nil {
		return fmt.Errorf("consumequeue: fdatasync %s: %w", sg.path, err)
	}
	return nil
}

// allocChunk is how far ahead of the writer file blocks are reserved.
const allocChunk = 128 << 10

// maxWriteFiles bounds how many files a set keeps open for cold-page writes
// (segment.wf). Past it, writeCold opens and closes the file each time, so a
// broker with tens of thousands of active queues does not run out of file
// descriptors.
const maxWriteFiles = 1024

// writeCold writes b at byte pos of sg's file with pwrite, first reserving
// blocks up to a chunk beyond it if needed, and marks the pages it covers as
// touched. Only the writer calls it.
func (s *Set) writeCold(sg *segment, pos int64, b []byte) error {
	end := pos + int64(len(b))
	sg.mu.Lock()
	defer sg.mu.Unlock()
	if sg.dead {
		return fmt.Errorf("consumequeue: write %s: %w", sg.path, errSegmentGone)
	}
	f := sg.wf.Load()
	if f == nil {
		vf, err := s.fs.OpenFile(sg.path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("consumequeue: open %s: %w", sg.path, err)
		}
		f = &writeFile{vf}
		if s.writeFiles.Add(1) <= maxWriteFiles {
			sg.wf.Store(f)
		} else {
			s.writeFiles.Add(-1)
			defer f.Close()
		}
	}
	sg.used.Store(true) // a tail being written is not idle: its file stays open
	if end > sg.allocated {
		to := min((end+allocChunk-1)/allocChunk*allocChunk, s.fileSize)
		if err := f.Allocate(sg.allocated, to-sg.allocated); err != nil {
			return fmt.Errorf("consumequeue: reserve blocks of %s: %w", sg.path, err)
		}
		sg.allocated = to
	}
	if _, err := f.WriteAt(b, pos); err != nil {
		return fmt.Errorf("consumequeue: write %s: %w", sg.path, err)
	}
	page := int64(mmap.PageSize())
	sg.touched = max(sg.touched, (end+page-1)/page*page)
	return nil
}
