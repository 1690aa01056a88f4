package client

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/message"
)

// MessageQueue identifies a queue: a topic's queue QueueID on the broker (master and
// slaves) named BrokerName.
type MessageQueue struct {
	Topic      string
	BrokerName string
	QueueID    int32
}

func (q MessageQueue) String() string {
	return q.Topic + "@" + q.BrokerName + "@" + strconv.Itoa(int(q.QueueID))
}

func mqLess(a, b MessageQueue) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	if c := strings.Compare(a.BrokerName, b.BrokerName); c != 0 {
		return c
	}
	return int(a.QueueID) - int(b.QueueID)
}

// Message is what a producer sends.
//
// A send reads the message and does not keep it: once SendAsync has returned, the
// caller may reuse it (and its Body) even before the callback runs.
type Message struct {
	Topic string
	Body  []byte

	// Tags is the message's tag (property TAGS), what subscriptions filter on.
	Tags string
	// Keys are business keys (property KEYS, space-separated), indexed by the broker.
	Keys []string
	// ShardingKey picks the queue with HashSelector (property SHARDING_KEY).
	ShardingKey string
	// DelayLevel delays delivery by RocketMQ's level (1 = 1 s ... 18 = 2 h; property DELAY).
	DelayLevel int
	// DeliverAt asks for delivery at that time (property TIMER_DELIVER_MS; RocketMQ 5
	// timer brokers).
	DeliverAt time.Time
	// Flag is the user flag stored with the record.
	Flag int32
	// Properties are user properties. Keys and values must not contain the bytes
	// 0x01 and 0x02. A property also set by a field above is taken from the field.
	// For received messages this holds every property, system ones included.
	Properties map[string]string
	// Queue is the queue to send to with ManualSelector. For a received message it is
	// the queue it came from.
	Queue *MessageQueue
}

// MessageExt is a received message: the Message and what the broker stored with it.
// It is the consumer's to keep. Its Body shares one array with the other messages
// of the pull response it came in (as in the official client, without a copy per
// message), so keeping one message keeps that array alive: copy the Body to keep a
// few messages of many for long. The Body's capacity ends where the body does, so an
// append to it cannot reach another message's bytes.
type MessageExt struct {
	Message
	// MsgID is the producer's unique id (UNIQ_KEY), or the OffsetMsgID when there is none.
	MsgID string
	// OffsetMsgID is the broker's id: store host and commit-log offset, in hex.
	OffsetMsgID string
	// QueueOffset is the message's position in its queue.
	QueueOffset int64
	// CommitLogOffset is the record's position in the broker's commit log.
	CommitLogOffset  int64
	SysFlag          int32
	BornTimestamp    time.Time
	BornHost         netip.AddrPort
	StoreTimestamp   time.Time
	StoreHost        netip.AddrPort
	ReconsumeTimes   int32
	PreparedTxOffset int64
	// StoreSize is the record's size in the commit log.
	StoreSize int32

	queue MessageQueue
}

// Property returns the property key ("" when absent).
func (m *MessageExt) Property(key string) string { return m.Properties[key] }

func (m *MessageExt) String() string {
	return fmt.Sprintf("MessageExt{%s offset=%d id=%s tags=%q body=%d}", m.queue, m.QueueOffset, m.MsgID, m.Tags, len(m.Body))
}

// MessageModel says how a consumer group shares messages.
type MessageModel int

const (
	// Clustering shares a topic's queues among the group; each message goes to one
	// consumer of the group. Offsets live on the broker.
	Clustering MessageModel = iota
	// Broadcasting gives every consumer every message. Offsets live in a local file.
	Broadcasting
)

func (m MessageModel) String() string {
	if m == Broadcasting {
		return "BROADCASTING"
	}
	return "CLUSTERING"
}

// ConsumeFrom says where a group with no stored offset for a queue starts.
type ConsumeFrom int

const (
	ConsumeFromLastOffset  ConsumeFrom = iota // new messages only (retry topics from their start)
	ConsumeFromFirstOffset                    // the queue's first message
	ConsumeFromTimestamp                      // the first message stored at or after a time
)

func (f ConsumeFrom) String() string {
	switch f {
	case ConsumeFromFirstOffset:
		return "CONSUME_FROM_FIRST_OFFSET"
	case ConsumeFromTimestamp:
		return "CONSUME_FROM_TIMESTAMP"
	}
	return "CONSUME_FROM_LAST_OFFSET"
}

// Compression is a body codec.
type Compression int

