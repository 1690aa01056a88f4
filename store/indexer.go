package store

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/message"
)

// indexer turns committed records into index entries (UNIQ_KEY and every KEYS
// item), in commit-log order, on a goroutine of its own beside the
// dispatcher. The two read the same records with separate cursors: the index
// slot of a random key is a cache miss the consume-queue path need not wait
// for, and with thousands of queues the two together were the engine's
// bottleneck. Only the consume queues decide visibility to Get; the index is
// for queries by key, which are eventually consistent as in RocketMQ.
// Store.dispatched is the lower of the two positions.
type indexer struct {
	s      *Store
	mu     sync.Mutex // serialises run (the loop vs Open's and Close's catch-up)
	cursor *commitlog.Cursor
	done   atomic.Int64      // every record below is indexed
	names  map[string]string // interned topic names; m[string(b)] does not allocate
	wake   chan struct{}     // capacity 1: the dispatcher's "more was dispatched"
}

func (x *indexer) init(s *Store, from int64) {
	x.s = s
	if x.cursor != nil {
		x.cursor.Close()
	}
	x.cursor = s.log.NewCursor(from)
	x.done.Store(from)
	if x.names == nil {
		x.names = map[string]string{}
	}
	if x.wake == nil {
		x.wake = make(chan struct{}, 1)
	}
}

func (x *indexer) loop() {
	defer x.s.wg.Done()
	for {
		select {
		case <-x.s.stop:
			return
		case <-x.wake:
			x.run()
		}
	}
}

// kick asks the loop to run; it never blocks.
func (x *indexer) kick() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// run indexes every record up to the written position.
func (x *indexer) run() {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.s
	n := 0
	for {
		rec, off, err := x.cursor.Next()
		if errors.Is(err, commitlog.ErrOffsetNotWritten) {
			break
		}
		if err != nil {
			if errors.Is(err, commitlog.ErrOffsetDeleted) {
				x.cursor.Close()
				x.cursor = s.log.NewCursor(s.log.MinOffset())
				continue
			}
			// The dispatcher reports the same record and stops there too.
			break
		}
		x.record(rec, off)
		x.done.Store(x.cursor.Offset())
		if n++; n%arrivalBatch == 0 {
			s.advanceDispatched()
		}
	}
	x.cursor.Close()
	s.advanceDispatched()
}

// record indexes one record. Index errors are counted and logged, not
// retried: a missing index entry costs a query, never a message.
func (x *indexer) record(rec []byte, off int64) {
	v, err := message.Decode(rec, false)
	if err != nil {
		return // the dispatcher counts and logs it
	}
	if message.TxType(v.SysFlag()) == message.TxRollbackType {
		return
	}
	topic := x.name(v.Topic())
	ts := v.StoreTimestamp()
	if k := v.UniqKey(); len(k) > 0 {
		x.put(topic, k, off, ts)
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
			x.put(topic, k, off, ts)
		}
	}
}

func (x *indexer) put(topic string, key []byte, off, ts int64) {
	if err := x.s.idx.PutBytes(topic, key, off, ts); err != nil {
		x.s.stats.dispatchErrors.Add(1)
		x.s.opts.Logger.Error("store: index put failed", "topic", topic, "offset", off, "err", err)
	}
}

func (x *indexer) name(b []byte) string {
	if n, ok := x.names[string(b)]; ok {
		return n
	}
	n := string(b)
	x.names[n] = n
	return n
}

// forget drops an interned topic name.
func (x *indexer) forget(topic string) {
	x.mu.Lock()
	delete(x.names, topic)
	x.mu.Unlock()
}
