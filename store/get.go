package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/mmap"
)

// Filter decides which messages a Get returns. The broker's subscription
// filters (tags, SQL92) implement it.
type Filter interface {
	// MatchTagCode is asked first, with the consume-queue entry's tag code.
	MatchTagCode(code int64) bool
	// NeedsRecord reports whether MatchProperties must be asked too.
	NeedsRecord() bool
	// MatchProperties is asked with the record's encoded properties.
	MatchProperties(props []byte) bool
}

// TagCodeFilter passes entries whose tag code is one of Codes (all entries
// when Codes is empty). It does not re-check the tag string.
type TagCodeFilter struct{ Codes []int64 }

// MatchTagCode implements Filter.
func (f *TagCodeFilter) MatchTagCode(code int64) bool {
	if len(f.Codes) == 0 {
		return true
	}
	for _, c := range f.Codes {
		if c == code {
			return true
		}
	}
	return false
}

// NeedsRecord implements Filter.
func (f *TagCodeFilter) NeedsRecord() bool { return false }

// MatchProperties implements Filter.
func (f *TagCodeFilter) MatchProperties([]byte) bool { return true }

// GetStatus says what a Get found; rocketmq-protocol.md §2.6 maps it to pull
// response codes and next offsets.
type GetStatus int

const (
	// Found: Messages holds at least one message.
	Found GetStatus = iota
	// NoMatchedMessage: entries were scanned but the filter rejected all of them.
	NoMatchedMessage
	// NoMessageInQueue: the queue exists but is empty.
	NoMessageInQueue
	// NoMatchedLogicQueue: there is no such queue.
	NoMatchedLogicQueue
	// OffsetTooSmall: the offset is below the queue's min offset.
	OffsetTooSmall
	// OffsetOverflowOne: the offset equals the max offset (no new message: long-poll).
	OffsetOverflowOne
	// OffsetOverflowBadly: the offset is past the max offset.
	OffsetOverflowBadly
	// MessageWasRemoving: the entries point below the commit log's min offset (retention).
	MessageWasRemoving
)

var getStatusNames = [...]string{"FOUND", "NO_MATCHED_MESSAGE", "NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE",
	"OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_ONE", "OFFSET_OVERFLOW_BADLY", "MESSAGE_WAS_REMOVING"}

func (s GetStatus) String() string {
	if int(s) < len(getStatusNames) {
		return getStatusNames[s]
	}
	return fmt.Sprintf("GetStatus(%d)", int(s))
}

// GetResult is the caller-owned result of Get; reuse it across calls. Views
// pin commit-log segments: call Release once the bytes are written out.
type GetResult struct {
	Status GetStatus
	// Messages are zero-copy views of whole records, in queue order.
	Messages []View
	// NextOffset is where the next Get of this queue should start.
	NextOffset int64
	// MinOffset and MaxOffset are the queue's bounds at the time of the Get.
	MinOffset, MaxOffset int64
	// Bytes is the total size of Messages.
	Bytes int

	entries []consumequeue.Entry
	checks  []pendingCheck // a read's views still to check, in order
	addrs   []uintptr      // a read's prefetch addresses
}

// pendingCheck is a view a read took and has still to check: its entry and
// queue offset.
type pendingCheck struct {
	e    consumequeue.Entry
	qoff int64
}

// getRead is one Get or GetLite under way: what it reads, its limits, and
// how far it got. Both run its loop (take) over the entries they read from
// their index, a chunk at a time; it lives on the caller's stack.
type getRead struct {
	s        *Store
	res      *GetResult
	topic    string // the topic, or the lite topic's parent
	queueID  int32  // the consume queue (-1 for a lite topic)
	lite     string // the lite topic, when isLite
	isLite   bool
	f        Filter // nil: every message (a lite read has none)
	maxMsgs  int
	maxBytes int   // ≤ 0: no limit
	logMin   int64 // the commit log's min offset when the read began
	next     int64 // the queue offset of the next entry to look at
	scanned  int   // entries looked at
	removing bool  // retention took some of them
}

