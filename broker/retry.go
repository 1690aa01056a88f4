package broker

import (
	"fmt"
	"strings"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// Retry and dead-letter queues (rocketmq-protocol.md §2.10, §6.6).
const (
	// defaultRetryDelayBase: without a level from the client, a message
	// consumed n times before comes back after level 3+n (10 s, 30 s, 1 m, ...).
	defaultRetryDelayBase = 3
	// dlqQueues and retryQueues: RocketMQ gives each group one queue of each.
	dlqQueues   = 1
	retryQueues = 1
)

// retryTopic and dlqTopic name a group's retry and dead-letter topics.
func retryTopic(group string) string { return retryTopicPrefix + group }
func dlqTopic(group string) string   { return dlqTopicPrefix + group }

// ensureGroupTopic returns the entry of a group's %RETRY% or %DLQ% topic,
// creating it with one read-write queue (RocketMQ's
// createTopicInSendMessageBackMethod).
func (b *Broker) ensureGroupTopic(name string, queues int32) (*topicEntry, error) {
	if e := b.topics.lookup(name); e != nil {
		return e, nil
	}
	if len(name) > message.MaxTopicLength {
		return nil, fmt.Errorf("topic[%s] is longer than %d bytes", name, message.MaxTopicLength)
	}
	e, created := b.topics.createIfAbsent(newTopicConfig(name, queues, protocol.PermRead|protocol.PermWrite))
	if created {
		b.opts.Logger.Info("broker: topic created for a consumer group", "topic", name)
		b.topicChanged(name, false)
	}
	return e, nil
}

// handleSendBack serves CONSUMER_SEND_MSG_BACK (36): a message a consumer
// failed to consume is looked up by its commit-log offset and stored again
// in %RETRY%<group>, delayed by a delay level (the client's, or 3 +
// reconsumeTimes), with reconsumeTimes + 1; after maxReconsumeTimes (the
// request's, else the group's retryMaxTimes), or for a negative delay
// level, it goes to %DLQ%<group> instead.
func (b *Broker) handleSendBack(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ConsumerSendMsgBackRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	g := b.groups.get([]byte(h.Group))
	if g == nil {
		return fail(resp, protocol.RespSubscriptionGroupNotExist, "subscription group not exist, "+h.Group)
	}
	if g.RetryQueueNums <= 0 {
		return remoting.Reply // RocketMQ: the group has no retry queue, the message is dropped
	}
	rt, err := b.ensureGroupTopic(retryTopic(h.Group), retryQueues)
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if !rt.writable() {
		return fail(resp, protocol.RespNoPermission, "the topic["+rt.name+"] sending message is forbidden")
	}
	view, err := b.store.ReadMessage(h.Offset)
	if err != nil {
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("look message by offset failed, %d", h.Offset))
	}
	defer view.Release()
	v, err := message.Decode(view.Bytes(), false)
	if err != nil {
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("look message by offset failed, %d: %v", h.Offset, err))
	}

	maxTimes := g.RetryMaxTimes
	if h.HasMaxReconsumeTimes {
		maxTimes = h.MaxReconsumeTimes
	}
	// An orderly group (consumeMessageOrderly) does not retry through the
	// retry topic: its failures go to the DLQ, as for a group holding locks.
	dead := v.ReconsumeTimes() >= maxTimes || h.DelayLevel < 0 || g.ConsumeMessageOrderly

	s := b.getSendScratch()
	defer b.putSendScratch(s)
	m := recordMessage(v)
	m.ReconsumeTimes = v.ReconsumeTimes() + 1
	m.QueueID = 0
	// Properties: the original's, RETRY_TOPIC (the topic it was first
	// consumed from) and ORIGIN_MESSAGE_ID kept or set, routing properties
	// of earlier trips (DELAY, REAL_*, timers) dropped.
	s.props = appendPropsExcept(s.props[:0], v.Properties(), message.PropDelay, message.PropRealTopic,
		message.PropRealQueueID, message.PropTimerDeliverMS, message.PropTimerDelayMS, message.PropTimerDelaySec,
		propTimerOutMS, message.PropWait)
	if _, ok := v.Property(message.PropRetryTopic); !ok {
		s.props = message.AppendProperty(s.props, message.PropRetryTopic, string(v.Topic()))
	}
	if id, ok := v.Property(message.PropOriginMessageID); !ok || len(id) == 0 {
		s.props = append(s.props, message.PropOriginMessageID...)
		s.props = append(s.props, message.NameValueSeparator)
		s.props = v.AppendOffsetMsgID(s.props)
		s.props = append(s.props, message.PropertySeparator)
	}
	if dead {
		dt, err := b.ensureGroupTopic(dlqTopic(h.Group), dlqQueues)
		if err != nil {
			return fail(resp, protocol.RespSystemError, err.Error())
		}
		m.Topic = dt.name
		b.stats.deadLetters.Add(1)
		b.opts.Logger.Info("broker: message sent to the dead-letter queue", "group", h.Group, "topic", string(v.Topic()),
			"offset", h.Offset, "reconsumeTimes", v.ReconsumeTimes(), "maxReconsumeTimes", maxTimes, "delayLevel", h.DelayLevel)
	} else {
		m.Topic = rt.name
		policy, _ := parseRetryPolicy(g.GroupRetryPolicy)
		switch level := int64(h.DelayLevel); {
		case level == 0 && policy != nil:
			// The group's retry policy: any interval, through the timer wheel.
			deliver := time.Now().Add(policy.delay(v.ReconsumeTimes())).UnixMilli()
			s.props = b.timerProps(s.props, &m, deliver)
		case level == 0:
			s.props = b.scheduleProps(s.props, &m, defaultRetryDelayBase+int64(v.ReconsumeTimes()))
		default:
			s.props = b.scheduleProps(s.props, &m, level)
		}
	}
	if len(s.props) > message.MaxPropertiesSize {
		return fail(resp, protocol.RespMessageIllegal, "the retried message's properties are longer than 32767 bytes")
	}
	m.Properties = s.props
	b.stats.sendBacks.Add(1)
	return b.putAndAnswer(c, req, resp, &m, s)
}

