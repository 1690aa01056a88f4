package pop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// Limits of the requests.
const (
	// MaxMessages is the most messages one pop returns (the Java broker's limit).
	MaxMessages = 32
	// MaxInvisible bounds a message's invisible time (and keeps visibleAt
	// from overflowing).
	MaxInvisible = 30 * 24 * time.Hour
	// MaxInflight bounds the in-flight (and waiting) messages of one
	// (group, topic, queue): a queue at the limit hands out redeliveries only.
	MaxInflight = 2000
	// MaxQueueID bounds the queue ids the state file may name (as the
	// broker's offset table does).
	MaxQueueID = 1 << 16
	// maxReadBytes is about the most record bytes one read of a queue returns.
	maxReadBytes = 256 << 10
	// maxReads bounds the reads of new messages per queue and pop (a filter
	// that rejects many entries costs at most this many store reads).
	maxReads = 4
)

// Errors of Ack and ChangeInvisible (and of Pop for ErrInvalidArgument).
var (
	// ErrStaleHandle: the receipt handle is of an older delivery; the
	// message was popped again since.
	ErrStaleHandle = errors.New("pop: the receipt handle is expired: the message was received again since")
	// ErrNotInFlight: the message was never handed out to the group.
	ErrNotInFlight = errors.New("pop: the message is not in flight for the group")
	// ErrAcked: ChangeInvisible of a message already done (acked, filtered
	// out or dead-lettered). Ack of such a message succeeds instead.
	ErrAcked = errors.New("pop: the message was acked already")
	// ErrInvalidArgument: a request out of the documented bounds.
	ErrInvalidArgument = errors.New("pop: invalid argument")
)

// key names the state of one (group, topic, queue).
type key struct {
	group, topic string
	queue        int32
}

// entry is one in-flight (or, for FIFO, waiting) message of a group.
type entry struct {
	VisibleAt int64  `json:"visibleAt"` // unix ms; 0 for a waiting entry
	PopTime   int64  `json:"popTime"`   // the current delivery's pop time; 0: never delivered
	Attempts  int32  `json:"attempts"`  // deliveries so far
	Key       string `json:"key,omitempty"`
}

// queueState is the state of one (group, topic, queue).
type queueState struct {
	next     int64 // first offset never handed out; -1: not initialised
	inflight map[int64]*entry
}

// Manager owns the POP bookkeeping of every group and its state file. Its
// methods are safe for concurrent use.
type Manager struct {
	host Host
	cfg  Config

	mu      sync.Mutex
	queues  map[key]*queueState // guarded by mu
	changes uint64              // guarded by mu: bumped by every change

	persistMu sync.Mutex // serialises state-file writes; taken before mu
	persisted uint64     // changes the last successful write covers (under mu)

	rr atomic.Uint32 // round-robin start of pops of every queue

	visibleMu sync.Mutex                    // orders OnVisible's registrations
	visible   atomic.Pointer[[]VisibleFunc] // copy on write

	runMu   sync.Mutex // guards started, stopped
	started bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}

	stats struct {
		pops, popped, acks, changes, redelivered, deadLetters, stale atomic.Int64
	}
}

