package litequeue

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

// Errors callers branch on.
var (
	ErrClosed = errors.New("litequeue: closed")
	// ErrDamaged: a file failed a check that no repair here can answer.
	ErrDamaged = errors.New("litequeue: damaged")
	// ErrBadName: a lite topic or parent name that is empty or longer than MaxNameLen.
	ErrBadName = errors.New("litequeue: bad name")
	// ErrFull: the index cannot grow (ids, parents, arena or block numbers exhausted).
	ErrFull = errors.New("litequeue: full")
)

// MaxNameLen bounds a parent's, a lite topic's and a group's name (bytes).
const MaxNameLen = 1024

// MaxLiteTopics bounds the lite ids (the lite topics alive at once): 64 Mi,
// 3.5 GiB of slots. A journal naming a larger id is damaged.
const MaxLiteTopics = 1 << 26

// maxParents is how many parents the index tells apart (uint16 ids, one
// reserved for free slots).
const maxParents = 1<<16 - 1

// Options configure an Index. Zero values mean the defaults given.
type Options struct {
	// FileSize of a block file: a multiple of the page size. Default 64 MiB.
	FileSize int64
	// FS is the file system every file operation goes through. Default
	// vfs.Default.
	FS vfs.FS
	// StoreTime returns the store time (ms) of the record an entry points
	// at; a rebuild after a crash asks it for each lite topic's last entry
	// (its last store time is what expiry looks at). Without it, or when it
	// fails, a rebuilt lite topic's last store time is the time of Open.
	StoreTime func(e Entry) (int64, bool)
	// Now returns the time in ms (tests). Default: the wall clock.
	Now func() int64
}

func (o Options) withDefaults() (Options, error) {
	if o.FileSize == 0 {
		o.FileSize = 64 << 20
	}
	if o.FileSize < int64(mmap.PageSize()) || o.FileSize%int64(mmap.PageSize()) != 0 || o.FileSize%BlockSize != 0 {
		return o, fmt.Errorf("litequeue: file size %d is not a multiple of the page size", o.FileSize)
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Now == nil {
		o.Now = nowMs
	}
	return o, nil
}

// offKey names one lite consumer offset.
type offKey struct{ group, parent, lite string }

// offVal is one lite consumer offset and its change number: each change
// takes the next one (Index.oseq), so OffsetsSince finds what changed
// after a number a follower holds.
type offVal struct {
	off int64
	seq uint64
}

// Index is the lite-topic index of one store. Its methods are safe for
// concurrent use under the rules in the package doc.
type Index struct {
	opts Options
	dir  string
	fs   vfs.FS

	mu      sync.RWMutex
	closed  bool
	slots   []slot
	free    []uint32 // ids of free slots
	live    int
	tab     table
	parents []string          // by parent id
	pidx    map[string]uint16 // parent name → id
	files   []*blockFile      // contiguous by base; nil where a file was removed
	next    uint32            // the next block to allocate
	// reserved and touched are byte positions in the newest file: blocks are
	// reserved (fallocate) below reserved, pages written below touched.
	reserved, touched int64
	wf                vfs.File // the newest file, open for pwrite
	pageBuf           []byte
	dirDirty          bool  // files created or removed since the last Flush
	recBytes          int64 // what the live slots' creation records take

	omu     sync.Mutex
	offsets map[offKey]offVal
	oseq    uint64 // the last change number given (offVal.seq)
	oepoch  int64  // names this run's change numbers (OffsetsSince)
	dirty   map[offKey]struct{}
	groups  map[string]map[string]struct{} // parent → groups with offsets

	jmu     sync.Mutex
	jf      vfs.File
	jsize   int64
	pending []byte
}

// Stats describes the index.
type Stats struct {
	Topics, Parents int
	// Files is how many block files exist (each mapped once); FileBytes
	// their total size; LiveBlocks the blocks of live lite topics.
	Files      int
	FileBytes  int64
	LiveBlocks int64
	// JournalBytes is the journal's size; Offsets how many lite consumer
	// offsets are kept.
	JournalBytes int64
	Offsets      int
	// TableBytes is the memory of the in-memory table: slots, hash buckets
	// and the names' arena.
	TableBytes int64
}

// Recovery describes what Open found.
type Recovery struct {
	// Clean: TABLE was there and checked; no block header was read.
	Clean bool
	// TableRejected says why a TABLE found was not used ("" when none was
	// found or it was used).
	TableRejected string
	// Topics is how many lite topics were recovered; Rebuilt how many of
	// them had their chain walked from the block headers.
	Topics, Rebuilt int
	// BrokenChains counts lite topics whose chain ended at a block that
	// failed its check before reaching their oldest block: their min rose.
	BrokenChains int
	// Emptied counts lite topics the journal names whose blocks were all
	// missing: they start again at offset 0.
	Emptied int
	// JournalCut is how many bytes of a torn or damaged journal tail were
	// cut.
	JournalCut int64
}

// Open opens (or creates) the index in dir and recovers it.
func Open(dir string, opts Options) (*Index, Recovery, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, Recovery{}, err
	}
	x := &Index{opts: o, dir: dir, fs: o.FS, pidx: map[string]uint16{},
		offsets: map[offKey]offVal{}, dirty: map[offKey]struct{}{}, groups: map[string]map[string]struct{}{},
		pageBuf: make([]byte, mmap.PageSize())}
	x.oepoch = time.Now().UnixNano()
	x.tab.init()
	rep, err := x.open()
	if err != nil {
		x.release()
		return nil, rep, err
	}
	return x, rep, nil
}

