package store

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apogeemq/apogee/commitlog"
)

// The commit log's errors callers of the store branch on, re-exported so that
// they need not import the commit log.
var (
	// ErrDiskFull: the message could not be stored for lack of disk space;
	// nothing changed, and puts succeed again once space returns.
	ErrDiskFull = commitlog.ErrDiskFull
	// ErrLogFailed: a sync of the commit log failed. It is sticky: nobody
	// knows what reached the disk, so every later put and durability wait
	// fails until the process restarts.
	ErrLogFailed = commitlog.ErrLogFailed
	// ErrFlushTimeout: a durability wait gave up after
	// Options.SyncFlushTimeout. The message is stored and may still become
	// durable (RocketMQ's FLUSH_DISK_TIMEOUT).
	ErrFlushTimeout = commitlog.ErrFlushTimeout
	// ErrRecordTooLarge: a message or batch larger than a segment allows.
	ErrRecordTooLarge = commitlog.ErrRecordTooLarge
)

// View is a zero-copy view of bytes in the commit log (a record, for Get,
// ReadMessage and QueryByKey). The bytes stay valid until Release; release a
// View exactly once.
type View struct{ v commitlog.View }

// Bytes returns the viewed bytes. Do not modify them, and do not use them
// after Release.
func (v View) Bytes() []byte { return v.v.Bytes() }

// Release unpins the commit-log segment the view points into.
func (v View) Release() { v.v.Release() }

// Durability. A stored message is durable when the flush mode says so (in
// sync mode once a sync of the commit log covers it, in async mode at once:
// the page cache holds it, and a machine crash may lose what was not synced,
// see docs/crash-safety.md) and, with Options.SyncReplicas, once that many
// replicas acknowledged it (docs/replication.md says what a replica's
// acknowledgement means). Everything below DurableOffset is durable.
// Callers wait through WaitDurable or OnDurable only, never on the log.
//
// Replicas are required only of a master: on a replica (IsReplica) a
// message is durable once its flush mode says so, whatever SyncReplicas or
// SetInSyncReplicas say (they apply again once it is promoted). The one
// exception is a wait for what Put stored while the store was a master
// (PutBatch's own wait, OnDurable, WaitPutDurable): a demotion does not
// make it durable, and the wait still needs the replicas (which fail it
// with ErrReplicaNotAvailable once they are gone).

// replicasNeeded reports whether a durability wait needs replicas: some are
// required, and the store is a master or the wait is for what Put stored
// as one (put).
func (s *Store) replicasNeeded(put bool) bool {
	return s.repl.need.Load() > 0 && (put || !s.replica.Load())
}

// DurableOffset is the commit-log offset below which every message is
// durable: the flushed offset in sync mode (the written one in async mode),
// and, on a master, no further than ReplicatedOffset when replicas are
// required.
func (s *Store) DurableOffset() int64 { return s.durableOffset(false) }

func (s *Store) durableOffset(put bool) int64 {
	d := s.log.WrittenOffset()
	if s.log.FlushMode() == FlushSync {
		d = s.log.FlushedOffset()
	}
	if s.replicasNeeded(put) {
		d = min(d, s.repl.replicated.Load())
	}
	return d
}

// DurableWaits reports whether a durability wait can block: in sync flush
// mode, or on a master when replicas are required. Otherwise every stored
// message is durable at once and Put's callers need not wait. It changes
// with SetReplica and SetInSyncReplicas.
func (s *Store) DurableWaits() bool {
	return s.log.FlushMode() == FlushSync || s.replicasNeeded(false)
}

// WaitDurable blocks until everything below end (a PutResult's
// CommitLogOffset + Size) is durable, within Options.SyncFlushTimeout. It
// returns nil, or why the messages are stored but not durable:
// ErrReplicaNotAvailable (checked first, without waiting for replicas, when
// too few are in sync), ErrReplicaTimeout, ErrFlushTimeout (a replica error
// wins over it, as in RocketMQ); or the sticky ErrLogFailed, or ErrClosed.
// The local flush is waited for in every case. Without sync flush or
// replicas it returns nil at once. On a replica it waits for the flush
// alone (a replica's acknowledgements, package ha); a master's callers of
// Put with NoWait use WaitPutDurable.
func (s *Store) WaitDurable(end int64) error { return s.waitDurable(end, false) }

