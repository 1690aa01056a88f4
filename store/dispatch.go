package store

import (
	"bytes"
	"errors"
	"sync"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/index"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/mmap"
	"golang.org/x/sys/unix"
)

// dispatcher turns committed records into consume-queue and index entries,
// in commit-log order. One goroutine runs it (loop), except during Open and
// Close, when the caller runs it with the loop stopped.
type dispatcher struct {
	s      *Store
	mu     sync.Mutex // serialises run (the loop vs Close's final catch-up)
	cursor *commitlog.Cursor
	topics map[string]*dispatchTopic // by topic name; m[string(b)] does not allocate
	gen    uint64                    // bumped by forget: queues cached in queueCounters are stale

	// pos is the offset of the next record to dispatch, seq its hint
	// sequence number when pos >= hints.from (hints.go). read is this
	// goroutine's copy of hints.read; seqLost is set if retention moved pos
	// past records it never saw, so that seq no longer matches.
	pos     int64
	seq     uint64
	read    uint64
	seqLost bool

	// touched collects the queues that grew during a run: OnArrival is called
	// once per queue per run, after the run, not once per record.
	touched map[*consumequeue.Queue]struct{}

	retry      chan struct{} // a token asks the loop to run again (after a full disk)
	retryArmed bool          // a retry timer is pending; under mu

	batch  []pendingRecord       // run's working batch; capacity dispatchBatch
	hashes []int32               // the batch's index key hashes, in order
	addrs  []uintptr             // the batch's prefetch addresses
	qs     []*consumequeue.Queue // the batch's queues, for TailAddrs
	offs   []int64               // and their queue offsets
}

// arrivalBatch bounds how many records a run dispatches before it reports
// arrivals, so a dispatcher that never catches up still wakes long polls.
const arrivalBatch = 256

// retryDelay is how long dispatch waits before retrying after a full disk.
const retryDelay = 100 * time.Millisecond

type dispatchTopic struct {
	name    string
	keyHash int32 // index.TopicHash(name)
	queues  []*consumequeue.Queue
}

func (d *dispatcher) init(s *Store) {
	d.s = s
	if d.topics == nil {
		d.topics = map[string]*dispatchTopic{}
	}
	if d.cursor == nil {
		d.pos = s.dispatched.Load()
		d.cursor = s.log.NewCursor(d.pos)
	}
	if d.retry == nil {
		d.retry = make(chan struct{}, 1)
	}
	if d.touched == nil {
		d.touched = map[*consumequeue.Queue]struct{}{}
	}
	if d.batch == nil {
		d.batch = make([]pendingRecord, 0, dispatchBatch)
	}
}

func (d *dispatcher) loop() {
	defer d.s.wg.Done()
	appended := d.s.log.Appended()
	for {
		select {
		case <-d.s.stop:
			return
		case <-appended:
			d.run()
		case <-d.retry:
			d.mu.Lock()
			d.retryArmed = false
			d.mu.Unlock()
			d.run()
		}
	}
}

// run dispatches every record up to the written position.
//
// It works in batches of up to dispatchBatch records, in two passes. The
// first (fill) takes each record's queue, consume-queue entry and index key
// hashes from the hint Put left for it, or decodes the record from the log
// when there is none, then prefetches every tail entry and index slot the
// batch will write; the second writes the entries and keys in commit-log
// order. With thousands of queues every tail entry is a cold line in a cold
// page, and writing it at once stalls the dispatcher on a page-table walk and
// a memory read (about half a microsecond on this kind of virtual machine);
// prefetched together a batch ahead, those overlap one another
// (docs/benchmarks.md).
func (d *dispatcher) run() {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.s
	n := 0
	for {
		batch, stop, broken := d.fill()
		stalled := false
		for i := range batch {
			p := &batch[i]
			if err := d.write(p); err != nil {
				// Out of space for a consume-queue block: stop before this
				// record (nothing after it may be dispatched out of order) and
				// try again shortly; appends to the log go on meanwhile.
				d.pos, d.seq = p.off, p.seq
				s.stats.dispatchStalls.Add(1)
				if !d.retryArmed {
					// One timer at a time: appends also wake the loop, and
					// each of those runs stalls here again while the disk is full.
					d.retryArmed = true
					time.AfterFunc(retryDelay, func() {
						select {
						case d.retry <- struct{}{}:
						default:
						}
					})
				}
				stalled = true
				break
			}
			s.dispatched.Store(p.end)
			if n++; n%arrivalBatch == 0 {
				d.flushArrival()
			}
		}
		clear(batch) // drop the views before the cursor may move on
		if stalled || broken {
			s.lag.stall()
			break
		}
		if len(batch) > 0 {
			s.lag.progressed()
		}
		if stop {
			break
		}
	}
	d.cursor.Close()
	d.flushArrival()
	s.stats.lastDispatch.Store(time.Now().UnixNano())
}

