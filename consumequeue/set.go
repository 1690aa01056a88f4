package consumequeue

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// Set is every consume queue under one root directory
// (<root>/<topic>/<queueId>/<files>). It is safe for concurrent use.
type Set struct {
	root     string
	opts     Options
	fs       vfs.FS
	fileSize int64

	mapped     atomic.Int64 // segments holding a cache reference on a mapping
	relieveMu  sync.Mutex   // one relieve at a time
	relieved   atomic.Int64 // relieve runs (MaxMappedFiles reached)
	writeFiles atomic.Int64 // segments holding their writer's file open (segment.wf)
	epoch      atomic.Int64 // unix nanos of the last Sweep (or of OpenSet)

	mu      sync.RWMutex
	queues  map[queueKey]*Queue
	damaged map[queueKey]error
	closed  bool
}

type queueKey struct {
	topic string
	id    int32
}

// DamagedQueue is a queue OpenSet found unusable. Err wraps ErrDamaged.
type DamagedQueue struct {
	Topic   string
	QueueID int32
	Err     error
}

// OpenSet opens (creating it if needed) the consume-queue directory root and
// recovers every queue in it cheaply: a directory listing per queue, plus a
// binary search and one bounded read at the end of each queue's last file to
// find its last valid entry (see the package doc). No file is mapped.
//
// Queues whose files are inconsistent do not make OpenSet fail: they are left
// out, listed by Damaged, and Queue returns ErrDamaged for them until
// DropQueue removes them, after which the store rebuilds them from the
// commitlog. OpenSet fails when the root cannot be read, or a queue's files
// cannot be listed, read or repaired: an I/O error proves nothing about the
// files, and dropping a queue whose records the commitlog no longer holds
// would lose its offsets.
func OpenSet(root string, opts Options) (*Set, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.ReadOnly {
		if _, err := o.FS.Stat(root); err != nil {
			return nil, fmt.Errorf("consumequeue: %w", err)
		}
	} else if err := durable.MkdirAll(o.FS, root, 0o755); err != nil {
		return nil, fmt.Errorf("consumequeue: %w", err)
	}
	s := &Set{
		root:     root,
		opts:     o,
		fs:       o.FS,
		fileSize: int64(o.EntriesPerFile) * EntrySize,
		queues:   make(map[queueKey]*Queue),
		damaged:  make(map[queueKey]error),
	}
	s.epoch.Store(time.Now().UnixNano())
	rec, err := s.takeCleanRecord()
	strict := err == nil
	if err != nil && !errors.Is(err, errNoCleanRecord) {
		return nil, err
	}
	// Read-only, every queue is checked strictly: what recovery would cut or
	// zero is reported as damage instead.
	if err := s.scan(strict || o.ReadOnly); err != nil {
		s.closeQueues()
		return nil, err
	}
	if strict {
		s.checkCleanRecord(rec)
	}
	return s, nil
}

// Root returns the set's directory.
func (s *Set) Root() string { return s.root }

// checkName rejects topic names that are not a single path element.
func checkName(topic string) error {
	if topic == "" || topic == "." || topic == ".." || strings.ContainsAny(topic, "/\\\x00") {
		return fmt.Errorf("consumequeue: invalid topic name %q", topic)
	}
	return nil
}

