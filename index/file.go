package index

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

// File layout (big-endian, as Java's ByteBuffer writes it).
const (
	headerSize = 40
	slotSize   = 4
	entrySize  = 20

	hdrBeginTs   = 0
	hdrEndTs     = 8
	hdrBeginPhy  = 16
	hdrEndPhy    = 24
	hdrSlotsUsed = 32
	hdrCount     = 36
)

var be = binary.BigEndian

// file is one index file, mapped for its whole length.
//
// The fields below m are published for lock-free readers. The writer stores
// an entry's bytes, then endTs/endPhy (and beginTs/beginPhy for the first
// entry), then count, then the slot, so a reader that loads a slot and then
// count finds every entry number below count fully written. Readers touch
// m.Bytes() only between a successful m.Acquire and m.Release.
type file struct {
	name string // yyyyMMddHHmmssSSS
	path string
	fs   vfs.FS
	m    *mmap.Mapping
	rw   bool // mapped read-write: the newest file at Open, or created by roll

	count    atomic.Int32 // header indexCount: the next entry number, >= 1
	beginTs  atomic.Int64
	endTs    atomic.Int64
	beginPhy atomic.Int64
	endPhy   atomic.Int64

	slotsUsed int32 // header hashSlotCount; writer only (Index.mu)
}

// header is the decoded 40-byte file header.
type header struct {
	beginTs, endTs, beginPhy, endPhy int64
	slotsUsed, count                 int32
}

func readHeader(b []byte) header {
	return header{
		beginTs:   int64(be.Uint64(b[hdrBeginTs:])),
		endTs:     int64(be.Uint64(b[hdrEndTs:])),
		beginPhy:  int64(be.Uint64(b[hdrBeginPhy:])),
		endPhy:    int64(be.Uint64(b[hdrEndPhy:])),
		slotsUsed: int32(be.Uint32(b[hdrSlotsUsed:])),
		count:     int32(be.Uint32(b[hdrCount:])),
	}
}

// writeHeader stores the file's current counters into the mapped header.
func (f *file) writeHeader(b []byte) {
	be.PutUint64(b[hdrBeginTs:], uint64(f.beginTs.Load()))
	be.PutUint64(b[hdrEndTs:], uint64(f.endTs.Load()))
	be.PutUint64(b[hdrBeginPhy:], uint64(f.beginPhy.Load()))
	be.PutUint64(b[hdrEndPhy:], uint64(f.endPhy.Load()))
	be.PutUint32(b[hdrSlotsUsed:], uint32(f.slotsUsed))
	be.PutUint32(b[hdrCount:], uint32(f.count.Load()))
}

// setFromHeader loads the published counters from h.
func (f *file) setFromHeader(h header) {
	f.beginTs.Store(h.beginTs)
	f.endTs.Store(h.endTs)
	f.beginPhy.Store(h.beginPhy)
	f.endPhy.Store(h.endPhy)
	f.slotsUsed = h.slotsUsed
	f.count.Store(h.count)
}

// loadSlot atomically reads the big-endian int32 at b[off:], which must be
// 4-byte aligned in memory (slots are: the mapping is page aligned and slot
// positions are 40 + 4*s).
func loadSlot(b []byte, off int) int32 {
	_ = b[off+3]
	v := atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
	var w [4]byte
	binary.NativeEndian.PutUint32(w[:], v)
	return int32(be.Uint32(w[:]))
}

// storeSlot atomically writes v big-endian at b[off:].
func storeSlot(b []byte, off int, v int32) {
	_ = b[off+3]
	var w [4]byte
	be.PutUint32(w[:], uint32(v))
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), binary.NativeEndian.Uint32(w[:]))
}

// entry is a decoded 20-byte entry.
type entry struct {
	hash int32
	off  int64
	diff int32 // seconds since the file's beginTimestamp
	prev int32
}

func readEntry(b []byte, pos int) entry {
	e := b[pos : pos+entrySize]
	return entry{
		hash: int32(be.Uint32(e[0:])),
		off:  int64(be.Uint64(e[4:])),
		diff: int32(be.Uint32(e[12:])),
		prev: int32(be.Uint32(e[16:])),
	}
}

func writeEntry(b []byte, pos int, e entry) {
	p := b[pos : pos+entrySize]
	be.PutUint32(p[0:], uint32(e.hash))
	be.PutUint64(p[4:], uint64(e.off))
	be.PutUint32(p[12:], uint32(e.diff))
	be.PutUint32(p[16:], uint32(e.prev))
}

func (e entry) zero() bool { return e == entry{} }

