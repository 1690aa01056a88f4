package core

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// sendRoute is what routeSend decided for a single message.
type sendRoute struct {
	typ   MessageType
	retry bool // sent to a %RETRY% topic
	check bool // SendRequest.CheckTopicType
}

// routeSend applies the messaging features to a single (non-batch) message
// about to be stored. m holds the topic and queue the producer chose and
// s.props the properties to store (the producer's plus CLUSTER). In this
// order:
//
//   - a %RETRY% topic: beyond its group's max reconsume times (the header's
//     maxReconsumeTimes when present), or while the group holds orderly queue
//     locks, the message goes to %DLQ%<group> without delay;
//   - a transactional half message (TRAN_MSG=true or the PREPARED sysflag)
//     goes to RMQ_SYS_TRANS_HALF_TOPIC;
//   - TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS in the future: the
//     timer topic;
//   - DELAY > 0: SCHEDULE_TOPIC_XXXX;
//   - a priority (PropPriority, 0 and up) on a message none of the above
//     took and without a message group: the queue of that priority,
//     min(priority, writeQueueNums-1), whatever queue the producer chose
//     (RocketMQ 5.4's SendMessageProcessor); on the others the property is
//     dropped.
//
// The topic's message type and the per-type size limits are checked too.
// Every decision reads s.sp, the properties parsed once by checkSend; the
// properties are scanned again only to drop some of them from the stored
// ones (a dead letter's delay, a non-priority message's priority). It does
// not allocate on the common paths.
func (c *Core) routeSend(s *sendScratch, h *SendRequest, t *topicEntry, m *store.Message, bodyLen int) error {
	props, sp := h.Properties, &s.sp
	r := sendRoute{check: h.CheckTopicType}
	if group := retryGroupOf(t.name); group != "" {
		r.retry = true
		g := c.groups.get([]byte(group))
		if g == nil {
			return newError(ReasonSubscriptionGroupNotExist, "subscription group not exist, "+group)
		}
		maxTimes := g.RetryMaxTimes
		if h.HasMaxReconsumeTimes {
			maxTimes = h.MaxReconsumeTimes
		}
		locked := g.ConsumeMessageOrderly || c.locks.groupLocked(group, time.Now())
		if h.ReconsumeTimes > maxTimes || locked {
			dt, err := c.ensureGroupTopic(dlqTopic(group), dlqQueues)
			if err != nil {
				return wrapError(ReasonSystemError, err.Error(), err)
			}
			m.Topic, m.QueueID = dt.name, 0
			m.SysFlag = message.SetTxType(m.SysFlag, message.TxNotType)
			s.props = appendPropsExcept(s.props[:0], props, message.PropDelay, message.PropTimerDeliverMS,
				message.PropTimerDelayMS, message.PropTimerDelaySec)
			s.props = message.AppendProperty(s.props, message.PropCluster, c.opts.ClusterName)
			m.Properties = s.props
			c.stats.deadLetters.Add(1)
			c.opts.Logger.Info("broker: retried message sent to the dead-letter queue", "group", group,
				"reconsumeTimes", h.ReconsumeTimes, "maxReconsumeTimes", maxTimes, "groupLocked", locked)
			return nil
		}
	}

	if lt, ok := sp.Get(message.SendLiteTopic); ok && len(lt) > 0 && !r.retry && !isLiteParent(t) {
		// A lite topic is read only under a LITE parent (RocketMQ's broker
		// dispatches lite messages of LITE topics alone). The store indexes
		// every record that carries __LITE_TOPIC (a replica's dispatcher
		// cannot tell a LITE parent), so the property is dropped from what
		// is stored here: otherwise any producer could grow the lite index
		// by a name per message under a NORMAL or MIXED topic. A checked
		// send (gRPC) to a topic that refuses LITE is still refused below.
		props = dropLiteTopic(props)
		s.props = c.appendStoredProps(s.props[:0], props, nil)
		m.Properties = s.props
	}

	tx := message.TxType(h.SysFlag)
	if sp.Is(message.SendTranMsg, "true") || tx == message.TxPreparedType {
		if tx == message.TxPreparedType || !(h.ReconsumeTimes > 0 && hasDelay(sp)) {
			r.typ = MessageTransaction
			if err := c.checkType(t, r, bodyLen); err != nil {
				return err
			}
			c.dropPriority(s, props)
			s.props = c.features().tx.HalfProps(s.props, sp, h.ProducerGroup, m)
			m.Properties = s.props
			return nil
		}
	}
	if tx == message.TxRollbackType {
		return nil // stored, not dispatched (as RocketMQ's store does)
	}

	deliver, isTimer, err := c.timerDeliverTime(sp, time.Now)
	if err != nil {
		return err
	}
	if isTimer {
		r.typ = MessageDelay
		if err := c.checkType(t, r, bodyLen); err != nil {
			return err
		}
		c.dropPriority(s, props)
		s.props = c.timerProps(s.props, m, deliver)
		m.Properties = s.props
		return nil
	}

	level, present, ok := sp.Int(message.SendDelay)
	if present && !ok {
		return newError(ReasonDeliveryTimeIllegal, "the DELAY property is not a number")
	}
	if level > 0 {
		r.typ = MessageDelay
		if err := c.checkType(t, r, bodyLen); err != nil {
			return err
		}
		c.dropPriority(s, props)
		// DELAY is in s.props already: only REAL_TOPIC and REAL_QID are added.
		lv := c.features().sched.ClampLevel(level)
		s.props = message.AppendProperty(s.props, message.PropRealTopic, m.Topic)
		s.props = appendPropInt(s.props, message.PropRealQueueID, int64(m.QueueID))
		m.Topic, m.QueueID = scheduleTopic, lv-1
		m.Properties = s.props
		c.stats.delayed.Add(1)
		return nil
	}
	if sp.Has(message.SendJavaShardingKey) {
		r.typ = MessageFIFO
		c.dropPriority(s, props)
		m.Properties = s.props
	} else if p, ok := messagePriority(sp); ok {
		r.typ = MessagePriority
		if n := t.cfg.WriteQueueNums; n > 0 {
			m.QueueID = min(p, n-1)
		}
	} else if lt, ok := sp.Get(message.SendLiteTopic); ok && len(lt) > 0 {
		r.typ = MessageLite // lite.go: indexed under (topic, lite topic) by the store
	}
	if sp.HasAny(delayProps) {
		// Delivery already due: stored as it is, but RocketMQ types a
		// message by its delay properties, due or not
		// (TopicMessageType.parseFromMessageProperty): DELAY for the check.
		r.typ = MessageDelay
	}
	return c.checkType(t, r, bodyLen)
}