// dispatchBatch is how many records run prepares (and prefetches for) ahead
// of writing their entries.
const dispatchBatch = 16

// pendingRecord is a prepared record waiting in a batch for its entries.
type pendingRecord struct {
	rec      []byte // a decoded record's view of the log; valid while the cursor stays in its segment
	off, end int64  // where the record starts and ends in the log
	seq      uint64 // its hint sequence number, if off >= hints.from
	qoff     int64  // queue offset
	ts       int64  // store timestamp
	topic    string
	q        *consumequeue.Queue // the consume queue to append to; nil for none
	e        consumequeue.Entry
	// keys are the index key hashes of the record: dispatcher.hashes[keys[0]:keys[1]].
	keys [2]int
	bad  bool // undecodable: reported, and dispatched as nothing
}

// fill prepares the next batch: from hints while the records have them, or
// else by decoding records from the log (fillDecoded), and prefetches what
// writing them will touch. stop reports that the batch reaches the written
// position, broken that the next record is unreadable: the run ends after
// this batch.
func (d *dispatcher) fill() (batch []pendingRecord, stop, broken bool) {
	batch = d.batch[:0]
	d.hashes = d.hashes[:0]
	written := d.s.log.WrittenOffset()
	if d.pos >= written {
		return batch, true, false
	}
	if d.hint() != nil {
		batch, stop = d.fillHinted(batch, written)
	} else {
		batch, stop, broken = d.fillDecoded(batch, written)
	}
	if d.seq > d.read {
		// The slots up to here are done with: Put may reuse them.
		d.read = d.seq
		d.s.hints.read.Store(d.read)
	}
	d.prefetch(batch)
	return batch, stop, broken
}

// hint returns the hint of the record at d.pos, or nil if it has none. The
// caller has seen the log written past d.pos.
func (d *dispatcher) hint() *dispatchHint {
	r := &d.s.hints
	if d.pos < r.from || d.seq < d.read || d.seqLost {
		return nil
	}
	h := &r.slots[d.seq&r.mask]
	if h.seq != d.seq+1 || h.off < d.pos {
		return nil
	}
	return h
}

// fillHinted fills batch from the hints of the records from d.pos on, up to
// the written offset or the first record without a hint.
func (d *dispatcher) fillHinted(batch []pendingRecord, written int64) ([]pendingRecord, bool) {
	for len(batch) < cap(batch) && d.pos < written {
		h := d.hint()
		if h == nil {
			break
		}
		p := pendingRecord{off: h.off, end: h.off + int64(h.size), seq: d.seq, qoff: h.qoff, ts: h.ts,
			topic: h.c.topic}
		if h.qoff >= 0 {
			if p.q = d.counterQueue(h.c); p.q != nil {
				p.e = consumequeue.Entry{CommitLogOffset: h.off, Size: h.size, TagCode: h.tag}
			}
		}
		p.keys[0] = len(d.hashes)
		d.hashes = append(d.hashes, h.keys[:h.nkeys]...)
		p.keys[1] = len(d.hashes)
		batch = append(batch, p)
		d.pos, d.seq = p.end, d.seq+1
	}
	return batch, d.pos >= written
}

