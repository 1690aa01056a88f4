package index

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/javacompat"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("index: closed")
	// ErrOptions is wrapped by Open when an option is out of range.
	ErrOptions = errors.New("index: invalid options")
	// ErrLayout describes a file whose size does not match the options (the
	// directory was written with other SlotCount/MaxEntries, or the file was
	// cut). Open removes such a file (see Repaired); it is not returned.
	ErrLayout = errors.New("index: file does not match the options")
	// ErrUnavailable is returned by Put while no file can be created (a full
	// disk): after a failure Put fails fast until a back-off delay (1 s,
	// doubling up to a minute) has passed, then tries again. It wraps the
	// cause.
	ErrUnavailable = errors.New("index: no file can be created")
)

// Back-off after a failed file creation.
const (
	minBackoff = time.Second
	maxBackoff = time.Minute
)

const (
	tmpSuffix = ".tmp"
	nameLen   = len("yyyyMMddHHmmssSSS")
	memoSize  = 16
)

// Index is one directory of index files. It has one writer (Put, PutBytes)
// and any number of concurrent readers (Query, MaxCommitLogOffset,
// LastUpdate); Flush, DeleteBefore and TruncateAfter may run concurrently
// with both.
type Index struct {
	dir string
	lay layout
	fs  vfs.FS

	// files is the current list, oldest first. A published slice is never
	// modified: changes store a new one. The Index holds one reference on
	// each listed file's mapping and drops it when the file leaves the list.
	files  atomic.Pointer[[]*file]
	closed atomic.Bool

	// flushMu serialises Flush and Close. Lock order: flushMu, then mu.
	flushMu sync.Mutex

	// mu serialises the writer with Flush's bookkeeping, DeleteBefore,
	// TruncateAfter and Close.
	mu       sync.Mutex
	cur      *file  // file being written, mapped read-write; nil: the next Put starts a file
	lastName string // name of the newest file ever listed, for monotonic names
	err      error  // sticky: a failed sync of a file
	hasLast  bool   // some file holds an entry
	lastOff  int64  // the highest commit-log offset indexed, if hasLast

	// After a failed file creation, puts fail fast with ErrUnavailable
	// (wrapping downErr) until downUntil; backoff doubles per failure.
	downUntil time.Time
	downErr   error
	backoff   time.Duration

	// repaired lists what Open removed as damaged (set once by Open).
	repaired []string

	// memo lists the keyHashes put for commit-log offset memoOff since its
	// first key arrived in this process, so that re-putting that message's
	// keys (a resumed dispatch) does not duplicate them. memoOK is false when
	// the list is incomplete; the slot chains are then searched instead.
	memoOK  bool
	memoOff int64
	memoN   int
	memo    [memoSize]int32
}

// Open opens the index in dir, creating the directory if needed. Files
// named yyyyMMddHHmmssSSS are loaded in name order; leftovers of an
// interrupted file creation (name.tmp) are removed; other names are ignored.
//
// The newest file is validated and repaired as described in the package
// doc; if none of its entries survives it is deleted. Older files were
// synced before their successor was created and are trusted when their
// header is within bounds. A file of the wrong size or with a header out of
// bounds is damaged: it and every later file are removed (Repaired says
// which and why), so that the index ends before it and the store re-indexes
// the rest from the commit log (TruncateAfter reports where to resume).
func Open(dir string, opts Options) (*Index, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fsys := o.FS
	if err := durable.MkdirAll(fsys, dir, 0o755); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		n := e.Name()
		if base, ok := strings.CutSuffix(n, tmpSuffix); ok && validName(base) {
			if err := fsys.Remove(filepath.Join(dir, n)); err != nil {
				return nil, fmt.Errorf("index: remove leftover: %w", err)
			}
			continue
		}
		if validName(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)

	x := &Index{dir: dir, lay: newLayout(o), fs: fsys}
	files := make([]*file, 0, len(names))
	fail := func(err error) (*Index, error) {
		for _, f := range files {
			f.m.Release()
		}
		return nil, err
	}
	for i, name := range names {
		newest := i == len(names)-1
		f, err := openFile(fsys, dir, name, &x.lay, newest)
		if errors.Is(err, ErrLayout) || err == nil && !newest && !f.headerSane(&x.lay) {
			if err == nil {
				f.m.Release()
				err = fmt.Errorf("%s: header out of bounds", f.path)
			}
			if err := x.removeDamaged(names[i:], err); err != nil {
				return fail(err)
			}
			break
		}
		if err != nil {
			return fail(err)
		}
		if !newest {
			files = append(files, f)
			continue
		}
		ok, err := f.recover(&x.lay)
		if err != nil {
			f.m.Release()
			return fail(err)
		}
		if !ok {
			f.m.Release()
			if err := fsys.Remove(f.path); err != nil {
				return fail(fmt.Errorf("index: remove empty %s: %w", f.path, err))
			}
			if err := x.syncDir(); err != nil {
				return fail(err)
			}
			continue
		}
		files = append(files, f)
		x.cur = f
	}
	if len(names) > 0 {
		x.lastName = names[len(names)-1]
	}
	x.files.Store(&files)
	x.resetLast()
	return x, nil
}

