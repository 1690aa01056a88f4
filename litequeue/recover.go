package litequeue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

const (
	journalName = "JOURNAL"
	tableName   = "TABLE"
	tableMagic  = "APGLQT01"
	tableSlot   = 48 // id, gen, head, tail (4 each), min, max, lastCL, lastMs (8 each)
	tableFile   = 12 // base (8), live count (4)
)

func nowMs() int64 { return time.Now().UnixMilli() }

func (x *Index) journalPath() string { return filepath.Join(x.dir, journalName) }
func (x *Index) tablePath() string   { return filepath.Join(x.dir, tableName) }

// open recovers the index: files, journal, then TABLE or a rebuild.
func (x *Index) open() (Recovery, error) {
	var rep Recovery
	if err := durable.MkdirAll(x.fs, x.dir, 0o755); err != nil {
		return rep, fmt.Errorf("litequeue: create %s: %w", x.dir, err)
	}
	if err := durable.RemoveTemps(x.fs, x.journalPath()); err != nil {
		return rep, fmt.Errorf("litequeue: %w", err)
	}
	if err := durable.RemoveTemps(x.fs, x.tablePath()); err != nil {
		return rep, fmt.Errorf("litequeue: %w", err)
	}
	if err := x.openFiles(); err != nil {
		return rep, err
	}
	cut, err := x.replayJournal()
	if err != nil {
		return rep, err
	}
	rep.JournalCut = cut
	tab, err := vfs.ReadFile(x.fs, x.tablePath())
	switch {
	case err == nil:
		if why := x.loadTable(tab); why != "" {
			rep.TableRejected = why
			x.resetPositions()
		} else {
			rep.Clean = true
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return rep, fmt.Errorf("litequeue: read %s: %w", x.tablePath(), err)
	}
	if !rep.Clean {
		x.rebuild(&rep)
	}
	rep.Topics = x.live
	if err == nil {
		// From now on a crash must take the rebuild path.
		if err := x.fs.Remove(x.tablePath()); err != nil {
			return rep, fmt.Errorf("litequeue: remove %s: %w", x.tablePath(), err)
		}
		if err := durable.SyncDir(x.fs, x.dir); err != nil {
			return rep, err
		}
	}
	return rep, x.startAllocator()
}

// openFiles lists and maps the block files.
func (x *Index) openFiles() error {
	ents, err := x.fs.ReadDir(x.dir)
	if err != nil {
		return fmt.Errorf("litequeue: list %s: %w", x.dir, err)
	}
	var bases []int64
	for _, e := range ents {
		base, ok := parseFileName(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		if base%x.opts.FileSize != 0 {
			return fmt.Errorf("litequeue: %s: %w: its base is not a multiple of the file size %d (was the file size changed?)",
				filepath.Join(x.dir, e.Name()), ErrDamaged, x.opts.FileSize)
		}
		bases = append(bases, base) // ReadDir sorts by name: by base
	}
	for _, base := range bases {
		path := filepath.Join(x.dir, fileName(base))
		m, err := mapFile(x.fs, path, x.opts.FileSize, false)
		if err != nil {
			return err
		}
		f := &blockFile{base: base, path: path, m: m}
		if len(x.files) > 0 {
			for last := x.files[len(x.files)-1].base; last+x.opts.FileSize < base; last += x.opts.FileSize {
				x.files = append(x.files, nil) // a file retention removed
			}
		}
		x.files = append(x.files, f)
	}
	return nil
}

// replayJournal applies the journal's records and cuts a torn or damaged
// tail; it returns how many bytes it cut.
func (x *Index) replayJournal() (int64, error) {
	path := x.journalPath()
	b, err := vfs.ReadFile(x.fs, path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("litequeue: read %s: %w", path, err)
	}
	// Size the table for what the journal names at most (a creation
	// record takes 30 bytes or more), so that replay does not grow it
	// step by step.
	if est := min(len(b)/30, MaxLiteTopics); est > 1024 {
		x.slots = make([]slot, 0, est)
		x.tab.arena = make([]byte, 0, len(b)/3)
		x.tab.reserve(x.slots, est)
	}
	pos := 0
	for pos < len(b) {
		r, n, err := nextRecord(b[pos:])
		if err != nil {
			break
		}
		if err := x.apply(r); errors.Is(err, errBadRecord) {
			break // damaged: the journal ends before it
		} else if err != nil {
			return 0, err
		}
		pos += n
	}
	x.jf, err = x.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("litequeue: open %s: %w", path, err)
	}
	cut := int64(len(b) - pos)
	if cut > 0 {
		if err := x.jf.Truncate(int64(pos)); err != nil {
			return 0, fmt.Errorf("litequeue: cut %s: %w", path, err)
		}
		if err := x.jf.Datasync(); err != nil {
			return 0, fmt.Errorf("litequeue: sync %s: %w", path, err)
		}
	}
	x.jsize = int64(pos)
	for i := range x.slots {
		if x.slots[i].parent == freeParent {
			x.free = append(x.free, uint32(i))
		}
	}
	return cut, nil
}

// apply replays one journal record.
func (x *Index) apply(r record) error {
	switch r.kind {
	case recCreate:
		if checkName(r.parent) != nil || checkName(r.name) != nil || r.id >= MaxLiteTopics {
			return errBadRecord
		}
		pid, err := x.parentID(r.parent)
		if err != nil {
			return err
		}
		if int(r.id) < len(x.slots) && x.slots[r.id].parent != freeParent {
			x.dropSlot(r.id)
		}
		if old, ok := x.tab.find(x.slots, pid, r.name); ok {
			x.dropSlot(old)
		}
		_, err = x.create(pid, r.name, r.id, r.gen, true)
		return err
	case recDelete:
		if r.id != noBlock && int(r.id) < len(x.slots) {
			if s := &x.slots[r.id]; s.parent != freeParent && s.gen == r.gen {
				x.dropSlot(r.id)
			}
		}
		parent, lite := string(r.parent), string(r.name)
		for g := range x.groups[parent] {
			delete(x.offsets, offKey{g, parent, lite})
		}
	case recOffset:
		x.setOffset(offKey{string(r.group), string(r.parent), string(r.name)}, r.offset)
	}
	return nil
}

// dropSlot frees a slot during replay (no blocks are known yet).
func (x *Index) dropSlot(id uint32) {
	s := &x.slots[id]
	x.tab.remove(x.slots, id)
	x.recBytes -= recSize(len(x.parents[s.parent]), int(s.nameLen))
	gen := s.gen
	*s = slot{parent: freeParent, gen: gen, head: noBlock, tail: noBlock}
	x.live--
}

// resetPositions forgets what a rejected TABLE set.
func (x *Index) resetPositions() {
	for i := range x.slots {
		s := &x.slots[i]
		if s.parent != freeParent {
			s.head, s.tail, s.min, s.max, s.lastCL, s.lastMs = noBlock, noBlock, 0, 0, -1, 0
		}
	}
	for _, f := range x.files {
		if f != nil {
			f.live = 0
		}
	}
	x.next = 0
}

// writeTable writes TABLE. Under mu.
func (x *Index) writeTable() error {
	nf := 0
	for _, f := range x.files {
		if f != nil {
			nf++
		}
	}
	buf := make([]byte, 0, 8+4+4+4+nf*tableFile+x.live*tableSlot+4)
	buf = append(buf, tableMagic...)
	be := binary.BigEndian
	buf = be.AppendUint32(buf, x.next)
	buf = be.AppendUint32(buf, uint32(nf))
	for _, f := range x.files {
		if f != nil {
			buf = be.AppendUint64(buf, uint64(f.base))
			buf = be.AppendUint32(buf, uint32(f.live))
		}
	}
	buf = be.AppendUint32(buf, uint32(x.live))
	for i := range x.slots {
		s := &x.slots[i]
		if s.parent == freeParent {
			continue
		}
		buf = be.AppendUint32(buf, uint32(i))
		buf = be.AppendUint32(buf, s.gen)
		buf = be.AppendUint32(buf, s.head)
		buf = be.AppendUint32(buf, s.tail)
		buf = be.AppendUint64(buf, uint64(s.min))
		buf = be.AppendUint64(buf, uint64(s.max))
		buf = be.AppendUint64(buf, uint64(s.lastCL))
		buf = be.AppendUint64(buf, uint64(s.lastMs))
	}
	buf = be.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	if err := durable.WriteFile(x.fs, x.tablePath(), buf); err != nil {
		return fmt.Errorf("litequeue: %w", err)
	}
	return nil
}

// loadTable applies TABLE; it returns why it was rejected ("" when used).
// Every slot it names must be live in the journal with its generation,
// every live slot must be named, and each one's tail block must carry its
// id, generation and the first offset its max implies.
func (x *Index) loadTable(b []byte) string {
	if len(b) < 8+4+4+4+4 || string(b[:8]) != tableMagic {
		return "bad magic or too short"
	}
	be := binary.BigEndian
	if crc32.Checksum(b[:len(b)-4], castagnoli) != be.Uint32(b[len(b)-4:]) {
		return "bad CRC"
	}
	d := decoder{b: b[8 : len(b)-4]}
	x.next = d.u32()
	nf := int(d.u32())
	if nf > len(x.files) {
		return "names more block files than there are"
	}
	for i := 0; i < nf && !d.bad; i++ {
		base, live := int64(d.u64()), int(d.u32())
		j := x.fileIndex(base)
		if j < 0 || x.files[j].base != base {
			return fmt.Sprintf("block file %s is missing", fileName(base))
		}
		x.files[j].live = live
	}
	n := int(d.u32())
	if n != x.live {
		return fmt.Sprintf("names %d lite topics, the journal %d", n, x.live)
	}
	for i := 0; i < n && !d.bad; i++ {
		id, gen, head, tail := d.u32(), d.u32(), d.u32(), d.u32()
		mn, mx, lastCL, lastMs := int64(d.u64()), int64(d.u64()), int64(d.u64()), int64(d.u64())
		if d.bad {
			break
		}
		if int(id) >= len(x.slots) || x.slots[id].parent == freeParent || x.slots[id].gen != gen {
			return fmt.Sprintf("lite id %d generation %d is not in the journal", id, gen)
		}
		if mn < 0 || mn > mx {
			return fmt.Sprintf("lite id %d: min %d, max %d", id, mn, mx)
		}
		s := &x.slots[id]
		s.head, s.tail, s.min, s.max, s.lastCL, s.lastMs = head, tail, mn, mx, lastCL, lastMs
		if tail == noBlock {
			if head != noBlock || mx != 0 {
				return fmt.Sprintf("lite id %d: no tail block with max %d", id, mx)
			}
			continue
		}
		th, ok := x.header(tail, id, gen)
		if !ok || mx < th.first || mx > th.first+EntriesPerBlock || tail >= x.next {
			return fmt.Sprintf("lite id %d: tail block %d does not check", id, tail)
		}
		hh, ok := x.header(head, id, gen)
		if !ok || hh.first > th.first || (head == tail) != (hh.first == th.first) || head > tail || mn < hh.first || head >= x.next {
			return fmt.Sprintf("lite id %d: head block %d does not check", id, head)
		}
	}
	if d.bad || len(d.b) != 0 {
		return "truncated or trailing bytes"
	}
	return ""
}

// rebuild recovers every live slot's chain from the block headers, in one
// pass in allocation order (see the package doc). A block of no live lite
// topic (deleted, or never named in the journal) has its header cleared. A
// lite topic's first valid block starts its chain, and each later one extends it if it is the
// next (its first offset 24 more, its prev the chain's tail); one that does
// not breaks the chain there, and it and every later block of that lite
// topic have their header cleared. Flush syncs every block written before
// it, so the blocks after a break were never synced: they lie past any
// checkpoint, and re-dispatch writes them again.
func (x *Index) rebuild(rep *Recovery) {
	x.resetPositions()
	maxValid := int64(-1)
	broken := map[uint32]bool{}
	firsts := make([]int64, len(x.slots)) // the tail's first offset, by id
	for _, f := range x.files {
		if f == nil {
			continue
		}
		data := f.m.Bytes()
		base := uint32(f.base / BlockSize)
		for off := 0; off+BlockSize <= len(data); off += BlockSize {
			b := data[off : off+BlockSize]
			h, ok := parseHeader(b)
			if !ok {
				continue
			}
			n := base + uint32(off/BlockSize)
			maxValid = int64(n)
			var s *slot
			if int(h.id) < len(x.slots) {
				s = &x.slots[h.id]
			}
			switch {
			case s == nil || s.parent == freeParent || s.gen != h.gen:
				// A deleted lite topic's block, or one whose creation the
				// journal never got: cleared, so that its id and
				// generation, given again, start a chain of their own.
			case broken[h.id]:
			case s.tail == noBlock:
				s.head, s.tail, s.min = n, n, h.first
				firsts[h.id] = h.first
				x.liveDelta(n, 1)
				continue
			case h.first == firsts[h.id]+EntriesPerBlock && h.prev == s.tail:
				setNext(x.block(s.tail), n)
				x.markDirty(s.tail)
				s.tail = n
				firsts[h.id] = h.first
				x.liveDelta(n, 1)
				continue
			default:
				broken[h.id] = true
				rep.BrokenChains++
			}
			clear(b[:HeaderSize])
			f.dirty = true
		}
	}
	x.next = uint32(maxValid + 1)
	now := x.opts.Now()
	for i := range x.slots {
		s := &x.slots[i]
		if s.parent == freeParent {
			continue
		}
		id := uint32(i)
		if s.tail == noBlock {
			rep.Emptied++
			continue
		}
		rep.Rebuilt++
		tb := x.block(s.tail)
		k := int64(0)
		for k < EntriesPerBlock && getEntry(tb[HeaderSize+k*EntrySize:]).Size != 0 {
			k++
		}
		s.max = firsts[id] + k
		setNext(tb, 0)
		s.lastMs = now
		s.lastCL = -1
		if s.max > s.min {
			if e, ok := x.entryAt(id, s, s.max-1); ok {
				s.lastCL = e.CommitLogOffset
				if x.opts.StoreTime != nil {
					if ms, ok := x.opts.StoreTime(e); ok {
						s.lastMs = ms
					}
				}
			}
		}
	}
}

// startAllocator positions the allocator after x.next: the newest file's
// pages up to it count as written, its blocks as reserved.
func (x *Index) startAllocator() error {
	if len(x.files) == 0 {
		return nil
	}
	f := x.files[len(x.files)-1]
	pos := int64(x.next) * BlockSize
	if pos < f.base {
		// The newest file holds no valid block: allocate from its start.
		pos = f.base
		x.next = uint32(pos / BlockSize)
	}
	if pos > f.base+x.opts.FileSize {
		return fmt.Errorf("litequeue: allocation point %d past the newest file %s: %w", pos, f.path, ErrDamaged)
	}
	page := int64(len(x.pageBuf))
	x.touched = (pos + page - 1) / page * page
	x.reserved = x.touched
	if err := x.openWriteFile(f.path); err != nil {
		return err
	}
	if x.touched > pos {
		// The rest of the page the allocator is in may hold bytes of blocks
		// a crash left unfinished: zero them.
		if _, err := x.wf.WriteAt(x.pageBuf[:x.touched-pos], pos-f.base); err != nil {
			return fmt.Errorf("litequeue: write %s: %w", f.path, err)
		}
	}
	return nil
}
