package txn

import (
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// The property helpers are broker/internal/reput's, shared with the other
// features that re-store records; appendPropBytes is the one only
// transactions need.

// appendPropBytes appends "key\x01value\x02" without allocating.
func appendPropBytes(dst []byte, key string, value []byte) []byte {
	dst = append(dst, key...)
	dst = append(dst, message.NameValueSeparator)
	dst = append(dst, value...)
	return append(dst, message.PropertySeparator)
}

// span is a message's properties within a scratch buffer.
type span struct{ start, end int }

// scratch is the working memory of one operation that stores records: the
// properties of each message back to back, the messages, the results and
// the records the messages' bodies alias (pinned until stored).
type scratch struct {
	props []byte
	spans []span
	msgs  []store.Message
	res   []store.PutResult
	ids   []byte
	ents  []store.QueueEntry
	views []store.View
}

// reset releases the pinned records and empties everything (ents aside).
func (s *scratch) reset() {
	for i := range s.views {
		s.views[i].Release()
	}
	clear(s.views)
	clear(s.msgs) // drop references to record bytes
	s.props, s.spans, s.msgs, s.res, s.ids, s.views = s.props[:0], s.spans[:0], s.msgs[:0], s.res[:0], s.ids[:0], s.views[:0]
}

// add queues m with the properties s.props[start:].
func (s *scratch) add(m store.Message, start int) {
	s.spans = append(s.spans, span{start, len(s.props)})
	s.msgs = append(s.msgs, m)
}

// fix points each message at its properties (s.props may have moved while
// it grew).
func (s *scratch) fix() {
	for i := range s.msgs {
		s.msgs[i].Properties = s.props[s.spans[i].start:s.spans[i].end]
	}
}

// entries returns s.ents emptied with room for n entries.
func (s *scratch) entries(n int) []store.QueueEntry {
	if cap(s.ents) < n {
		s.ents = make([]store.QueueEntry, 0, n)
	}
	return s.ents[:0:n]
}
