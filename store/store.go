package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apogeemq/apogee/internal/logthrottle"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/index"
	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/litequeue"
	"github.com/apogeemq/apogee/message"
)

// Sentinel errors callers branch on.
var (
	ErrClosed          = errors.New("store: closed")
	ErrMessageTooLarge = errors.New("store: message body too large")
	ErrBadMessage      = errors.New("store: malformed message")
	// ErrLocked: another process holds the data directory.
	ErrLocked = errors.New("store: data directory is locked by another process")
	// ErrOffsetOutOfRange: ReadEntries was asked for entries below a queue's
	// min offset (cleaned up by retention).
	ErrOffsetOutOfRange = errors.New("store: queue offset out of range")
)

// Store is the message store. Its methods are safe for concurrent use.
type Store struct {
	opts Options
	log  *commitlog.Log
	cqs  *consumequeue.Set
	idx  *index.Index
	lq   *litequeue.Index // lite topics (lite.go)
	lock io.Closer

	// counters assign queue offsets; each counter's next field is only
	// touched inside the commit log's append critical section.
	counters counterTable

	dispatched atomic.Int64 // everything below is in the consume queues and the index
	liteMin    atomic.Int64 // the log minimum the lite-topic index's retention last applied
	dispatch   dispatcher
	lag        lagGate // Put waits here while the dispatcher is too far behind
	ckpt       *storeCheckpoint

	putPool sync.Pool // *putBatch

	// replica is the current mode (Options.Replica at Open, then
	// SetReplica): Put refuses while it is set. roleMu serialises
	// SetReplica.
	replica atomic.Bool
	roleMu  sync.Mutex

	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup

	// testWaitHook, when set (tests), sees the end and the deadline of
	// every durability wait as it begins.
	testWaitHook atomic.Pointer[func(end int64, deadline time.Time)]

	stats          counters
	badEntryLogged atomic.Int64 // unix nanos of the last bad-entry report
	diskFull       atomic.Bool  // the last append failed for lack of space
	scrubMu        sync.Mutex   // one scrub pass at a time
	durable        durableNotifier
	repl           replicaSet // the replicas' acknowledgements (a master's)
	// ckptMu serialises the checkpoint's writes (flushDerived) with
	// TruncateReplica, which lowers the dispatched offset.
	ckptMu sync.Mutex
}

// writesRefused records that an append failed for lack of space, logging the
// change of state once.
func (s *Store) writesRefused(err error) {
	s.stats.diskFullRefusals.Add(1)
	if !s.diskFull.Swap(true) {
		s.opts.Logger.Warn("store: disk full: refusing writes until space returns", "dir", s.opts.Dir, "err", err)
	}
}

// writesAccepted records that appends succeed again after a full disk.
func (s *Store) writesAccepted() {
	if s.diskFull.Swap(false) {
		s.opts.Logger.Warn("store: disk space is back: accepting writes again", "dir", s.opts.Dir,
			"refusedMeanwhile", s.stats.diskFullRefusals.Load())
	}
}

// Open opens (or creates) the store in opts.Dir and recovers it. The
// returned Recovery describes what the commit log's recovery did.
func Open(opts Options) (*Store, commitlog.Recovery, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, commitlog.Recovery{}, err
	}
	// Durably: a power loss must not take the store's directory, and
	// every synced file under it with it.
	if err := durable.MkdirAll(o.FS, o.Dir, 0o755); err != nil {
		return nil, commitlog.Recovery{}, fmt.Errorf("store: create %s: %w", o.Dir, err)
	}
	lock, err := lockDir(o.FS, o.Dir)
	if err != nil {
		return nil, commitlog.Recovery{}, err
	}
	s := &Store{opts: o, lock: lock, stop: make(chan struct{})}
	s.repl.need.Store(int64(o.SyncReplicas))
	s.repl.confirmed = make(chan struct{}, 1)
	s.repl.maxGap = o.MaxReplicaGap
	s.counters.init()
	rep, err := s.recover()
	if err != nil {
		s.closeParts()
		lock.Close()
		return nil, rep, err
	}
	if o.Replica {
		s.replica.Store(true)
		s.log.RefuseAppends(true)
	}
	s.dispatch.init(s)
	s.lag.init(max(o.MaxDispatchLag, 0), s.log, &s.dispatched)
	s.durable.init(s)
	s.wg.Add(3)
	go s.dispatch.loop()
	go s.maintain()
	go s.durable.loop()
	if o.ScrubRate > 0 {
		s.wg.Add(1)
		go s.scrubLoop()
	}
	return s, rep, nil
}

