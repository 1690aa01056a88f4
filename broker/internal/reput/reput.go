// Package reput is what the broker's features that store again records the
// store already holds (the delay scheduler, the timer wheel; the
// transaction checker and POP's revive can use it too) share: the batch
// bounds of a re-put, the working memory of a goroutine that re-puts
// (Scratch), the reader that keeps the records it read pinned until their
// put returns (Records), and the properties edits a re-put makes
// (AppendPropsExcept, AppendPropInt, PropInt, Message, RealTarget).
//
// Nothing here allocates beyond the growth of the slices it is given, and
// nothing holds a lock: a Scratch and a Records belong to one goroutine.
package reput

import (
	"strconv"

	"github.com/apogeemq/apogee/internal/javacompat"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

const (
	// MaxBatchBytes bounds the records of one re-put batch (the batch holds
	// at least one record, whatever its size).
	MaxBatchBytes = 256 << 10
	// MaxBatchLength bounds the number of records of one re-put batch.
	MaxBatchLength = 32
	// BlankEntrySize marks a consume queue's pre-fill entries
	// (store.QueueEntry.Size); an entry of Size 0 stands for a record the
	// commit log lost. Neither points to a record.
	BlankEntrySize = 0x7FFFFFFF
)

// Records reads records for one goroutine. Every record Read returns stays
// valid (pinned in the commit log) until ReleaseAll: a re-put's messages
// alias the records they copy (body, properties), so the pins last until
// the put that copies them has returned. A Records is not safe for
// concurrent use.
type Records interface {
	// Read returns the record at a commit-log offset: a whole v1 record,
	// valid until ReleaseAll. The caller must not modify it.
	Read(commitLogOffset int64) ([]byte, error)
	// ReleaseAll unpins every record Read returned since the last ReleaseAll.
	ReleaseAll()
}

// Scratch is the working memory of one goroutine that re-stores records:
// the properties of each message back to back, the messages, the results,
// the consume-queue entries read, and the records they alias (pinned by
// Recs until Reset).
//
// Use: Entries for a read of the queue; per record, append its properties
// to Props and Add its message; Fix before the put (Props may have moved as
// it grew); Reset after it.
type Scratch struct {
	Props []byte
	Msgs  []store.Message
	Res   []store.PutResult
	Ents  []store.QueueEntry
	// Recs pins the records Msgs alias. It is set once, by the owner.
	Recs  Records
	spans []span
}

type span struct{ start, end int }

// Reset releases the pinned records and empties everything (keeping the
// capacity).
func (s *Scratch) Reset() {
	if s.Recs != nil {
		s.Recs.ReleaseAll()
	}
	clear(s.Msgs) // drop references to the released records
	s.Props, s.spans, s.Msgs, s.Res = s.Props[:0], s.spans[:0], s.Msgs[:0], s.Res[:0]
}

// Add queues m with the properties s.Props[start:].
func (s *Scratch) Add(m store.Message, start int) {
	s.spans = append(s.spans, span{start, len(s.Props)})
	s.Msgs = append(s.Msgs, m)
}

// Fix points each queued message at its properties.
func (s *Scratch) Fix() {
	for i := range s.Msgs {
		s.Msgs[i].Properties = s.Props[s.spans[i].start:s.spans[i].end]
	}
}

// Entries returns s.Ents emptied with room for n entries (for
// store.ReadEntries, which fills up to the capacity). Store the result
// back in s.Ents (as ents[:0]) to keep a grown array.
func (s *Scratch) Entries(n int) []store.QueueEntry {
	if cap(s.Ents) < n {
		s.Ents = make([]store.QueueEntry, 0, n)
	}
	return s.Ents[:0:n]
}

// NextProp splits the first pair off a properties string the way the Go
// client reads it (message.ForEachProperty): items are separated by 0x02
// and an item is a pair only if it holds exactly one 0x01. ok is false when
// p holds no further pair; items that are not pairs are skipped.
func NextProp(p []byte) (key, val, rest []byte, ok bool) {
	for len(p) > 0 {
		item := p
		rest = nil
		for i, c := range p {
			if c == message.PropertySeparator {
				item, rest = p[:i], p[i+1:]
				break
			}
		}
		sep, n := -1, 0
		for i, c := range item {
			if c == message.NameValueSeparator {
				sep = i
				n++
			}
		}
		if n == 1 {
			return item[:sep], item[sep+1:], rest, true
		}
		p = rest
	}
	return nil, nil, nil, false
}

// AppendPropsExcept appends src's pairs to dst, minus those whose key is
// one of drop, each closed with 0x02. It does not allocate beyond dst's
// growth.
func AppendPropsExcept(dst, src []byte, drop ...string) []byte {
	for {
		k, v, rest, ok := NextProp(src)
		if !ok {
			return dst
		}
		src = rest
		skip := false
		for _, d := range drop {
			if string(k) == d {
				skip = true
				break
			}
		}
		if skip {
			continue
		}
		dst = append(dst, k...)
		dst = append(dst, message.NameValueSeparator)
		dst = append(dst, v...)
		dst = append(dst, message.PropertySeparator)
	}
}

// AppendPropInt appends "key\x01<v>\x02" without allocating.
func AppendPropInt(dst []byte, key string, v int64) []byte {
	dst = append(dst, key...)
	dst = append(dst, message.NameValueSeparator)
	dst = strconv.AppendInt(dst, v, 10)
	return append(dst, message.PropertySeparator)
}

// PropInt looks an integer property up; ok is false when it is absent or
// not a number (read as Java's Long.parseLong does).
func PropInt(props []byte, key string) (v int64, present, ok bool) {
	b, present := message.LookupProperty(props, key)
	if !present {
		return 0, false, false
	}
	v, ok = javacompat.ParseInt64(b)
	return v, true, ok
}

// Message is the store.Message that re-stores the record v as it is
// (topic, queue, flags, born fields, reconsume times, body); callers then
// change what they need and set Properties. Body aliases v.
func Message(v message.View) store.Message {
	return store.Message{
		Topic: string(v.Topic()), QueueID: v.QueueID(), Flag: v.Flag(),
		SysFlag:       v.SysFlag() &^ (message.FlagBornHostV6 | message.FlagStoreHostV6),
		BornTimestamp: v.BornTimestamp(), BornHost: v.BornHost(), ReconsumeTimes: v.ReconsumeTimes(),
		PreparedTransactionOffset: v.PreparedTransactionOffset(), Body: v.Body(),
	}
}

// RealTarget returns the topic and queue a routed record (a delayed, timer
// or half message) is for: its REAL_TOPIC and REAL_QID properties. ok is
// false when either is missing, REAL_TOPIC is empty or REAL_QID is not a
// number in [0, 2^31).
func RealTarget(v message.View) (topic []byte, queueID int32, ok bool) {
	props := v.Properties()
	topic, okT := message.LookupProperty(props, message.PropRealTopic)
	qid, _, okQ := PropInt(props, message.PropRealQueueID)
	if !okT || len(topic) == 0 || !okQ || qid < 0 || qid > 1<<31-1 {
		return nil, 0, false
	}
	return topic, int32(qid), true
}