// fillDecoded fills batch with records decoded from the log, up to the
// next one that has a hint, all in one commit-log segment, so that every view
// stays valid.
func (d *dispatcher) fillDecoded(batch []pendingRecord, written int64) (_ []pendingRecord, stop, broken bool) {
	s := d.s
	if d.cursor.Offset() != d.pos {
		d.cursor.Seek(d.pos)
	}
	for len(batch) < cap(batch) && (len(batch) == 0 || !d.cursor.AtSegmentEnd() && (d.pos >= written || d.hint() == nil)) {
		rec, off, err := d.cursor.Next()
		if errors.Is(err, commitlog.ErrOffsetNotWritten) {
			stop = true
			break
		}
		if errors.Is(err, commitlog.ErrOffsetDeleted) {
			// Retention overtook the dispatcher (only possible if it was
			// stopped for days): resume at the log's start. This comes only
			// from moving to another segment, so the batch is empty.
			d.pos = s.log.MinOffset()
			if d.pos > s.hints.from {
				d.seqLost = true // the records skipped had sequence numbers
			}
			d.cursor.Seek(d.pos)
			continue
		}
		if err != nil {
			s.stats.dispatchErrors.Add(1)
			s.opts.Logger.Error("store: dispatch stopped on an unreadable record", "offset", off, "err", err)
			stop, broken = true, true
			break
		}
		p := pendingRecord{rec: rec, off: off, end: off + int64(len(rec)), seq: d.seq}
		if off >= s.hints.from {
			d.seq++
		}
		d.pos = p.end
		batch = append(batch, p)
	}
	s.stats.dispatchDecoded.Add(int64(len(batch)))
	d.prefetchRecords(batch)
	for i := range batch {
		d.prepare(&batch[i])
	}
	return batch, stop, broken
}

// prefetchRecords starts loading the parts of the batch's records that
// prepare reads beyond the first line, which the cursor has read already:
// the rest of the header, and the end, where the topic and the properties
// are. The records were just written by another core, so each of those is a
// miss; prefetched for the whole batch at once, they overlap.
func (d *dispatcher) prefetchRecords(batch []pendingRecord) {
	addrs := d.addrs[:0]
	for i := range batch {
		rec := batch[i].rec
		if n := len(rec); n > 64 {
			addrs = append(addrs, mmap.Addr(rec[64:]), mmap.Addr(rec[max(n-128, 64):]), mmap.Addr(rec[n-1:]))
		}
	}
	mmap.PrefetchAll(addrs)
	d.addrs = addrs
}

// prefetch starts loading every tail entry and index slot the batch will
// write. The addresses are gathered first and prefetched from one tight loop,
// so that all the page-table walks and line fills are in flight together.
func (d *dispatcher) prefetch(batch []pendingRecord) {
	qs, offs := d.qs[:0], d.offs[:0]
	for i := range batch {
		if p := &batch[i]; p.q != nil {
			qs = append(qs, p.q)
			offs = append(offs, p.qoff)
		}
	}
	addrs := consumequeue.TailAddrs(qs, offs, d.addrs[:0])
	clear(qs) // hold no queue past the batch (a deleted topic's, say)
	d.qs, d.offs = qs[:0], offs[:0]
	addrs = d.s.idx.SlotAddrs(d.hashes, addrs)
	mmap.PrefetchAll(addrs)
	d.addrs = addrs
}

// prepare decodes p's record, resolves its topic and queue, computes its
// consume-queue entry and hashes its index keys: the same rules as Put's
// hints (prepareHint, Assign).
func (d *dispatcher) prepare(p *pendingRecord) {
	s := d.s
	v, err := message.Decode(p.rec, false)
	if err != nil {
		s.stats.dispatchErrors.Add(1)
		s.opts.Logger.Error("store: undecodable record in the commit log", "offset", p.off, "err", err)
		p.bad = true
		return
	}
	t := d.topic(v.Topic())
	p.topic, p.qoff, p.ts = t.name, v.QueueOffset(), v.StoreTimestamp()
	tags, keys, uniq := v.DispatchProperties()
	d.prepareKeys(p, t, v.SysFlag(), keys, uniq)
	if !message.Dispatchable(v.SysFlag()) {
		return
	}
	if p.q = d.queue(t, v.QueueID()); p.q == nil {
		return
	}
	code, ok := int64(0), false
	if s.opts.TagCode != nil {
		code, ok = s.opts.TagCode(v)
	}
	if !ok {
		code = message.TagCode(tags)
	}
	p.e = consumequeue.Entry{CommitLogOffset: p.off, Size: int32(v.TotalSize()), TagCode: code}
}

