package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

// segment is one fixed-size file of the log, mapped whole.
type segment struct {
	base int64
	size int64
	path string
	f    vfs.File
	m    *mmap.Mapping // the owner's reference is dropped by release; readers Acquire
	data []byte        // m.Bytes(), valid while a reference is held

	// lastWrite is when the segment was last appended to (unix nanoseconds):
	// the file's mtime at open, the time it was sealed after a roll.
	lastWrite atomic.Int64
	// removed is set once the file should be unlinked when the last reference goes.
	removed atomic.Bool
	// retired is set when retention hands the segment to the reaper (Log.reap),
	// which unlinks the files of retired segments oldest first (or moves them
	// into the recycling pool); unmapped once its last reference is gone.
	retired, unmapped atomic.Bool
	// noRecycle is set when retention deleted the segment for disk
	// pressure: the reaper unlinks its file rather than keep it for reuse.
	noRecycle atomic.Bool
	// recycled is set when the file came from the recycling pool: past what
	// this log wrote it may hold an older segment's bytes. oldData is set
	// when its blocks do hold them (it was not zeroed for being cold): pages
	// to be read, not zero-filled, when faulted in.
	recycled, oldData bool
}

// segmentName is the file name of the segment starting at base.
func segmentName(base int64) string { return fmt.Sprintf("%020d", base) }

// parseSegmentName reports the base of a segment file name (20 decimal digits).
func parseSegmentName(name string) (int64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(name, 10, 64)
	return v, err == nil
}

// prefault faults [off, off+n) of the segment in writable ahead of the
// writer. A recycled file's blocks hold an older segment's data: its pages
// are read with readahead (mmap.PrefaultData), so that pages no longer in
// the page cache come back in large reads, not one read per page; a new (or
// zeroed) file's blocks hold nothing to read (mmap.Prefault, readahead off).
func (s *segment) prefault(off, n int) {
	if s.oldData {
		s.m.PrefaultData(off, n)
		return
	}
	s.m.Prefault(off, n)
}

// end is the offset one past the segment.
func (s *segment) end() int64 { return s.base + s.size }

// openSegment maps an existing segment file.
func (l *Log) openSegment(base int64) (*segment, error) {
	size := l.opts.SegmentSize
	path := filepath.Join(l.dir, segmentName(base))
	f, err := l.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("commitlog: open segment: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("commitlog: stat segment %s: %w", path, err)
	}
	if st.Size() != size {
		f.Close()
		return nil, fmt.Errorf("commitlog: segment %s is %d bytes, want %d: %w", path, st.Size(), size, errShortSegment)
	}
	s, err := l.mapSegment(f, path, base)
	if err != nil {
		return nil, err
	}
	s.lastWrite.Store(st.ModTime().UnixNano())
	return s, nil
}

var errShortSegment = errors.New("segment file has the wrong size")

// createSegment makes the segment at base: a file from the recycling pool
// renamed into place (see recycleSegment) when there is one, otherwise a
// new file, created, preallocated and mapped, its directory entry made
// durable. A failed creation leaves no file behind (unless removing it
// fails too: the next creation then finds it in the way and removes it
// first).
func (l *Log) createSegment(base int64) (*segment, error) {
	if s, ok, err := l.recycleSegment(base); ok || err != nil {
		return s, err
	}
	return l.createSegmentAt(filepath.Join(l.dir, segmentName(base)), base)
}

// createSegmentAt is createSegment into the file path (RestartAt creates a
// segment under a temporary name, then renames it into place).
func (l *Log) createSegmentAt(path string, base int64) (*segment, error) {
	fsys, dir, size := l.fs, filepath.Dir(path), l.opts.SegmentSize
	// O_EXCL: never reuse a file that some mapping may still cover. A file of
	// that name can only be a leftover of a failed creation (nothing maps a
	// segment past the log's end), so it is removed first.
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		if err = fsys.Remove(path); err == nil {
			f, err = fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("commitlog: create segment: %w", classifySpace(err))
	}
	if err := f.Allocate(0, size); err != nil {
		f.Close()
		fsys.Remove(path)
		return nil, fmt.Errorf("commitlog: preallocate segment %s: %w", path, classifySpace(err))
	}
	// Its size too: fallocate's new size is metadata no sync has written,
	// and after a power loss a segment file of 0 bytes before a later one
	// is a cut segment to recovery (reported as damage), though it never
	// held an acknowledged record. One fdatasync per segment, on the
	// allocator's goroutine.
	if err := f.Datasync(); err != nil {
		f.Close()
		fsys.Remove(path)
		return nil, fmt.Errorf("commitlog: sync new segment %s: %w", path, err)
	}
	s, err := l.mapSegment(f, path, base)
	if err != nil {
		fsys.Remove(path)
		return nil, err
	}
	// The new file's directory entry must survive a power failure before a
	// record acknowledged in sync mode lands in it.
	if err := durable.SyncDir(fsys, dir); err != nil {
		s.release(true)
		return nil, fmt.Errorf("commitlog: new segment %s: %w", path, err)
	}
	s.lastWrite.Store(l.opts.now().UnixNano())
	return s, nil
}

