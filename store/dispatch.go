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

	// touched collects the queues that grew during a run: OnArrival is called
	// once per queue per run, after the run, not once per record.
	touched map[*consumequeue.Queue]struct{}
	// liteTouched collects the lite topics that grew during a run (id<<32 |
	// generation), reported to OnLiteArrival after the run's OnArrival calls.
	liteTouched map[uint64]struct{}
	liteDown    bool // lite-topic index appends are refused (logged once per change)

	// rebuilding is set while Open re-dispatches: a queue offset beyond a
	// queue's max then means the records in between were lost from the log
	// (its queue was rebuilt), and they are filled with lost-message entries.
	rebuilding bool
	// indexDown is set while index puts fail, stalled while dispatch waits
	// for disk space (each logged once per change).
	indexDown, stalled bool

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

// retryDelay is how long dispatch waits before retrying after a failed
// consume-queue write (a variable for the fault-injection test).
var retryDelay = 100 * time.Millisecond

type dispatchTopic struct {
	name    string
	keyHash int32 // index.TopicHash(name)
	queues  []*consumequeue.Queue
	// liteParent: its records' __LITE_TOPIC is indexed (not a system topic;
	// see liteParentTopic).
	liteParent bool
}

func (d *dispatcher) init(s *Store) {
	d.s = s
	if d.topics == nil {
		d.topics = map[string]*dispatchTopic{}
	}
	if d.cursor == nil {
		d.cursor = s.log.NewCursor(s.dispatched.Load())
	}
	if d.retry == nil {
		d.retry = make(chan struct{}, 1)
	}
	if d.touched == nil {
		d.touched = map[*consumequeue.Queue]struct{}{}
	}
	if d.liteTouched == nil {
		d.liteTouched = map[uint64]struct{}{}
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
		case <-d.s.repl.confirmed: // the confirm offset moved (dispatchLimit)
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
// It works in batches of up to dispatchBatch records from one commit-log
// segment, in two passes. The first (fill) decodes each record, resolves its
// queue, computes its entry and hashes its keys, then prefetches every tail
// entry and index slot the batch will write; the second writes the entries
// and keys in commit-log order. With thousands of queues every tail entry is
// a cold line in a cold page, and writing it at once stalls the dispatcher on
// a page-table walk and a memory read (about half a microsecond on this kind
// of virtual machine); prefetched together a batch ahead, those overlap one
// another (docs/benchmarks.md).
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
				// A consume-queue write failed (no space for a block, an
				// I/O error): stop before this record (nothing after it may
				// be dispatched out of order, and skipping it would leave a
				// gap that hides every later message of its queue and, after
				// a restart, hands its queue offset out again) and try again
				// shortly; appends to the log go on meanwhile.
				d.cursor.Close()
				d.cursor = s.log.NewCursor(p.off)
				s.stats.dispatchStalls.Add(1)
				if !d.stalled {
					d.stalled = true
					if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
						s.opts.Logger.Warn("store: disk full: dispatch paused; new messages are stored but not visible until space returns",
							"offset", p.off, "err", err)
					} else {
						s.opts.Logger.Error("store: consume-queue write failed: dispatch paused; new messages are stored but not visible until it succeeds",
							"offset", p.off, "err", err)
					}
				}
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
			s.dispatched.Store(p.off + int64(len(p.rec)))
			if d.stalled {
				d.stalled = false
				s.opts.Logger.Warn("store: consume-queue writes succeed again (disk space is back?): dispatch resumed", "offset", p.off)
			}
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
			// What follows the last record up to the written position (a
			// blank-end marker and its padding, a hole) holds nothing to
			// dispatch: a log that ends there is dispatched to its end.
			if o := d.cursor.Offset(); o > s.dispatched.Load() {
				s.dispatched.Store(o)
			}
			break
		}
	}
	d.cursor.Close()
	d.flushArrival()
	s.stats.lastDispatch.Store(time.Now().UnixNano())
}

// dispatchBatch is how many records run decodes (and prefetches for) ahead of
// writing their entries.
const dispatchBatch = 16