// lockDir takes an exclusive lock on <dir>/lock, held while the store is open.
func lockDir(fsys vfs.FS, dir string) (io.Closer, error) {
	l, err := fsys.Lock(filepath.Join(dir, "lock"))
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("store: lock %s: %w", dir, err)
	}
	return l, nil
}

// Log returns the commit log, for the store's own benchmarks and tools that
// measure the log alone; the broker uses the store's own API (WaitDurable,
// OnDurable, View, the re-exported errors) and never this.
func (s *Store) Log() *commitlog.Log { return s.log }

// WrittenOffset is the commit-log offset just past the last stored message
// (RocketMQ's max physical offset).
func (s *Store) WrittenOffset() int64 { return s.log.WrittenOffset() }

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.opts.Dir }

// Message is what Put stores. Properties are already encoded
// (message.AppendProperty); Body is stored as given.
type Message struct {
	Topic                     string
	QueueID                   int32
	Flag                      int32
	SysFlag                   int32
	BornTimestamp             int64
	BornHost                  netip.AddrPort
	ReconsumeTimes            int32
	PreparedTransactionOffset int64
	Body                      []byte
	Properties                []byte
	// NoWait skips the flush wait in sync mode (the WAIT=false property).
	NoWait bool
}

// PutStatus is the outcome of a stored message.
type PutStatus int

const (
	// StatusOK: stored (and flushed, in sync mode).
	StatusOK PutStatus = iota
	// StatusFlushDiskTimeout: stored, but the sync did not complete within
	// SyncFlushTimeout. The broker answers FLUSH_DISK_TIMEOUT (10).
	StatusFlushDiskTimeout
	// StatusFlushSlaveTimeout: stored, but the replicas Options.SyncReplicas
	// asks for did not acknowledge it within SyncFlushTimeout
	// (ErrReplicaTimeout). The broker answers FLUSH_SLAVE_TIMEOUT (12).
	StatusFlushSlaveTimeout
	// StatusSlaveNotAvailable: stored, but too few replicas were in sync to
	// wait for (ErrReplicaNotAvailable). The broker answers
	// SLAVE_NOT_AVAILABLE (11).
	StatusSlaveNotAvailable
)

// PutResult describes one stored message.
type PutResult struct {
	Status          PutStatus
	QueueID         int32
	QueueOffset     int64 // -1 for prepared or rolled-back transaction records
	CommitLogOffset int64
	Size            int32
	StoreTimestamp  int64
}

// AppendMsgID appends the message's offset message id (32 or 56 hex chars).
func (s *Store) AppendMsgID(dst []byte, r *PutResult) []byte {
	return message.AppendOffsetMsgID(dst, s.opts.StoreHost, r.CommitLogOffset)
}

// StoreHost is the host written into records.
func (s *Store) StoreHost() netip.AddrPort { return s.opts.StoreHost }

// putBatch is the pooled state of one Put: the encode buffer, the queue
// counters of its records, and the results. It is the commit log's Assigner.
type putBatch struct {
	buf      []byte
	counters []*queueCounter
	sysflags []int32
	qoffs    []int64
	i        int
	res      commitlog.Result
}

// Assign runs inside the commit log's critical section, once per record.
func (b *putBatch) Assign(rec []byte, _ int64) {
	i := b.i
	b.i++
	if !message.Dispatchable(b.sysflags[i]) {
		b.qoffs = append(b.qoffs, -1)
		return
	}
	c := b.counters[i]
	message.SetQueueOffset(rec, c.next)
	b.qoffs = append(b.qoffs, c.next)
	c.next++
}

func (b *putBatch) reset() {
	b.buf = b.buf[:0]
	b.counters = b.counters[:0]
	b.sysflags = b.sysflags[:0]
	b.qoffs = b.qoffs[:0]
	b.i = 0
	b.res.Offsets = b.res.Offsets[:0]
}

// counter returns the queue-offset counter of (topic, queueID), creating it.
func (s *Store) counter(topic string, queueID int32) *queueCounter {
	return s.counters.get(topic, queueID)
}

// Put stores one message. Unless m.NoWait, it returns once the message is
// durable (WaitDurable: flushed in sync flush mode, acknowledged by
// Options.SyncReplicas replicas), or reports in the status why it is stored
// but not durable. On a replica it fails with ErrReplica.
func (s *Store) Put(m *Message) (PutResult, error) {
	var r [1]PutResult
	_, err := s.PutBatch(unsafe.Slice(m, 1), r[:0])
	return r[0], err
}