// removeDamaged removes the files names (a damaged one and every later one)
// and records why, for Repaired.
func (x *Index) removeDamaged(names []string, why error) error {
	for _, n := range names {
		if err := x.fs.Remove(filepath.Join(x.dir, n)); err != nil {
			return fmt.Errorf("index: remove damaged %s: %w", n, err)
		}
	}
	x.repaired = append(x.repaired, fmt.Sprintf("%v; removed %s to re-index from the commit log", why, strings.Join(names, ", ")))
	return x.syncDir()
}

// syncDir fsyncs the index's directory (see durable.SyncDir).
func (x *Index) syncDir() error {
	if err := durable.SyncDir(x.fs, x.dir); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}

// Repaired lists the damaged files Open removed, with the reason; empty when
// none. The store re-indexes their range from the commit log.
func (x *Index) Repaired() []string { return x.repaired }

// validName reports whether s has the form of an index file name.
func validName(s string) bool {
	if len(s) != nameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// fileName formats t as yyyyMMddHHmmssSSS in local time, as RocketMQ names
// index files.
func fileName(t time.Time) string {
	s := t.Format("20060102150405.000")
	return s[:14] + s[15:]
}

// nextName returns a name for a new file: the current time, or just after
// the newest name if the clock has not passed it (two files in one
// millisecond, or a clock step back), so names always sort in creation order.
func (x *Index) nextName() string {
	name := fileName(time.Now())
	if name > x.lastName {
		return name
	}
	if t, err := time.ParseInLocation("20060102150405.000", x.lastName[:14]+"."+x.lastName[14:], time.Local); err == nil {
		if n := fileName(t.Add(time.Millisecond)); n > x.lastName {
			return n
		}
	}
	// Unparseable (or a local-time oddity): count up the digits.
	b := []byte(x.lastName)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < '9' {
			b[i]++
			break
		}
		b[i] = '0'
	}
	return string(b)
}

// resetLast recomputes the writer's view of the highest indexed offset from
// the file list and forgets the memo. Called with mu held (or before the
// Index is shared).
func (x *Index) resetLast() {
	x.hasLast, x.lastOff = false, 0
	if f := x.newest(); f != nil {
		x.hasLast, x.lastOff = true, f.endPhy.Load()
	}
	x.memoOK, x.memoN = false, 0
}

// newest returns the newest listed file that holds an entry, or nil.
func (x *Index) newest() *file {
	files := *x.files.Load()
	for i := len(files) - 1; i >= 0; i-- {
		if files[i].count.Load() > 1 {
			return files[i]
		}
	}
	return nil
}

// Put indexes key of topic (the key string topic + "#" + key) for the
// message at commitLogOffset stored at storeTimestamp (Unix ms).
//
// Messages must be put in commit-log order. A Put with an offset below the
// highest one indexed is skipped, and so is a key already indexed for the
// highest offset: re-dispatching from TruncateAfter's resumeFrom therefore
// adds no duplicates. When the current file is full, Put syncs it and starts
// a new one; otherwise it makes no system call and does not allocate.
func (x *Index) Put(topic, key string, commitLogOffset, storeTimestamp int64) error {
	return x.put(keyHash(topic, key), commitLogOffset, storeTimestamp)
}