// WaitPutDurable is WaitDurable for messages Put stored on this store as a
// master (a send answered once durable): the replicas it requires are
// waited for even if the store became a replica since (SetReplica), so a
// demotion never passes an unreplicated message for a durable one.
func (s *Store) WaitPutDurable(end int64) error { return s.waitDurable(end, true) }

func (s *Store) waitDurable(end int64, put bool) error {
	if s.log.FlushMode() != FlushSync && !s.replicasNeeded(put) && s.testWaitHook.Load() == nil {
		return nil // nothing to wait for: no clock read on the async send path
	}
	return s.waitDurableUntil(end, put, time.Now().Add(s.opts.SyncFlushTimeout))
}

// waitDurableUntil is waitDurable bounded by deadline: both the flush and
// the replicas' acknowledgement must come by then (the bound of the whole
// wait, as Options.SyncFlushTimeout documents).
func (s *Store) waitDurableUntil(end int64, put bool, deadline time.Time) error {
	if h := s.testWaitHook.Load(); h != nil {
		(*h)(end, deadline)
	}
	repl := s.replicasNeeded(put) && s.repl.replicated.Load() < end
	var rerr error
	if repl {
		rerr = s.repl.available(end)
	}
	var ferr error
	if s.log.FlushMode() == FlushSync {
		if ferr = s.log.WaitFlushedUntil(end, deadline); ferr != nil && !errors.Is(ferr, ErrFlushTimeout) {
			if errors.Is(ferr, commitlog.ErrClosed) {
				ferr = fmt.Errorf("%w: %w", ErrClosed, ferr)
			}
			return ferr
		}
	}
	if repl && rerr == nil {
		rerr = s.repl.wait(end, deadline, s.stop)
	}
	if rerr != nil {
		return rerr
	}
	return ferr
}

// DurableWaiter is told when what it waits for is durable.
type DurableWaiter interface {
	// Durable is called once: with nil when everything below the offset it
	// waited for is durable, or with the error that ended the wait
	// (ErrFlushTimeout, ErrLogFailed, ErrClosed). It runs on the store's
	// durability goroutine and must not block.
	Durable(err error)
}

// OnDurable arranges for w.Durable to be called once everything below end is
// durable, without holding a goroutine per waiter: one goroutine waits for the
// sync that covers the earliest pending end and then tells every waiter the
// synced offset covers, in the order they were added (one sync serves them
// all, as the commit log's group commit does). When end is durable already
// (always in async mode without replicas) w is told at once, on the
// caller's goroutine. After Close it is told ErrClosed. It is for what Put
// stored: as WaitPutDurable, it needs the replicas the store required as a
// master even after a demotion.
//
// Each call's bound is its own: Options.SyncFlushTimeout from the call,
// whatever the waits of the calls before it (a waiter added while the
// goroutine waits for earlier ones is told ErrFlushTimeout or
// ErrReplicaTimeout at its own deadline, not one wait later). A wait that
// fails otherwise (ErrReplicaNotAvailable, ErrLogFailed, ErrClosed) fails
// every waiter pending at that moment.
func (s *Store) OnDurable(end int64, w DurableWaiter) {
	if s.durableOffset(true) >= end {
		w.Durable(nil)
		return
	}
	s.durable.add(end, time.Now().Add(s.opts.SyncFlushTimeout), w)
}

// durableWaiter is one OnDurable call: what it waits for, and until when.
type durableWaiter struct {
	end      int64
	deadline time.Time
	w        DurableWaiter
}

// durableNotifier runs OnDurable's waits: one goroutine (loop), woken by
// add.
type durableNotifier struct {
	s    *Store
	wake chan struct{}

	mu     sync.Mutex
	queue  []durableWaiter
	closed bool
}