// scheduleProps moves m to SCHEDULE_TOPIC_XXXX for delay level level (> 0,
// clamped to the last level): the queue is level-1, and DELAY, REAL_TOPIC
// and REAL_QID are appended to props. It does not allocate beyond props'
// growth.
func (b *Broker) scheduleProps(props []byte, m *store.Message, level int64) []byte {
	lv := b.sched.ClampLevel(level)
	props = appendPropInt(props, message.PropDelay, int64(lv))
	props = message.AppendProperty(props, message.PropRealTopic, m.Topic)
	props = appendPropInt(props, message.PropRealQueueID, int64(m.QueueID))
	m.Topic = scheduleTopic
	m.QueueID = lv - 1
	b.stats.delayed.Add(1)
	return props
}

// putAndAnswer stores one message the broker built for a request and
// answers it with a bare SUCCESS; in sync-flush mode the answer waits (off
// the connection's goroutine) for the flush.
func (b *Broker) putAndAnswer(c *remoting.Conn, req *protocol.Command, resp *remoting.Response, m *store.Message, s *sendScratch) remoting.Action {
	m.NoWait = true
	s.msgs = append(s.msgs[:0], *m)
	var err error
	s.res, err = b.store.PutBatch(s.msgs, s.res[:0])
	if err != nil {
		code, remark := putErrorCode(err)
		return fail(resp, code, remark)
	}
	b.stats.innerPuts.Add(1)
	if !b.syncFlush {
		return remoting.Reply
	}
	r := &s.res[0]
	a := b.acks.get(b)
	a.end, a.plain = r.CommitLogOffset+int64(r.Size), true
	return b.answerWhenDurable(c, req, resp, a)
}

// isRetryTopic reports whether a topic is a %RETRY% topic.
func isRetryTopic(t string) bool { return strings.HasPrefix(t, retryTopicPrefix) }

// registerRetry registers CONSUMER_SEND_MSG_BACK.
func (b *Broker) registerRetry(t *handlerTable) {
	t.add(b.handleSendBack, protocol.ReqConsumerSendMsgBack)
}