// take reads the records of entries (the queue's, from queue offset g.next
// on) into g.res, keeping those that pass the checks, in order. It stops
// before the entry that would pass maxMsgs messages or, with a message
// taken, maxBytes (full). Two passes: the first takes a view of every
// candidate's record, the second (check) checks each against its entry
// (and the filter's properties). In between, the records' first lines are
// prefetched together, so their misses overlap instead of stalling one
// after another (a read reads records it has not touched since they were
// written). When the checks drop some, the caller reads on from g.next,
// the first entry not taken.
func (g *getRead) take(entries []consumequeue.Entry) (full bool) {
	s, res := g.s, g.res
	first := len(res.Messages)
	for _, e := range entries {
		if len(res.Messages) >= g.maxMsgs {
			break
		}
		if g.maxBytes > 0 && res.Bytes > 0 && res.Bytes+int(e.Size) > g.maxBytes {
			full = true
			break
		}
		g.scanned++
		g.next++
		if e.Size <= 0 || !g.isLite && e.Size == 0x7FFFFFFF {
			continue // blank: a consume queue's pre-fill, a lite entry never written
		}
		if !g.isLite && e.IsLost() {
			s.stats.lostSkipped.Add(1)
			continue // its record was lost from the commit log
		}
		if e.CommitLogOffset < g.logMin {
			g.removing = true
			continue
		}
		if g.f != nil && !g.f.MatchTagCode(e.TagCode) {
			continue
		}
		v, err := s.log.Read(e.CommitLogOffset, int(e.Size))
		if err != nil {
			if errors.Is(err, commitlog.ErrOffsetDeleted) {
				g.removing = true
				continue
			}
			g.badEntry(g.next-1, e, err.Error())
			continue
		}
		res.Messages = append(res.Messages, View{v})
		res.checks = append(res.checks, pendingCheck{e, g.next - 1})
		res.Bytes += int(e.Size)
	}
	g.check(first)
	return full
}

// check checks the views res.Messages[first:] (res.checks holds their
// entries, in order) against their entries (recordMatches; a lite topic's
// recordHeaderMatches: its records' queue fields are the parent's) and the
// filter's properties, keeping those that pass, in order, and releasing
// the others.
func (g *getRead) check(first int) {
	res := g.res
	views := res.Messages[first:]
	addrs := res.addrs[:0]
	for i := range views {
		// The first 36 bytes may straddle two lines.
		b := views[i].Bytes()
		addrs = append(addrs, mmap.Addr(b), mmap.Addr(b[message.OffSysFlag-1:]))
	}
	mmap.PrefetchAll(addrs)
	res.addrs = addrs[:0]
	kept := first
	for i, v := range views {
		c := res.checks[i]
		var ok bool
		if g.isLite {
			ok = recordHeaderMatches(v.Bytes(), c.e)
		} else {
			ok = recordMatches(v.Bytes(), c.e, g.queueID, c.qoff)
		}
		if !ok {
			g.badEntry(c.qoff, c.e, "the record there is not this entry's")
		} else if g.f != nil && g.f.NeedsRecord() {
			m, err := message.Decode(v.Bytes(), false)
			ok = err == nil && g.f.MatchProperties(m.Properties())
		}
		if !ok {
			res.Bytes -= int(c.e.Size)
			v.Release()
			continue
		}
		res.Messages[kept] = v
		kept++
	}
	clear(res.Messages[kept:])
	res.Messages = res.Messages[:kept]
	clear(res.checks)
	res.checks = res.checks[:0]
}

// badEntry counts and logs (at most once a second) an entry of the read
// whose record is not there; a lite topic is named parent/lite.
func (g *getRead) badEntry(qoff int64, e consumequeue.Entry, why string) {
	if g.isLite {
		g.s.badEntry(g.topic+"/"+g.lite, -1, qoff, e, why)
		return
	}
	g.s.badEntry(g.topic, g.queueID, qoff, e, why)
}