// write appends p's consume-queue entry and index keys. It returns an error
// only when the record must be dispatched again later (the disk is full).
func (d *dispatcher) write(p *pendingRecord) error {
	if p.bad {
		return nil
	}
	s := d.s
	if q := p.q; q != nil {
		if err := q.Append(p.qoff, p.e); err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				return err
			}
			s.stats.dispatchErrors.Add(1)
			s.opts.Logger.Error("store: consume-queue append failed", "topic", p.topic, "queue", q.ID(), "queueOffset", p.qoff, "err", err)
		} else {
			d.arrived(q)
		}
	}
	for _, h := range d.hashes[p.keys[0]:p.keys[1]] {
		if err := s.idx.PutHash(h, p.off, p.ts); err != nil {
			s.stats.dispatchErrors.Add(1)
			s.opts.Logger.Error("store: index put failed", "topic", p.topic, "offset", p.off, "err", err)
		}
	}
	return nil
}

// prepareKeys hashes the record's index keys (its UNIQ_KEY and each item of
// its space-separated KEYS) into d.hashes. A rolled-back transaction record
// is not indexed.
func (d *dispatcher) prepareKeys(p *pendingRecord, t *dispatchTopic, sysFlag int32, keys, uniq []byte) {
	p.keys[0] = len(d.hashes)
	p.keys[1] = len(d.hashes)
	if message.TxType(sysFlag) == message.TxRollbackType {
		return
	}
	if len(uniq) > 0 {
		d.hashes = append(d.hashes, index.KeyHashAfter(t.keyHash, uniq))
	}
	for len(keys) > 0 {
		var k []byte
		k, keys = nextKey(keys)
		if len(k) > 0 {
			d.hashes = append(d.hashes, index.KeyHashAfter(t.keyHash, k))
		}
	}
	p.keys[1] = len(d.hashes)
}

// nextKey splits the first item off a space-separated KEYS value.
func nextKey(keys []byte) (key, rest []byte) {
	if i := bytes.IndexByte(keys, ' '); i >= 0 {
		return keys[:i], keys[i+1:]
	}
	return keys, nil
}

// counterQueue returns the consume queue of c's topic and queue, cached in c
// until forget.
func (d *dispatcher) counterQueue(c *queueCounter) *consumequeue.Queue {
	if c.dq != nil && c.dgen == d.gen {
		return c.dq
	}
	t, ok := d.topics[c.topic]
	if !ok {
		t = d.addTopic(c.topic)
	}
	q := d.queue(t, c.id)
	c.dq, c.dgen = q, d.gen
	return q
}

func (d *dispatcher) topic(name []byte) *dispatchTopic {
	if t, ok := d.topics[string(name)]; ok {
		return t
	}
	return d.addTopic(string(name))
}

func (d *dispatcher) addTopic(name string) *dispatchTopic {
	t := &dispatchTopic{name: name, keyHash: index.TopicHash(name)}
	d.topics[name] = t
	return t
}

func (d *dispatcher) queue(t *dispatchTopic, id int32) *consumequeue.Queue {
	if id < 0 {
		return nil
	}
	if int(id) < len(t.queues) && t.queues[id] != nil {
		return t.queues[id]
	}
	q, err := d.s.cqs.Queue(t.name, id)
	if err != nil {
		d.s.stats.dispatchErrors.Add(1)
		d.s.opts.Logger.Error("store: consume queue unavailable", "topic", t.name, "queue", id, "err", err)
		return nil
	}
	for int(id) >= len(t.queues) {
		t.queues = append(t.queues, nil)
	}
	t.queues[id] = q
	return q
}

// forget drops cached queues of a deleted topic.
func (d *dispatcher) forget(topic string) {
	d.mu.Lock()
	delete(d.topics, topic)
	d.gen++
	d.mu.Unlock()
}

// arrived records that q grew.
func (d *dispatcher) arrived(q *consumequeue.Queue) {
	if d.s.opts.OnArrival != nil {
		d.touched[q] = struct{}{}
	}
}

// flushArrival tells the broker about every queue that grew during the run.
func (d *dispatcher) flushArrival() {
	for q := range d.touched {
		d.s.opts.OnArrival(q.Topic(), q.ID(), q.MaxOffset())
	}
	clear(d.touched)
}