func (l *Log) mapSegment(f vfs.File, path string, base int64) (*segment, error) {
	size := l.opts.SegmentSize
	m, err := f.Map(0, int(size), mmap.ReadWrite)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	s := &segment{base: base, size: size, path: path, f: f, m: m, data: m.Bytes()}
	m.AfterUnmap(func() {
		f.Close()
		switch {
		case s.retired.Load():
			s.unmapped.Store(true)
			l.reap()
		case s.removed.Load():
			// A segment past the log's end (prepared, or dropped by
			// recovery). Best effort: a file left by a power failure right
			// now, or by a failed unlink, holds no record; recovery removes
			// it, or the next creation of that segment does.
			// s.path, not path: RestartAt renames the segment it creates.
			if l.fs.Remove(s.path) == nil {
				durable.SyncDir(l.fs, filepath.Dir(s.path))
			}
		}
	})
	return s, nil
}

// retire hands a segment that retention took off the list to the reaper
// and drops the log's reference: its file is unlinked once no reader holds
// it and every older retired segment's file is gone.
func (l *Log) retire(s *segment) {
	l.reapMu.Lock()
	s.retired.Store(true)
	l.doomed = append(l.doomed, s)
	l.reapMu.Unlock()
	s.m.Release() // the last reference: AfterUnmap reaps
}

// reap unlinks the files of retired segments, oldest first, stopping at the
// first one a reader still maps. The files left are therefore always the
// oldest segments, contiguous with the live ones: a crash, or an unlink that
// fails (retried by the next reap, which Retain runs), never leaves a gap
// that the next Open would refuse. Each unlink is made durable (the
// directory synced) before the next one, so a power failure cannot reorder
// them either. With recycling on, a file is renamed into the recycling pool
// instead of unlinked (toPool): for the sequence of segment files that is
// the same as an unlink. Only unmapped files reach the pool, so the
// allocator never hands out a file a reader still maps.
func (l *Log) reap() {
	l.reapMu.Lock()
	defer l.reapMu.Unlock()
	if l.reapDirty {
		if err := l.syncDir(l.dir); err != nil {
			l.opts.Logger.Warn("commitlog: deleting a retained segment failed; retrying later", "dir", l.dir, "err", err)
			return
		}
		l.reapDirty = false
	}
	for len(l.doomed) > 0 && l.doomed[0].unmapped.Load() {
		s := l.doomed[0]
		if err := l.toPool(s.path, s.base, !s.noRecycle.Load()); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.opts.Logger.Warn("commitlog: deleting a retained segment failed; retrying later", "file", s.path, "err", err)
			return
		}
		l.doomed[0] = nil
		l.doomed = l.doomed[1:]
		if err := l.syncDir(l.dir); err != nil {
			l.reapDirty = true
			l.opts.Logger.Warn("commitlog: deleting a retained segment failed; retrying later", "dir", l.dir, "err", err)
			return
		}
	}
}

// release drops the owner's reference; with remove set, the file is unlinked
// once every reader has released it too.
func (s *segment) release(remove bool) {
	if remove {
		s.removed.Store(true)
	}
	s.m.Release()
}

// listSegments returns the bases of the segment files in dir, ascending.
func listSegments(fsys vfs.FS, dir string) ([]int64, error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("commitlog: list %s: %w", dir, err)
	}
	var bases []int64
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if b, ok := parseSegmentName(e.Name()); ok {
			bases = append(bases, b)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}
