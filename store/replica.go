package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
)

// Replication, the store's side (package ha runs the stream over TCP).
//
// A master's store serves raw commit-log bytes (ReadLog, woken by
// LogWritten) and keeps a record of its replicas' acknowledgements
// (AddReplica): with Options.SyncReplicas > 0 a message is durable only once
// that many replicas acknowledged it, and the durability waits (WaitDurable,
// OnDurable) fail with ErrReplicaNotAvailable or ErrReplicaTimeout otherwise.
//
// A replica's store (Options.Replica, or SetReplica(true)) refuses Put and
// appends the master's bytes instead (AppendReplicated): at the same offsets, every record
// validated, then flushed, dispatched to its consume queues and index and
// retained exactly as its own would be. When the master no longer holds what
// the replica needs next, ResetReplica starts its log over at the master's
// oldest segment.

var (
	// ErrReplica: Put on a replica's store (Options.Replica). Writes go to
	// the master; RocketMQ's store answers SERVICE_NOT_AVAILABLE (14) here
	// ("message store is slave mode, so putMessage is forbidden").
	ErrReplica = errors.New("store: this store is a replica: writes go to the master")
	// ErrReplicaNotAvailable: a durability wait that needs replicas
	// (Options.SyncReplicas) found fewer in sync than it needs: not
	// connected, or further behind than Options.MaxReplicaGap. The message
	// is stored (and flushed as the flush mode says) on this store.
	// RocketMQ's SLAVE_NOT_AVAILABLE (11).
	ErrReplicaNotAvailable = errors.New("store: no replica in sync")
	// ErrReplicaTimeout: the replicas did not acknowledge within
	// Options.SyncFlushTimeout (or the store closed first). The message is
	// stored on this store and may still reach them. RocketMQ's
	// FLUSH_SLAVE_TIMEOUT (12).
	ErrReplicaTimeout = errors.New("store: replica acknowledgement timed out")
	// ErrReplicaOffset: AppendReplicated was given bytes for another
	// offset than the replica's end.
	ErrReplicaOffset = commitlog.ErrReplicaOffset
	// ErrReplicaData: replicated bytes that fail validation (see
	// commitlog.Log.AppendReplica).
	ErrReplicaData = commitlog.ErrReplicaData
	// ErrOffsetDeleted: ReadLog below the log's minimum offset (retention
	// removed it).
	ErrOffsetDeleted = commitlog.ErrOffsetDeleted
)

// NotDurable reports whether err, from a durability wait (WaitDurable,
// OnDurable), means that the message is stored but not as durable as the
// store is configured to make it: ErrFlushTimeout, ErrReplicaTimeout or
// ErrReplicaNotAvailable. Callers that store on their own account (re-puts of
// scheduled messages, say) treat these as success, never as a reason to put
// again.
func NotDurable(err error) bool {
	return errors.Is(err, ErrFlushTimeout) || errors.Is(err, ErrReplicaTimeout) || errors.Is(err, ErrReplicaNotAvailable)
}

// IsReplica reports whether the store is a replica now (Options.Replica at
// Open, then SetReplica).
func (s *Store) IsReplica() bool { return s.replica.Load() }

