package client

import (
	"strings"
	"time"

	"github.com/apogeemq/apogee/message"
)

// decodeMessage turns the record v into a new MessageExt. Its Body aliases v's
// body (capacity capped at its length), so v's bytes must be the caller's to give
// away: a response that no one reuses. The body is inflated
// when the record is compressed (a body that does not inflate is kept as stored, as
// the official Go client does, and the error returned alongside the message). A
// record from a retry topic gets its original topic back (RETRY_TOPIC).
func decodeMessage(v message.View, queue MessageQueue) (*MessageExt, error) {
	m := &MessageExt{queue: queue}
	m.Queue = &m.queue
	m.Topic = queue.Topic
	if queue.Topic == "" {
		m.Topic = string(v.Topic())
		m.queue.Topic = m.Topic
	}
	m.QueueOffset = v.QueueOffset()
	m.CommitLogOffset = v.PhysicalOffset()
	m.SysFlag = v.SysFlag()
	m.Flag = v.Flag()
	m.BornTimestamp = time.UnixMilli(v.BornTimestamp())
	m.StoreTimestamp = time.UnixMilli(v.StoreTimestamp())
	m.BornHost = v.BornHost()
	m.StoreHost = v.StoreHost()
	m.ReconsumeTimes = v.ReconsumeTimes()
	m.PreparedTxOffset = v.PreparedTransactionOffset()
	m.StoreSize = int32(v.TotalSize())
	// The offset id and the properties share one string: one allocation for
	// both (and for every property key and value, substrings of it).
	var sbuf [256]byte
	s := v.AppendOffsetMsgID(sbuf[:0])
	idLen := len(s)
	all := string(append(s, v.Properties()...))
	m.OffsetMsgID = all[:idLen]
	m.Properties = message.ParsePropertiesString(all[idLen:])
	m.Tags = m.Properties[message.PropTags]
	if k := m.Properties[message.PropKeys]; k != "" {
		m.Keys = strings.Split(k, message.PropKeysSeparator)
	}
	m.ShardingKey = m.Properties[message.PropShardingKey]
	m.MsgID = m.Properties[message.PropUniqKey]
	if m.MsgID == "" {
		m.MsgID = m.OffsetMsgID
	}
	if rt := m.Properties[message.PropRetryTopic]; rt != "" && isRetryTopic(m.Topic) {
		m.Topic = rt
	}
	body := v.Body()
	var err error
	if m.SysFlag&message.FlagCompressed != 0 {
		var out []byte
		if out, err = decompress(body, m.SysFlag); err == nil {
			m.Body = out
			return m, nil
		}
	}
	m.Body = body[:len(body):len(body)]
	return m, err
}