// New returns a Manager with no state; Load reads the state file, Start
// starts the persister.
func New(h Host, cfg Config) *Manager {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Manager{host: h, cfg: cfg, queues: make(map[key]*queueState),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Stats are the manager's counters since New.
type Stats struct {
	Pops         int64 // pops answered (held pops count each time they look)
	Popped       int64 // messages handed out, redeliveries included
	Redelivered  int64 // messages handed out again after their invisible time
	Acks         int64 // successful acks of in-flight messages
	Changes      int64 // successful changes of an invisible time
	DeadLetters  int64 // messages sent to %DLQ%<group> after their last retry
	StaleHandles int64 // acks and changes refused for a stale receipt handle
	InFlight     int   // messages in flight or waiting for their FIFO group now
}

// Stats returns the counters. InFlight is counted under the manager's
// mutex, in O(queues).
func (m *Manager) Stats() Stats {
	s := Stats{
		Pops: m.stats.pops.Load(), Popped: m.stats.popped.Load(), Redelivered: m.stats.redelivered.Load(),
		Acks: m.stats.acks.Load(), Changes: m.stats.changes.Load(), DeadLetters: m.stats.deadLetters.Load(),
		StaleHandles: m.stats.stale.Load(),
	}
	m.mu.Lock()
	for _, q := range m.queues {
		s.InFlight += len(q.inflight)
	}
	m.mu.Unlock()
	return s
}

// Request is one pop. The manager keeps nothing of it after Pop returns, so
// a caller may run the same Request again (a held pop does).
type Request struct {
	Group, Topic string
	// QueueID is the queue to pop from, or -1: every queue of the topic,
	// starting with the next one in round-robin order.
	QueueID int32
	// Queues is the topic's number of read queues (used with QueueID -1).
	Queues int32
	// Max is the most messages to hand out: 1..MaxMessages.
	Max int
	// Invisible is how long the messages stay invisible to the group:
	// 1 ms..MaxInvisible, in whole milliseconds.
	Invisible time.Duration
	// FromFirst starts a group new to a queue (no state, no committed
	// offset) at the queue's first message; otherwise at its last one (the
	// Java broker's initMode MIN and MAX).
	FromFirst bool
	// Orderly hands out the messages of a message group (SHARDING_KEY or
	// __SHARDINGKEY) in order: consecutive ones together in one answer, and
	// none while an earlier one is in flight from an earlier pop.
	Orderly bool
	// Filter selects the messages (nil: all); the rejected ones are done for
	// the group. It must be safe for concurrent use and immutable.
	Filter store.Filter
	// RetryMax is the group's retryMaxTimes: a message delivered 1 +
	// RetryMax times that becomes visible once more is dead-lettered.
	RetryMax int32
	// Priority pops a PRIORITY topic (RocketMQ 5.4, RIP-80; QueueID -1 and
	// not Orderly): the queue id is the priority, so the queues are taken
	// from the highest id down, new messages of every queue first and the
	// redeliveries (RocketMQ's retries) after them, again from the highest
	// queue down: a retry waits for the backlog of new messages, as
	// RocketMQ's default popFromRetryProbabilityForPriority=0 has it.
	Priority bool
	// PriorityZeroHighest (with Priority) makes queue 0 the highest
	// priority (RocketMQ's priorityOrderAsc=false): the queues are taken
	// from the lowest id up.
	PriorityZeroHighest bool
	// RetryFirst (with Priority) takes the redeliveries before the new
	// messages (RocketMQ's popFromRetryProbabilityForPriority: a pop that
	// prefers the retry topic), each pass in priority order.
	RetryFirst bool
}

// Popped is one message a pop handed out.
type Popped struct {
	QueueID int32
	Offset  int64 // queue offset
	// Attempts counts the deliveries, this one included (1: the first).
	// The record's reconsumeTimes is raised by Attempts-1.
	Attempts int32

	start, end int // the record in Result.Body
}

// Result is a pop's answer. Reuse it across pops; nothing in it aliases the
// store.
type Result struct {
	// Body holds the records, copied back to back in Msgs' order: queue by
	// queue, and within a queue the redeliveries (in offset order) before
	// the new messages; a Priority pop's: the new messages queue by queue
	// from the highest, then the redeliveries likewise.
	Body []byte
	Msgs []Popped
	// PopTime is the pop's time (unix ms): a receipt handle names the
	// delivery by it.
	PopTime int64
	// Rest counts the messages of the popped queues not yet handed out to
	// the group.
	Rest int64
	// NextVisible (unix ms; 0: none) is, for a pop that found nothing, the
	// earliest time one of the group's in-flight messages of the popped
	// queues becomes visible again: when a held pop should look again
	// (later changes are reported to OnVisible's listeners).
	NextVisible int64
}

// Record returns the record of Msgs[i], a slice of Body.
func (r *Result) Record(i int) []byte { return r.Body[r.Msgs[i].start:r.Msgs[i].end] }

func (r *Result) reset() {
	r.Body, r.Msgs, r.PopTime, r.Rest, r.NextVisible = r.Body[:0], r.Msgs[:0], 0, 0, 0
}

// validInvisible reports whether d is a valid invisible time.
func validInvisible(d time.Duration) bool {
	return d >= time.Millisecond && d <= MaxInvisible
}

// Pop hands out up to r.Max messages of r.Topic to r.Group: first the
// in-flight messages whose invisible time has passed (redeliveries, or dead
// letters once their retries ran out), then new ones. Each becomes invisible
// to the group for r.Invisible from now. An answer without messages is not
// an error.
func (m *Manager) Pop(r *Request, res *Result) error {
	res.reset()
	if r.Max < 1 || r.Max > MaxMessages {
		return fmt.Errorf("%w: max %d is not in 1..%d", ErrInvalidArgument, r.Max, MaxMessages)
	}
	if !validInvisible(r.Invisible) {
		return fmt.Errorf("%w: invisible time %v is not in 1ms..%v", ErrInvalidArgument, r.Invisible, MaxInvisible)
	}
	if r.QueueID < -1 || (r.QueueID == -1 && r.Queues <= 0) {
		return fmt.Errorf("%w: queue %d of %d", ErrInvalidArgument, r.QueueID, r.Queues)
	}
	now := time.Now().UnixMilli()
	invisible := r.Invisible.Milliseconds()
	var rest int64
	m.mu.Lock()
	switch {
	case r.QueueID >= 0:
		rest += m.popQueueLocked(r, r.QueueID, now, invisible, res, takeAll)
	case r.Priority && !r.Orderly:
		// Queue i of the priority order.
		qid := func(i int32) int32 {
			if r.PriorityZeroHighest {
				return i
			}
			return r.Queues - 1 - i
		}
		first, second := takeNew, takeRedelivered
		if r.RetryFirst {
			first, second = takeRedelivered, takeNew
		}
		for i := int32(0); i < r.Queues && len(res.Msgs) < r.Max; i++ {
			m.popQueueLocked(r, qid(i), now, invisible, res, first)
		}
		// The second pass also counts every queue's rest and, for a pop
		// that found nothing, looks at every queue's in-flight messages
		// (NextVisible).
		for i := int32(0); i < r.Queues; i++ {
			if len(res.Msgs) >= r.Max {
				rest += max(m.host.MaxOffset(r.Topic, qid(i))-m.nextLocked(r, qid(i)), 0)
				continue
			}
			rest += m.popQueueLocked(r, qid(i), now, invisible, res, second)
		}
	default:
		first := m.rr.Add(1)
		for i := int32(0); i < r.Queues; i++ {
			qid := int32((first + uint32(i)) % uint32(r.Queues))
			if len(res.Msgs) >= r.Max {
				rest += max(m.host.MaxOffset(r.Topic, qid)-m.nextLocked(r, qid), 0)
				continue
			}
			rest += m.popQueueLocked(r, qid, now, invisible, res, takeAll)
		}
	}
	m.mu.Unlock()
	res.PopTime, res.Rest = now, rest
	m.stats.pops.Add(1)
	m.stats.popped.Add(int64(len(res.Msgs)))
	return nil
}

// nextLocked returns the group's next offset of a queue (m.mu held; 0 if
// unknown).
func (m *Manager) nextLocked(r *Request, qid int32) int64 {
	if q := m.queues[key{r.Group, r.Topic, qid}]; q != nil && q.next > 0 {
		return q.next
	}
	return 0
}

// queueLocked returns the state of k, initialised (m.mu held): from the
// group's committed offset, else the queue's first or last message.
func (m *Manager) queueLocked(k key, fromFirst bool) *queueState {
	q := m.queues[k]
	if q == nil {
		q = &queueState{next: -1, inflight: make(map[int64]*entry)}
		m.queues[k] = q
	}
	if q.next < 0 {
		h := m.host
		if off, ok := h.CommittedOffset(k.group, k.topic, k.queue); ok {
			q.next = off
		} else if fromFirst {
			q.next = h.MinOffset(k.topic, k.queue)
		} else {
			// From the last message on (the Java broker's initMode MAX).
			q.next = max(h.MaxOffset(k.topic, k.queue)-1, h.MinOffset(k.topic, k.queue), 0)
		}
		m.changes++
	}
	return q
}

// changedLocked records a change of q (m.mu held) and commits the group's
// consumer offset: the lowest offset not yet done.
func (m *Manager) changedLocked(k key, q *queueState) {
	m.changes++
	low := q.next
	for off := range q.inflight {
		low = min(low, off)
	}
	m.host.CommitOffset(k.group, k.topic, k.queue, low)
}

// What popQueueLocked takes of a queue.
const (
	takeRedelivered = 1 << iota // in-flight messages visible again (and dead letters)
	takeNew                     // messages never handed out
	takeAll         = takeRedelivered | takeNew
)

// popQueueLocked pops from one queue into res, what take says, and returns
// the queue's rest (messages not yet handed out). m.mu is held.
func (m *Manager) popQueueLocked(r *Request, qid int32, now, invisible int64, res *Result, take int) int64 {
	k := key{r.Group, r.Topic, qid}
	q := m.queueLocked(k, r.FromFirst)
	h := m.host
	changed := false
	if minOff := h.MinOffset(r.Topic, qid); q.next < minOff {
		q.next = minOff // retention removed them
		changed = true
	}
	// Orderly pops: the state of each message group met so far in this
	// queue (see fifoState).
	var groups map[string]fifoState
	if r.Orderly {
		groups = make(map[string]fifoState)
	}

	// Redeliveries (and FIFO messages waiting for their group), in offset order.
	if take&takeRedelivered != 0 && len(q.inflight) > 0 {
		offs := make([]int64, 0, len(q.inflight))
		for off := range q.inflight {
			offs = append(offs, off)
		}
		slices.Sort(offs)
		for _, off := range offs {
			e := q.inflight[off]
			fifo := r.Orderly && e.Key != ""
			if fifo && groups[e.Key] == fifoBlocked {
				continue // an earlier message of its group stays in flight
			}
			if e.VisibleAt > now {
				if res.NextVisible == 0 || e.VisibleAt < res.NextVisible {
					res.NextVisible = e.VisibleAt
				}
				if fifo {
					groups[e.Key] = fifoBlocked
				}
				continue
			}
			if len(res.Msgs) >= r.Max {
				if fifo {
					groups[e.Key] = fifoBlocked
				}
				continue
			}
			// A message past its last retry is copied out for its dead
			// letter; any other goes to the answer. Either way the state
			// of its message group is what it was before it.
			dead := e.Attempts > r.RetryMax
			var dlq []byte
			found := false
			status, _, err := h.Read(r.Topic, qid, off, 1, 0, nil, func(rec []byte) {
				if found {
					return
				}
				found = true
				if dead {
					dlq = append(dlq, rec...)
				} else {
					m.appendRecord(res, qid, off, rec, e.Attempts+1)
				}
			})
			if err != nil || status != store.Found || !found {
				delete(q.inflight, off) // gone (retention)
				changed = true
				continue
			}
			if dead {
				m.deadLetterLocked(r.Group, dlq)
				delete(q.inflight, off)
				changed = true
				continue
			}
			if fifo {
				groups[e.Key] = fifoTaking
			}
			if e.PopTime != 0 {
				m.stats.redelivered.Add(1)
			}
			e.Attempts++
			e.PopTime, e.VisibleAt = now, now+invisible
			changed = true
		}
	}

	// New messages.
	for reads := 0; take&takeNew != 0 && len(res.Msgs) < r.Max && len(q.inflight) < MaxInflight && reads < maxReads; reads++ {
		want := min(r.Max-len(res.Msgs), MaxInflight-len(q.inflight))
		status, next, err := h.Read(r.Topic, qid, q.next, want, maxReadBytes, r.Filter, func(rec []byte) {
			m.takeNewLocked(r, q, qid, now, invisible, rec, groups, res)
		})
		if err != nil {
			break
		}
		if status == store.NoMatchedMessage {
			if next > q.next {
				q.next = next
				changed = true
			}
			continue
		}
		if status != store.Found {
			break
		}
		q.next = max(q.next, next)
		changed = true
	}
	if changed {
		m.changedLocked(k, q)
	}
	return max(h.MaxOffset(r.Topic, qid)-q.next, 0)
}

// fifoState is what an orderly pop knows of a message group of the queue
// it pops from: nothing yet (no message of it met), taking (every message
// of it met so far is in this answer, so the next may join them: a batch
// in order, as RocketMQ's orderly pop returns consecutive messages), or
// blocked (one is in flight from an earlier pop, or could not join this
// answer: the rest wait for it).
type fifoState uint8

const (
	fifoNone fifoState = iota
	fifoTaking
	fifoBlocked
)

// takeNewLocked hands out one new message (or, in an orderly pop, makes it
// wait for its group). m.mu is held.
func (m *Manager) takeNewLocked(r *Request, q *queueState, qid int32, now, invisible int64, rec []byte,
	groups map[string]fifoState, res *Result) {
	v, err := message.Decode(rec, false)
	if err != nil {
		return
	}
	off := v.QueueOffset()
	group := ""
	if kb, ok := v.Property(message.PropShardingKey); ok && len(kb) > 0 {
		group = string(kb)
	} else if kb, ok := v.Property(message.PropJavaShardingKey); ok && len(kb) > 0 {
		group = string(kb)
	}
	if r.Orderly && group != "" {
		if groups[group] == fifoBlocked {
			q.inflight[off] = &entry{Key: group} // waits for its group
			return
		}
		groups[group] = fifoTaking
	}
	q.inflight[off] = &entry{PopTime: now, VisibleAt: now + invisible, Attempts: 1, Key: group}
	m.appendRecord(res, qid, off, rec, 1)
}

// appendRecord copies a record into res as Popped{qid, off, attempts}, its
// reconsumeTimes raised by the deliveries before this one.
func (m *Manager) appendRecord(res *Result, qid int32, off int64, rec []byte, attempts int32) {
	start := len(res.Body)
	res.Body = append(res.Body, rec...)
	res.Msgs = append(res.Msgs, Popped{QueueID: qid, Offset: off, Attempts: attempts, start: start, end: len(res.Body)})
	if attempts <= 1 {
		return
	}
	cp := res.Body[start:]
	v, err := message.Decode(cp, false)
	if err != nil {
		return
	}
	at := message.OffBornHost + len(v.BornHostBytes()) + 8 + len(v.StoreHostBytes())
	binary.BigEndian.PutUint32(cp[at:], uint32(v.ReconsumeTimes()+attempts-1))
}

// Ack marks a message done for the group: the message at (topic, queue,
// offset), delivered at popTime (the receipt handle's). An ack of a message
// already done succeeds. It fails with ErrStaleHandle when the message was
// popped again since popTime, ErrNotInFlight when it was never handed out to
// the group.
func (m *Manager) Ack(group, topic string, queue int32, offset, popTime int64) error {
	k := key{group, topic, queue}
	m.mu.Lock()
	e, err := m.inflightLocked(k, offset, popTime)
	if e == nil {
		m.mu.Unlock()
		if errors.Is(err, ErrAcked) {
			return nil
		}
		return err
	}
	q := m.queues[k]
	// The ack unblocks the next message of a FIFO message group, or makes
	// room in a queue at MaxInflight: the group's held pops may look now.
	revive := len(q.inflight) >= MaxInflight || (e.Key != "" && waitingLocked(q, e.Key))
	delete(q.inflight, offset)
	m.changedLocked(k, q)
	m.mu.Unlock()
	m.stats.acks.Add(1)
	if revive {
		m.notifyVisible(group, topic, queue, time.Now().UnixMilli())
	}
	return nil
}

// waitingLocked reports whether a FIFO message of group key waits in q
// for its group's message in flight (m.mu held).
func waitingLocked(q *queueState, key string) bool {
	for _, w := range q.inflight {
		if w.PopTime == 0 && w.Key == key {
			return true
		}
	}
	return false
}

// ChangeInvisible makes an in-flight message invisible for invisible from
// now and returns its new pop time (which the new receipt handle carries;
// the old one is void). It fails with ErrStaleHandle, ErrNotInFlight,
// ErrAcked (the message is done), or ErrInvalidArgument for an invisible
// time out of 1 ms..MaxInvisible.
func (m *Manager) ChangeInvisible(group, topic string, queue int32, offset, popTime int64, invisible time.Duration) (int64, error) {
	if !validInvisible(invisible) {
		return 0, fmt.Errorf("%w: invisible time %v is not in 1ms..%v", ErrInvalidArgument, invisible, MaxInvisible)
	}
	now := time.Now().UnixMilli()
	k := key{group, topic, queue}
	m.mu.Lock()
	e, err := m.inflightLocked(k, offset, popTime)
	if e == nil {
		m.mu.Unlock()
		return 0, err
	}
	e.PopTime = max(now, e.PopTime+1)
	e.VisibleAt = e.PopTime + invisible.Milliseconds()
	popTime, visibleAt := e.PopTime, e.VisibleAt
	m.changedLocked(k, m.queues[k])
	m.mu.Unlock()
	m.stats.changes.Add(1)
	m.notifyVisible(group, topic, queue, visibleAt)
	return popTime, nil
}

// VisibleFunc is told that messages of group in (topic, queue) become
// visible to the group's pops at at (unix ms): at once when at is not after
// now, otherwise then. It runs on the goroutine of the Ack or
// ChangeInvisible that caused it, after the manager's mutex is released; it
// must not block.
type VisibleFunc func(group, topic string, queue int32, at int64)

// OnVisible registers fn to be told of the changes that make messages
// visible to a group's pops sooner than a pop that found nothing could
// know (its Result.NextVisible): a changed invisible time (the new time,
// earlier or later), an ack that unblocks a FIFO message group or makes
// room in a queue at MaxInflight (now). Listeners may be added at any time
// and are never removed.
func (m *Manager) OnVisible(fn VisibleFunc) {
	m.visibleMu.Lock()
	defer m.visibleMu.Unlock()
	var fns []VisibleFunc
	if old := m.visible.Load(); old != nil {
		fns = append(fns, *old...)
	}
	fns = append(fns, fn)
	m.visible.Store(&fns)
}

func (m *Manager) notifyVisible(group, topic string, queue int32, at int64) {
	if fns := m.visible.Load(); fns != nil {
		for _, fn := range *fns {
			fn(group, topic, queue, at)
		}
	}
}

// inflightLocked returns the in-flight entry of offset whose current
// delivery is popTime, or nil and why not (ErrAcked for a message done).
// m.mu is held.
func (m *Manager) inflightLocked(k key, offset, popTime int64) (*entry, error) {
	q := m.queues[k]
	if q == nil || q.next < 0 {
		return nil, ErrNotInFlight
	}
	e := q.inflight[offset]
	if e == nil {
		if offset >= 0 && offset < q.next {
			return nil, ErrAcked
		}
		return nil, ErrNotInFlight
	}
	if e.PopTime != popTime {
		m.stats.stale.Add(1)
		return nil, ErrStaleHandle
	}
	return e, nil
}