// release unmaps every file and closes every descriptor.
func (x *Index) release() {
	for _, f := range x.files {
		if f != nil {
			f.m.Release()
		}
	}
	x.files = nil
	if x.wf != nil {
		x.wf.Close()
		x.wf = nil
	}
	if x.jf != nil {
		x.jf.Close()
		x.jf = nil
	}
}

// unsafeBytes views s as bytes (never written).
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// lookup returns the slot of (parent, lite). Under mu (either mode).
func (x *Index) lookup(parent string, lite []byte) (uint32, *slot, bool) {
	pid, ok := x.pidx[parent]
	if !ok {
		return 0, nil, false
	}
	id, ok := x.tab.find(x.slots, pid, lite)
	if !ok {
		return 0, nil, false
	}
	return id, &x.slots[id], true
}

// parentID interns parent. Under mu.
func (x *Index) parentID(parent []byte) (uint16, error) {
	if pid, ok := x.pidx[string(parent)]; ok {
		return pid, nil
	}
	if len(x.parents) >= maxParents {
		return 0, fmt.Errorf("%w: %d parent topics", ErrFull, len(x.parents))
	}
	pid := uint16(len(x.parents))
	p := string(parent)
	x.parents = append(x.parents, p)
	x.pidx[p] = pid
	return pid, nil
}

func checkName(b []byte) error {
	if len(b) == 0 || len(b) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes", ErrBadName, len(b))
	}
	return nil
}

// create makes a slot for (parent, lite) and returns its id. Under mu.
func (x *Index) create(pid uint16, lite []byte, id, gen uint32, fromJournal bool) (uint32, error) {
	if len(x.tab.arena)+len(lite) > int(^uint32(0)) {
		return 0, fmt.Errorf("%w: name arena", ErrFull)
	}
	if !fromJournal {
		if n := len(x.free); n > 0 {
			id = x.free[n-1]
			x.free = x.free[:n-1]
			gen = x.slots[id].gen + 1
		} else {
			if len(x.slots) >= MaxLiteTopics {
				return 0, fmt.Errorf("%w: %d lite topics", ErrFull, len(x.slots))
			}
			id, gen = uint32(len(x.slots)), 1
		}
	}
	for int(id) >= len(x.slots) {
		x.slots = append(x.slots, slot{parent: freeParent})
	}
	x.slots[id] = slot{nameOff: x.tab.addName(lite), nameLen: uint16(len(lite)), parent: pid, gen: gen,
		head: noBlock, tail: noBlock, lastCL: -1}
	x.tab.insert(x.slots, id)
	x.live++
	x.recBytes += recSize(len(x.parents[pid]), len(lite))
	if !fromJournal {
		x.jmu.Lock()
		x.pending = appendCreate(x.pending, recCreate, id, gen, unsafeBytes(x.parents[pid]), lite)
		x.jmu.Unlock()
	}
	return id, nil
}

// recSize is the framed size of a creation record.
func recSize(plen, nlen int) int64 { return int64(8 + 1 + 8 + 2 + plen + 2 + nlen) }