// Queue returns the queue topic/queueID, creating it if it does not exist (its
// directory is created on the first Append). ErrDamaged for a damaged queue
// until DropQueue.
func (s *Set) Queue(topic string, queueID int32) (*Queue, error) {
	k := queueKey{topic, queueID}
	s.mu.RLock()
	q, closed := s.queues[k], s.closed
	s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if q != nil {
		return q, nil
	}
	if err := checkName(topic); err != nil {
		return nil, err
	}
	if queueID < 0 {
		return nil, fmt.Errorf("consumequeue: invalid queue id %d", queueID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if err := s.damaged[k]; err != nil {
		return nil, err
	}
	if q = s.queues[k]; q == nil {
		if s.opts.ReadOnly {
			return nil, fmt.Errorf("consumequeue: %s/%d: no such queue (read-only set)", topic, queueID)
		}
		q = newQueue(s, topic, queueID)
		s.queues[k] = q
	}
	return q, nil
}

// Lookup returns an existing queue.
func (s *Set) Lookup(topic string, queueID int32) (*Queue, bool) {
	s.mu.RLock()
	q := s.queues[queueKey{topic, queueID}]
	s.mu.RUnlock()
	return q, q != nil
}

// snapshot returns the queues sorted by topic and id.
func (s *Set) snapshot() []*Queue {
	s.mu.RLock()
	qs := make([]*Queue, 0, len(s.queues))
	for _, q := range s.queues {
		qs = append(qs, q)
	}
	s.mu.RUnlock()
	slices.SortFunc(qs, func(a, b *Queue) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return qs
}

// ForEach calls fn for every queue, in topic then id order, until it returns
// false. fn runs without the set's lock held and may call the set.
func (s *Set) ForEach(fn func(topic string, queueID int32, q *Queue) bool) {
	for _, q := range s.snapshot() {
		if !fn(q.topic, q.id, q) {
			return
		}
	}
}

// Damaged lists the queues OpenSet found damaged and that were not dropped yet.
func (s *Set) Damaged() []DamagedQueue {
	s.mu.RLock()
	out := make([]DamagedQueue, 0, len(s.damaged))
	for k, err := range s.damaged {
		out = append(out, DamagedQueue{Topic: k.topic, QueueID: k.id, Err: err})
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b DamagedQueue) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return cmp.Compare(a.QueueID, b.QueueID)
	})
	return out
}

// MaxCommitLogEnd returns the largest End() of any queue's last entry: the
// commitlog position re-dispatch must resume from at least. 0 when empty.
func (s *Set) MaxCommitLogEnd() int64 {
	var end int64
	for _, q := range s.snapshot() {
		end = max(end, q.lastEnd.Load())
	}
	return end
}

// TruncateAfter truncates every queue after commitLogEnd (see Queue.TruncateAfter).
func (s *Set) TruncateAfter(commitLogEnd int64) error {
	var errs []error
	for _, q := range s.snapshot() {
		if err := q.TruncateAfter(commitLogEnd); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DeleteBelow is the cleanup after the commitlog dropped segments below
// minCommitLogOffset: every queue removes its leading files whose every entry
// points below it (never its last file) and advances its MinOffset to its
// first entry at or above it. MinOffset is not persisted in between: call
// DeleteBelow once after OpenSet as well. It returns the number of files removed.
func (s *Set) DeleteBelow(minCommitLogOffset int64) (int, error) {
	total := 0
	var errs []error
	for _, q := range s.snapshot() {
		n, err := q.deleteBelow(minCommitLogOffset)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// DropQueue removes a queue (damaged or not) and its directory. A *Queue
// obtained earlier is closed: its methods return ErrClosed; readers holding a
// mapping finish safely. Dropping a queue that does not exist is not an error.
func (s *Set) DropQueue(topic string, queueID int32) error {
	k := queueKey{topic, queueID}
	s.mu.Lock()
	q := s.queues[k]
	delete(s.queues, k)
	delete(s.damaged, k)
	s.mu.Unlock()
	if err := checkName(topic); err != nil {
		return err
	}
	var errs []error
	if q != nil {
		errs = append(errs, q.close(true))
	}
	dir := filepath.Join(s.root, topic, strconv.FormatInt(int64(queueID), 10))
	if err := s.fs.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("consumequeue: %w", err))
	}
	errs = append(errs, s.syncDir(filepath.Dir(dir)))
	return errors.Join(errs...)
}

// DeleteTopic drops every queue of topic and removes its directory.
func (s *Set) DeleteTopic(topic string) error {
	if err := checkName(topic); err != nil {
		return err
	}
	s.mu.RLock()
	var ids []int32
	for k := range s.queues {
		if k.topic == topic {
			ids = append(ids, k.id)
		}
	}
	for k := range s.damaged {
		if k.topic == topic {
			ids = append(ids, k.id)
		}
	}
	s.mu.RUnlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, s.DropQueue(topic, id))
	}
	if err := s.fs.RemoveAll(filepath.Join(s.root, topic)); err != nil {
		errs = append(errs, fmt.Errorf("consumequeue: %w", err))
	}
	errs = append(errs, s.syncDir(s.root))
	return errors.Join(errs...)
}

// Flush makes every queue's new entries durable (see Queue.Flush). The store
// calls it about once a second and at close; entries lost in a crash are
// rebuilt from the commitlog.
func (s *Set) Flush() error { return s.FlushDirty(0) }

// FlushDirty is Flush restricted to queues with at least leastEntries
// unflushed entries (and to queues whose directory is new): RocketMQ flushes
// consume queues every second only where two pages are dirty, so thousands of
// barely-written queues do not cost a sync each per second.
func (s *Set) FlushDirty(leastEntries int64) error {
	var errs []error
	var created []*Queue
	parents := map[string]bool{}
	for _, q := range s.snapshot() {
		newDir, err := q.flush(leastEntries)
		if err != nil {
			errs = append(errs, err)
		}
		if newDir {
			created = append(created, q)
			parents[filepath.Dir(q.dir)] = true
		}
	}
	if len(created) > 0 {
		var err error
		for d := range parents {
			if err = s.syncDir(d); err != nil {
				break
			}
		}
		if err == nil {
			err = s.syncDir(s.root)
		}
		if err != nil {
			errs = append(errs, err)
			for _, q := range created {
				q.newDir.Store(true)
			}
		}
	}
	return errors.Join(errs...)
}

// Sweep unmaps files that nobody touched for IdleUnmap, and closes those the
// set held open for the writer. A file counts as idle from the first Sweep
// that finds it untouched, so the measure has the resolution of the Sweep
// interval. Readers still holding an unmapped file's mapping keep it until
// they release it; the next access maps it again.
func (s *Set) Sweep(now time.Time) {
	idle := int64(s.opts.IdleUnmap)
	if idle < 0 {
		return
	}
	t := now.UnixNano()
	s.epoch.Store(t)
	for _, q := range s.snapshot() {
		for _, sg := range q.segs.Load().segs {
			s.sweep(sg, t, idle)
		}
	}
}

// WriteFiles returns the number of files the set holds open for the writer's
// cold-page writes: tails being written, at most 1,024, until Sweep finds them
// idle.
func (s *Set) WriteFiles() int { return int(s.writeFiles.Load()) }

// Relieved counts the times the set unmapped files early because
// MaxMappedFiles was reached.
func (s *Set) Relieved() int64 { return s.relieved.Load() }

// MappedFiles returns the number of files the set currently holds mapped.
// (A file unmapped by Sweep or deleted while a reader still holds its mapping
// is no longer counted; it goes away when that reader releases it.)
func (s *Set) MappedFiles() int { return int(s.mapped.Load()) }

// Close flushes every queue, records every queue's max offset for the next
// OpenSet to check (the clean-shutdown record) and drops the set's mappings.
// Queues obtained from the set return ErrClosed afterwards. Do not call it
// while Append runs.
func (s *Set) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.opts.ReadOnly {
		s.closeQueues()
		return nil
	}
	qs := s.snapshot()
	err := s.Flush()
	if err == nil {
		// Everything is flushed: record where each queue ends, for the
		// next OpenSet to check the files against.
		err = s.writeCleanRecord(qs)
	}
	errs := []error{err}
	for _, q := range qs {
		errs = append(errs, q.close(false))
	}
	return errors.Join(errs...)
}

// closeQueues closes the set without a clean-shutdown record (a failed
// OpenSet, or a read-only set).
func (s *Set) closeQueues() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, q := range s.snapshot() {
		q.close(false)
	}
}

// syncDir fsyncs a directory of the set (see durable.SyncDir). A directory
// that is gone (its queue or topic dropped meanwhile) needs no sync.
func (s *Set) syncDir(dir string) error {
	err := durable.SyncDir(s.fs, dir)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("consumequeue: %w", err)
}
