// Package fakehost is an in-memory host for the tests of the broker's
// feature packages (delay, timerwheel): consume queues of entries, a log of
// encoded records, the inner put, topic names and state files, with the
// store's hooks (TagCode, OnArrival) and injectable failures. It starts no
// goroutine and reads the clock with time.Now, so tests run it inside a
// testing/synctest bubble to control time. It is not a store: no files, no
// durability, no dispatch lag; it is safe for concurrent use.
package fakehost

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker/internal/reput"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// ErrInjected is what an injected failure returns (FailPuts, FailReads,
// FailWrites).
var ErrInjected = errors.New("fakehost: injected failure")

// StoreHost is the store host written into records.
var StoreHost = netip.MustParseAddrPort("127.0.0.1:10911")

type qkey struct {
	topic string
	queue int32
}

// queue holds entries from offset 0; those below min were removed (as
// retention removes them).
type queue struct {
	min  int64
	ents []store.QueueEntry
}

// Host is the fake. Set TagCode and OnArrival before the first put.
type Host struct {
	// TagCode is the store's tag-code hook: when it returns true its value is
	// the entry's tag code, otherwise message.TagCode of TAGS.
	TagCode func(v message.View) (int64, bool)
	// OnArrival is called after every put, once per message stored, without
	// the lock held.
	OnArrival func(topic string, queueID int32)

	mu        sync.Mutex
	next      int64            // next commit-log offset
	recs      map[int64][]byte // records by commit-log offset
	queues    map[qkey]*queue
	files     map[string][]byte
	writes    int
	putCalls  []int // messages per PutInner call that stored
	failPuts  int
	failReads int
	failWrite int
	pinned    int
}

// New returns an empty host.
func New() *Host {
	return &Host{next: 1000, recs: map[int64][]byte{}, queues: map[qkey]*queue{}, files: map[string][]byte{}}
}

// Put stores m now, as a producer's send does (after the broker routed
// it), and returns where.
func (h *Host) Put(m store.Message) (store.PutResult, error) {
	return h.PutAt(m, time.Now().UnixMilli())
}

// PutAt stores m with the store time storeMs (a record stored before a
// clock went back, for instance).
func (h *Host) PutAt(m store.Message, storeMs int64) (store.PutResult, error) {
	h.mu.Lock()
	r, err := h.putLocked(&m, storeMs)
	h.mu.Unlock()
	if err == nil && h.OnArrival != nil {
		h.OnArrival(m.Topic, m.QueueID)
	}
	return r, err
}

func (h *Host) putLocked(m *store.Message, storeMs int64) (store.PutResult, error) {
	k := qkey{m.Topic, m.QueueID}
	q := h.queues[k]
	if q == nil {
		q = &queue{}
		h.queues[k] = q
	}
	rec, err := message.AppendRecord(nil, &message.Record{
		Topic: m.Topic, QueueID: m.QueueID, Flag: m.Flag, QueueOffset: int64(len(q.ents)), PhysicalOffset: h.next,
		SysFlag: m.SysFlag, BornTimestamp: m.BornTimestamp, BornHost: m.BornHost, StoreTimestamp: storeMs,
		StoreHost: StoreHost, ReconsumeTimes: m.ReconsumeTimes, PreparedTransactionOffset: m.PreparedTransactionOffset,
		Body: m.Body, Properties: m.Properties,
	})
	if err != nil {
		return store.PutResult{}, err
	}
	v, err := message.Decode(rec, true)
	if err != nil {
		return store.PutResult{}, err
	}
	tag, ok := int64(0), false
	if h.TagCode != nil {
		tag, ok = h.TagCode(v)
	}
	if !ok {
		tag = message.TagCode(v.Tags())
	}
	off := h.next
	h.recs[off] = rec
	h.next += int64(len(rec))
	q.ents = append(q.ents, store.QueueEntry{CommitLogOffset: off, Size: int32(len(rec)), TagCode: tag})
	return store.PutResult{QueueID: m.QueueID, QueueOffset: int64(len(q.ents) - 1), CommitLogOffset: off,
		Size: int32(len(rec)), StoreTimestamp: storeMs}, nil
}

// PutInner stores msgs at once (all or, with an injected failure, none)
// and appends their results to res.
func (h *Host) PutInner(msgs []store.Message, res []store.PutResult) ([]store.PutResult, error) {
	h.mu.Lock()
	if h.failPuts > 0 {
		h.failPuts--
		h.mu.Unlock()
		return res, fmt.Errorf("fakehost: put: %w", ErrInjected)
	}
	now := time.Now().UnixMilli()
	n := len(res)
	for i := range msgs {
		r, err := h.putLocked(&msgs[i], now)
		if err != nil {
			h.mu.Unlock()
			return res[:n], err
		}
		res = append(res, r)
	}
	h.putCalls = append(h.putCalls, len(msgs))
	h.mu.Unlock()
	if h.OnArrival != nil {
		for i := range msgs {
			h.OnArrival(msgs[i].Topic, msgs[i].QueueID)
		}
	}
	return res, nil
}