// timeDiff returns RocketMQ's stored time of an entry: whole seconds since
// the file's beginTimestamp, clamped to [0, MaxInt32], and 0 while the
// beginTimestamp is not positive.
func timeDiff(beginTs, ts int64) int32 {
	if beginTs <= 0 {
		return 0
	}
	d := (ts - beginTs) / 1000
	switch {
	case d < 0:
		return 0
	case d > math.MaxInt32:
		return math.MaxInt32
	}
	return int32(d)
}

// createFile makes a new file at dir/name: written as name.tmp, preallocated,
// synced, mapped read-write, given its initial header (RocketMQ starts a file
// with begin = end = the previous file's end, and indexCount 1), then renamed
// into place and the directory synced.
func createFile(fsys vfs.FS, dir, name string, lay *layout, prevEndTs, prevEndPhy int64) (*file, error) {
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	fd, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("index: create %s: %w", tmp, err)
	}
	fail := func(err error) (*file, error) {
		fd.Close()
		fsys.Remove(tmp)
		return nil, err
	}
	if err := fd.Allocate(0, int64(lay.size)); err != nil {
		return fail(fmt.Errorf("index: %w", err))
	}
	if err := fd.Datasync(); err != nil {
		return fail(fmt.Errorf("index: fdatasync %s: %w", tmp, err))
	}
	m, err := fd.Map(0, lay.size, mmap.ReadWrite)
	if err != nil {
		return fail(fmt.Errorf("index: %w", err))
	}
	if err := fd.Close(); err != nil {
		m.Release()
		fsys.Remove(tmp)
		return nil, fmt.Errorf("index: close %s: %w", tmp, err)
	}
	f := &file{name: name, path: path, fs: fsys, m: m, rw: true}
	f.setFromHeader(header{beginTs: prevEndTs, endTs: prevEndTs, beginPhy: prevEndPhy, endPhy: prevEndPhy, count: 1})
	f.writeHeader(m.Bytes())
	if err := fsys.Rename(tmp, path); err != nil {
		m.Release()
		fsys.Remove(tmp)
		return nil, fmt.Errorf("index: rename %s: %w", tmp, err)
	}
	if err := durable.SyncDir(fsys, dir); err != nil {
		// The file is in place but its name may not survive a power
		// failure: remove it (a later Put creates another).
		m.Release()
		fsys.Remove(path)
		return nil, fmt.Errorf("index: new file %s: %w", path, err)
	}
	return f, nil
}

// openFile maps an existing file, read-write if rw. Its size must match the
// layout. The counters are loaded from the header unchecked; the caller
// validates them.
func openFile(fsys vfs.FS, dir, name string, lay *layout, rw bool) (*file, error) {
	path := filepath.Join(dir, name)
	flag := os.O_RDONLY
	mode := mmap.ReadOnly
	if rw {
		flag, mode = os.O_RDWR, mmap.ReadWrite
	}
	fd, err := fsys.OpenFile(path, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", path, err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("index: stat %s: %w", path, err)
	}
	if st.Size() != int64(lay.size) {
		return nil, fmt.Errorf("%w: %s is %d bytes, the options give %d", ErrLayout, path, st.Size(), lay.size)
	}
	m, err := fd.Map(0, lay.size, mode)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	f := &file{name: name, path: path, fs: fsys, m: m, rw: rw}
	f.setFromHeader(readHeader(m.Bytes()))
	return f, nil
}

// headerSane reports whether the header's counters are within the layout's
// bounds and consistent with each other.
func (f *file) headerSane(lay *layout) bool {
	n := f.count.Load()
	if n < 1 || int(n) > lay.entries || f.slotsUsed < 0 || int(f.slotsUsed) > lay.slots {
		return false
	}
	if n > 1 && (f.endPhy.Load() < f.beginPhy.Load() || f.endTs.Load() < f.beginTs.Load()) {
		return false
	}
	return true
}

// scanResult is what scan derives from a file's entries.
type scanResult struct {
	count   int32   // next entry number: entries [1, count) are valid
	slots   []int32 // the slot table those entries imply
	used    int32   // non-empty slots
	lastOff int64   // offset of entry count-1
	maxDiff int32   // largest time diff among the valid entries
}