// delayProps are the delay level and the timer properties: a message that
// carries one, whatever its value, is a DELAY one for the type check.
var delayProps = message.SendPropSet(message.SendDelay, message.SendTimerDeliverMS, message.SendTimerDelaySec,
	message.SendTimerDelayMS)

// messagePriority returns a message's priority (RocketMQ 5.4, RIP-80):
// its PropPriority property when that is a number in 0..MaxInt32 (Java's
// NumberUtils.toInt). Any other value makes no priority message: the
// message is stored as a NORMAL one, the property as it came (what
// RocketMQ's broker does; the gRPC front end refuses a negative priority
// before).
func messagePriority(sp *message.SendProps) (int32, bool) {
	v, _, ok := sp.Int(message.SendPriority)
	if !ok || v < 0 || v > math.MaxInt32 {
		return 0, false
	}
	return int32(v), true
}

// dropPriority removes the priority property from the stored properties of
// a message that is not a PRIORITY one (TRANSACTION, DELAY or FIFO come
// first, as RocketMQ's TopicMessageType.parseFromMessageProperty has them;
// its broker clears the property too). s.props is props plus CLUSTER.
func (c *Core) dropPriority(s *sendScratch, props []byte) {
	if !s.sp.Has(message.SendPriority) {
		return
	}
	s.props = appendPropsExcept(s.props[:0], props, message.PropPriority)
	s.props = message.AppendProperty(s.props, message.PropCluster, c.opts.ClusterName)
}

// hasDelay reports whether the properties ask for a delay level.
func hasDelay(sp *message.SendProps) bool {
	l, _, ok := sp.Int(message.SendDelay)
	return ok && l > 0
}

// retryGroupOf returns the group of a %RETRY% topic name, or "".
func retryGroupOf(topic string) string {
	if len(topic) > len(retryTopicPrefix) && topic[:len(retryTopicPrefix)] == retryTopicPrefix {
		return topic[len(retryTopicPrefix):]
	}
	return ""
}

// checkType checks a message's type against its topic's (when the send
// asks: SendRequest.CheckTopicType; topicEntry.accepts is the rule) and the
// per-type size limits. Retries and dead letters are exempt: they carry
// whatever the original was (RocketMQ's proxy skips %RETRY% and %DLQ%).
// liteKey is the lite topic property's key as a properties string holds it:
// a quick test of whether a batch entry may carry one.
var liteKey = []byte(message.PropertyLiteTopic + "\x01")

// dropLiteTopic returns props without the lite topic property (a copy; the
// rare case of a lite topic sent to a topic that is not a LITE parent).
func dropLiteTopic(props []byte) []byte {
	if !bytes.Contains(props, liteKey) {
		return props
	}
	return appendPropsExcept(make([]byte, 0, len(props)), props, message.PropertyLiteTopic)
}

// isLiteParent reports whether t is a LITE topic (message.type=LITE): a
// parent of lite topics, the only kind whose messages' lite topics are
// indexed, whose idle lite topics expire and to which a lite group binds.
func isLiteParent(t *topicEntry) bool {
	tt, ok := t.msgType()
	return ok && tt == MessageLite
}

func (c *Core) checkType(t *topicEntry, r sendRoute, bodyLen int) error {
	if r.retry {
		return nil
	}
	if r.check && !t.accepts(r.typ) && !strings.HasPrefix(t.name, dlqTopicPrefix) {
		want := "NORMAL (it has no message.type)"
		if tt, ok := t.msgType(); ok {
			want = tt.String()
		}
		return newError(ReasonTopicMessageTypeMismatch, "the message type "+r.typ.String()+" does not match the topic["+t.name+
			"]'s message.type "+want)
	}
	limit := c.opts.MaxMessageSize
	switch r.typ {
	case MessageDelay:
		limit = c.opts.MaxDelayMessageSize
	case MessageTransaction:
		limit = c.opts.MaxTransactionMessageSize
	}
	if bodyLen > limit {
		return newError(ReasonMessageBodyTooLarge, "the "+r.typ.String()+" message body size "+strconv.Itoa(bodyLen)+
			" exceeds the limit of "+strconv.Itoa(limit)+" bytes")
	}
	return nil
}
