package litequeue

import (
	"hash/maphash"
)

// noBlock marks the absence of a block (a slot with no entries yet, the
// first block's prev).
const noBlock = ^uint32(0)

// freeParent marks a free slot.
const freeParent = ^uint16(0)

// slot is one lite topic's state; 56 bytes, no pointers.
type slot struct {
	nameOff uint32 // the name in the arena
	nameLen uint16
	parent  uint16 // index in Index.parents; freeParent when free
	gen     uint32 // incremented each time the id is reused
	head    uint32 // the oldest block kept; noBlock before the first entry
	tail    uint32 // the newest block
	_       uint32
	min     int64 // first readable queue offset
	max     int64 // next queue offset
	lastCL  int64 // commit-log offset of the last entry (-1 none)
	lastMs  int64 // store time of the last entry (ms)
}

// table maps (parent id, name) to a lite id: open addressing with linear
// probing over ids+1 (0 = empty), at most half full, names in an append-only
// arena that is compacted when half of it is garbage.
type table struct {
	seed    maphash.Seed
	buckets []uint32
	n       int // live entries
	arena   []byte
	garbage int // bytes of deleted names in the arena
}

func (t *table) init() {
	t.seed = maphash.MakeSeed()
	t.buckets = make([]uint32, 1024)
}

func (t *table) hash(parent uint16, name []byte) uint64 {
	h := maphash.Bytes(t.seed, name) ^ (uint64(parent)+1)*0x9E3779B97F4A7C15
	return h ^ h>>29
}

// reserve sizes the table for n entries without growing on the way.
func (t *table) reserve(slots []slot, n int) {
	size := len(t.buckets)
	for size < 2*n {
		size *= 2
	}
	if size == len(t.buckets) {
		return
	}
	old := t.buckets
	t.buckets = make([]uint32, size)
	for _, b := range old {
		if b != 0 {
			t.place(slots, b-1)
		}
	}
}

func (t *table) name(s *slot) []byte {
	return t.arena[s.nameOff : s.nameOff+uint32(s.nameLen)]
}

// find returns the id of (parent, name), or false.
func (t *table) find(slots []slot, parent uint16, name []byte) (uint32, bool) {
	mask := uint64(len(t.buckets) - 1)
	for i := t.hash(parent, name) & mask; ; i = (i + 1) & mask {
		b := t.buckets[i]
		if b == 0 {
			return 0, false
		}
		s := &slots[b-1]
		if s.parent == parent && int(s.nameLen) == len(name) && string(t.name(s)) == string(name) {
			return b - 1, true
		}
	}
}

// insert adds id, whose slot already holds its parent and name.
func (t *table) insert(slots []slot, id uint32) {
	if (t.n+1)*2 > len(t.buckets) {
		t.grow(slots)
	}
	t.place(slots, id)
	t.n++
}

func (t *table) place(slots []slot, id uint32) {
	s := &slots[id]
	mask := uint64(len(t.buckets) - 1)
	i := t.hash(s.parent, t.name(s)) & mask
	for t.buckets[i] != 0 {
		i = (i + 1) & mask
	}
	t.buckets[i] = id + 1
}

func (t *table) grow(slots []slot) { t.reserve(slots, len(t.buckets)) }

// remove deletes id (backward-shift deletion keeps probes short without
// tombstones). The slot must still hold its parent and name.
func (t *table) remove(slots []slot, id uint32) {
	s := &slots[id]
	mask := uint64(len(t.buckets) - 1)
	i := t.hash(s.parent, t.name(s)) & mask
	for t.buckets[i] != id+1 {
		i = (i + 1) & mask
	}
	j := i
	for {
		j = (j + 1) & mask
		b := t.buckets[j]
		if b == 0 {
			break
		}
		o := &slots[b-1]
		k := t.hash(o.parent, t.name(o)) & mask
		// Move b into the hole at i unless its home k lies cyclically in (i, j].
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			t.buckets[i] = b
			i = j
		}
	}
	t.buckets[i] = 0
	t.n--
	t.garbage += int(s.nameLen)
}

// addName appends name to the arena and returns its offset.
func (t *table) addName(name []byte) uint32 {
	off := uint32(len(t.arena))
	t.arena = append(t.arena, name...)
	return off
}

// compact rewrites the arena without its garbage when that is more than half
// of it (and more than 1 MiB).
func (t *table) compact(slots []slot) {
	if t.garbage < 1<<20 || t.garbage*2 < len(t.arena) {
		return
	}
	arena := make([]byte, 0, len(t.arena)-t.garbage+len(t.arena)/8)
	for i := range slots {
		s := &slots[i]
		if s.parent == freeParent {
			continue
		}
		off := uint32(len(arena))
		arena = append(arena, t.name(s)...)
		s.nameOff = off
	}
	t.arena, t.garbage = arena, 0
}
