package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/mmap"
)

// Segment recycling.
//
// Retention does not unlink every retired segment file: up to
// Options.RecycleSegments of them are renamed into a pool (files named
// poolPrefix + the old segment's name, which listSegments ignores), and the
// allocator renames a pool file into place as the next segment instead of
// creating and fallocating a new one. Its blocks are allocated and its pages
// are likely still in the page cache, so writing into it costs a fraction of
// first-touching fresh pages.
//
// A recycled file is not zeroed: past the written position it holds an
// older segment's bytes (records, blank-end and hole markers, partial
// records). Records identify themselves (PHYSICALOFFSET must equal their
// position), markers do not. So before a pool file takes a segment's name,
// that segment's base is recorded durably in the registry (recycledName);
// recovery treats a registered segment's bytes past the synced position as
// possibly stale (see scanSegment, resync, staleExtent). A base leaves the
// registry once its segment is sealed (blank-end marker written) and synced,
// or once recovery zeroed its tail. A registered base whose file does not
// exist, or whose segment is sealed, or that was created fresh, is harmless:
// the rules for registered segments only distrust what a fresh segment never
// holds.

// poolPrefix names the files of the recycling pool: poolPrefix + the
// segment name the file had.
const poolPrefix = "recycle-"

// recycledName is the registry of segments that may hold stale bytes. It is
// replaced atomically (durable.WriteFile), never rewritten in place: a torn
// write must not make registrations vanish. Layout (big-endian):
//
//	0  8  magic "APGRCYC1"
//	8  4  count n (at most maxRecycled)
//	12 8n bases
//	.. 4  CRC32 (IEEE) of everything before
//
// An unreadable registry (wrong magic, size or CRC) makes recovery treat
// every segment as registered: the safe side.
const (
	recycledName  = "RECYCLED"
	recycledMagic = "APGRCYC1"
	// maxRecycled bounds the registry. In use at once: the active segment,
	// the prepared one and a sealed one whose sync is pending, so a full
	// registry (recycling then creates fresh files) means something keeps
	// segments from being synced.
	maxRecycled = 8
)

// errRegistryFull: no room to register another recycled segment.
var errRegistryFull = errors.New("commitlog: recycled-segment registry full")

// registry is the in-memory copy of recycledName.
type registry struct {
	fs   vfs.FS
	path string

	mu    sync.Mutex
	bases []int64 // ascending
	// low is the smallest registered base + segment size (math.MaxInt64 when
	// none): the flusher looks at it without the lock to see whether a
	// registered segment has become sealed and synced.
	low atomic.Int64
}

const noneRegistered = int64(^uint64(0) >> 1)