// PutBytes is Put with the key as a byte slice, which is not retained.
func (x *Index) PutBytes(topic string, key []byte, commitLogOffset, storeTimestamp int64) error {
	return x.put(keyHashBytes(topic, key), commitLogOffset, storeTimestamp)
}

// KeyHash returns the hash a key of topic is filed under (see the package
// doc), for PutHash and SlotAddrs.
func KeyHash(topic string, key []byte) int32 { return keyHashBytes(topic, key) }

// TopicHash is the part of KeyHash that depends on the topic alone, for a
// caller that hashes many keys of one topic:
// KeyHashAfter(TopicHash(topic), key) == KeyHash(topic, key).
func TopicHash(topic string) int32 { return 31*javacompat.HashCode(topic) + '#' }

// KeyHashAfter finishes KeyHash from the topic's TopicHash.
func KeyHashAfter(topicHash int32, key []byte) int32 {
	return positive(javacompat.HashCodeFrom(topicHash, key))
}

// PutHash is Put for a key whose hash the caller computed with KeyHash.
func (x *Index) PutHash(h int32, commitLogOffset, storeTimestamp int64) error {
	if h < 0 {
		return fmt.Errorf("index: key hash %d is negative (not from KeyHash)", h)
	}
	return x.put(h, commitLogOffset, storeTimestamp)
}

// SlotAddrs appends to dst the addresses of the slots of hashes hs in the
// current file, for the writer to prefetch (mmap.PrefetchAll) before it puts
// those keys, so that the puts do not each stall on a cold slot. Only the
// writer calls it.
func (x *Index) SlotAddrs(hs []int32, dst []uintptr) []uintptr {
	if len(hs) == 0 {
		return dst
	}
	x.mu.Lock()
	if f := x.cur; f != nil && !x.closed.Load() {
		b := f.m.Bytes()
		for _, h := range hs {
			dst = append(dst, mmap.Addr(b[x.lay.slotPos(int(h)%x.lay.slots):]))
		}
	}
	x.mu.Unlock()
	return dst
}