// pendingRecord is a decoded record waiting in a batch for its entries.
type pendingRecord struct {
	rec []byte // a view of the commit log; valid while the cursor stays in its segment
	off int64
	v   message.View
	t   *dispatchTopic
	q   *consumequeue.Queue // the consume queue to append to; nil for none
	e   consumequeue.Entry
	// keys are the index key hashes of the record: dispatcher.hashes[keys[0]:keys[1]].
	keys [2]int
	// lite is the record's lite topic (a view of rec; nil for none): its
	// entry also goes to the lite-topic index under (topic, lite).
	lite []byte
	bad  bool // undecodable: reported, and dispatched as nothing
}

// fill reads the next batch of records from the cursor (all in one segment,
// so every view stays valid), prefetches the rest of them, prepares them and
// prefetches what writing them will touch. stop reports that the cursor
// reached the written position, broken that it reached an unreadable record:
// the run ends after this batch.
func (d *dispatcher) fill() (batch []pendingRecord, stop, broken bool) {
	s := d.s
	batch = d.batch[:0]
	d.hashes = d.hashes[:0]
	limit := s.dispatchLimit()
	for len(batch) < cap(batch) && (len(batch) == 0 || !d.cursor.AtSegmentEnd()) {
		if d.cursor.Offset() >= limit {
			stop = true
			break
		}
		rec, off, err := d.cursor.Next()
		if errors.Is(err, commitlog.ErrOffsetNotWritten) {
			stop = true
			break
		}
		if err == nil && off+int64(len(rec)) > limit {
			// Not confirmed yet: dispatched once the replicas have it.
			d.cursor.Back(off)
			stop = true
			break
		}
		if errors.Is(err, commitlog.ErrOffsetDeleted) {
			// Retention overtook the dispatcher (only possible if it was
			// stopped for days): resume at the log's start. This comes only
			// from moving to another segment, so the batch is empty.
			d.cursor.Close()
			d.cursor = s.log.NewCursor(s.log.MinOffset())
			continue
		}
		if err != nil {
			s.stats.dispatchErrors.Add(1)
			s.opts.Logger.Error("store: dispatch stopped on an unreadable record", "offset", off, "err", err)
			stop, broken = true, true
			break
		}
		batch = append(batch, pendingRecord{rec: rec, off: off})
	}
	d.prefetchRecords(batch)
	for i := range batch {
		d.prepare(&batch[i])
	}
	d.prefetch(batch)
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
			offs = append(offs, p.v.QueueOffset())
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
// consume-queue entry and hashes its index keys.
func (d *dispatcher) prepare(p *pendingRecord) {
	s := d.s
	v, err := message.Decode(p.rec, false)
	if err != nil {
		s.stats.dispatchErrors.Add(1)
		s.opts.Logger.Error("store: undecodable record in the commit log", "offset", p.off, "err", err)
		p.bad = true
		return
	}
	p.v = v
	p.t = d.topic(v.Topic())
	tags, keys, uniq, lite := v.DispatchPropertiesLite()
	d.prepareKeys(p, keys, uniq)
	if !message.Dispatchable(v.SysFlag()) {
		return
	}
	p.e = consumequeue.Entry{CommitLogOffset: p.off, Size: int32(v.TotalSize()), TagCode: s.tagCode(v, tags)}
	if len(lite) > 0 && p.t.liteParent {
		p.lite = lite
	}
	p.q = d.queue(p.t, v.QueueID())
}

// tagCode is the consume-queue tag code of record v whose TAGS are tags:
// Options.TagCode's, or the Java hash of the tags (0 without).
func (s *Store) tagCode(v message.View, tags []byte) int64 {
	if s.opts.TagCode != nil {
		if code, ok := s.opts.TagCode(v); ok {
			return code
		}
	}
	return message.TagCode(tags)
}

// write appends p's consume-queue entry and index keys. It returns an error
// only when the record must be dispatched again later: the consume-queue
// write failed for a reason that may pass (a full disk, an I/O error), as
// opposed to an entry the queue refuses (those are logged and skipped).
func (d *dispatcher) write(p *pendingRecord) error {
	if p.bad {
		return nil
	}
	s := d.s
	v, t := p.v, p.t
	if p.lite != nil {
		if err := d.writeLite(p); err != nil {
			return err
		}
	}
	if q := p.q; q != nil {
		err := q.Append(v.QueueOffset(), p.e)
		if errors.Is(err, consumequeue.ErrGap) && d.rebuilding {
			from := q.MaxOffset()
			if err = q.FillLost(v.QueueOffset()); err == nil {
				s.opts.Logger.Warn("store: queue offsets whose records the commit log lost; marked lost",
					"topic", t.name, "queue", v.QueueID(), "fromQueueOffset", from, "toQueueOffset", v.QueueOffset()-1)
				err = q.Append(v.QueueOffset(), p.e)
			}
		}
		if errors.Is(err, consumequeue.ErrConflict) {
			// The stored entry is not the one its record implies: after a
			// power loss, an entry of the unflushed tail torn by sector (its
			// tag code zero, say). The log is the truth.
			var wrote bool
			if wrote, err = q.Repair(v.QueueOffset(), p.e); wrote {
				s.opts.Logger.Warn("store: consume-queue entry rewritten from its record on re-dispatch",
					"topic", t.name, "queue", v.QueueID(), "queueOffset", v.QueueOffset(), "commitLogOffset", p.off)
				d.arrived(q)
			}
		}
		if err != nil {
			if !refused(err) {
				return err
			}
			s.stats.dispatchErrors.Add(1)
			s.opts.Logger.Error("store: consume-queue append failed", "topic", t.name, "queue", v.QueueID(), "queueOffset", v.QueueOffset(), "err", err)
		} else {
			d.arrived(q)
		}
	}
	ts := v.StoreTimestamp()
	for _, h := range d.hashes[p.keys[0]:p.keys[1]] {
		if err := s.idx.PutHash(h, p.off, ts); err != nil {
			d.indexFailed(err)
			return nil
		}
	}
	if d.indexDown && p.keys[1] > p.keys[0] {
		d.indexDown = false
		s.opts.Logger.Warn("store: the index is back: keys are indexed again", "unindexedMeanwhile", s.stats.unindexed.Load())
	}
	return nil
}

// refused reports whether a consume-queue append error is the queue refusing
// the entry (it conflicts with the stored one, leaves a gap, is invalid, or
// the queue was dropped), which no retry changes, rather than a failure to
// write it.
func refused(err error) bool {
	return errors.Is(err, consumequeue.ErrConflict) || errors.Is(err, consumequeue.ErrGap) ||
		errors.Is(err, consumequeue.ErrInvalidEntry) || errors.Is(err, consumequeue.ErrClosed) ||
		errors.Is(err, consumequeue.ErrOutOfRange) || errors.Is(err, consumequeue.ErrReadOnly)
}

// indexFailed counts a record whose keys could not be indexed and logs when
// the index becomes unavailable (not once per record: while no index file
// can be created, the index backs off and fails fast).
func (d *dispatcher) indexFailed(err error) {
	s := d.s
	s.stats.unindexed.Add(1)
	if !d.indexDown {
		d.indexDown = true
		s.stats.dispatchErrors.Add(1)
		s.opts.Logger.Warn("store: the index is unavailable: keys of new messages are not indexed until it is back", "err", err)
	}
}

// prepareKeys hashes the record's index keys (its UNIQ_KEY and each item of
// its space-separated KEYS) into d.hashes. A rolled-back transaction record
// is not indexed.
func (d *dispatcher) prepareKeys(p *pendingRecord, keys, uniq []byte) {
	p.keys[0] = len(d.hashes)
	p.keys[1] = len(d.hashes)
	if message.TxType(p.v.SysFlag()) == message.TxRollbackType {
		return
	}
	if len(uniq) > 0 {
		d.hashes = append(d.hashes, index.KeyHashAfter(p.t.keyHash, uniq))
	}
	for len(keys) > 0 {
		i := bytes.IndexByte(keys, ' ')
		var k []byte
		if i < 0 {
			k, keys = keys, nil
		} else {
			k, keys = keys[:i], keys[i+1:]
		}
		if len(k) > 0 {
			d.hashes = append(d.hashes, index.KeyHashAfter(p.t.keyHash, k))
		}
	}
	p.keys[1] = len(d.hashes)
}

func (d *dispatcher) topic(name []byte) *dispatchTopic {
	if t, ok := d.topics[string(name)]; ok {
		return t
	}
	t := &dispatchTopic{name: string(name), liteParent: liteParentTopic(string(name))}
	t.keyHash = index.TopicHash(t.name)
	d.topics[t.name] = t
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
	d.flushLiteArrival()
}