// Release releases every view and empties Messages.
func (r *GetResult) Release() {
	for i := range r.Messages {
		r.Messages[i].Release()
		r.Messages[i] = View{}
	}
	r.Messages = r.Messages[:0]
	r.Bytes = 0
}

// maxScan bounds how many consume-queue entries one Get inspects when a
// filter rejects them (RocketMQ scans 16,000 bytes of entries, 800).
const maxScan = 800

// Get returns up to maxMsgs messages (and about maxBytes; at least one
// message when any matches) of (topic, queueID) from queue offset offset,
// skipping those f rejects (f may be nil). Release res when done. The error is
// for failures of the store itself; every situation of the queue is a Status.
func (s *Store) Get(topic string, queueID int32, offset int64, maxMsgs, maxBytes int, f Filter, res *GetResult) error {
	res.Release()
	res.Status, res.NextOffset, res.MinOffset, res.MaxOffset = NoMatchedLogicQueue, 0, 0, 0
	if s.closed.Load() {
		return ErrClosed
	}
	q, ok := s.cqs.Lookup(topic, queueID)
	if !ok {
		return nil
	}
	qmax := q.MaxOffset()
	if res.outside(offset, q.MinOffset(), qmax) {
		return nil
	}
	if maxMsgs <= 0 {
		maxMsgs = 1
	}
	scanLimit := maxMsgs
	if f != nil {
		scanLimit = max(maxMsgs, maxScan)
	}
	if cap(res.entries) < 64 {
		res.entries = make([]consumequeue.Entry, 0, 64)
	}
	g := getRead{s: s, res: res, topic: topic, queueID: queueID, f: f, maxMsgs: maxMsgs, maxBytes: maxBytes,
		logMin: s.log.MinOffset(), next: offset}
	for g.scanned < scanLimit && len(res.Messages) < maxMsgs && g.next < qmax {
		n := min(cap(res.entries), scanLimit-g.scanned)
		entries, err := q.Read(g.next, res.entries[:0:n])
		if err != nil {
			if errors.Is(err, consumequeue.ErrOutOfRange) {
				break
			}
			res.Release()
			return fmt.Errorf("store: read consume queue %s/%d at %d: %w", topic, queueID, g.next, err)
		}
		if len(entries) == 0 || g.take(entries) {
			break
		}
	}
	s.finishGet(res, g.next, g.removing)
	return nil
}

// outside sets res's bounds, and reports whether offset is outside them
// with the status and next offset that says how (an empty queue's is
// NoMessageInQueue at 0): the start of Get and GetLite.
func (res *GetResult) outside(offset, qmin, qmax int64) bool {
	res.MinOffset, res.MaxOffset = qmin, qmax
	switch {
	case qmax == 0:
		res.Status, res.NextOffset = NoMessageInQueue, 0
	case offset < qmin:
		res.Status, res.NextOffset = OffsetTooSmall, qmin
	case offset == qmax:
		res.Status, res.NextOffset = OffsetOverflowOne, offset
	case offset > qmax:
		res.Status, res.NextOffset = OffsetOverflowBadly, qmax
	default:
		return false
	}
	return true
}

// finishGet sets a read's next offset and status (Found, else
// MessageWasRemoving when retention took what it looked for, else
// NoMatchedMessage) and counts what it found: the end of Get and GetLite.
func (s *Store) finishGet(res *GetResult, next int64, removing bool) {
	res.NextOffset = next
	switch {
	case len(res.Messages) > 0:
		res.Status = Found
		s.stats.gets.Add(int64(len(res.Messages)))
		s.stats.getBytes.Add(int64(res.Bytes))
	case removing:
		res.Status = MessageWasRemoving
	default:
		res.Status = NoMatchedMessage
	}
}