func (n *durableNotifier) init(s *Store) {
	n.s = s
	n.wake = make(chan struct{}, 1)
}

func (n *durableNotifier) add(end int64, deadline time.Time, w DurableWaiter) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		w.Durable(ErrClosed)
		return
	}
	n.queue = append(n.queue, durableWaiter{end, deadline, w})
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// loop tells waiters as syncs cover them, until Close; then it waits for
// the final flush and tells everyone still waiting.
func (n *durableNotifier) loop() {
	defer n.s.wg.Done()
	var pending []durableWaiter
	for {
		if len(pending) == 0 {
			select {
			case <-n.s.stop:
				n.mu.Lock()
				n.closed = true
				pending = append(pending, n.queue...)
				clear(n.queue)
				n.queue = n.queue[:0]
				n.mu.Unlock()
				var end int64
				for _, p := range pending {
					end = max(end, p.end)
				}
				tell(pending, n.s.waitDurable(end, true))
				return
			case <-n.wake:
			}
		}
		n.mu.Lock()
		pending = append(pending, n.queue...)
		clear(n.queue)
		n.queue = n.queue[:0]
		n.mu.Unlock()
		pending = n.tellDurable(pending)
	}
}

// tellDurable waits until the earliest-ending pending waiter is durable,
// or until the earliest deadline among them, and then tells every waiter
// the durable offset covers (nil) and every one whose deadline has passed
// (its timeout); it returns the rest, which wait on. Waiting for the
// earliest end rather than the latest tells each waiter after the first
// sync that covers it, not one sync later; waiting no longer than the
// earliest deadline tells each waiter its timeout at its own deadline,
// not at the end of a wait that began before it was added.
func (n *durableNotifier) tellDurable(pending []durableWaiter) []durableWaiter {
	if len(pending) == 0 {
		return pending
	}
	first, deadline := pending[0].end, pending[0].deadline
	for _, p := range pending {
		first = min(first, p.end)
		if p.deadline.Before(deadline) {
			deadline = p.deadline
		}
	}
	err := n.s.waitDurableUntil(first, true, deadline)
	stopping := false
	select {
	case <-n.s.stop: // the replicas' wait ends at Close: nobody waits on
		stopping = true
	default:
	}
	if err != nil && (stopping || !errors.Is(err, ErrFlushTimeout) && !errors.Is(err, ErrReplicaTimeout)) {
		if errors.Is(err, commitlog.ErrClosed) {
			err = ErrClosed
		}
		tell(pending, err)
		clear(pending)
		return pending[:0]
	}
	durable := n.s.durableOffset(true)
	now := time.Now()
	rest := pending[:0]
	for _, p := range pending {
		switch {
		case p.end <= durable:
			p.w.Durable(nil)
		case !now.Before(p.deadline):
			p.w.Durable(n.s.timeoutError(p.end, err))
		default:
			rest = append(rest, p)
		}
	}
	clear(pending[len(rest):])
	return rest
}

// timeoutError is what a waiter for end whose deadline passed is told:
// the wait's own timeout when it was for end's shortfall, else the one
// that describes it (a replica's wins over the flush's, as in
// WaitDurable).
func (s *Store) timeoutError(end int64, waitErr error) error {
	if s.replicasNeeded(true) && s.repl.replicated.Load() < end {
		if errors.Is(waitErr, ErrReplicaTimeout) {
			return waitErr
		}
		return fmt.Errorf("%w: offset %d acknowledged by replicas up to %d by its deadline", ErrReplicaTimeout, end, s.repl.replicated.Load())
	}
	if errors.Is(waitErr, ErrFlushTimeout) {
		return waitErr
	}
	return fmt.Errorf("%w: offset %d not flushed by its deadline (flushed %d)", ErrFlushTimeout, end, s.log.FlushedOffset())
}

func tell(ws []durableWaiter, err error) {
	for _, p := range ws {
		p.w.Durable(err)
	}
}
