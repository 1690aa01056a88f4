package core

import (
	"fmt"
	"time"

	"github.com/apogeemq/apogee/broker/pop"
)

// The looks at a group's POP progress that hand nothing out (RocketMQ's
// PEEK_MESSAGE 3444 and NOTIFICATION 3446) and the batch ack
// (BATCH_ACK_MESSAGE 3543). As RocketMQ's broker, the looks neither create
// the group nor the group's state: a group that does not exist is refused
// (SUBSCRIPTION_GROUP_NOT_EXIST), like one whose consumption is disabled
// (NO_PERMISSION).

// popLookTopic checks the topic, queue and group of a look. badQueue is
// the reason of a queue id out of range (RocketMQ answers peek's with
// INVALID_PARAMETER, notification's with SYSTEM_ERROR).
func (c *Core) popLookTopic(group, topic []byte, queueID int32, badQueue Reason) (*topicEntry, string, error) {
	if c.slave.Load() {
		return nil, "", errSlavePop
	}
	t := c.topics.get(topic)
	if t == nil {
		return nil, "", newError(ReasonTopicNotExist, "topic["+string(topic)+"] not exist, apply first please!")
	}
	if !t.readable() {
		return nil, "", newError(ReasonTopicPermission, "the topic["+t.name+"] peeking message is forbidden")
	}
	if queueID >= t.cfg.ReadQueueNums {
		return nil, "", newError(badQueue, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d]",
			queueID, t.name, t.cfg.ReadQueueNums))
	}
	g := c.groups.get(group)
	if g == nil {
		return nil, "", newError(ReasonSubscriptionGroupNotExist, "subscription group ["+string(group)+"] does not exist")
	}
	if !g.ConsumeEnable {
		return nil, "", newError(ReasonGroupConsumeDisabled, "subscription group no permission, "+g.GroupName)
	}
	return t, g.GroupName, nil
}

// Peek copies into res up to maxMsgs (1..pop.MaxMessages) messages a pop
// of group would hand out next from (topic, queueID) (a negative queueID:
// every queue), without handing them out (package broker/pop's
// Manager.Peek): res.Msgs, the records in res.Body, res.Rest the messages
// never handed out. Refusals: as the package doc above says, and
// INVALID_PARAMETER for a queue out of range or maxMsgs out of bounds.
func (c *Core) Peek(group, topic []byte, queueID, maxMsgs int32, res *pop.Result) error {
	t, g, err := c.popLookTopic(group, topic, queueID, ReasonInvalidParameter)
	if err != nil {
		return err
	}
	if maxMsgs <= 0 || maxMsgs > pop.MaxMessages {
		return newError(ReasonInvalidParameter, fmt.Sprintf("maxMsgNums %d is not in 1..%d", maxMsgs, pop.MaxMessages))
	}
	return popError(c.features().pops.Peek(g, t.name, max(queueID, -1), t.cfg.ReadQueueNums, int(maxMsgs), res))
}

// PopLook is what HasPopMessage found and what a front end that holds the
// look (a long-polled NOTIFICATION) needs to run it again and to be woken.
type PopLook struct {
	Group, Topic string // the tables' names
	QueueID      int32  // -1: every queue
	Queues       int32  // the topic's read queues
	Orderly      bool
	// NextVisible (unix ms; 0: none) is, when nothing was found, when the
	// first of the group's in-flight messages there becomes visible again.
	NextVisible int64
}

// HasPopMessage reports whether a pop of group would find a message in
// (topic, queueID) now (NOTIFICATION, 3446; a negative queueID: any
// queue), with orderly as an orderly pop sees them (package broker/pop's
// Manager.HasMessage). look is filled for LookAgain. Refusals: as the
// package doc above says, and SYSTEM_ERROR for a queue out of range (as
// RocketMQ answers).
func (c *Core) HasPopMessage(group, topic []byte, queueID int32, orderly bool, look *PopLook) (bool, error) {
	t, g, err := c.popLookTopic(group, topic, queueID, ReasonQueueIllegal)
	if err != nil {
		return false, err
	}
	*look = PopLook{Group: g, Topic: t.name, QueueID: max(queueID, -1), Queues: t.cfg.ReadQueueNums, Orderly: orderly}
	return c.LookAgain(look), nil
}

// LookAgain runs the look of an earlier HasPopMessage again (a held
// notification woken by an arrival or a revive).
func (c *Core) LookAgain(look *PopLook) bool {
	has, nv := c.features().pops.HasMessage(look.Group, look.Topic, look.QueueID, look.Queues, look.Orderly)
	look.NextVisible = nv
	return has
}

// AckBatch acknowledges several popped messages of one queue delivered by
// one pop (BATCH_ACK_MESSAGE's BatchAck: its start offset and bitmap give
// offsets): each as Ack would, and it returns how many were in flight
// with that delivery and are now done. A message Ack would refuse (a stale
// handle, not in flight) is skipped, as RocketMQ's broker skips it; the
// error is for the whole entry: a slave, a topic that does not exist, a
// queue out of range.
func (c *Core) AckBatch(group, topic []byte, queueID int32, popTime int64, offsets []int64) (int, error) {
	if c.slave.Load() {
		return 0, errSlavePop
	}
	t, err := c.receiptTopic(topic, queueID, Receipt{QueueID: queueID, PopTime: popTime})
	if err != nil {
		return 0, err
	}
	pops := c.features().pops
	acked := 0
	for _, off := range offsets {
		if pops.Ack(string(group), t.name, queueID, off, popTime) == nil {
			acked++
		}
	}
	return acked, nil
}

// NextVisibleTime is l.NextVisible as a time (zero: none).
func (l *PopLook) NextVisibleTime() time.Time {
	if l.NextVisible == 0 {
		return time.Time{}
	}
	return time.UnixMilli(l.NextVisible)
}

// CheckPopLook checks a POLLING_INFO request (3447) as HasPopMessage
// checks a notification, and returns the tables' names of its topic and
// group.
func (c *Core) CheckPopLook(group, topic []byte, queueID int32) (topicName, groupName string, err error) {
	t, g, err := c.popLookTopic(group, topic, queueID, ReasonQueueIllegal)
	if err != nil {
		return "", "", err
	}
	return t.name, g, nil
}
