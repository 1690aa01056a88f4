package consumequeue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/apogeemq/apogee/mmap"
)

// Queue is one topic/queue's sequence of entries. One writer (the store's
// dispatcher) calls Append and TruncateAfter; any number of readers call Get,
// Read, SearchByTime and the offset accessors concurrently; DeleteBelow, Flush
// and Sweep run from other goroutines through the Set.
type Queue struct {
	set   *Set
	topic string
	id    int32
	dir   string
	per   int64 // entries per file

	// Published state, read without locks.
	min     atomic.Int64 // first readable offset
	max     atomic.Int64 // next offset to write; stored after the entry's bytes
	lastEnd atomic.Int64 // End() of the entry at max-1 (0 if none since the blank pre-fill)
	gen     atomic.Uint64
	// gen is a sequence lock around the rare rewrites of bytes below a
	// published max (TruncateAfter): odd while they happen. Readers retry when
	// it is odd or changed across their read. Appends never touch it.
	segs     atomic.Pointer[segList]
	closed   atomic.Bool
	dirDirty atomic.Bool // files created or removed since the last Flush
	newDir   atomic.Bool // the queue directory was created since the last Flush

	// Writer state. tail is read by Append's fast path without wmu; only the
	// writer itself changes it, under wmu. Everything that changes the file
	// list (new file, truncation, deletion, drop) holds wmu.
	wmu     sync.Mutex
	tail    *segment // the last file; nil iff there are no files
	floor   int64    // first offset that is not a blank pre-fill entry; under wmu
	dirMade bool     // under wmu

	flushMu sync.Mutex
	flushed int64 // entries below this are durable; under flushMu

	// Hints recovery leaves, so that the store's checks at open touch no
	// file: minCommit is the commitlog offset of the entry at min (-1:
	// unknown), recTail the entry at recTailAt (valid while that is
	// max-1; -1: none). Writers reset them when they change what they say.
	minCommit atomic.Int64
	recTail   Entry
	recTailAt int64
}

func newQueue(s *Set, topic string, id int32) *Queue {
	q := &Queue{
		set:   s,
		topic: topic,
		id:    id,
		dir:   filepath.Join(s.root, topic, strconv.FormatInt(int64(id), 10)),
		per:   int64(s.opts.EntriesPerFile),
	}
	q.segs.Store(&segList{})
	q.minCommit.Store(-1)
	q.recTailAt = -1
	return q
}

// RecoveredTail returns the queue's last entry as recovery read it, while
// it is still the last one (for the store's checks at open, which then read
// no queue file); ok is false otherwise.
func (q *Queue) RecoveredTail() (e Entry, ok bool) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if q.recTailAt < 0 || q.recTailAt != q.max.Load()-1 {
		return Entry{}, false
	}
	return q.recTail, true
}

// Topic returns the queue's topic.
func (q *Queue) Topic() string { return q.topic }

// ID returns the queue id.
func (q *Queue) ID() int32 { return q.id }

// MinOffset returns the first readable queue offset.
func (q *Queue) MinOffset() int64 {
	lo, hi := q.min.Load(), q.max.Load()
	return min(lo, hi)
}

// MaxOffset returns the next offset to be written: the number of entries ever
// written to the queue (blank pre-fill included).
func (q *Queue) MaxOffset() int64 { return q.max.Load() }

// Files returns the number of files the queue has.
func (q *Queue) Files() int { return len(q.segs.Load().segs) }

// fileName is the 20-digit zero-padded start byte offset.
func fileName(byteOff int64) string { return fmt.Sprintf("%020d", byteOff) }

func (q *Queue) errorf(format string, args ...any) error {
	return fmt.Errorf("consumequeue: %s/%d: "+format, append([]any{q.topic, q.id}, args...)...)
}

// Append stores e at queue offset off.
//
//   - off == MaxOffset(): the entry is written and MaxOffset advances. The
//     commitlog offset must not go below the previous entry's end
//     (ErrInvalidEntry), since entries follow commitlog order.
//   - off < MaxOffset(): a re-dispatch after recovery. A no-op if the stored
//     entry is identical (or below MinOffset, already cleaned up); an all-zero
//     stored entry (lost in a crash) is filled in; ErrConflict if it differs.
//   - off > MaxOffset(): ErrGap, except on an empty queue (MinOffset ==
//     MaxOffset, e.g. new, or rebuilt after its files were dropped): the queue
//     then restarts at off, writing RocketMQ's blank entries from the start of
//     the file holding off up to it (files below are removed), and MinOffset
//     becomes off.
//
// Only one goroutine may call Append and TruncateAfter. In the steady state
// Append writes through the tail file's read-write mapping: no allocation, no
// system call but one fallocate per 128 KiB. A new file is created (sparse) when the tail fills.
func (q *Queue) Append(off int64, e Entry) error {
	t := q.tail
	if t == nil || off != q.max.Load() || off-t.start >= q.per || q.closed.Load() ||
		!validForAppend(e) || e.CommitLogOffset < q.lastEnd.Load() {
		return q.appendSlow(off, e)
	}
	return q.write(t, off, e)
}