func encodeRegistry(bases []int64) []byte {
	b := make([]byte, 0, 12+8*len(bases)+4)
	b = append(b, recycledMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(bases)))
	for _, v := range bases {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// decodeRegistry parses a registry file; ok is false when it is damaged.
func decodeRegistry(b []byte) (bases []int64, ok bool) {
	if len(b) < 16 || string(b[:8]) != recycledMagic {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(b[8:]))
	if n > maxRecycled || len(b) != 12+8*n+4 {
		return nil, false
	}
	if crc32.ChecksumIEEE(b[:12+8*n]) != binary.BigEndian.Uint32(b[12+8*n:]) {
		return nil, false
	}
	for i := 0; i < n; i++ {
		bases = append(bases, int64(binary.BigEndian.Uint64(b[12+8*i:])))
	}
	return bases, true
}

// readRegistry reads the registry in dir. all is true when the file exists
// but cannot be trusted: every segment must then be treated as registered.
func readRegistry(fsys vfs.FS, dir string) (bases []int64, all bool, err error) {
	path := filepath.Join(dir, recycledName)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("commitlog: recycled registry: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 12+8*maxRecycled+4+1)
	n, _ := f.ReadAt(buf, 0)
	bases, ok := decodeRegistry(buf[:n])
	if !ok {
		return nil, true, nil
	}
	return bases, false, nil
}

func newRegistry(fsys vfs.FS, dir string) *registry {
	r := &registry{fs: fsys, path: filepath.Join(dir, recycledName)}
	r.low.Store(noneRegistered)
	return r
}

// storeLocked writes bases durably and makes them the registry's. r.mu is held.
func (r *registry) storeLocked(bases []int64, segSize int64) error {
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	if err := durable.WriteFile(r.fs, r.path, encodeRegistry(bases)); err != nil {
		return fmt.Errorf("commitlog: recycled registry: %w", err)
	}
	r.bases = bases
	low := noneRegistered
	if len(bases) > 0 {
		low = bases[0] + segSize
	}
	r.low.Store(low)
	return nil
}

// reset makes the registry empty (recovery, once every registered segment
// is ordinary again). Writes nothing when the file is absent and nothing is
// registered.
func (r *registry) reset(segSize int64, exists bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !exists && len(r.bases) == 0 {
		return nil
	}
	return r.storeLocked(nil, segSize)
}

// add registers base durably, first dropping the bases that no longer need
// it (drop reports those). It fails with errRegistryFull when no room is left.
func (r *registry) add(base, segSize int64, drop func(int64) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make([]int64, 0, len(r.bases)+1)
	for _, b := range r.bases {
		if b != base && !drop(b) {
			next = append(next, b)
		}
	}
	if len(next) >= maxRecycled {
		return errRegistryFull
	}
	return r.storeLocked(append(next, base), segSize)
}

// prune drops the bases drop reports, writing the registry if any went.
func (r *registry) prune(segSize int64, drop func(int64) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make([]int64, 0, len(r.bases))
	for _, b := range r.bases {
		if !drop(b) {
			next = append(next, b)
		}
	}
	if len(next) == len(r.bases) {
		return nil
	}
	return r.storeLocked(next, segSize)
}

// poolName is the pool file name for a file that was the segment at base.
func poolName(base int64) string { return poolPrefix + segmentName(base) }

// recycleEnabled reports whether retired files go to the pool.
func (l *Log) recycleEnabled() bool { return l.opts.RecycleSegments > 0 && !l.readOnly }

// openPool adopts the pool files an earlier run left (the newest up to
// Options.RecycleSegments; a file of the wrong size is removed) and removes
// the rest, and the registry's temporary files. Called by Open before
// recovery.
func (l *Log) openPool() error {
	if err := durable.RemoveTemps(l.fs, filepath.Join(l.dir, recycledName)); err != nil {
		return fmt.Errorf("commitlog: %w", err)
	}
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("commitlog: list %s: %w", l.dir, err)
	}
	var found []int64
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, poolPrefix) {
			continue
		}
		b, ok := parseSegmentName(strings.TrimPrefix(name, poolPrefix))
		st, err := l.fs.Stat(filepath.Join(l.dir, name))
		if ok && err == nil && st.Size() == l.opts.SegmentSize {
			found = append(found, b)
			continue
		}
		if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("commitlog: remove pool file: %w", err)
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i] > found[j] }) // newest first
	keep := max(l.opts.RecycleSegments, 0)
	for i, b := range found {
		path := filepath.Join(l.dir, poolName(b))
		if i < keep {
			l.pool = append([]string{path}, l.pool...) // oldest first
			continue
		}
		if err := l.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("commitlog: remove pool file: %w", err)
		}
	}
	return nil
}

