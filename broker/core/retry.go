package core

import (
	"fmt"
	"strings"
	"time"

	"github.com/apogeemq/apogee/message"
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

// isRetryTopic reports whether a topic is a %RETRY% topic.
func isRetryTopic(t string) bool { return strings.HasPrefix(t, retryTopicPrefix) }

// SendBackRequest is a consumer's report that it failed to consume a
// message (CONSUMER_SEND_MSG_BACK, 36).
type SendBackRequest struct {
	Group string
	// Offset is the message's commit-log offset.
	Offset int64
	// DelayLevel: 0 lets the broker decide (the group's retry policy, else
	// level 3 + reconsumeTimes), > 0 a delay level, < 0 straight to the DLQ.
	DelayLevel int32
	// MaxReconsumeTimes, when HasMaxReconsumeTimes, replaces the group's
	// retryMaxTimes.
	MaxReconsumeTimes    int32
	HasMaxReconsumeTimes bool
}

// SendBack stores again a message a consumer failed to consume: looked up
// by its commit-log offset, it goes to %RETRY%<group> (created on first
// use) delayed by a delay level (the request's, or 3 + reconsumeTimes) or
// by the group's 5.x retry policy (any interval, through the timer wheel),
// with reconsumeTimes + 1; after maxReconsumeTimes (the request's, else the
// group's retryMaxTimes), for a negative delay level, or for a group that
// consumes orderly, to %DLQ%<group> instead. A group without retry queues
// drops it (RocketMQ does too). In sync-flush mode the answer waits for
// the returned Pending.
func (c *Core) SendBack(r *SendBackRequest) (Pending, error) {
	if c.slave.Load() {
		return Pending{}, errSlaveSend
	}
	if e := c.gate.Load(); e != nil {
		return Pending{}, e
	}
	g := c.groups.get([]byte(r.Group))
	if g == nil {
		return Pending{}, newError(ReasonSubscriptionGroupNotExist, "subscription group not exist, "+r.Group)
	}
	if g.RetryQueueNums <= 0 {
		return Pending{}, nil // RocketMQ: the group has no retry queue, the message is dropped
	}
	rt, err := c.ensureGroupTopic(retryTopic(r.Group), retryQueues)
	if err != nil {
		return Pending{}, wrapError(ReasonSystemError, err.Error(), err)
	}
	if !rt.writable() {
		return Pending{}, newError(ReasonTopicPermission, "the topic["+rt.name+"] sending message is forbidden")
	}
	view, err := c.store.ReadMessage(r.Offset)
	if err != nil {
		return Pending{}, wrapError(ReasonMessageNotAtOffset, fmt.Sprintf("look message by offset failed, %d", r.Offset), err)
	}
	defer view.Release()
	v, err := message.Decode(view.Bytes(), false)
	if err != nil {
		return Pending{}, wrapError(ReasonMessageNotAtOffset, fmt.Sprintf("look message by offset failed, %d: %v", r.Offset, err), err)
	}

	maxTimes := g.RetryMaxTimes
	if r.HasMaxReconsumeTimes {
		maxTimes = r.MaxReconsumeTimes
	}
	// An orderly group (consumeMessageOrderly) does not retry through the
	// retry topic: its failures go to the DLQ, as for a group holding locks.
	dead := v.ReconsumeTimes() >= maxTimes || r.DelayLevel < 0 || g.ConsumeMessageOrderly

	s := c.getSendScratch()
	defer c.putSendScratch(s)
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
		dt, err := c.ensureGroupTopic(dlqTopic(r.Group), dlqQueues)
		if err != nil {
			return Pending{}, wrapError(ReasonSystemError, err.Error(), err)
		}
		m.Topic = dt.name
		c.stats.deadLetters.Add(1)
		c.opts.Logger.Info("broker: message sent to the dead-letter queue", "group", r.Group, "topic", string(v.Topic()),
			"offset", r.Offset, "reconsumeTimes", v.ReconsumeTimes(), "maxReconsumeTimes", maxTimes, "delayLevel", r.DelayLevel)
	} else {
		m.Topic = rt.name
		policy, _ := parseRetryPolicy(g.GroupRetryPolicy)
		switch level := int64(r.DelayLevel); {
		case level == 0 && policy != nil:
			// The group's retry policy: any interval, through the timer wheel.
			deliver := time.Now().Add(policy.delay(v.ReconsumeTimes())).UnixMilli()
			s.props = c.timerProps(s.props, &m, deliver)
		case level == 0:
			s.props = c.scheduleProps(s.props, &m, defaultRetryDelayBase+int64(v.ReconsumeTimes()))
		default:
			s.props = c.scheduleProps(s.props, &m, level)
		}
	}
	if len(s.props) > message.MaxPropertiesSize {
		return Pending{}, newError(ReasonMessagePropertiesTooLarge, "the retried message's properties are longer than 32767 bytes")
	}
	m.Properties = s.props
	c.stats.sendBacks.Add(1)
	c.rstats.SentBack(string(v.Topic()), g.GroupName)
	return c.putOne(&m, s)
}

// scheduleProps moves m to SCHEDULE_TOPIC_XXXX for delay level level (> 0,
// clamped to the last level): the queue is level-1, and DELAY, REAL_TOPIC
// and REAL_QID are appended to props. It does not allocate beyond props'
// growth.
func (c *Core) scheduleProps(props []byte, m *store.Message, level int64) []byte {
	lv := c.features().sched.ClampLevel(level)
	props = appendPropInt(props, message.PropDelay, int64(lv))
	props = message.AppendProperty(props, message.PropRealTopic, m.Topic)
	props = appendPropInt(props, message.PropRealQueueID, int64(m.QueueID))
	m.Topic = scheduleTopic
	m.QueueID = lv - 1
	c.stats.delayed.Add(1)
	return props
}

// putOne stores one message the core built for an operation, without
// waiting for the flush; in sync-flush mode the returned Pending covers it.
func (c *Core) putOne(m *store.Message, s *sendScratch) (Pending, error) {
	m.NoWait = true
	s.msgs = append(s.msgs[:0], *m)
	var err error
	s.res, err = c.store.PutBatch(s.msgs, s.res[:0])
	if err != nil {
		return Pending{}, storeError(err)
	}
	c.stats.innerPuts.Add(1)
	if !c.waitDurable.Load() {
		return Pending{}, nil
	}
	r := &s.res[0]
	return Pending{end: r.CommitLogOffset + int64(r.Size)}, nil
}