// AppendResult says what Append did.
type AppendResult struct {
	ID, Gen uint32 // the lite topic's id and generation (Describe)
	Max     int64  // its max offset after the append
	Created bool   // the lite topic was created by this append
	Dup     bool   // the entry was there already (a re-dispatch): nothing changed
}

// Append adds e at the end of the lite topic (parent, lite), creating it at
// offset 0 if needed; storeMs is the record's store time. Only the
// dispatcher calls it, in commit-log order.
func (x *Index) Append(parent, lite []byte, e Entry, storeMs int64) (AppendResult, error) {
	if err := checkName(parent); err != nil {
		return AppendResult{}, err
	}
	if err := checkName(lite); err != nil {
		return AppendResult{}, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return AppendResult{}, ErrClosed
	}
	var r AppendResult
	pid, err := x.parentID(parent)
	if err != nil {
		return r, err
	}
	id, ok := x.tab.find(x.slots, pid, lite)
	if !ok {
		if id, err = x.create(pid, lite, 0, 0, false); err != nil {
			return r, err
		}
		r.Created = true
	}
	s := &x.slots[id]
	r.ID, r.Gen = id, s.gen
	if e.CommitLogOffset <= s.lastCL {
		r.Max, r.Dup = s.max, true
		return r, nil
	}
	var b []byte
	if s.tail == noBlock {
		n, err := x.alloc(header{id: id, gen: s.gen, first: s.max / EntriesPerBlock * EntriesPerBlock, prev: noBlock})
		if err != nil {
			return r, err
		}
		s.head, s.tail = n, n
		b = x.block(n)
	} else {
		b = x.block(s.tail)
		h, _ := parseHeader(b)
		if s.max-h.first >= EntriesPerBlock {
			n, err := x.alloc(header{id: id, gen: s.gen, first: h.first + EntriesPerBlock, prev: s.tail})
			if err != nil {
				return r, err
			}
			setNext(b, n)
			x.markDirty(s.tail)
			s.tail = n
			b = x.block(n)
		}
	}
	h, _ := parseHeader(b)
	i := s.max - h.first
	putEntry(b[HeaderSize+i*EntrySize:], e)
	x.markDirty(s.tail)
	s.max++
	s.lastCL, s.lastMs = e.CommitLogOffset, storeMs
	r.Max = s.max
	return r, nil
}

// Describe returns the names and max offset of lite id (of generation gen),
// or false when it was deleted since.
func (x *Index) Describe(id, gen uint32) (parent, lite string, max int64, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if int(id) >= len(x.slots) {
		return "", "", 0, false
	}
	s := &x.slots[id]
	if s.parent == freeParent || s.gen != gen {
		return "", "", 0, false
	}
	return x.parents[s.parent], string(x.tab.name(s)), s.max, true
}

// Offsets returns the lite topic's min and max offsets.
func (x *Index) Offsets(parent, lite string) (min, max int64, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, s, ok := x.lookup(parent, unsafeBytes(lite))
	if !ok {
		return 0, 0, false
	}
	return s.min, s.max, true
}

// Count is how many lite topics exist.
func (x *Index) Count() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live
}

// Read appends to dst the lite topic's entries from offset on, at most
// cap(dst)-len(dst) of them, and returns its min and max offsets; found is
// false for an unknown lite topic. An offset outside [min, max) reads
// nothing.
func (x *Index) Read(parent, lite string, offset int64, dst []Entry) (entries []Entry, min, max int64, found bool, err error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.closed {
		return dst, 0, 0, false, ErrClosed
	}
	id, s, ok := x.lookup(parent, unsafeBytes(lite))
	if !ok {
		return dst, 0, 0, false, nil
	}
	min, max = s.min, s.max
	if offset < min || offset >= max || cap(dst) == len(dst) {
		return dst, min, max, true, nil
	}
	n, h, err := x.seek(id, s, offset)
	if err != nil {
		return dst, min, max, true, err
	}
	for offset < max && len(dst) < cap(dst) {
		b := x.block(n)
		for i := offset - h.first; i < EntriesPerBlock && offset < max && len(dst) < cap(dst); i++ {
			dst = append(dst, getEntry(b[HeaderSize+i*EntrySize:]))
			offset++
		}
		if offset >= max || len(dst) == cap(dst) {
			break
		}
		nh, ok := x.header(h.next, id, s.gen)
		if !ok || nh.first != h.first+EntriesPerBlock {
			return dst, min, max, true, fmt.Errorf("%w: lite topic %s/%s: block %d's next %d is not its successor", ErrDamaged, parent, lite, n, h.next)
		}
		n, h = h.next, nh
	}
	return dst, min, max, true, nil
}

