package store

import (
	"sync/atomic"

	"github.com/apogeemq/apogee/index"
	"github.com/apogeemq/apogee/message"
)

// Dispatch hints.
//
// Put knows, before its records enter the commit log, everything the
// dispatcher needs from them: the queue, the tag code and the index keys'
// hashes. Handing that over spares the dispatcher (one goroutine, the store's
// serial path) reading back and decoding every record a writer has just
// written on another core. Put prepares a hint per record from its own
// encoding, which is still in its cache. Inside the commit log's append
// critical section, where records are given their offsets in log order, it
// stores the hint in a ring slot chosen by the record's sequence number. The
// dispatcher reads the ring in the same order.
//
// The commit log stays the truth. A record without a valid hint is decoded
// from the log as before and dispatched by the same rules: records recovered
// at Open, records whose hint did not fit (the ring was full, or more index
// keys than a hint holds). Hints change the cost of dispatch, never its
// outcome; the tests rebuild consume queues and index from the log and
// compare.
//
// Sequence numbers count the records appended since Open: from is the log's
// written offset at Open, and every append goes through Put and its Assign,
// so the n-th record at or past from has number n (from 0). Slot n&mask holds
// record n's hint when its seq field is n+1.
//
// Who touches a slot: Put writes the slot of record n inside the append
// critical section, before the log's written offset moves past the record,
// and only if n < read+len(slots). The dispatcher reads the slot of record n
// only after it has seen the written offset past the record, and only if
// n >= read; then it raises read past n. So Put never writes a slot the
// dispatcher may still read, and the dispatcher reads a slot's fields after
// they were written (the log's atomic written offset orders the two).
type hintRing struct {
	slots []dispatchHint
	mask  uint64
	from  int64 // the log's written offset at Open: records from here on have sequence numbers

	next uint64 // the next record's sequence number; inside the append critical section only

	_    [64]byte      // read is written by the dispatcher, next by the writers
	read atomic.Uint64 // slots below this number are never read again; stored by the dispatcher
}

// hintSlots is the ring's size: a power of two. 32 Ki slots of 64 bytes
// cover MaxDispatchLag's default (16 MiB) of records of 512 bytes or more.
// Tests make it smaller.
var hintSlots = 1 << 15

// maxHintKeys is how many index keys a hint holds: a UNIQ_KEY, which every
// RocketMQ client sets, and one KEYS item. A record with more is decoded by
// the dispatcher.
const maxHintKeys = 2

// dispatchHint is what dispatching a record needs, prepared by Put. It is 64
// bytes: one cache line per record for the dispatcher to read.
type dispatchHint struct {
	seq   uint64 // the record's sequence number + 1; 0 in a hint not yet placed
	off   int64  // commit-log offset
	qoff  int64  // queue offset; -1 when the record goes to no consume queue
	ts    int64  // store timestamp
	tag   int64  // consume-queue tag code
	c     *queueCounter
	size  int32 // the record's size; 0 marks a hint Put could not prepare
	nkeys int32
	keys  [maxHintKeys]int32 // index key hashes
}

func (r *hintRing) init(from int64) {
	r.slots = make([]dispatchHint, hintSlots)
	r.mask = uint64(hintSlots - 1)
	r.from = from
}

// place stores h as the hint of the next record, at commit-log offset off
// with queue offset qoff and store timestamp ts, if the ring has room. Put
// calls it inside the append critical section, once for every record, in
// log order.
func (r *hintRing) place(h *dispatchHint, off, qoff, ts int64) {
	n := r.next
	r.next++
	if h.size == 0 || n-r.read.Load() >= uint64(len(r.slots)) {
		return
	}
	slot := &r.slots[n&r.mask]
	*slot = *h
	slot.seq, slot.off, slot.qoff, slot.ts = n+1, off, qoff, ts
}

// prepareHint fills h for the encoded record v, which goes to counter c. The
// tag code is the TAGS hash; Assign replaces it when Options.TagCode
// overrides it, since that may read the store timestamp. A record with more
// index keys than a hint holds gets h.size 0: no hint.
func prepareHint(h *dispatchHint, v message.View, c *queueCounter) {
	*h = dispatchHint{c: c}
	tags, keys, uniq := v.DispatchProperties()
	h.tag = message.TagCode(tags)
	if message.TxType(v.SysFlag()) != message.TxRollbackType {
		ok := true
		if len(uniq) > 0 {
			ok = h.addKey(c.keyHash, uniq)
		}
		for ok && len(keys) > 0 {
			var k []byte
			k, keys = nextKey(keys)
			if len(k) > 0 {
				ok = h.addKey(c.keyHash, k)
			}
		}
		if !ok {
			return
		}
	}
	h.size = int32(v.TotalSize())
}

func (h *dispatchHint) addKey(topicHash int32, key []byte) bool {
	if h.nkeys == maxHintKeys {
		return false
	}
	h.keys[h.nkeys] = index.KeyHashAfter(topicHash, key)
	h.nkeys++
	return true
}