// PutBatch stores msgs as one unit: one commit-log append, in one segment,
// with consecutive offsets; results are appended to res, one per message.
func (s *Store) PutBatch(msgs []Message, res []PutResult) ([]PutResult, error) {
	if s.closed.Load() {
		return res, ErrClosed
	}
	if s.replica.Load() {
		return res, ErrReplica
	}
	if len(msgs) == 0 {
		return res, fmt.Errorf("%w: empty batch", ErrBadMessage)
	}
	s.lag.wait()
	b := s.getBatch()
	defer s.putPool.Put(b)
	var rec message.Record
	for i := range msgs {
		m := &msgs[i]
		if len(m.Body) > s.opts.MaxMessageSize {
			return res, fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(m.Body), s.opts.MaxMessageSize)
		}
		if m.Topic == "" || m.QueueID < 0 {
			return res, fmt.Errorf("%w: topic %q queue %d", ErrBadMessage, m.Topic, m.QueueID)
		}
		// The commit log's recovery takes a zero byte in a topic or in
		// properties for a sector a power loss tore (commitlog/torn.go).
		if strings.IndexByte(m.Topic, 0) >= 0 || bytes.IndexByte(m.Properties, 0) >= 0 {
			return res, fmt.Errorf("%w: a zero byte in the topic or properties", ErrBadMessage)
		}
		rec = message.Record{
			Topic: m.Topic, QueueID: m.QueueID, Flag: m.Flag, SysFlag: m.SysFlag,
			BornTimestamp: m.BornTimestamp, BornHost: m.BornHost, StoreHost: s.opts.StoreHost,
			ReconsumeTimes: m.ReconsumeTimes, PreparedTransactionOffset: m.PreparedTransactionOffset,
			Body: m.Body, Properties: m.Properties,
		}
		var err error
		if b.buf, err = message.AppendRecord(b.buf, &rec); err != nil {
			return res, fmt.Errorf("%w: %w", ErrBadMessage, err)
		}
		b.counters = append(b.counters, s.counter(m.Topic, m.QueueID))
		b.sysflags = append(b.sysflags, rec.SysFlag)
	}
	if err := s.log.Append(b.buf, b, &b.res); err != nil {
		if errors.Is(err, commitlog.ErrAppendsRefused) {
			// SetReplica(true) began after the check above.
			return res, ErrReplica
		}
		s.stats.putErrors.Add(1)
		switch {
		case errors.Is(err, commitlog.ErrDiskFull):
			s.writesRefused(err)
		case errors.Is(err, commitlog.ErrClosed):
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return res, err
	}
	if s.diskFull.Load() {
		s.writesAccepted()
	}
	status := StatusOK
	if !msgs[0].NoWait {
		if err := s.waitDurable(b.res.End, true); err != nil {
			switch {
			case errors.Is(err, ErrReplicaNotAvailable):
				status = StatusSlaveNotAvailable
			case errors.Is(err, ErrReplicaTimeout):
				status = StatusFlushSlaveTimeout
			case errors.Is(err, ErrFlushTimeout):
				status = StatusFlushDiskTimeout
			default:
				s.stats.putErrors.Add(1)
				return res, err
			}
		}
	}
	off := 0
	for i := range msgs {
		size := int32(message.ReadTotalSize(b.buf[off:]))
		off += int(size)
		res = append(res, PutResult{
			Status: status, QueueID: msgs[i].QueueID, QueueOffset: b.qoffs[i],
			CommitLogOffset: b.res.Offsets[i], Size: size, StoreTimestamp: b.res.StoreTimestamp,
		})
	}
	s.stats.puts.Add(int64(len(msgs)))
	s.stats.putBytes.Add(int64(len(b.buf)))
	return res, nil
}

func (s *Store) getBatch() *putBatch {
	if v := s.putPool.Get(); v != nil {
		b := v.(*putBatch)
		b.reset()
		return b
	}
	return &putBatch{}
}

// Close stops the dispatcher after it caught up, flushes everything, writes
// the checkpoint, removes the abort marker and releases the directory lock.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	s.lag.close()
	close(s.stop)
	s.wg.Wait()
	// Dispatch whatever the loop had not reached.
	s.dispatch.run()
	var errs []error
	if err := s.flushDerived(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, s.closeParts()...)
	if len(errs) == 0 {
		if err := s.opts.FS.Remove(filepath.Join(s.opts.Dir, abortName)); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	s.lock.Close()
	return errors.Join(errs...)
}