// header returns block n's header if it is a valid block of (id, gen).
func (x *Index) header(n, id, gen uint32) (header, bool) {
	if n == noBlock {
		return header{}, false
	}
	b := x.block(n)
	if b == nil {
		return header{}, false
	}
	h, ok := parseHeader(b)
	return h, ok && h.id == id && h.gen == gen
}

// seek finds the block holding offset (min <= offset < max): the tail when
// offset is in it, else a walk from the nearer end. Under mu.
func (x *Index) seek(id uint32, s *slot, offset int64) (uint32, header, error) {
	want := offset / EntriesPerBlock * EntriesPerBlock
	th, ok := x.header(s.tail, id, s.gen)
	if !ok {
		return 0, th, fmt.Errorf("%w: lite id %d: tail block %d fails its check", ErrDamaged, id, s.tail)
	}
	if want >= th.first {
		return s.tail, th, nil
	}
	hh, ok := x.header(s.head, id, s.gen)
	if !ok {
		return 0, hh, fmt.Errorf("%w: lite id %d: head block %d fails its check", ErrDamaged, id, s.head)
	}
	n, h := s.tail, th
	forward := want-hh.first < th.first-want
	if forward {
		n, h = s.head, hh
	}
	for h.first != want {
		next := h.prev
		if forward {
			next = h.next
		}
		nh, ok := x.header(next, id, s.gen)
		step := int64(-EntriesPerBlock)
		if forward {
			step = EntriesPerBlock
		}
		if !ok || nh.first != h.first+step {
			return 0, h, fmt.Errorf("%w: lite id %d: chain broken at block %d", ErrDamaged, id, n)
		}
		n, h = next, nh
	}
	return n, h, nil
}

// entryAt returns the entry at offset (min <= offset < max). Under mu.
func (x *Index) entryAt(id uint32, s *slot, offset int64) (Entry, bool) {
	n, h, err := x.seek(id, s, offset)
	if err != nil {
		return Entry{}, false
	}
	return getEntry(x.block(n)[HeaderSize+(offset-h.first)*EntrySize:]), true
}

// LiteInfo is one lite topic as ForEach reports it.
type LiteInfo struct {
	Lite        string
	Min, Max    int64
	LastStoreMs int64
}

// forEachChunk is how many slots ForEach and Expire look at per hold of mu.
const forEachChunk = 4096

// ForEach calls fn for each lite topic of parent (every parent when parent
// is ""), in id order, until fn returns false. It holds no lock while fn
// runs (fn may call the index), so a lite topic created or deleted
// meanwhile may or may not be reported.
func (x *Index) ForEach(parent string, fn func(parent string, info LiteInfo) bool) {
	var buf []LiteInfo
	var pnames []string
	for start := 0; ; start += forEachChunk {
		buf, pnames = buf[:0], pnames[:0]
		x.mu.RLock()
		if x.closed || start >= len(x.slots) {
			x.mu.RUnlock()
			return
		}
		pid, ok := x.pidx[parent]
		if parent != "" && !ok {
			x.mu.RUnlock()
			return
		}
		end := min(start+forEachChunk, len(x.slots))
		for i := start; i < end; i++ {
			s := &x.slots[i]
			if s.parent == freeParent || parent != "" && s.parent != pid {
				continue
			}
			buf = append(buf, LiteInfo{Lite: string(x.tab.name(s)), Min: s.min, Max: s.max, LastStoreMs: s.lastMs})
			pnames = append(pnames, x.parents[s.parent])
		}
		x.mu.RUnlock()
		for i := range buf {
			if !fn(pnames[i], buf[i]) {
				return
			}
		}
	}
}

// Delete removes the lite topic (parent, lite) and its consumer offsets;
// it reports whether the lite topic existed. A later message for it creates
// it again at offset 0.
func (x *Index) Delete(parent, lite string) (bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false, ErrClosed
	}
	id, _, ok := x.lookup(parent, unsafeBytes(lite))
	if ok {
		x.deleteSlot(id)
	} else {
		x.jmu.Lock()
		x.pending = appendCreate(x.pending, recDelete, noBlock, 0, unsafeBytes(parent), unsafeBytes(lite))
		x.jmu.Unlock()
	}
	x.dropOffsets(parent, lite)
	x.tab.compact(x.slots)
	return ok, x.removeDeadFiles()
}

