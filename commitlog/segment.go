package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/mmap"
)

// segment is one fixed-size file of the log, mapped whole.
type segment struct {
	base int64
	size int64
	path string
	f    *os.File
	m    *mmap.Mapping // the owner's reference is dropped by release; readers Acquire
	data []byte        // m.Bytes(), valid while a reference is held

	// lastWrite is when the segment was last appended to (unix nanoseconds):
	// the file's mtime at open, the time it was sealed after a roll.
	lastWrite atomic.Int64
	// removed is set once the file should be unlinked when the last reference goes.
	removed atomic.Bool
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

// end is the offset one past the segment.
func (s *segment) end() int64 { return s.base + s.size }

// openSegment maps an existing segment file.
func openSegment(dir string, base, size int64) (*segment, error) {
	path := filepath.Join(dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
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
	s, err := mapSegment(f, path, base, size)
	if err != nil {
		return nil, err
	}
	s.lastWrite.Store(st.ModTime().UnixNano())
	return s, nil
}

var errShortSegment = errors.New("segment file has the wrong size")

// createSegment creates, preallocates and maps a new segment file. A failed
// creation leaves no file behind.
func createSegment(dir string, base, size int64, fallocate func(*os.File, int64, int64) error, now time.Time) (*segment, error) {
	return createSegmentPath(filepath.Join(dir, segmentName(base)), base, size, fallocate, now)
}

// createSegmentPath is createSegment into the file path.
func createSegmentPath(path string, base, size int64, fallocate func(*os.File, int64, int64) error, now time.Time) (*segment, error) {
	dir := filepath.Dir(path)
	// O_EXCL: never reuse a file that some mapping may still cover.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("commitlog: create segment: %w", err)
	}
	if err := fallocate(f, 0, size); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("commitlog: preallocate segment %s: %w", path, classifySpace(err))
	}
	s, err := mapSegment(f, path, base, size)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	// The new file's directory entry must survive a power failure before a
	// record acknowledged in sync mode lands in it.
	if err := syncDir(dir); err != nil {
		s.release(true)
		return nil, err
	}
	s.lastWrite.Store(now.UnixNano())
	return s, nil
}

func mapSegment(f *os.File, path string, base, size int64) (*segment, error) {
	m, err := mmap.Map(f, 0, int(size), mmap.ReadWrite)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	s := &segment{base: base, size: size, path: path, f: f, m: m, data: m.Bytes()}
	m.AfterUnmap(func() {
		f.Close()
		if s.removed.Load() {
			// Best effort: a file left by a power failure right now is
			// below the log's minimum and removed by retention again.
			// s.path, not path: RestartAt renames the segment it creates.
			if os.Remove(s.path) == nil {
				syncDir(filepath.Dir(s.path))
			}
		}
	})
	return s, nil
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
func listSegments(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
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