// TailAddr returns the address Append(off, …) will store to, for the writer
// to prefetch (mmap.PrefetchAll) a little ahead of the append, so that the
// store does not stall on a page-table walk and a memory read. It returns 0
// when off is not on the tail's mapped, already-written pages. It reads the
// writer's state, so only the writer may call it.
func (q *Queue) TailAddr(off int64) uintptr {
	t := q.tail
	if t == nil || off < t.start || off-t.start >= q.per {
		return 0
	}
	pos := (off - t.start) * EntrySize
	if pos+EntrySize > t.touched {
		return 0
	}
	if m := t.m.Load(); m != nil {
		// No reference is taken: a prefetch of a region being unmapped is
		// harmless, and the Mapping itself is ordinary memory.
		return mmap.Addr(m.Bytes()[pos:])
	}
	return 0
}

// TailAddrs appends to addrs the TailAddr of each qs[i] for offs[i] (the
// nonzero ones), for a writer about to append to all of them. With thousands
// of queues each queue's state is cold, and finding a tail address is a
// chain of dependent loads (the Queue, its tail segment, that segment's
// mapping), each a cache miss of its own. TailAddrs walks the chains of the
// whole batch a link at a time and prefetches each link for every queue
// before following any of them, so the batch pays about one miss per link
// instead of one per link per queue. It also warms the Queue fields Append
// reads. Only the writer may call it.
func TailAddrs(qs []*Queue, offs []int64, addrs []uintptr) []uintptr {
	base := len(addrs)
	for _, q := range qs {
		addrs = append(addrs, uintptr(unsafe.Pointer(&q.per)), uintptr(unsafe.Pointer(&q.lastEnd)), uintptr(unsafe.Pointer(&q.tail)))
	}
	mmap.PrefetchAll(addrs[base:])
	addrs = addrs[:base]
	for _, q := range qs {
		if t := q.tail; t != nil {
			addrs = append(addrs, uintptr(unsafe.Pointer(&t.start)), uintptr(unsafe.Pointer(&t.touched)))
		}
	}
	mmap.PrefetchAll(addrs[base:])
	addrs = addrs[:base]
	for _, q := range qs {
		if t := q.tail; t != nil {
			if m := t.m.Load(); m != nil {
				addrs = append(addrs, uintptr(unsafe.Pointer(m)))
			}
		}
	}
	mmap.PrefetchAll(addrs[base:])
	addrs = addrs[:base]
	for i, q := range qs {
		if a := q.TailAddr(offs[i]); a != 0 {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

func (q *Queue) write(t *segment, off int64, e Entry) error {
	pos := (off - t.start) * EntrySize
	if pos+EntrySize > t.touched {
		// First write into this page (and maybe the first past the reserved
		// blocks): pwrite, see segment.touched.
		var b [EntrySize]byte
		putEntry(b[:], e)
		if err := q.set.writeCold(t, pos, b[:]); err != nil {
			return err
		}
	} else {
		m, err := q.set.acquire(t, true)
		if err != nil {
			return q.writeErr(off, err)
		}
		putEntry(m.Bytes()[pos:], e)
		m.Release()
	}
	q.lastEnd.Store(e.End())
	q.max.Store(off + 1) // publish after the bytes
	return nil
}

func (q *Queue) appendSlow(off int64, e Entry) error {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if q.closed.Load() {
		return ErrClosed
	}
	if q.set.opts.ReadOnly {
		return ErrReadOnly
	}
	if !validForAppend(e) || off < 0 {
		return q.errorf("append at %d: %+v: %w", off, e, ErrInvalidEntry)
	}
	hi := q.max.Load()
	switch {
	case off < hi:
		if off < q.min.Load() {
			return nil
		}
		old, err := q.entryAt(off)
		if err != nil {
			return err
		}
		if old == (Entry{}) {
			return q.fillHole(off, e)
		}
		if old != e {
			return q.errorf("append at %d: stored %+v, given %+v: %w", off, old, e, ErrConflict)
		}
		return nil
	case off > hi:
		if q.min.Load() != hi {
			return q.errorf("append at %d, max offset %d: %w", off, hi, ErrGap)
		}
		if err := q.rebase(off); err != nil {
			return err
		}
	case q.tail == nil && off%q.per != 0:
		// No file yet (a failed rebase) and off is inside a file: start it
		// with blanks too, or recovery would find zeros before the entry.
		if err := q.rebase(off); err != nil {
			return err
		}
	}
	if last := q.lastEnd.Load(); e.CommitLogOffset < last {
		return q.errorf("append at %d: commitlog offset %d before previous entry's end %d: %w",
			off, e.CommitLogOffset, last, ErrInvalidEntry)
	}
	t := q.tail
	if t == nil || off-t.start >= q.per {
		var err error
		if t, err = q.roll(off); err != nil {
			return err
		}
	}
	return q.write(t, off, e)
}

// fillHole writes e over an all-zero entry below max: one lost in a crash
// (e.g. a page that never reached the disk) and given again by re-dispatch.
func (q *Queue) fillHole(off int64, e Entry) error { return q.rewrite(off, e) }

// rewrite writes e over the entry at off, below max. Readers may be reading
// there, so it runs under the sequence lock. Holds wmu.
func (q *Queue) rewrite(off int64, e Entry) error {
	sg := q.segs.Load().find(off, q.per)
	if sg == nil {
		return q.errorf("offset %d: no file: %w", off, ErrOutOfRange)
	}
	// The hole may be a sparse region and a cold page: write it with pwrite
	// (a full disk fails here instead of faulting a store into the mapping).
	var b [EntrySize]byte
	putEntry(b[:], e)
	q.gen.Add(1)
	err := q.set.writeCold(sg, (off-sg.start)*EntrySize, b[:])
	q.gen.Add(1)
	if err != nil {
		return err
	}
	q.flushMu.Lock()
	q.flushed = min(q.flushed, off)
	q.flushMu.Unlock()
	return nil
}

// roll creates (sparse), sizes and maps the file holding queue offset off and
// makes it the tail. Holds wmu.
func (q *Queue) roll(off int64) (*segment, error) {
	start := off - off%q.per
	old := q.segs.Load()
	if n := len(old.segs); n > 0 && old.segs[n-1].start+q.per != start {
		return nil, q.errorf("new file at offset %d does not follow the last one at %d", start, old.segs[n-1].start)
	}
	if !q.dirMade {
		if err := q.set.fs.MkdirAll(q.dir, 0o755); err != nil {
			return nil, fmt.Errorf("consumequeue: %w", err)
		}
		q.dirMade = true
		q.newDir.Store(true)
	}
	path := filepath.Join(q.dir, fileName(start*EntrySize))
	// A file of that name can only be a leftover of a retired file; it may
	// still be mapped by a reader, so unlink it rather than truncate it.
	if err := q.set.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("consumequeue: %w", err)
	}
	f, err := q.set.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("consumequeue: %w", err)
	}
	m, err := func() (*mmap.Mapping, error) {
		defer f.Close()
		// Sparse: blocks are reserved a chunk ahead of the writer (Set.reserve).
		if err := f.Truncate(q.set.fileSize); err != nil {
			return nil, err
		}
		// The size is made durable now: the next Flush makes the name
		// durable, maybe before any entry of the file is synced, and after
		// a power loss a last file of 0 bytes is damage to recovery (the
		// queue dropped and rebuilt). One fdatasync per file created.
		if err := f.Datasync(); err != nil {
			return nil, err
		}
		return f.Map(0, int(q.set.fileSize), mmap.ReadWrite)
	}()
	if err != nil {
		q.set.fs.Remove(path)
		return nil, fmt.Errorf("consumequeue: %w", err)
	}
	sg := &segment{start: start, path: path}
	sg.writable.Store(true)
	q.set.install(sg, m)
	nl := &segList{base: start, segs: make([]*segment, len(old.segs)+1)}
	if len(old.segs) > 0 {
		nl.base = old.base
	}
	copy(nl.segs, old.segs)
	nl.segs[len(old.segs)] = sg
	q.segs.Store(nl)
	if q.tail != nil {
		q.tail.writable.Store(false)
		q.set.closeWriteFile(q.tail) // only a hole refill writes there again
	}
	q.tail = sg
	q.dirDirty.Store(true)
	return sg, nil
}

// rebase restarts an empty queue (min == max) at offset n > MaxOffset. Holds
// wmu. Nothing readable remains, so every file goes (readers see min == max and
// touch none) and the queue begins afresh in the file holding n, blank entries
// before n as RocketMQ writes them. Reusing the old tail file instead would put
// blanks after messages, which recovery rightly takes for damage.
func (q *Queue) rebase(n int64) error {
	old := q.segs.Load()
	q.segs.Store(&segList{})
	if q.tail != nil {
		q.tail.writable.Store(false)
	}
	q.tail = nil
	for _, sg := range old.segs {
		if err := q.set.retire(sg, true); err != nil {
			return err
		}
	}
	q.dirDirty.Store(true)
	t, err := q.roll(n)
	if err != nil {
		return err
	}
	m, err := q.set.acquire(t, true)
	if err != nil {
		return q.writeErr(n, err)
	}
	b := m.Bytes()
	for off := t.start; off < n; off++ {
		putEntry(b[(off-t.start)*EntrySize:], blankEntry)
	}
	m.Release()
	q.min.Store(n) // min first: readers see min > max (nothing) rather than blanks
	q.minCommit.Store(-1)
	q.max.Store(n)
	q.floor = n
	q.flushMu.Lock()
	q.flushed = min(q.flushed, t.start)
	q.flushMu.Unlock()
	return nil
}

// entryAt reads the stored entry at off without range checks against min and
// max. Used by the writer side under wmu, where the file list is stable.
func (q *Queue) entryAt(off int64) (Entry, error) {
	sg := q.segs.Load().find(off, q.per)
	if sg == nil {
		return Entry{}, q.errorf("offset %d: no file: %w", off, ErrOutOfRange)
	}
	m, err := q.set.acquire(sg, false)
	if err != nil {
		return Entry{}, err
	}
	e := getEntry(m.Bytes()[(off-sg.start)*EntrySize:])
	m.Release()
	return e, nil
}

func (q *Queue) rangeErr() error {
	if q.closed.Load() {
		return ErrClosed
	}
	return ErrOutOfRange
}

// readErr maps a failure to acquire a file into what the caller should see.
func (q *Queue) readErr(off int64, err error) error {
	if q.closed.Load() {
		return ErrClosed
	}
	if errors.Is(err, errSegmentGone) || off < q.min.Load() || off >= q.max.Load() {
		return ErrOutOfRange
	}
	return err
}

// writeErr maps a failure of the writer to acquire its file into what
// Append returns: ErrClosed once the queue is closed or dropped (its files
// retired), the cause otherwise.
func (q *Queue) writeErr(off int64, err error) error {
	if q.closed.Load() || errors.Is(err, errSegmentGone) {
		return ErrClosed
	}
	return q.errorf("append at %d: %w", off, err)
}

// Get returns the entry at queue offset off: O(1), no allocation.
// ErrOutOfRange below MinOffset or at/after MaxOffset.
func (q *Queue) Get(off int64) (Entry, error) {
	for {
		g := q.gen.Load()
		if g&1 != 0 {
			runtime.Gosched()
			continue
		}
		if off < q.min.Load() || off >= q.max.Load() {
			return Entry{}, q.rangeErr()
		}
		sg := q.segs.Load().find(off, q.per)
		if sg == nil {
			return Entry{}, q.rangeErr()
		}
		m, err := q.set.acquire(sg, false)
		if err != nil {
			return Entry{}, q.readErr(off, err)
		}
		e := getEntry(m.Bytes()[(off-sg.start)*EntrySize:])
		m.Release()
		if q.gen.Load() == g {
			return e, nil
		}
	}
}

// Read appends to dst the entries from queue offset off on, at most
// cap(dst)-len(dst) of them, stopping at MaxOffset. It does not allocate.
// off == MaxOffset returns dst unchanged (nothing new); off below MinOffset or
// beyond MaxOffset is ErrOutOfRange. On error dst is returned unextended.
func (q *Queue) Read(off int64, dst []Entry) ([]Entry, error) {
	n0 := len(dst)
	for {
		g := q.gen.Load()
		if g&1 != 0 {
			runtime.Gosched()
			continue
		}
		if q.closed.Load() {
			return dst, ErrClosed
		}
		lo, hi := q.min.Load(), q.max.Load()
		if off < lo || off > hi {
			return dst, ErrOutOfRange
		}
		n := min(int64(cap(dst)-n0), hi-off)
		if n <= 0 {
			return dst, nil
		}
		l := q.segs.Load()
		dst = dst[:n0+int(n)]
		k := n0
		for pos, end := off, off+n; pos < end; {
			sg := l.find(pos, q.per)
			if sg == nil {
				return dst[:n0], q.rangeErr()
			}
			m, err := q.set.acquire(sg, false)
			if err != nil {
				return dst[:n0], q.readErr(pos, err)
			}
			b := m.Bytes()
			for stop := min(end, sg.start+q.per); pos < stop; pos++ {
				dst[k] = getEntry(b[(pos-sg.start)*EntrySize:])
				k++
			}
			m.Release()
		}
		if q.gen.Load() == g {
			return dst, nil
		}
		dst = dst[:n0]
	}
}

// LastEntry returns the entry at MaxOffset()-1, if it is readable.
func (q *Queue) LastEntry() (Entry, bool) {
	for {
		hi := q.max.Load()
		if hi <= q.min.Load() {
			return Entry{}, false
		}
		e, err := q.Get(hi - 1)
		if err == nil {
			return e, true
		}
		if q.max.Load() == hi {
			return Entry{}, false
		}
	}
}

// SearchByTime returns the first offset in [MinOffset, MaxOffset) whose
// message's store time (given by storeTime, usually read from the commitlog)
// is >= ts: MinOffset if every message is newer, MaxOffset if every one is
// older (RocketMQ's semantics). Entries are in commitlog order, so store times
// are taken as non-decreasing. storeTime's error is returned wrapped.
func (q *Queue) SearchByTime(ts int64, storeTime func(Entry) (int64, error)) (int64, error) {
	lo, hi := q.MinOffset(), q.MaxOffset()
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := q.Get(mid)
		if err != nil {
			return 0, q.errorf("search by time: offset %d: %w", mid, err)
		}
		t, err := storeTime(e)
		if err != nil {
			return 0, q.errorf("search by time: offset %d: %w", mid, err)
		}
		if t >= ts {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// TruncateAfter drops every entry whose End() > commitLogEnd (the commitlog
// was truncated there by its recovery). Entries are in commitlog order, so the
// dropped ones are a suffix: MaxOffset moves back to the first of them, the
// files wholly after it are deleted and the rest of its file is zeroed and
// synced. Called by the writer only.
func (q *Queue) TruncateAfter(commitLogEnd int64) error {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if q.closed.Load() {
		return ErrClosed
	}
	if q.lastEnd.Load() <= commitLogEnd {
		return nil
	}
	hi := q.max.Load()
	a, b := q.floor, hi
	for a < b {
		mid := a + (b-a)/2
		e, err := q.entryAt(mid)
		if err != nil {
			return err
		}
		if e.End() > commitLogEnd {
			b = mid
		} else {
			a = mid + 1
		}
	}
	k := a
	if k >= hi {
		return nil
	}
	l := q.segs.Load()
	idx := int((k - l.base) / q.per)
	ts := l.segs[idx]
	m, err := q.set.acquire(ts, true)
	if err != nil {
		return err
	}
	defer m.Release()
	var errs []error
	if drop := l.segs[idx+1:]; len(drop) > 0 {
		// Unlink later files first (and make that durable), so a crash
		// midway leaves stale entries that a second truncation removes,
		// never a hole of zeros before stale entries. On an error the
		// in-memory truncation still completes: the queue stays usable.
		keep := make([]*segment, idx+1)
		copy(keep, l.segs)
		q.segs.Store(&segList{base: l.base, segs: keep})
		for _, sg := range drop {
			errs = append(errs, q.set.retire(sg, true))
		}
		errs = append(errs, q.set.syncDir(q.dir))
	}
	zeroTo := min(hi, ts.start+q.per)
	from, n := int((k-ts.start)*EntrySize), int((zeroTo-k)*EntrySize)
	q.gen.Add(1)
	q.recTailAt = -1
	q.max.Store(k)
	if q.min.Load() > k {
		q.min.Store(k)
		q.minCommit.Store(-1)
	}
	clear(m.Bytes()[from : from+n])
	q.gen.Add(1)
	if q.tail != ts {
		q.tail.writable.Store(false)
		ts.writable.Store(true)
		q.tail = ts
	}
	q.lastEnd.Store(0)
	if k > q.floor {
		var e Entry
		if k > ts.start {
			e = getEntry(m.Bytes()[from-EntrySize:])
		} else if e, err = q.entryAt(k - 1); err != nil { // in the previous file
			errs = append(errs, err)
		}
		q.lastEnd.Store(e.End())
	}
	q.flushMu.Lock()
	q.flushed = min(q.flushed, k)
	q.flushMu.Unlock()
	if err := q.set.fs.MSync(ts.path, m, from, n); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return q.errorf("truncate after %d: %w", commitLogEnd, err)
	}
	return nil
}

// deleteBelow removes the queue's leading files whose every entry points below
// minPhy (never the last file) and advances MinOffset to the first entry at or
// above minPhy. It returns the number of files removed.
func (q *Queue) deleteBelow(minPhy int64) (int, error) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if q.closed.Load() {
		return 0, nil
	}
	if c := q.minCommit.Load(); c >= 0 && c >= minPhy {
		// Every entry from min on points at or above minPhy (they
		// increase): nothing to delete, min stays.
		return 0, nil
	}
	l := q.segs.Load()
	hi := q.max.Load()
	n := 0
	for n < len(l.segs)-1 {
		e, err := q.entryAt(l.segs[n].start + q.per - 1)
		if err != nil {
			return 0, err
		}
		if classify(e) == kindMessage && e.CommitLogOffset >= minPhy {
			break
		}
		n++
	}
	base := l.base
	if n > 0 {
		base = l.segs[n].start
	}
	a, b := max(q.min.Load(), base), hi
	for a < b {
		mid := a + (b-a)/2
		e, err := q.entryAt(mid)
		if err != nil {
			return 0, err
		}
		if e.CommitLogOffset >= minPhy {
			b = mid
		} else {
			a = mid + 1
		}
	}
	if a > q.min.Load() {
		q.min.Store(a) // before the files go: readers then see out-of-range
		q.minCommit.Store(-1)
	}
	if n == 0 {
		return 0, nil
	}
	keep := make([]*segment, len(l.segs)-n)
	copy(keep, l.segs[n:])
	q.segs.Store(&segList{base: base, segs: keep})
	q.floor = max(q.floor, base)
	q.dirDirty.Store(true)
	for _, sg := range l.segs[:n] {
		if err := q.set.retire(sg, true); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Flush makes the entries written since the last Flush durable (msync of the
// dirty range through the mapping, or fdatasync of a file no longer mapped),
// and fsyncs the directory when files were created or removed (and its
// parents when it was created).
func (q *Queue) Flush() error {
	newDir, err := q.flush(0)
	if err != nil || !newDir {
		return err
	}
	for _, d := range []string{filepath.Dir(q.dir), q.set.root} {
		if err := q.set.syncDir(d); err != nil {
			q.newDir.Store(true)
			return err
		}
	}
	return nil
}

// flush syncs the queue's new entries and its directory. It reports whether
// the directory was created since the last flush: its parents then need an
// fsync too, which the caller does (once for many queues, in Set.Flush).
func (q *Queue) flush(least int64) (newDir bool, err error) {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	// The directory's flags are taken before the entries' end is read: a
	// file the writer creates after this point waits for the next flush.
	// The other way round a roll between the two could make the new file's
	// name durable while the last entries of the file before it were not
	// synced, and after a power loss that file would end in an unwritten
	// entry though a later one follows: damage to recovery, and a rebuild.
	dirty, created := q.dirDirty.Swap(false), q.newDir.Swap(false)
	hi := q.max.Load()
	lo := q.flushed
	if hi-lo < least && !created && !dirty {
		return false, nil
	}
	defer func() {
		if err != nil {
			// Not synced: the next flush tries again.
			if dirty {
				q.dirDirty.Store(true)
			}
			if created {
				q.newDir.Store(true)
			}
		}
	}()
	l := q.segs.Load()
	if len(l.segs) > 0 && lo < l.base {
		lo = l.base
	}
	for lo < hi {
		sg := l.find(lo, q.per)
		if sg == nil {
			break
		}
		to := min(hi, sg.start+q.per)
		if err := q.set.syncRange(sg, lo, to); err != nil {
			return false, q.errorf("flush: %w", err)
		}
		lo = to
	}
	q.flushed = hi
	if dirty || created {
		if err := q.set.syncDir(q.dir); err != nil {
			return false, err
		}
	}
	return created, nil
}

// close marks the queue closed and drops the set's references on its files
// (removing them with unlink). Readers holding a mapping keep it until they
// release it.
func (q *Queue) close(unlink bool) error {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	q.closed.Store(true)
	var errs []error
	for _, sg := range q.segs.Load().segs {
		if err := q.set.retire(sg, unlink); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