// deleteSlot frees slot id: its blocks, its table entry, its id. Under mu.
func (x *Index) deleteSlot(id uint32) {
	s := &x.slots[id]
	parent := x.parents[s.parent]
	x.jmu.Lock()
	x.pending = appendCreate(x.pending, recDelete, id, s.gen, unsafeBytes(parent), x.tab.name(s))
	x.jmu.Unlock()
	x.freeChain(id, s)
	x.tab.remove(x.slots, id)
	x.recBytes -= recSize(len(parent), int(s.nameLen))
	gen := s.gen
	*s = slot{parent: freeParent, gen: gen, head: noBlock, tail: noBlock}
	x.free = append(x.free, id)
	x.live--
}

// freeChain drops the live counts of every block of s's chain. Under mu.
func (x *Index) freeChain(id uint32, s *slot) {
	n := s.tail
	for n != noBlock {
		h, ok := x.header(n, id, s.gen)
		if !ok {
			break
		}
		x.liveDelta(n, -1)
		if n == s.head || h.prev >= n {
			break
		}
		n = h.prev
	}
}

// dropOffsets removes every group's offset of (parent, lite).
func (x *Index) dropOffsets(parent, lite string) {
	x.omu.Lock()
	defer x.omu.Unlock()
	for g := range x.groups[parent] {
		k := offKey{g, parent, lite}
		delete(x.offsets, k)
		delete(x.dirty, k)
	}
}

// Expire deletes parent's lite topics whose last store time is before
// idleBeforeMs, calling deleted (without a lock held) with each one's name,
// and returns how many it deleted.
func (x *Index) Expire(parent string, idleBeforeMs int64, deleted func(lite string)) (int, error) {
	count := 0
	var names []string
	var errs []error
	for start := 0; ; start += forEachChunk {
		names = names[:0]
		x.mu.Lock()
		if x.closed {
			x.mu.Unlock()
			return count, ErrClosed
		}
		pid, ok := x.pidx[parent]
		if !ok || start >= len(x.slots) {
			x.mu.Unlock()
			break
		}
		end := min(start+forEachChunk, len(x.slots))
		for i := start; i < end; i++ {
			s := &x.slots[i]
			if s.parent != pid || s.lastMs >= idleBeforeMs {
				continue
			}
			name := string(x.tab.name(s))
			x.deleteSlot(uint32(i))
			names = append(names, name)
		}
		if len(names) > 0 {
			x.tab.compact(x.slots)
			if err := x.removeDeadFiles(); err != nil {
				errs = append(errs, err)
			}
		}
		x.mu.Unlock()
		for _, n := range names {
			x.dropOffsets(parent, n)
			count++
			if deleted != nil {
				deleted(n)
			}
		}
	}
	return count, errors.Join(errs...)
}

// CommitOffset records group's consumer offset in the lite topic (parent,
// lite). It is durable after the next Flush.
func (x *Index) CommitOffset(group, parent, lite string, offset int64) error {
	if len(group) == 0 || len(group) > MaxNameLen || len(parent) == 0 || len(parent) > MaxNameLen || len(lite) == 0 || len(lite) > MaxNameLen {
		return fmt.Errorf("%w: group %q, parent %q, lite topic of %d bytes", ErrBadName, group, parent, len(lite))
	}
	x.omu.Lock()
	defer x.omu.Unlock()
	k := offKey{group, parent, lite}
	if old, ok := x.offsets[k]; ok && old.off == offset {
		return nil
	}
	x.setOffset(k, offset)
	x.dirty[k] = struct{}{}
	return nil
}

// setOffset records an offset. Under omu.
func (x *Index) setOffset(k offKey, offset int64) {
	x.oseq++
	x.offsets[k] = offVal{off: offset, seq: x.oseq}
	gs := x.groups[k.parent]
	if gs == nil {
		gs = map[string]struct{}{}
		x.groups[k.parent] = gs
	}
	gs[k.group] = struct{}{}
}

// Offset returns group's consumer offset in (parent, lite).
func (x *Index) Offset(group, parent, lite string) (int64, bool) {
	x.omu.Lock()
	defer x.omu.Unlock()
	v, ok := x.offsets[offKey{group, parent, lite}]
	return v.off, ok
}

