package broker

import (
	"errors"
	"strconv"

	"github.com/apogeemq/apogee/internal/javacompat"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// System topics of the messaging features (RocketMQ's TopicValidator names).
const (
	scheduleTopic       = "SCHEDULE_TOPIC_XXXX"
	timerTopic          = "rmq_sys_wheel_timer"
	propTimerOutMS      = "TIMER_OUT_MS"
	propTimerRollTimes  = "TIMER_ROLL_TIMES"
	maxInnerBatchBytes  = 256 << 10 // a re-put batch of the scanners stays below this
	maxInnerBatchLength = 32
)

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

// propInt looks an integer property up; ok is false when it is absent or
// not a number.
func propInt(props []byte, key string) (v int64, present, ok bool) {
	b, present := message.LookupProperty(props, key)
	if !present {
		return 0, false, false
	}
	v, ok = javacompat.ParseInt64(b) // as the Java broker: Long.parseLong
	return v, true, ok
}

// recordMessage is the store.Message that re-stores the record v as it is
// (topic, queue, flags, born fields, reconsume times, body); callers then
// change what they need and set Properties.
func recordMessage(v message.View) store.Message {
	return store.Message{
		Topic: string(v.Topic()), QueueID: v.QueueID(), Flag: v.Flag(),
		SysFlag:       v.SysFlag() &^ (message.FlagBornHostV6 | message.FlagStoreHostV6),
		BornTimestamp: v.BornTimestamp(), BornHost: v.BornHost(), ReconsumeTimes: v.ReconsumeTimes(),
		PreparedTransactionOffset: v.PreparedTransactionOffset(), Body: v.Body(),
	}
}

// putInner stores messages the broker makes itself (retries, dead letters,
// redeliveries of delayed messages and timers, committed transactions, op
// records). In sync-flush mode it returns only once they are flushed (a
// flush that times out still counts as stored, as for producers). It must
// not be called on a connection's read goroutine in sync-flush mode; the
// request handlers use putDeferred.
func (b *Broker) putInner(msgs []store.Message, res []store.PutResult) ([]store.PutResult, error) {
	for i := range msgs {
		msgs[i].NoWait = true
	}
	n := len(res)
	res, err := b.store.PutBatch(msgs, res)
	if err != nil {
		return res, err
	}
	b.stats.innerPuts.Add(int64(len(msgs)))
	if b.syncFlush {
		last := &res[len(res)-1]
		if err := b.store.WaitDurable(last.CommitLogOffset + int64(last.Size)); err != nil &&
			!errors.Is(err, store.ErrFlushTimeout) {
			return res[:n], err
		}
	}
	return res, nil
}

// innerScratch is the working memory of one goroutine that re-stores
// records: the properties of each message back to back, the messages and
// the results.
type innerScratch struct {
	props []byte
	spans []span
	msgs  []store.Message
	res   []store.PutResult
	ents  []store.QueueEntry
	views []store.View // records the messages' bodies alias, pinned until stored
}

// reset releases the pinned records and empties everything.
func (s *innerScratch) reset() {
	for i := range s.views {
		s.views[i].Release()
	}
	clear(s.views)
	clear(s.msgs)
	s.props, s.spans, s.msgs, s.res, s.views = s.props[:0], s.spans[:0], s.msgs[:0], s.res[:0], s.views[:0]
}

// add queues m with the properties s.props[start:].
func (s *innerScratch) add(m store.Message, start int) {
	s.spans = append(s.spans, span{start, len(s.props)})
	s.msgs = append(s.msgs, m)
}

// fix points each message at its properties (s.props may have moved while
// it grew).
func (s *innerScratch) fix() {
	for i := range s.msgs {
		s.msgs[i].Properties = s.props[s.spans[i].start:s.spans[i].end]
	}
}

// entries returns s.ents emptied with room for n entries.
func (s *innerScratch) entries(n int) []store.QueueEntry {
	if cap(s.ents) < n {
		s.ents = make([]store.QueueEntry, 0, n)
	}
	return s.ents[:0:n]
}