// scan re-derives a file's contents from its entries alone. Entry 1 must
// carry the header's beginPhyOffset, and from there every entry must be what
// the writer produces: not all zero, a non-negative keyHash, a commit-log
// offset not below the previous entry's, a non-negative time diff, and a
// prevIndex equal to the previous entry of the same slot (0 for the first).
// The first entry that breaks a rule ends the scan. A torn or foreign entry
// cannot satisfy the exact prevIndex rule except by coincidence, so the
// result is the longest prefix the writer could have produced.
func scan(b []byte, lay *layout, beginPhy int64) scanResult {
	r := scanResult{count: 1, slots: make([]int32, lay.slots)}
	last := int64(math.MinInt64)
	for n := int32(1); int(n) < lay.entries; n++ {
		e := readEntry(b, lay.entryPos(n))
		if e.zero() || e.hash < 0 || e.off < last || e.diff < 0 {
			break
		}
		if n == 1 && e.off != beginPhy {
			break
		}
		s := int(e.hash) % lay.slots
		if e.prev != r.slots[s] {
			break
		}
		if r.slots[s] == 0 {
			r.used++
		}
		r.slots[s] = n
		last = e.off
		r.count = n + 1
		r.lastOff = e.off
		r.maxDiff = max(r.maxDiff, e.diff)
	}
	return r
}

// recover validates the newest file after Open and repairs it in place: the
// entries are rescanned (see scan), the slot table is made to match them,
// everything past the last valid entry is zeroed (to the end of the file),
// and the header is rewritten. The header's own counters are not trusted: a
// crash may leave entries past indexCount, or an indexCount (or slots) ahead
// of entries that never reached the disk. Changes are synced before recover
// returns. It reports false, changing nothing, when no entry is valid: the
// caller then deletes the file.
func (f *file) recover(lay *layout) (bool, error) {
	b := f.m.Bytes()
	h := readHeader(b)
	r := scan(b, lay, h.beginPhy)
	if r.count <= 1 {
		return false, nil
	}
	changed := false
	endTs := h.endTs
	if h.count != r.count || h.endPhy != r.lastOff || endTs < h.beginTs {
		// The header does not describe these entries: bound the end time
		// from above by the newest entry's second.
		endTs = h.beginTs + int64(r.maxDiff)*1000 + 999
	}
	for s := range lay.slots {
		pos := lay.slotPos(s)
		if loadSlot(b, pos) != r.slots[s] {
			storeSlot(b, pos, r.slots[s])
			changed = true
		}
	}
	want := header{beginTs: h.beginTs, endTs: endTs, beginPhy: h.beginPhy, endPhy: r.lastOff, slotsUsed: r.used, count: r.count}
	f.setFromHeader(want)
	if h != want {
		f.writeHeader(b)
		changed = true
	}
	// Everything past the valid entries is zeroed, not only a run right
	// after them: a power loss can leave any of the dirty pages on disk, so
	// entries put before it may lie past a zeroed gap. Kept, they would wait
	// there until new puts fill the gap, then pass scan's rules at the next
	// Open (their prevIndex still matches a slot the new entries left alone)
	// and be taken for indexed: Put skips offsets below the highest indexed
	// one, and the store re-puts new messages at the offsets of lost ones.
	tail := lay.entryPos(r.count)
	if err := f.zeroFrom(tail, lay.size); err != nil {
		return false, err
	}
	syncFrom := tail
	if changed {
		syncFrom = 0
	}
	if err := f.fs.MSync(f.path, f.m, syncFrom, lay.size-syncFrom); err != nil {
		return false, fmt.Errorf("index: sync repaired file: %w", err)
	}
	return true, nil
}

// zeroFrom makes [from, to) of the file read as zeros: its blocks stay
// allocated (vfs File.ZeroRange: a metadata operation on ext4 and xfs, a
// punched hole reserved again on tmpfs), and the mapping sees the zeros.
// The caller syncs the range.
func (f *file) zeroFrom(from, to int) error {
	if from >= to {
		return nil
	}
	fd, err := f.fs.OpenFile(f.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("index: open %s to zero its tail: %w", f.path, err)
	}
	err = fd.ZeroRange(int64(from), int64(to-from))
	if cerr := fd.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("index: zero the tail of %s: %w", f.path, err)
	}
	return nil
}

// sync writes the file's slots and its first n entries back, then the
// header: the header goes last so that a synced header never describes
// entries that were not synced before it.
func (f *file) sync(lay *layout, n int32) error {
	end := lay.entryPos(n)
	ps := mmap.PageSize()
	if end <= ps {
		return f.fs.MSync(f.path, f.m, 0, end)
	}
	if err := f.fs.MSync(f.path, f.m, ps, end-ps); err != nil {
		return err
	}
	return f.fs.MSync(f.path, f.m, 0, headerSize)
}