// TruncateFrom drops every entry whose commit-log offset is at or above
// clOffset (recovery before re-dispatch; a replica's truncation). Only the
// dispatcher's owner calls it, with dispatch stopped.
func (x *Index) TruncateFrom(clOffset int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	for i := range x.slots {
		s := &x.slots[i]
		if s.parent == freeParent || s.tail == noBlock || s.lastCL < clOffset {
			continue
		}
		x.truncateSlot(uint32(i), s, clOffset)
	}
	return nil
}

// truncateSlot cuts s's entries at or above clOffset, and unwritten ones
// after them, zeroing them (a rebuild counts a tail's entries up to the
// first zero one) and dropping blocks left empty but the head. Under mu.
func (x *Index) truncateSlot(id uint32, s *slot, clOffset int64) {
	for {
		h, ok := x.header(s.tail, id, s.gen)
		if !ok {
			return
		}
		b := x.block(s.tail)
		for s.max > h.first {
			i := s.max - 1 - h.first
			e := b[HeaderSize+i*EntrySize : HeaderSize+(i+1)*EntrySize]
			// An unwritten (zero) entry is below no checkpoint: after a power
			// loss, a block can keep its header and lose its last entries.
			if last := getEntry(e); last.Size != 0 && last.CommitLogOffset < clOffset {
				s.lastCL = last.CommitLogOffset
				if x.opts.StoreTime != nil {
					if ms, ok := x.opts.StoreTime(last); ok {
						s.lastMs = ms
					}
				}
				x.markDirty(s.tail)
				return
			}
			clear(e)
			s.max--
		}
		x.markDirty(s.tail)
		if s.tail == s.head {
			s.lastCL = clOffset - 1
			s.min = min(s.min, s.max)
			return
		}
		// The tail is empty: drop it (its header made invalid, so a
		// rebuild does not take it for the tail again).
		if h.prev >= s.tail {
			return
		}
		clear(b[:HeaderSize])
		x.liveDelta(s.tail, -1)
		s.tail = h.prev
		if pb := x.block(s.tail); pb != nil {
			setNext(pb, 0)
		}
	}
}

// DeleteBelow raises each lite topic's min past the entries below the
// commit log's minimum offset and frees the blocks wholly below it; block
// files left without a live block are removed (retention, a replica's
// reset).
func (x *Index) DeleteBelow(logMin int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	for i := range x.slots {
		s := &x.slots[i]
		if s.parent == freeParent || s.head == noBlock || s.min == s.max {
			continue
		}
		x.raiseMin(uint32(i), s, logMin)
	}
	return x.removeDeadFiles()
}

// raiseMin moves s's min past entries below logMin. Under mu.
func (x *Index) raiseMin(id uint32, s *slot, logMin int64) {
	if s.lastCL < logMin {
		// Everything is gone: keep only the tail.
		for n := s.head; n != s.tail; {
			h, ok := x.header(n, id, s.gen)
			if !ok || h.next <= n {
				break
			}
			x.liveDelta(n, -1)
			n = h.next
		}
		s.head, s.min = s.tail, s.max
		return
	}
	for {
		h, ok := x.header(s.head, id, s.gen)
		if !ok {
			return
		}
		b := x.block(s.head)
		last := min(h.first+EntriesPerBlock, s.max) - 1
		if last < h.first {
			return
		}
		if s.head != s.tail && h.next > s.head && getEntry(b[HeaderSize+(last-h.first)*EntrySize:]).CommitLogOffset < logMin {
			x.liveDelta(s.head, -1)
			s.head = h.next
			s.min = h.first + EntriesPerBlock
			continue
		}
		for s.min < s.max && s.min >= h.first && s.min <= last &&
			getEntry(b[HeaderSize+(s.min-h.first)*EntrySize:]).CommitLogOffset < logMin {
			s.min++
		}
		return
	}
}