// toPool renames the unmapped file of a segment into the pool, or unlinks
// it when recycling is off or keep is false. The newest files are kept:
// when the pool is over its size, its oldest file is unlinked. The caller
// syncs the directory. l.poolMu must not be held.
func (l *Log) toPool(path string, base int64, keep bool) error {
	if !l.recycleEnabled() || !keep {
		if err := l.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	to := filepath.Join(l.dir, poolName(base))
	if err := l.fs.Rename(path, to); err != nil {
		return err
	}
	l.poolMu.Lock()
	l.pool = slices.DeleteFunc(l.pool, func(p string) bool { return p == to }) // replaced by the rename
	l.pool = append(l.pool, to)
	var drop []string
	if over := len(l.pool) - l.opts.RecycleSegments; over > 0 {
		drop = append(drop, l.pool[:over]...)
		l.pool = append(l.pool[:0:0], l.pool[over:]...)
	}
	l.poolMu.Unlock()
	for _, p := range drop {
		// Not part of the log: a file left by a failed unlink is removed
		// or adopted by the next Open.
		_ = l.fs.Remove(p)
	}
	return nil
}

// dropPool unlinks every file of the pool (retention under disk pressure:
// the space they hold is wanted now) and reports whether there was any.
// Not synced: the files are no part of the log.
func (l *Log) dropPool() bool {
	l.poolMu.Lock()
	drop := l.pool
	l.pool = nil
	l.poolMu.Unlock()
	for _, p := range drop {
		_ = l.fs.Remove(p)
	}
	return len(drop) > 0
}

// takePool removes the newest file from the pool and returns its path.
func (l *Log) takePool() (string, bool) {
	l.poolMu.Lock()
	defer l.poolMu.Unlock()
	if len(l.pool) == 0 {
		return "", false
	}
	p := l.pool[len(l.pool)-1]
	l.pool = l.pool[:len(l.pool)-1]
	return p, true
}

// givePool puts back a pool file that could not be used.
func (l *Log) givePool(p string) {
	l.poolMu.Lock()
	l.pool = append(l.pool, p)
	l.poolMu.Unlock()
}

// recycleSegment makes a pool file the segment at base: base is
// registered durably, the file renamed into place, the directory synced,
// the file mapped. ok is false when the pool is empty or the file could not
// be used (registry full or not written, rename failed: the caller creates
// a new segment); err is set when the rename happened but the segment
// cannot be used (the file is removed, as a failed creation's is).
func (l *Log) recycleSegment(base int64) (s *segment, ok bool, err error) {
	if !l.recycleEnabled() {
		return nil, false, nil
	}
	src, ok := l.takePool()
	if !ok {
		return nil, false, nil
	}
	size := l.opts.SegmentSize
	flushed := l.flushed.Load()
	// A registered segment that is sealed and synced needs no entry. (One
	// retention removed is not dropped before that: its file may still be
	// on disk under its name while a reader maps it.)
	drop := func(b int64) bool { return b+size <= flushed }
	// Until the rename, a failure leaves the file in the pool and the
	// caller creates a new segment instead (which reports a real disk
	// problem itself).
	if err := l.reg.add(base, size, drop); err != nil {
		l.givePool(src)
		l.opts.Logger.Warn("commitlog: cannot register a recycled segment; creating a new one", "segment", segmentName(base), "err", err)
		return nil, false, nil
	}
	path := filepath.Join(l.dir, segmentName(base))
	if err := l.fs.Rename(src, path); err != nil {
		l.givePool(src)
		l.opts.Logger.Warn("commitlog: cannot rename a pool file into place; creating a new segment", "file", src, "segment", segmentName(base), "err", err)
		return nil, false, nil
	}
	// The new name must survive a power failure before a record
	// acknowledged in sync mode lands in the file.
	if err := durable.SyncDir(l.fs, l.dir); err != nil {
		l.fs.Remove(path)
		return nil, true, fmt.Errorf("commitlog: recycle segment %s: %w", segmentName(base), err)
	}
	f, err := l.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		l.fs.Remove(path)
		return nil, true, fmt.Errorf("commitlog: recycle segment %s: %w", segmentName(base), err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != size {
		f.Close()
		l.fs.Remove(path)
		if err == nil {
			err = fmt.Errorf("%w: %d bytes", errShortSegment, st.Size())
		}
		return nil, true, fmt.Errorf("commitlog: recycle segment %s: %w", segmentName(base), err)
	}
	s, err = l.mapSegment(f, path, base)
	if err != nil {
		l.fs.Remove(path)
		return nil, true, err
	}
	s.recycled = true
	s.oldData = true
	// Its pages are cheap to write into only while they are in the page
	// cache. Once most of them are evicted (a long retention time), reading
	// them back costs more than new pages: the file's blocks are then
	// zeroed (FALLOC_FL_ZERO_RANGE, a metadata operation: the blocks stay
	// allocated and read as zeros with no I/O), which makes it a new file
	// in all but the fallocate saved. Not synced: after a crash it may hold
	// the older data again, which its registration covers.
	if res, pages, err := s.m.Resident(); err == nil && 2*res < pages {
		if s.f.ZeroRange(0, size) == nil {
			s.oldData = false
		}
	}
	s.lastWrite.Store(l.opts.now().UnixNano())
	return s, true, nil
}

// releaseUnused drops a segment past the log's end that holds no record
// (the prepared one at Close, one recovery found unused): a recycled file
// goes back to the pool, any other is unlinked. The caller syncs the
// directory when it needs the change durable.
func (l *Log) releaseUnused(s *segment) {
	if !s.recycled || !l.recycleEnabled() {
		s.release(true)
		return
	}
	s.release(false) // nothing else maps a segment past the log's end
	if err := l.toPool(s.path, s.base, true); err != nil {
		l.fs.Remove(s.path)
	}
}

// pruneRegistry drops from the registry the segments that are sealed and
// synced (called by the allocator goroutine, which the flusher kicks once a
// registered segment is synced). Cheap when none is.
func (l *Log) pruneRegistry(flushed int64) {
	if l.reg == nil || flushed < l.reg.low.Load() {
		return
	}
	size := l.opts.SegmentSize
	// A failure leaves the bases registered: harmless, retried next round.
	_ = l.reg.prune(size, func(b int64) bool { return b+size <= flushed })
}

// staleHeader reports whether buf (at log offset pos of a segment of size
// segSize) starts with something an earlier use of a recycled file left: a
// record header whose PHYSICALOFFSET lies below pos by a multiple of the
// segment size, or a blank-end or hole marker that fits in the segment.
func staleHeader(buf []byte, pos, segEnd, segSize int64) bool {
	if len(buf) < message.BlankHeaderSize {
		return false
	}
	size := int64(message.ReadTotalSize(buf))
	switch binary.BigEndian.Uint32(buf[message.OffMagic:]) {
	case message.MagicBlank:
		return size == segEnd-pos
	case message.MagicHole:
		return size >= message.BlankHeaderSize && pos+size <= segEnd
	case message.MagicV1, message.MagicV2:
		if size < message.MinRecordSize || len(buf) < message.OffPhysicalOffset+8 {
			return false
		}
		p := int64(binary.BigEndian.Uint64(buf[message.OffPhysicalOffset:]))
		return p < pos && (pos-p)%segSize == 0
	}
	return false
}

var holeMagicBytes = []byte{0xDE, 0xAD, 0xF1, 0x11}

// staleExtent returns how many bytes from off on, in a recycled segment,
// come before an earlier use's data: the first stale header (staleHeader),
// or the end of the non-zero bytes (the next all-zero 64 KiB chunk) when
// that comes first. They are what a crash may have left of unsynced new
// data; the rest is an older segment's.
func staleExtent(seg *segment, off int64) int64 {
	data := seg.data
	start := off - seg.base
	n := int64(len(data))
	last := start
	for c := start; c < n; c += zeroChunk {
		ce := min(c+zeroChunk, n)
		for p := c; p < ce; {
			// The next header candidate starting in [p, ce).
			window := data[:min(ce+message.OffMagic+4, n)]
			cand := int64(-1)
			for _, magic := range [][]byte{recordMagicPrefix, blankMagicBytes, holeMagicBytes} {
				if i := indexFrom(window, magic, p+message.OffMagic) - message.OffMagic; i >= p && i < ce && (cand < 0 || i < cand) {
					cand = i
				}
			}
			if cand < 0 {
				break
			}
			if staleHeader(data[cand:], seg.base+cand, seg.end(), seg.size) {
				return cand - start
			}
			p = cand + 1
		}
		nz := lastNonZero(data[c:ce])
		if nz < 0 {
			break
		}
		last = c + int64(nz) + 1
	}
	return last - start
}

// mmapPageSize is the page size, for tests that look at mappings.
var mmapPageSize = mmap.PageSize