// SetReplica changes the store's mode in place, as a broker changes role
// without a restart (RocketMQ's changeToSlave and changeToMaster).
//
// To a replica (true; a master's demotion): Put and PutBatch fail with
// ErrReplica from the moment the call begins, and it returns once no Put
// is appending any more (it takes the commit log's append lock once, and
// the log refuses Append from then on), so everything Put stored before
// is in the log. A Put that appended before still finishes its durability
// wait as a master's (see WaitPutDurable). AppendReplicated,
// ResetReplica and TruncateReplica work from then on, and durability is
// the flush's alone (DurableWaits, DurableOffset, WaitDurable).
//
// To a master (false; a replica's promotion): the caller guarantees that
// no AppendReplicated, ResetReplica or TruncateReplica runs meanwhile (its
// replication is stopped first). It dispatches everything written, then
// starts every queue-offset counter at its consume queue's MaxOffset (as
// Open does), so the next message Put stores in a queue takes the queue
// offset after the last replicated one; then Put works again. The
// replicated offset (ReplicatedOffset) is lowered to the log's end if it
// was beyond (a log cut back as a replica holds records no replica
// acknowledged), and SyncReplicas or SetInSyncReplicas's requirement
// applies again. It fails, leaving the store a replica, when dispatch
// cannot reach the log's end (a full disk, a record it cannot read).
//
// A call that does not change the mode returns nil at once; calls are
// serialised; after Close it returns ErrClosed.
func (s *Store) SetReplica(replica bool) error {
	s.roleMu.Lock()
	defer s.roleMu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	if s.replica.Load() == replica {
		return nil
	}
	if replica {
		s.replica.Store(true)
		// Once the append lock was taken with the refusal set, no Put
		// that passed the check above before the flag changed can append.
		s.log.RefuseAppends(true)
		s.opts.Logger.Info("store: now a replica", "dir", s.opts.Dir, "logEnd", s.log.WrittenOffset())
		return nil
	}
	// Everything written must be in the consume queues before the counters
	// start from them.
	s.dispatch.run()
	if d, w := s.dispatched.Load(), s.log.WrittenOffset(); d < w {
		return fmt.Errorf("store: promote: dispatch stopped at %d, the log ends at %d", d, w)
	}
	// No Append runs (the log refuses it) and no Assign with it; the
	// counters' writes are published to the next appender by the append
	// lock RefuseAppends(false) takes.
	s.counters.m.Range(func(_ string, qs *[]*queueCounter) bool {
		for _, c := range *qs {
			if c != nil {
				c.next = 0 // a queue no longer in the store starts over
			}
		}
		return true
	})
	s.cqs.ForEach(func(topic string, id int32, q *consumequeue.Queue) bool {
		s.counter(topic, id).next = q.MaxOffset()
		return true
	})
	end := s.log.WrittenOffset()
	s.repl.mu.Lock()
	if s.repl.replicated.Load() > end {
		s.repl.replicated.Store(end)
	}
	// Everything the new master holds is the group's log now: dispatched
	// above, and confirmed for the dispatch limit from here on.
	s.repl.confirmFloor.Store(end)
	s.repl.mu.Unlock()
	s.log.RefuseAppends(false)
	s.replica.Store(false)
	s.opts.Logger.Info("store: now a master", "dir", s.opts.Dir, "logEnd", end)
	return nil
}

// LogMinOffset is the commit log's first offset: the base of its oldest
// segment (retention moves it up).
func (s *Store) LogMinOffset() int64 { return s.log.MinOffset() }

// SegmentSize is the commit log's segment size.
func (s *Store) SegmentSize() int64 { return s.log.SegmentSize() }

// ReadLog returns a zero-copy view of the commit log's raw bytes from off:
// at most max bytes, never past the written position or the end of off's
// segment. Records, blank-end markers and hole markers come as they are. At
// the written position the view is empty; below the log's minimum offset the
// error is ErrOffsetDeleted, after Close ErrClosed. Release the view.
func (s *Store) ReadLog(off int64, max int) (View, error) {
	if s.closed.Load() {
		return View{}, ErrClosed
	}
	w := s.log.WrittenOffset()
	if off >= w {
		if off > w {
			return View{}, fmt.Errorf("store: read of the log at %d, beyond its end %d", off, w)
		}
		return View{}, nil
	}
	size := s.log.SegmentSize()
	n := min(int64(max), w-off, off-off%size+size-off)
	v, err := s.log.Read(off, int(n))
	if err != nil {
		return View{}, err
	}
	return View{v}, nil
}

// LogWritten returns a channel closed once the commit log's written position
// is beyond off (at once if it is). A replication sender waits on it.
func (s *Store) LogWritten(off int64) <-chan struct{} { return s.log.WrittenAfter(off) }