// Flush makes the journal's pending records and every written block
// durable, the journal first (see the package doc's invariant 5).
func (x *Index) Flush() error {
	if err := x.flushJournal(); err != nil {
		return err
	}
	type toSync struct {
		path string
		m    *mmap.Mapping
		f    *blockFile
	}
	var syncs []toSync
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return ErrClosed
	}
	for _, f := range x.files {
		if f != nil && f.dirty && f.m.Acquire() {
			f.dirty = false
			syncs = append(syncs, toSync{f.path, f.m, f})
		}
	}
	dirDirty := x.dirDirty
	x.dirDirty = false
	x.mu.Unlock()
	var errs []error
	for _, s := range syncs {
		if err := x.fs.MSync(s.path, s.m, 0, s.m.Len()); err != nil {
			errs = append(errs, fmt.Errorf("litequeue: %w", err))
			x.mu.Lock()
			s.f.dirty = true
			x.mu.Unlock()
		}
		s.m.Release()
	}
	if dirDirty {
		if err := durable.SyncDir(x.fs, x.dir); err != nil {
			errs = append(errs, err)
			x.mu.Lock()
			x.dirDirty = true
			x.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// flushJournal writes the dirty offsets and the pending records to the
// journal and syncs it; it rewrites the journal whole when it grew past four
// times the live state's size.
func (x *Index) flushJournal() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.closed {
		return ErrClosed
	}
	// Lock order mu → omu → jmu. omu is held through a rewrite (it reads
	// every offset), but not while the journal is written and synced:
	// commits go on meanwhile.
	x.omu.Lock()
	x.jmu.Lock()
	defer x.jmu.Unlock()
	for k := range x.dirty {
		x.pending = appendOffset(x.pending, k, x.offsets[k].off)
	}
	clear(x.dirty)
	if want := x.recBytes + int64(len(x.offsets))*96; x.jsize+int64(len(x.pending)) > 4*want+journalSlack {
		err := x.rewriteJournal()
		x.omu.Unlock()
		return err
	}
	x.omu.Unlock()
	if len(x.pending) == 0 {
		return nil
	}
	if _, err := x.jf.WriteAt(x.pending, x.jsize); err != nil {
		return fmt.Errorf("litequeue: write journal: %w", err)
	}
	if err := x.jf.Datasync(); err != nil {
		return fmt.Errorf("litequeue: sync journal: %w", err)
	}
	x.jsize += int64(len(x.pending))
	x.pending = x.pending[:0]
	return nil
}

// journalSlack is how much the journal may exceed four times the live
// state before it is rewritten (a variable for tests).
var journalSlack int64 = 1 << 20

// rewriteJournal replaces the journal by the live state: a creation record
// per lite topic and an offset record per offset. Under mu (read), omu
// and jmu.
func (x *Index) rewriteJournal() error {
	buf := make([]byte, 0, x.recBytes+int64(len(x.offsets))*96)
	for i := range x.slots {
		s := &x.slots[i]
		if s.parent != freeParent {
			buf = appendCreate(buf, recCreate, uint32(i), s.gen, unsafeBytes(x.parents[s.parent]), x.tab.name(s))
		}
	}
	for k, v := range x.offsets {
		buf = appendOffset(buf, k, v.off)
	}
	path := x.journalPath()
	if err := durable.WriteFile(x.fs, path, buf); err != nil {
		return fmt.Errorf("litequeue: rewrite journal: %w", err)
	}
	f, err := x.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("litequeue: open journal: %w", err)
	}
	x.jf.Close()
	x.jf, x.jsize = f, int64(len(buf))
	x.pending = x.pending[:0]
	return nil
}

// Stats returns the index's state.
func (x *Index) Stats() Stats {
	x.mu.RLock()
	st := Stats{Topics: x.live, Parents: len(x.parents)}
	for _, f := range x.files {
		if f != nil {
			st.Files++
			st.FileBytes += x.opts.FileSize
			st.LiveBlocks += int64(f.live)
		}
	}
	st.TableBytes = int64(cap(x.slots))*int64(unsafe.Sizeof(slot{})) + int64(cap(x.tab.buckets))*4 + int64(cap(x.tab.arena)) + int64(cap(x.free))*4
	x.mu.RUnlock()
	x.jmu.Lock()
	st.JournalBytes = x.jsize
	x.jmu.Unlock()
	x.omu.Lock()
	st.Offsets = len(x.offsets)
	x.omu.Unlock()
	return st
}

// Close flushes, writes TABLE (the next Open then reads no block header)
// and releases the files.
func (x *Index) Close() error {
	err := x.Flush()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrClosed
	}
	if err == nil {
		err = x.writeTable()
	}
	x.closed = true
	x.release()
	return err
}