// AppendBlank appends a blank pre-fill entry to a queue.
func (h *Host) AppendBlank(topic string, queueID int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := qkey{topic, queueID}
	if h.queues[k] == nil {
		h.queues[k] = &queue{}
	}
	h.queues[k].ents = append(h.queues[k].ents, store.QueueEntry{Size: reput.BlankEntrySize})
}

// Expire removes a queue's entries below offset, as retention does.
func (h *Host) Expire(topic string, queueID int32, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[qkey{topic, queueID}]; q != nil {
		q.min = max(q.min, min(offset, int64(len(q.ents))))
	}
}

// Forget removes the record at a commit-log offset (its entry stays): a
// read of it fails.
func (h *Host) Forget(commitLogOffset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.recs, commitLogOffset)
}

// FailPuts makes the next n PutInner calls fail (storing nothing).
func (h *Host) FailPuts(n int) { h.mu.Lock(); h.failPuts = n; h.mu.Unlock() }

// FailReads makes the next n ReadEntries calls fail.
func (h *Host) FailReads(n int) { h.mu.Lock(); h.failReads = n; h.mu.Unlock() }

// FailWrites makes the next n WriteState calls fail.
func (h *Host) FailWrites(n int) { h.mu.Lock(); h.failWrite = n; h.mu.Unlock() }

// ReadEntries has store.Store's contract.
func (h *Host) ReadEntries(topic string, queueID int32, offset int64, dst []store.QueueEntry) ([]store.QueueEntry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failReads > 0 {
		h.failReads--
		return dst, fmt.Errorf("fakehost: read entries: %w", ErrInjected)
	}
	q := h.queues[qkey{topic, queueID}]
	if q == nil || offset >= int64(len(q.ents)) {
		return dst, nil
	}
	if offset < q.min {
		return dst, fmt.Errorf("%w: %s/%d offset %d below min %d", store.ErrOffsetOutOfRange, topic, queueID, offset, q.min)
	}
	n := min(int64(cap(dst)-len(dst)), int64(len(q.ents))-offset)
	return append(dst, q.ents[offset:offset+n]...), nil
}

// MinOffset is a queue's min offset (0 for an unknown queue).
func (h *Host) MinOffset(topic string, queueID int32) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[qkey{topic, queueID}]; q != nil {
		return q.min
	}
	return 0
}

// MaxOffset is a queue's max offset (0 for an unknown queue).
func (h *Host) MaxOffset(topic string, queueID int32) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[qkey{topic, queueID}]; q != nil {
		return int64(len(q.ents))
	}
	return 0
}

// Records returns a reader that counts its pins (Pinned).
func (h *Host) Records() reput.Records { return &records{h: h} }

type records struct {
	h *Host
	n int
}

func (r *records) Read(off int64) ([]byte, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	rec, ok := r.h.recs[off]
	if !ok {
		return nil, fmt.Errorf("fakehost: no record at %d", off)
	}
	r.n++
	r.h.pinned++
	return rec, nil
}

func (r *records) ReleaseAll() {
	r.h.mu.Lock()
	r.h.pinned -= r.n
	r.n = 0
	r.h.mu.Unlock()
}

// Pinned is the number of records read and not released.
func (h *Host) Pinned() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pinned
}

// TopicName returns string(name).
func (h *Host) TopicName(name []byte) string { return string(name) }

// LoadState calls parse with the state file name's contents, if any.
func (h *Host) LoadState(name string, parse func([]byte) error) (bool, error) {
	h.mu.Lock()
	data, ok := h.files[name]
	h.mu.Unlock()
	if !ok {
		return false, nil
	}
	if err := parse(data); err != nil {
		return false, fmt.Errorf("fakehost: %s: %w", name, err)
	}
	return true, nil
}

// WriteState replaces the state file name.
func (h *Host) WriteState(name string, data []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failWrite > 0 {
		h.failWrite--
		return fmt.Errorf("fakehost: write %s: %w", name, ErrInjected)
	}
	h.files[name] = slices.Clone(data)
	h.writes++
	return nil
}

// State returns the state file name's contents (nil when there is none)
// and the number of successful writes of any state file so far.
func (h *Host) State(name string) (data []byte, writes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.files[name]), h.writes
}

// SetState sets the state file name's contents.
func (h *Host) SetState(name string, data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files[name] = slices.Clone(data)
}

// PutCalls returns the number of messages of every PutInner call that
// stored, in order.
func (h *Host) PutCalls() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.putCalls)
}

// Messages returns the records of a queue from offset from on, decoded
// (copies: they stay valid).
func (h *Host) Messages(topic string, queueID int32, from int64) []message.View {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[qkey{topic, queueID}]
	if q == nil {
		return nil
	}
	var out []message.View
	for _, e := range q.ents[min(max(from, q.min), int64(len(q.ents))):] {
		rec, ok := h.recs[e.CommitLogOffset]
		if !ok || e.Size == reput.BlankEntrySize {
			continue
		}
		v, err := message.Decode(slices.Clone(rec), true)
		if err == nil {
			out = append(out, v)
		}
	}
	return out
}

// Entries returns a copy of a queue's entries (from offset 0, including
// those removed by Expire).
func (h *Host) Entries(topic string, queueID int32) []store.QueueEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[qkey{topic, queueID}]; q != nil {
		return slices.Clone(q.ents)
	}
	return nil
}
