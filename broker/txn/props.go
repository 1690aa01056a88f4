package txn

import (
	"strconv"

	"github.com/apogeemq/apogee/internal/javacompat"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// The property helpers below are the broker's (broker/inner.go), repeated
// here so that the package does not reach back into the broker. They read
// and write RocketMQ's properties string: pairs "key\x01value" each closed
// by 0x02.

// nextProp splits the first pair off a properties string the way the Go
// client reads it (message.ForEachProperty): items are separated by 0x02 and
// an item is a pair only if it holds exactly one 0x01. ok is false when p
// holds no further pair; items that are not pairs are skipped.
func nextProp(p []byte) (key, val, rest []byte, ok bool) {
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

// appendPropsExcept appends src's pairs to dst, minus those whose key is one
// of drop, each closed with 0x02. It does not allocate beyond dst's growth.
func appendPropsExcept(dst, src []byte, drop ...string) []byte {
	for {
		k, v, rest, ok := nextProp(src)
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

// appendPropInt appends "key\x01<v>\x02" without allocating.
func appendPropInt(dst []byte, key string, v int64) []byte {
	dst = append(dst, key...)
	dst = append(dst, message.NameValueSeparator)
	dst = strconv.AppendInt(dst, v, 10)
	return append(dst, message.PropertySeparator)
}

// appendPropBytes appends "key\x01value\x02" without allocating.
func appendPropBytes(dst []byte, key string, value []byte) []byte {
	dst = append(dst, key...)
	dst = append(dst, message.NameValueSeparator)
	dst = append(dst, value...)
	return append(dst, message.PropertySeparator)
}

// propInt looks an integer property up; ok is false when it is absent or
// not a number (Java's Long.parseLong decides).
func propInt(props []byte, key string) (v int64, present, ok bool) {
	b, present := message.LookupProperty(props, key)
	if !present {
		return 0, false, false
	}
	v, ok = javacompat.ParseInt64(b)
	return v, true, ok
}

// recordMessage is the store.Message that re-stores the record v as it is
// (topic, queue, flags, born fields, reconsume times, body); callers then
// change what they need and set Properties. Its Body aliases v.
func recordMessage(v message.View) store.Message {
	return store.Message{
		Topic: string(v.Topic()), QueueID: v.QueueID(), Flag: v.Flag(),
		SysFlag:       v.SysFlag() &^ (message.FlagBornHostV6 | message.FlagStoreHostV6),
		BornTimestamp: v.BornTimestamp(), BornHost: v.BornHost(), ReconsumeTimes: v.ReconsumeTimes(),
		PreparedTransactionOffset: v.PreparedTransactionOffset(), Body: v.Body(),
	}
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
