package pop

import (
	"github.com/apogeemq/apogee/broker/internal/reput"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// deadLetterLocked stores a copy of rec in %DLQ%<group> (m.mu held; the put
// does not wait for a flush). The copy keeps the record's topic-independent
// fields and properties and adds RETRY_TOPIC (the original topic) and
// ORIGIN_MESSAGE_ID unless the record has them. A failure is logged: the
// message is done for the group either way.
func (m *Manager) deadLetterLocked(group string, rec []byte) {
	v, err := message.Decode(rec, false)
	if err != nil {
		return
	}
	dlq, err := m.host.DeadLetterTopic(group)
	if err != nil {
		m.cfg.Logger.Error("pop: create the dead-letter topic failed", "group", group, "err", err)
		return
	}
	msg := store.Message{
		Topic: dlq, QueueID: 0, Flag: v.Flag(),
		SysFlag:       v.SysFlag() &^ (message.FlagBornHostV6 | message.FlagStoreHostV6),
		BornTimestamp: v.BornTimestamp(), BornHost: v.BornHost(), ReconsumeTimes: v.ReconsumeTimes(),
		PreparedTransactionOffset: v.PreparedTransactionOffset(), Body: v.Body(),
		NoWait: true,
	}
	props := reput.AppendPropsExcept(nil, v.Properties())
	if _, ok := v.Property(message.PropRetryTopic); !ok {
		props = message.AppendProperty(props, message.PropRetryTopic, string(v.Topic()))
	}
	if id, ok := v.Property(message.PropOriginMessageID); !ok || len(id) == 0 {
		props = append(props, message.PropOriginMessageID...)
		props = append(props, message.NameValueSeparator)
		props = v.AppendOffsetMsgID(props)
		props = append(props, message.PropertySeparator)
	}
	msg.Properties = props
	if err := m.host.Put(msg); err != nil {
		m.cfg.Logger.Error("pop: dead-letter put failed", "group", group, "err", err)
		return
	}
	m.stats.deadLetters.Add(1)
	m.cfg.Logger.Info("pop: popped message sent to the dead-letter queue", "group", group,
		"topic", string(v.Topic()), "queue", v.QueueID(), "offset", v.QueueOffset())
}
