package litequeue

import (
	"container/heap"
	"slices"
)

// Following the lite consumer offsets (a slave of the index's broker):
// each offset change takes the next change number of this run of the
// index (Index.oseq, counted from 1 at Open, including the offsets the
// journal replays), and OffsetsSince returns, in change order, those
// changed after a number the follower holds, a page at a time. The
// numbers are only comparable within one run: OffsetEpoch names the run,
// and a follower seeing another epoch starts again from 0. A deleted or
// expired lite topic's offsets are dropped without a change number: a
// follower keeps them until its own index deletes the lite topic.

// LiteOffset is one lite consumer offset with its change number.
type LiteOffset struct {
	Group, Parent, Lite string
	Offset              int64
	Seq                 uint64
}

// OffsetEpoch names this run of the index's change numbers (the time of
// Open in ns).
func (x *Index) OffsetEpoch() int64 { return x.oepoch }

// OffsetsSince appends to dst, in change order, up to limit offsets whose
// change number is above since, and reports whether more remain. It scans
// every offset (under omu, O(n log limit)): a follower asks once per sync
// interval and, with only what changed, gets a short page.
func (x *Index) OffsetsSince(since uint64, limit int, dst []LiteOffset) ([]LiteOffset, bool) {
	if limit <= 0 {
		limit = 1
	}
	x.omu.Lock()
	defer x.omu.Unlock()
	if x.oseq <= since {
		return dst, false
	}
	h := make(seqHeap, 0, min(limit, len(x.offsets)))
	more := false
	for k, v := range x.offsets {
		if v.seq <= since {
			continue
		}
		if len(h) < limit {
			heap.Push(&h, seqItem{k, v})
			continue
		}
		more = true
		if v.seq < h[0].v.seq {
			h[0] = seqItem{k, v}
			heap.Fix(&h, 0)
		}
	}
	slices.SortFunc(h, func(a, b seqItem) int {
		switch {
		case a.v.seq < b.v.seq:
			return -1
		case a.v.seq > b.v.seq:
			return 1
		}
		return 0
	})
	for _, it := range h {
		dst = append(dst, LiteOffset{Group: it.k.group, Parent: it.k.parent, Lite: it.k.lite, Offset: it.v.off, Seq: it.v.seq})
	}
	return dst, more
}

// seqItem and seqHeap: a max-heap by change number, keeping the limit
// smallest above since.
type seqItem struct {
	k offKey
	v offVal
}

type seqHeap []seqItem

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i].v.seq > h[j].v.seq }
func (h seqHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *seqHeap) Push(v any)        { *h = append(*h, v.(seqItem)) }
func (h *seqHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}