// MaxOffset is the queue's next offset (the number of dispatched messages);
// 0 for an unknown queue.
func (s *Store) MaxOffset(topic string, queueID int32) int64 {
	if q, ok := s.cqs.Lookup(topic, queueID); ok {
		return q.MaxOffset()
	}
	return 0
}

// MinOffset is the queue's first readable offset; 0 for an unknown queue.
func (s *Store) MinOffset(topic string, queueID int32) int64 {
	if q, ok := s.cqs.Lookup(topic, queueID); ok {
		return q.MinOffset()
	}
	return 0
}

// storeTimeOf reads the STORETIMESTAMP of the record an entry points to.
func (s *Store) storeTimeOf(e consumequeue.Entry) (int64, error) {
	v, err := s.log.Read(e.CommitLogOffset, int(e.Size))
	if err != nil {
		return 0, err
	}
	defer v.Release()
	m, err := message.Decode(v.Bytes(), false)
	if err != nil {
		return 0, err
	}
	return m.StoreTimestamp(), nil
}

// OffsetByTime returns the first queue offset whose message was stored at or
// after ts (ms): the min offset if all are newer, the max offset if all are
// older (RocketMQ's SEARCH_OFFSET_BY_TIMESTAMP).
func (s *Store) OffsetByTime(topic string, queueID int32, ts int64) (int64, error) {
	q, ok := s.cqs.Lookup(topic, queueID)
	if !ok {
		return 0, nil
	}
	return q.SearchByTime(ts, s.storeTimeOf)
}

// EarliestStoreTime is the store time of the queue's first message.
func (s *Store) EarliestStoreTime(topic string, queueID int32) (int64, error) {
	q, ok := s.cqs.Lookup(topic, queueID)
	if !ok {
		return 0, fmt.Errorf("store: no queue %s/%d", topic, queueID)
	}
	e, err := q.Get(q.MinOffset())
	if err != nil {
		return 0, err
	}
	return s.storeTimeOf(e)
}

// ReadMessage returns a view of the record at a commit-log offset (for
// VIEW_MESSAGE_BY_ID, send-back and transactions). Release it when done.
// The record is checked whole (commitlog.CheckRecord, its body CRC
// included): an offset reached by its value alone may, after a power loss,
// lie inside a torn range recovery covered with a hole.
func (s *Store) ReadMessage(commitLogOffset int64) (View, error) {
	v, err := s.log.ReadRecord(commitLogOffset)
	if err != nil {
		return View{}, err
	}
	if err := commitlog.CheckRecord(v.Bytes(), commitLogOffset); err != nil {
		v.Release()
		return View{}, fmt.Errorf("store: record at %d: %w", commitLogOffset, err)
	}
	return View{v}, nil
}

// QueryByKey returns up to max messages of topic whose UNIQ_KEY or one of
// whose KEYS equals key, stored within [beginMs, endMs], newest first. The
// index's candidates are re-checked against the record (hashes collide).
// dst is appended to; release every view.
func (s *Store) QueryByKey(topic, key string, beginMs, endMs int64, max int, dst []View) ([]View, error) {
	if max <= 0 {
		return dst, nil
	}
	offs, err := s.idx.Query(topic, key, beginMs, endMs, max*4, nil)
	if err != nil {
		return dst, err
	}
	found := 0
	for _, off := range offs {
		if found >= max {
			break
		}
		v, err := s.log.ReadRecord(off)
		if err != nil {
			continue // retention removed it
		}
		// Checked whole, as ReadMessage does: the index may point into a
		// torn range a power loss left.
		if err := commitlog.CheckRecord(v.Bytes(), off); err != nil {
			v.Release()
			continue
		}
		m, err := message.Decode(v.Bytes(), false)
		if err != nil || string(m.Topic()) != topic || !hasKey(m, key) || m.StoreTimestamp() < beginMs || m.StoreTimestamp() > endMs {
			v.Release()
			continue
		}
		dst = append(dst, View{v})
		found++
	}
	return dst, nil
}