// AppendReplicated appends data, the master's commit-log bytes from offset
// off on, to a replica's log at the same offsets, and returns how many bytes
// it consumed (a record cut off at the end of data is not: pass its bytes
// again with what follows). off must be where the last call stopped, or the
// log's end (WrittenOffset) at the first call; see
// commitlog.Log.AppendReplica for the validation and the markers. The
// dispatcher makes the records visible as it does for Put; the caller
// acknowledges what WaitDurable then covers. Errors: ErrReplicaOffset,
// ErrReplicaData (the records before the bad one are appended), ErrDiskFull,
// ErrLogFailed, ErrClosed, and ErrNotReplica on a store that is not a
// replica.
func (s *Store) AppendReplicated(off int64, data []byte) (int, error) {
	if !s.replica.Load() {
		return 0, ErrNotReplica
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n, err := s.log.AppendReplica(off, data)
	if err != nil {
		switch {
		case errors.Is(err, commitlog.ErrDiskFull):
			s.writesRefused(err)
		case errors.Is(err, commitlog.ErrClosed):
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return n, err
	}
	if s.diskFull.Load() {
		s.writesAccepted()
	}
	s.stats.replicatedBytes.Add(int64(n))
	return n, nil
}

// ErrNotReplica: a replica's operation on a store that is not a replica
// (IsReplica).
var ErrNotReplica = errors.New("store: not a replica")

// ResetReplica starts a replica's log over at base, a segment boundary
// beyond its end: what a replica does when its master no longer holds the
// bytes it would need next. The old commit-log segments are moved into
// commitlog/discarded/<unix ms>/ (nothing is kept of a log without data), and
// the returned path names that directory ("" when nothing was kept); delete
// it once it is not wanted. Consume queues and the index lose every entry
// below base, as after retention (queue offsets carry on: the next record
// of each queue starts it again at its own queue offset). Readers of the old
// data see it gone.
func (s *Store) ResetReplica(base int64) (string, error) {
	if !s.replica.Load() {
		return "", ErrNotReplica
	}
	if s.closed.Load() {
		return "", ErrClosed
	}
	d := &s.dispatch
	d.mu.Lock()
	defer d.mu.Unlock()
	aside, err := s.log.RestartAt(base)
	if err != nil {
		return aside, fmt.Errorf("store: restart the replica's log at %d: %w", base, err)
	}
	d.cursor.Close()
	d.cursor = s.log.NewCursor(base)
	s.dispatched.Store(base)
	if _, err := s.cqs.DeleteBelow(base); err != nil {
		return aside, fmt.Errorf("store: %w", err)
	}
	if _, err := s.idx.DeleteBefore(base); err != nil {
		return aside, fmt.Errorf("store: %w", err)
	}
	if err := s.liteDeleteBelow(base); err != nil {
		return aside, err
	}
	if err := s.flushDerived(); err != nil {
		return aside, err
	}
	s.stats.replicaResets.Add(1)
	return aside, nil
}

// Replica is a master's record of one connected replica: package ha adds one
// per connection (AddReplica), reports each offset the replica acknowledges
// (Ack) and removes it when the connection ends (Remove).
type Replica struct {
	set   *replicaSet
	name  string
	since time.Time
	acked atomic.Int64 // written under set.mu
	gone  bool         // under set.mu
}

// ReplicaInfo describes a connected replica.
type ReplicaInfo struct {
	// Name is what the master called it (its remote address).
	Name string
	// Acked is the offset below which the replica acknowledged everything.
	Acked int64
	// Since is when it connected.
	Since time.Time
	// InSync reports whether it is within Options.MaxReplicaGap of the log's end.
	InSync bool
}

// AddReplica records a connected replica that holds everything below acked.
func (s *Store) AddReplica(name string, acked int64) *Replica {
	r := &Replica{set: &s.repl, name: name, since: time.Now()}
	r.acked.Store(acked)
	s.repl.mu.Lock()
	s.repl.list = append(s.repl.list, r)
	s.repl.updateLocked()
	s.repl.mu.Unlock()
	return r
}

// Ack records that the replica holds everything below off. Offsets only
// move up: a lower one is ignored.
func (r *Replica) Ack(off int64) {
	if off <= r.acked.Load() {
		return
	}
	rs := r.set
	rs.mu.Lock()
	if !r.gone && off > r.acked.Load() {
		r.acked.Store(off)
		rs.updateLocked()
	}
	rs.mu.Unlock()
}

// Acked is the offset below which the replica acknowledged everything.
func (r *Replica) Acked() int64 { return r.acked.Load() }

// Remove records that the replica disconnected. Waits that need it fail
// with ErrReplicaNotAvailable when too few replicas remain.
func (r *Replica) Remove() {
	rs := r.set
	rs.mu.Lock()
	if !r.gone {
		r.gone = true
		rs.list = slices.DeleteFunc(rs.list, func(x *Replica) bool { return x == r })
		rs.updateLocked()
		rs.wakeLocked() // waiters recheck whether enough replicas remain
	}
	rs.mu.Unlock()
}

// Replicas describes the connected replicas.
func (s *Store) Replicas() []ReplicaInfo {
	end := s.log.WrittenOffset()
	s.repl.mu.Lock()
	defer s.repl.mu.Unlock()
	out := make([]ReplicaInfo, 0, len(s.repl.list))
	for _, r := range s.repl.list {
		a := r.acked.Load()
		out = append(out, ReplicaInfo{Name: r.name, Acked: a, Since: r.since, InSync: end-a < s.repl.maxGap})
	}
	return out
}

// ReplicatedOffset is the offset below which every message reached
// Options.SyncReplicas replicas (0 when none are required).
func (s *Store) ReplicatedOffset() int64 { return s.repl.replicated.Load() }

// replicaSet is the master's view of its replicas, for the durability waits.
type replicaSet struct {
	need   atomic.Int64 // Options.SyncReplicas, or SetInSyncReplicas's
	maxGap int64        // Options.MaxReplicaGap
	// members, when not nil, are the only replicas whose acknowledgements
	// count (SetInSyncReplicas); nil: every connected replica. Under mu.
	members map[string]bool
	// explicit: SetInSyncReplicas was called, and SetSyncReplicas no
	// longer changes need. Under mu.
	explicit bool
	// confirm: dispatch stops at the confirm offset (set with explicit,
	// read by the dispatcher without mu); confirmFloor is the log's end
	// when the store last became a master: what it held then is
	// confirmed (dispatchLimit).
	confirm      atomic.Bool
	confirmFloor atomic.Int64
	// confirmed wakes the dispatcher when replicated moves or the policy
	// changes (cap 1, sent without blocking).
	confirmed chan struct{}

	mu   sync.Mutex
	list []*Replica
	// changed is closed (and cleared) when replicated moves or a replica
	// leaves; a waiter creates it. Under mu.
	changed chan struct{}
	// replicated only moves up: below it, every message reached need
	// replicas (at some time: a replica that left since still has them).
	replicated atomic.Int64

	timers sync.Pool // *time.Timer for waits
}

// updateLocked recomputes replicated: the need-th highest acknowledgement
// among the connected replicas. Called with mu held.
func (rs *replicaSet) updateLocked() {
	need := int(rs.need.Load())
	if need == 0 || rs.countingLocked() < need {
		return
	}
	var v int64
	if need == 1 {
		for _, r := range rs.list {
			if rs.counts(r) {
				v = max(v, r.acked.Load())
			}
		}
	} else {
		acks := make([]int64, 0, len(rs.list))
		for _, r := range rs.list {
			if rs.counts(r) {
				acks = append(acks, r.acked.Load())
			}
		}
		slices.Sort(acks)
		v = acks[len(acks)-need]
	}
	if v > rs.replicated.Load() {
		rs.replicated.Store(v)
		rs.wakeLocked()
		rs.confirmMoved()
	}
}

// confirmMoved wakes the dispatcher, which may dispatch further.
func (rs *replicaSet) confirmMoved() {
	select {
	case rs.confirmed <- struct{}{}:
	default:
	}
}

func (rs *replicaSet) wakeLocked() {
	if rs.changed != nil {
		close(rs.changed)
		rs.changed = nil
	}
}

// available returns ErrReplicaNotAvailable unless at least need replicas are
// connected within maxGap of end (RocketMQ's isSlaveOK, per replica).
func (rs *replicaSet) available(end int64) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	in := 0
	for _, r := range rs.list {
		if rs.counts(r) && end-r.acked.Load() < rs.maxGap {
			in++
		}
	}
	need := int(rs.need.Load())
	if in >= need {
		return nil
	}
	return fmt.Errorf("%w: %d of %d replicas connected within %d bytes of offset %d (%d connected)",
		ErrReplicaNotAvailable, in, need, rs.maxGap, end, len(rs.list))
}

// wait blocks until replicated reaches end. It fails with
// ErrReplicaNotAvailable as soon as fewer than need replicas are connected,
// and with ErrReplicaTimeout at the deadline or when stop closes.
func (rs *replicaSet) wait(end int64, deadline time.Time, stop <-chan struct{}) error {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
			rs.timers.Put(t)
		}
	}()
	for {
		if rs.replicated.Load() >= end {
			return nil
		}
		rs.mu.Lock()
		if rs.replicated.Load() >= end {
			rs.mu.Unlock()
			return nil
		}
		if n, need := rs.countingLocked(), int(rs.need.Load()); n < need {
			rs.mu.Unlock()
			return fmt.Errorf("%w: %d of %d replicas connected while waiting for offset %d", ErrReplicaNotAvailable, n, need, end)
		}
		if rs.changed == nil {
			rs.changed = make(chan struct{})
		}
		ch := rs.changed
		rs.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: offset %d acknowledged by replicas up to %d", ErrReplicaTimeout, end, rs.replicated.Load())
		}
		if t == nil {
			if v := rs.timers.Get(); v != nil {
				t = v.(*time.Timer)
				t.Reset(left)
			} else {
				t = time.NewTimer(left)
			}
		}
		select {
		case <-ch:
		case <-t.C:
			if rs.replicated.Load() >= end {
				return nil
			}
			return fmt.Errorf("%w: offset %d acknowledged by replicas up to %d", ErrReplicaTimeout, end, rs.replicated.Load())
		case <-stop:
			return fmt.Errorf("%w: the store closed before replicas acknowledged offset %d", ErrReplicaTimeout, end)
		}
	}
}