const (
	CompressionZlib Compression = iota // sysflag 0x1 (every RocketMQ client reads it)
	CompressionZstd                    // sysflag 0x1|0x200 (RocketMQ 5 compression type)
)

// reservedField reports whether a user property key is set from a Message field
// that is in use, so the map's entry is skipped.
func reservedField(m *Message, key string) bool {
	switch key {
	case message.PropTags:
		return m.Tags != ""
	case message.PropKeys:
		return len(m.Keys) > 0
	case message.PropShardingKey:
		return m.ShardingKey != ""
	case message.PropDelay:
		return m.DelayLevel > 0
	case message.PropTimerDeliverMS:
		return !m.DeliverAt.IsZero()
	}
	return false
}

func validProp(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == message.NameValueSeparator || s[i] == message.PropertySeparator {
			return false
		}
	}
	return true
}

// appendProperties appends m's properties, and UNIQ_KEY=uniq when uniq is not empty,
// to dst. It does not allocate beyond growing dst.
func appendProperties(dst []byte, m *Message, uniq []byte) ([]byte, error) {
	for k, v := range m.Properties {
		if k == "" || !validProp(k) || !validProp(v) {
			return dst, fmt.Errorf("%w: property %q", ErrBadMessage, k)
		}
		if reservedField(m, k) {
			continue
		}
		dst = message.AppendProperty(dst, k, v)
	}
	if m.Tags != "" {
		if !validProp(m.Tags) {
			return dst, fmt.Errorf("%w: tags contain a separator byte", ErrBadMessage)
		}
		dst = message.AppendProperty(dst, message.PropTags, m.Tags)
	}
	if len(m.Keys) > 0 {
		dst = append(dst, message.PropKeys...)
		dst = append(dst, message.NameValueSeparator)
		for i, k := range m.Keys {
			if !validProp(k) {
				return dst, fmt.Errorf("%w: key contains a separator byte", ErrBadMessage)
			}
			if i > 0 {
				dst = append(dst, message.PropKeysSeparator...)
			}
			dst = append(dst, k...)
		}
		dst = append(dst, message.PropertySeparator)
	}
	if m.ShardingKey != "" && validProp(m.ShardingKey) {
		dst = message.AppendProperty(dst, message.PropShardingKey, m.ShardingKey)
	}
	if m.DelayLevel > 0 {
		dst = append(dst, message.PropDelay...)
		dst = append(dst, message.NameValueSeparator)
		dst = strconv.AppendInt(dst, int64(m.DelayLevel), 10)
		dst = append(dst, message.PropertySeparator)
	}
	if !m.DeliverAt.IsZero() {
		dst = append(dst, message.PropTimerDeliverMS...)
		dst = append(dst, message.NameValueSeparator)
		dst = strconv.AppendInt(dst, m.DeliverAt.UnixMilli(), 10)
		dst = append(dst, message.PropertySeparator)
	}
	if len(uniq) > 0 {
		dst = append(dst, message.PropUniqKey...)
		dst = append(dst, message.NameValueSeparator)
		dst = append(dst, uniq...)
		dst = append(dst, message.PropertySeparator)
	}
	if len(dst) > message.MaxPropertiesSize {
		return dst, fmt.Errorf("%w: properties take %d bytes, over %d", ErrBadMessage, len(dst), message.MaxPropertiesSize)
	}
	return dst, nil
}

// newTagSubscription parses a tag expression: "*" or "" is everything, otherwise tags
// separated by "||", trimmed.
func newTagSubscription(topic, expr string) subscription {
	s := subscription{topic: topic, expr: strings.TrimSpace(expr), version: time.Now().UnixNano()}
	if s.expr == "" || s.expr == "*" {
		s.expr = "*"
		return s
	}
	for _, t := range strings.Split(s.expr, "||") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		s.tags = append(s.tags, t)
		s.codes = append(s.codes, message.JavaHashCode(t))
	}
	if len(s.tags) == 0 {
		s.expr = "*"
	}
	return s
}

// matchTag re-checks a message's tag against the subscription by exact string (the
// broker filters by hash only).
func (s *subscription) matchTag(tag string) bool {
	if s.sql || s.tags == nil {
		return true
	}
	for _, t := range s.tags {
		if tag == t {
			return true
		}
	}
	return false
}

func (s *subscription) expressionType() string {
	if s.sql {
		return "SQL92"
	}
	return "TAG"
}

func retryTopic(group string) string { return "%RETRY%" + group }

func isRetryTopic(topic string) bool { return strings.HasPrefix(topic, "%RETRY%") }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