func (x *Index) put(h int32, off, ts int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed.Load() {
		return ErrClosed
	}
	if x.err != nil {
		return x.err
	}
	if x.hasLast {
		if off < x.lastOff || off == x.lastOff && x.indexed(h, off) {
			return nil
		}
	}
	f := x.cur
	if f == nil || int(f.count.Load()) >= x.lay.entries {
		now := time.Now()
		if now.Before(x.downUntil) {
			return fmt.Errorf("%w: %w", ErrUnavailable, x.downErr)
		}
		var err error
		if f, err = x.roll(); err != nil {
			x.backoff = min(max(2*x.backoff, minBackoff), maxBackoff)
			x.downUntil, x.downErr = now.Add(x.backoff), err
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		x.backoff = 0
	}
	b := f.m.Bytes()
	n := f.count.Load()
	endTs := max(f.endTs.Load(), ts)
	if n <= 1 {
		f.beginTs.Store(ts)
		f.beginPhy.Store(off)
		be.PutUint64(b[hdrBeginTs:], uint64(ts))
		be.PutUint64(b[hdrBeginPhy:], uint64(off))
		endTs = ts
	}
	slotPos := x.lay.slotPos(int(h) % x.lay.slots)
	prev := loadSlot(b, slotPos)
	if prev <= 0 || prev >= n {
		prev = 0
		f.slotsUsed++
	}
	writeEntry(b, x.lay.entryPos(n), entry{hash: h, off: off, diff: timeDiff(f.beginTs.Load(), ts), prev: prev})
	f.endTs.Store(endTs)
	f.endPhy.Store(off)
	f.count.Store(n + 1)
	storeSlot(b, slotPos, n)
	be.PutUint64(b[hdrEndTs:], uint64(endTs))
	be.PutUint64(b[hdrEndPhy:], uint64(off))
	be.PutUint32(b[hdrSlotsUsed:], uint32(f.slotsUsed))
	be.PutUint32(b[hdrCount:], uint32(n+1))

	if !x.hasLast || off > x.lastOff {
		x.memoOK, x.memoOff, x.memoN = true, off, 0
	}
	if x.memoOK {
		if x.memoN < len(x.memo) {
			x.memo[x.memoN] = h
			x.memoN++
		} else {
			x.memoOK = false
		}
	}
	x.hasLast, x.lastOff = true, off
	return nil
}

// indexed reports whether keyHash h is already indexed for offset off, the
// highest indexed offset. Called with mu held.
func (x *Index) indexed(h int32, off int64) bool {
	if x.memoOK && x.memoOff == off {
		return slices.Contains(x.memo[:x.memoN], h)
	}
	files := *x.files.Load()
	for i := len(files) - 1; i >= 0; i-- {
		f := files[i]
		n := f.count.Load()
		if n <= 1 {
			continue
		}
		if f.endPhy.Load() < off {
			break
		}
		b := f.m.Bytes()
		idx := loadSlot(b, x.lay.slotPos(int(h)%x.lay.slots))
		for steps := int32(0); idx > 0 && idx < n && steps < n; steps++ {
			e := readEntry(b, x.lay.entryPos(idx))
			if e.off != off {
				break
			}
			if e.hash == h {
				return true
			}
			if e.prev >= idx {
				break
			}
			idx = e.prev
		}
		if f.beginPhy.Load() < off {
			break
		}
	}
	return false
}

// roll syncs the full current file and starts a new one. Called with mu held.
func (x *Index) roll() (*file, error) {
	files := *x.files.Load()
	var prevTs, prevPhy int64
	if len(files) > 0 {
		last := files[len(files)-1]
		prevTs, prevPhy = last.endTs.Load(), last.endPhy.Load()
	}
	if old := x.cur; old != nil {
		if err := old.sync(&x.lay, old.count.Load()); err != nil {
			x.err = fmt.Errorf("index: sync full %s: %w", old.path, err)
			return nil, x.err
		}
		x.cur = nil
	}
	name := x.nextName()
	f, err := createFile(x.fs, x.dir, name, &x.lay, prevTs, prevPhy)
	if err != nil {
		return nil, err
	}
	x.lastName = name
	next := append(slices.Clone(files), f)
	x.files.Store(&next)
	x.cur = f
	return f, nil
}

// Query appends to dst the commit-log offsets of the entries for key of
// topic whose stored time lies in [beginMs, endMs], newest first, at most
// max of them, and returns the extended slice.
//
// Every file whose [beginTimestamp, endTimestamp] overlaps the range is
// searched, newest first; the search stops after a file that began before
// beginMs (older files hold only older entries), or when max offsets were
// found. Entries are matched by keyHash, so different keys that collide are
// returned too: callers re-check the key. An entry's stored time is its
// file's beginTimestamp plus whole seconds, up to 999 ms earlier than its
// storeTimestamp, so a range boundary is only exact to that second (as in
// RocketMQ). Query does not allocate beyond growing dst.
func (x *Index) Query(topic, key string, beginMs, endMs int64, max int, dst []int64) ([]int64, error) {
	return x.query(keyHash(topic, key), beginMs, endMs, max, dst)
}

// QueryBytes is Query with the key as a byte slice, which is not retained.
func (x *Index) QueryBytes(topic string, key []byte, beginMs, endMs int64, max int, dst []int64) ([]int64, error) {
	return x.query(keyHashBytes(topic, key), beginMs, endMs, max, dst)
}

func (x *Index) query(h int32, beginMs, endMs int64, limit int, dst []int64) ([]int64, error) {
	if x.closed.Load() {
		return dst, ErrClosed
	}
	if limit <= 0 || beginMs > endMs {
		return dst, nil
	}
	files := *x.files.Load()
	found := 0
	for i := len(files) - 1; i >= 0 && found < limit; i-- {
		f := files[i]
		if !f.m.Acquire() {
			continue // deleted since the list was loaded
		}
		var stop bool
		dst, found, stop = x.walk(f, h, beginMs, endMs, limit, found, dst)
		f.m.Release()
		if stop {
			break
		}
	}
	return dst, nil
}

// walk searches one file, whose mapping the caller holds a reference on. It
// reports whether the search should stop (enough found, or the file began
// before beginMs).
//
// The slot is loaded before count: the writer stores count before the slot,
// so every entry number below the loaded count is fully written. Every step
// must move to a strictly smaller entry number, and the walk is bounded by
// count steps, so a corrupt file cannot loop or read outside the mapping.
func (x *Index) walk(f *file, h int32, beginMs, endMs int64, limit, found int, dst []int64) ([]int64, int, bool) {
	b := f.m.Bytes()
	idx := loadSlot(b, x.lay.slotPos(int(h)%x.lay.slots))
	n := f.count.Load()
	if n <= 1 {
		return dst, found, false
	}
	bt, et := f.beginTs.Load(), f.endTs.Load()
	older := bt < beginMs
	if bt > endMs || et < beginMs {
		return dst, found, older
	}
	for steps := int32(0); idx > 0 && idx < n && steps < n; steps++ {
		e := readEntry(b, x.lay.entryPos(idx))
		t := bt + int64(e.diff)*1000
		if t < beginMs {
			break // the rest of the chain is older
		}
		if e.hash == h && t <= endMs {
			dst = append(dst, e.off)
			if found++; found >= limit {
				return dst, found, true
			}
		}
		if e.prev >= idx {
			break
		}
		idx = e.prev
	}
	return dst, found, older
}

// MaxCommitLogOffset returns the highest commit-log offset indexed: the
// endPhyOffset of the newest file that holds an entry, or 0 if there is none.
func (x *Index) MaxCommitLogOffset() int64 {
	if f := x.newest(); f != nil {
		return f.endPhy.Load()
	}
	return 0
}

// LastUpdate returns the endTimestamp and endPhyOffset of the newest file
// that holds an entry (zeros if none): the indexLastUpdateTimestamp and
// indexLastUpdatePhyoffset of a QUERY_MESSAGE response. The two are read
// one after the other, not as one atomic pair.
func (x *Index) LastUpdate() (timestampMs, phyOffset int64) {
	if f := x.newest(); f != nil {
		return f.endTs.Load(), f.endPhy.Load()
	}
	return 0, 0
}

// TruncateAfter removes what a commit log truncated at commitLogEnd no
// longer holds: every file that holds an entry with an offset at or above
// commitLogEnd is deleted whole (chains cannot be cut), newest first, along
// with empty files at the end of the list. Files are deleted from under
// concurrent queries safely; the next Put starts a new file if the one being
// written was deleted.
//
// It returns resumeFrom, the commit-log offset from which the store must
// dispatch messages to the index again (messages at offsets >= resumeFrom):
//   - MaxCommitLogOffset() after the deletion, when a file with entries
//     remains. Its message is re-dispatched because its keys may have been
//     split between a kept and a deleted file; Put skips the keys already
//     indexed, and every offset below it.
//   - otherwise the beginPhyOffset of the oldest deleted file that held an
//     entry, when one was deleted;
//   - otherwise 0 (the index is empty: dispatch from the start of the log).
//
// A store calls it after every recovery, also when the log was not cut, to
// learn where the index stops.
func (x *Index) TruncateAfter(commitLogEnd int64) (resumeFrom int64, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed.Load() {
		return 0, ErrClosed
	}
	files := *x.files.Load()
	i := len(files)
	for i > 0 {
		f := files[i-1]
		if f.count.Load() > 1 && f.endPhy.Load() < commitLogEnd {
			break
		}
		i--
	}
	dropped := files[i:]
	resumeFrom = -1
	for _, f := range dropped {
		if f.count.Load() > 1 {
			resumeFrom = f.beginPhy.Load()
			break
		}
	}
	if len(dropped) > 0 {
		kept := slices.Clone(files[:i])
		x.files.Store(&kept)
		if x.cur != nil && slices.Contains(dropped, x.cur) {
			x.cur = nil
		}
		err = x.remove(dropped)
		x.resetLast()
	}
	switch {
	case x.hasLast:
		resumeFrom = x.lastOff
	case resumeFrom < 0:
		resumeFrom = 0
	}
	return resumeFrom, err
}

// DeleteBefore deletes, oldest first, the files whose endPhyOffset is below
// minCommitLogOffset (their messages are gone from the commit log), never
// the newest file. It returns how many it deleted. Queries holding a
// deleted file finish on it; its mapping goes when the last one releases it.
func (x *Index) DeleteBefore(minCommitLogOffset int64) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed.Load() {
		return 0, ErrClosed
	}
	files := *x.files.Load()
	i := 0
	for i < len(files)-1 && files[i].endPhy.Load() < minCommitLogOffset {
		i++
	}
	if i == 0 {
		return 0, nil
	}
	kept := slices.Clone(files[i:])
	x.files.Store(&kept)
	return i, x.remove(files[:i])
}