func hasKey(m message.View, key string) bool {
	if string(m.UniqKey()) == key {
		return true
	}
	keys := m.Keys()
	for len(keys) > 0 {
		i := bytes.IndexByte(keys, ' ')
		k := keys
		if i >= 0 {
			k, keys = keys[:i], keys[i+1:]
		} else {
			keys = nil
		}
		if string(k) == key {
			return true
		}
	}
	return false
}

// IndexLastUpdate reports the index's newest entry (QUERY_MESSAGE's
// indexLastUpdateTimestamp and indexLastUpdatePhyoffset).
func (s *Store) IndexLastUpdate() (timestampMs, phyOffset int64) { return s.idx.LastUpdate() }

// DeleteTopic removes a topic's consume queues, counters and lite topics. Its records stay
// in the commit log until retention removes them.
func (s *Store) DeleteTopic(topic string) error {
	s.dispatch.forget(topic)
	s.counters.remove(topic)
	if err := s.deleteLiteParent(topic); err != nil {
		return err
	}
	return s.cqs.DeleteTopic(topic)
}

// Queues calls fn for every consume queue (topic, queue id, min and max offsets).
func (s *Store) Queues(fn func(topic string, queueID int32, min, max int64) bool) {
	s.cqs.ForEach(func(topic string, id int32, q *consumequeue.Queue) bool {
		return fn(topic, id, q.MinOffset(), q.MaxOffset())
	})
}

// QueueEntry is one consume-queue entry: where a message sits in the commit
// log and its tag code (the delivery time for the broker's schedule and
// timer topics).
type QueueEntry struct {
	CommitLogOffset int64
	Size            int32
	TagCode         int64
}

// ReadEntries appends to dst the entries of (topic, queueID) from queue
// offset offset on, at most cap(dst)-len(dst) of them, without reading the
// records (the broker's delay scanners and timer wheel look at tag codes
// first). Blank pre-fill entries are returned as they are (Size 0 or
// 0x7FFFFFFF), and an entry standing for a message the commit log lost with
// Size 0. An unknown queue, or offset at or past the max offset, gives
// dst unchanged; an offset below the min offset is an error wrapping
// ErrOffsetOutOfRange. It does not allocate once dst has room.
func (s *Store) ReadEntries(topic string, queueID int32, offset int64, dst []QueueEntry) ([]QueueEntry, error) {
	if s.closed.Load() {
		return dst, ErrClosed
	}
	q, ok := s.cqs.Lookup(topic, queueID)
	if !ok || offset >= q.MaxOffset() {
		return dst, nil
	}
	if offset < q.MinOffset() {
		return dst, fmt.Errorf("%w: %s/%d offset %d below min %d", ErrOffsetOutOfRange, topic, queueID, offset, q.MinOffset())
	}
	var buf [64]consumequeue.Entry
	for len(dst) < cap(dst) {
		n := min(len(buf), cap(dst)-len(dst))
		entries, err := q.Read(offset, buf[:0:n])
		if err != nil {
			if errors.Is(err, consumequeue.ErrOutOfRange) {
				if offset < q.MinOffset() {
					return dst, fmt.Errorf("%w: %s/%d offset %d below min %d", ErrOffsetOutOfRange, topic, queueID, offset, q.MinOffset())
				}
				return dst, nil
			}
			return dst, fmt.Errorf("store: read consume queue %s/%d at %d: %w", topic, queueID, offset, err)
		}
		if len(entries) == 0 {
			return dst, nil
		}
		for _, e := range entries {
			if e.IsLost() {
				e = consumequeue.Entry{}
			}
			dst = append(dst, QueueEntry{CommitLogOffset: e.CommitLogOffset, Size: e.Size, TagCode: e.TagCode})
		}
		offset += int64(len(entries))
	}
	return dst, nil
}