func (s *Store) closeParts() []error {
	var errs []error
	if s.lq != nil {
		if err := s.lq.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.idx != nil {
		if err := s.idx.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cqs != nil {
		if err := s.cqs.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.log != nil {
		if err := s.log.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.ckpt != nil {
		s.ckpt.close()
	}
	return errs
}

// flushDerived flushes the consume queues and the index and records the
// dispatched offset they cover in the checkpoint.
func (s *Store) flushDerived() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	d := s.dispatched.Load()
	if err := s.cqs.Flush(); err != nil {
		return err
	}
	if err := s.idx.Flush(); err != nil {
		return err
	}
	if err := s.lq.Flush(); err != nil {
		return err
	}
	return s.ckpt.write(d)
}

// leastDirtyEntries is two 4 KiB pages of consume-queue entries.
const leastDirtyEntries = 2 * 4096 / 20

// flushDirty flushes consume queues with at least two dirty pages and the
// lite index. The hash index is left to flushDerived (every
// CheckpointInterval) and to the index itself (a full file is synced before
// the next starts), as RocketMQ's IndexService does: its slot table takes a
// random 4-byte store per message, so every msync write-protects pages that
// the next second's messages fault writable again (at 30,000 msgs/s about
// one fault per ten messages when it was flushed every second). Nothing
// depends on it sooner: the checkpoint's dispatched offset, written only
// after the index is flushed, bounds what a restart re-indexes.
func (s *Store) flushDirty() error {
	if err := s.cqs.FlushDirty(leastDirtyEntries); err != nil {
		return err
	}
	return s.lq.Flush()
}

// maintain flushes derived files every FlushInterval (everything, with the
// checkpoint, every CheckpointInterval) and cleans up every CleanInterval.
func (s *Store) maintain() {
	defer s.wg.Done()
	flush := time.NewTicker(s.opts.FlushInterval)
	defer flush.Stop()
	lastCheckpoint := time.Now()
	var clean <-chan time.Time
	if s.opts.CleanInterval > 0 {
		t := time.NewTicker(s.opts.CleanInterval)
		defer t.Stop()
		clean = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case now := <-flush.C:
			var err error
			if now.Sub(lastCheckpoint) >= s.opts.CheckpointInterval {
				lastCheckpoint = now
				err = s.flushDerived()
			} else {
				err = s.flushDirty()
			}
			if err != nil {
				flushLogs.Error(s.opts.Logger, fmt.Sprintf("%p|flush", s), "store: flush of consume queues and index failed (disk full or failing?); retried at the next flush", "err", err)
			} else {
				flushLogs.Clear(fmt.Sprintf("%p|flush", s))
			}
			s.cqs.Sweep(now)
		case <-clean:
			if _, err := s.Clean(); err != nil {
				flushLogs.Error(s.opts.Logger, fmt.Sprintf("%p|clean", s), "store: cleanup failed; retried at the next one", "err", err)
			}
		}
	}
}

// flushLogs throttles the background flusher's and cleaner's failures
// (one per tick, for as long as the disk fails): one line per store and
// task a minute, with the count of the ones held back.
var flushLogs = logthrottle.New(time.Minute)

// Clean deletes expired commit-log segments, then what replica
// truncations and restarts kept past their retention
// (commitlog.Log.RetainTruncated), then consume-queue files and index files
// wholly below the log's new minimum offset. It returns the number
// of commit-log segments removed.
func (s *Store) Clean() (int, error) {
	removed, err := s.log.RetainBelow(s.dispatched.Load())
	n := len(removed)
	for _, r := range removed {
		if r.Pressure {
			s.stats.pressureDeletes.Add(1)
			s.opts.Logger.Warn("store: commit-log segment deleted before its retention time: the disk is too full",
				"from", r.Base, "to", r.End, "diskUsage", fmt.Sprintf("%.1f%%", 100*r.Usage),
				"limit", fmt.Sprintf("%.1f%%", 100*s.opts.DiskUsageRatio))
		} else {
			s.opts.Logger.Info("store: expired commit-log segment deleted", "from", r.Base, "to", r.End)
		}
	}
	if err != nil {
		return n, err
	}
	kept, err := s.log.RetainTruncated()
	for _, k := range kept {
		why := "older than the truncation retention"
		if !k.Expired {
			why = "over the truncation size limit"
		}
		s.opts.Logger.Info("store: removed what a replica's truncation or restart kept: "+why, "path", k.Path, "bytes", k.Bytes, "written", k.Time)
	}
	if err != nil {
		return n, err
	}
	min := s.log.MinOffset()
	if _, err := s.cqs.DeleteBelow(min); err != nil {
		return n, err
	}
	if _, err := s.idx.DeleteBefore(min); err != nil {
		return n, err
	}
	if err := s.liteDeleteBelow(min); err != nil {
		return n, err
	}
	return n, nil
}
