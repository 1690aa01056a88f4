package store

import (
	"bytes"
	"errors"
	"sync"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/message"
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

	retry chan struct{} // a token asks the loop to run again (after a full disk)
}

// arrivalBatch bounds how many records a run dispatches before it reports
// arrivals, so a dispatcher that never catches up still wakes long polls.
const arrivalBatch = 256

// retryDelay is how long dispatch waits before retrying after a full disk.
const retryDelay = 100 * time.Millisecond

type dispatchTopic struct {
	name   string
	queues []*consumequeue.Queue
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
			d.run()
		}
	}
}

// run dispatches every record up to the written position.
func (d *dispatcher) run() {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.s
	n := 0
	for {
		rec, off, err := d.cursor.Next()
		if errors.Is(err, commitlog.ErrOffsetNotWritten) {
			break
		}
		if err != nil {
			if errors.Is(err, commitlog.ErrOffsetDeleted) {
				// Retention overtook the dispatcher (only possible if it was
				// stopped for days): resume at the log's start.
				d.cursor.Close()
				d.cursor = s.log.NewCursor(s.log.MinOffset())
				continue
			}
			s.stats.dispatchErrors.Add(1)
			s.opts.Logger.Error("store: dispatch stopped on an unreadable record", "offset", off, "err", err)
			break
		}
		if err := d.record(rec, off); err != nil {
			// Out of space for a consume-queue block: stop before this
			// record (nothing after it may be dispatched out of order) and
			// try again shortly; appends to the log go on meanwhile.
			d.cursor.Close()
			d.cursor = s.log.NewCursor(off)
			s.stats.dispatchStalls.Add(1)
			time.AfterFunc(retryDelay, func() {
				select {
				case d.retry <- struct{}{}:
				default:
				}
			})
			break
		}
		s.dispatched.Store(d.cursor.Offset())
		if n++; n%arrivalBatch == 0 {
			d.flushArrival()
		}
	}
	d.cursor.Close()
	d.flushArrival()
	s.stats.lastDispatch.Store(time.Now().UnixNano())
}

// record dispatches one record. It returns an error only when the record
// must be dispatched again later (the disk is full).
func (d *dispatcher) record(rec []byte, off int64) error {
	s := d.s
	v, err := message.Decode(rec, false)
	if err != nil {
		s.stats.dispatchErrors.Add(1)
		s.opts.Logger.Error("store: undecodable record in the commit log", "offset", off, "err", err)
		return nil
	}
	sys := v.SysFlag()
	t := d.topic(v.Topic())
	if message.Dispatchable(sys) {
		q := d.queue(t, v.QueueID())
		if q != nil {
			code, ok := int64(0), false
			if s.opts.TagCode != nil {
				code, ok = s.opts.TagCode(v)
			}
			if !ok {
				code = message.TagCode(v.Tags())
			}
			e := consumequeue.Entry{CommitLogOffset: off, Size: int32(v.TotalSize()), TagCode: code}
			if err := q.Append(v.QueueOffset(), e); err != nil {
				if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
					return err
				}
				s.stats.dispatchErrors.Add(1)
				s.opts.Logger.Error("store: consume-queue append failed", "topic", t.name, "queue", v.QueueID(), "queueOffset", v.QueueOffset(), "err", err)
			} else {
				d.arrived(q)
			}
		}
	}
	if message.TxType(sys) == message.TxRollbackType {
		return nil
	}
	ts := v.StoreTimestamp()
	if k := v.UniqKey(); len(k) > 0 {
		d.indexKey(t.name, k, off, ts)
	}
	keys := v.Keys()
	for len(keys) > 0 {
		i := bytes.IndexByte(keys, ' ')
		var k []byte
		if i < 0 {
			k, keys = keys, nil
		} else {
			k, keys = keys[:i], keys[i+1:]
		}
		if len(k) > 0 {
			d.indexKey(t.name, k, off, ts)
		}
	}
	return nil
}

func (d *dispatcher) indexKey(topic string, key []byte, off, ts int64) {
	if err := d.s.idx.PutBytes(topic, key, off, ts); err != nil {
		d.s.stats.dispatchErrors.Add(1)
		d.s.opts.Logger.Error("store: index put failed", "topic", topic, "offset", off, "err", err)
	}
}

func (d *dispatcher) topic(name []byte) *dispatchTopic {
	if t, ok := d.topics[string(name)]; ok {
		return t
	}
	t := &dispatchTopic{name: string(name)}
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
}