// remove drops the Index's reference on each file (unmapping it once no
// query holds it) and deletes it. The files have left the list already.
func (x *Index) remove(files []*file) error {
	var first error
	for _, f := range files {
		if err := f.m.Release(); err != nil && first == nil {
			first = fmt.Errorf("index: release %s: %w", f.path, err)
		}
		if err := x.fs.Remove(f.path); err != nil && first == nil {
			first = fmt.Errorf("index: remove: %w", err)
		}
	}
	if err := x.syncDir(); err != nil && first == nil {
		first = err
	}
	return first
}

// Flush syncs the file being written: its slots and entries, then its
// header. It does not block Put while the data is written back. A failed
// sync is sticky: Flush and Put return it from then on.
func (x *Index) Flush() error {
	x.flushMu.Lock()
	defer x.flushMu.Unlock()
	x.mu.Lock()
	if x.closed.Load() {
		x.mu.Unlock()
		return ErrClosed
	}
	if x.err != nil {
		err := x.err
		x.mu.Unlock()
		return err
	}
	f := x.cur
	if f == nil || !f.m.Acquire() {
		x.mu.Unlock()
		return nil
	}
	n := f.count.Load()
	x.mu.Unlock()

	err := f.sync(&x.lay, n)
	f.m.Release()
	if err != nil {
		err = fmt.Errorf("index: flush %s: %w", f.path, err)
		x.mu.Lock()
		if x.err == nil {
			x.err = err
		}
		x.mu.Unlock()
	}
	return err
}

// Close syncs the file being written and releases every file. Queries in
// flight finish on the mappings they hold; later calls return ErrClosed.
func (x *Index) Close() error {
	x.flushMu.Lock()
	defer x.flushMu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed.Swap(true) {
		return ErrClosed
	}
	err := x.err
	if f := x.cur; f != nil && err == nil {
		if e := f.sync(&x.lay, f.count.Load()); e != nil {
			err = fmt.Errorf("index: sync %s: %w", f.path, e)
		}
	}
	files := *x.files.Load()
	x.files.Store(&[]*file{})
	x.cur = nil
	for _, f := range files {
		if e := f.m.Release(); e != nil && err == nil {
			err = fmt.Errorf("index: release %s: %w", f.path, e)
		}
	}
	return err
}

// Check inspects the index files in dir without changing anything, for
// offline verification, and returns what Open would repair or remove: a
// file of the wrong size, an older file whose header is out of bounds, a
// newest file whose header does not describe its valid entries or that
// holds non-zero bytes after them. An empty result means Open would use
// every file as it is.
func Check(dir string, opts Options) ([]string, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ents, err := o.FS.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && validName(e.Name()) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	lay := newLayout(o)
	var problems []string
	for i, name := range names {
		f, err := openFile(o.FS, dir, name, &lay, false)
		if errors.Is(err, ErrLayout) {
			problems = append(problems, err.Error()+"; it and every later file would be re-indexed")
			break
		}
		if err != nil {
			return problems, err
		}
		if i < len(names)-1 {
			if !f.headerSane(&lay) {
				problems = append(problems, fmt.Sprintf("%s: header out of bounds; it and every later file would be re-indexed", f.path))
				f.m.Release()
				break
			}
			f.m.Release()
			continue
		}
		h := readHeader(f.m.Bytes())
		r := scan(f.m.Bytes(), &lay, h.beginPhy)
		if h.count != r.count || h.count > 1 && h.endPhy != r.lastOff {
			problems = append(problems, fmt.Sprintf("%s: header records %d entries, %d are valid; Open would repair it", f.path, h.count-1, r.count-1))
		}
		if !allZero(f.m.Bytes()[lay.entryPos(r.count):]) {
			problems = append(problems, fmt.Sprintf("%s: non-zero bytes after its %d valid entries; Open would zero them", f.path, r.count-1))
		}
		f.m.Release()
	}
	return problems, nil
}

var zeroBlock [4096]byte

// allZero reports whether every byte of b is zero.
func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}
