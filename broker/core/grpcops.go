package core

import (
	"net/netip"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// Operations RocketMQ 5's gRPC protocol needs that the remoting requests do
// not (its front end is package broker/grpcfe): a route query that creates
// the topic as a send would, and the dead-lettering of one received
// message on the client's word.

// RouteTopic returns a topic's configuration for a route query. An unknown
// topic is created as a send to it would create it (from TBW102, unless
// auto-creation is off) when create is true: RocketMQ 5's clients ask for
// the route of every topic they will send to before the first send, and a
// topic created by its first send is what remoting clients get. A slave
// never creates one: it answers the topics its table has (following its
// master's through the log) and TOPIC_NOT_EXIST (ReasonSlaveCreate)
// for the others. Refusals: an illegal name (SYSTEM_ERROR), a system topic
// (NO_PERMISSION), an unknown topic that may not be created
// (TOPIC_NOT_EXIST).
//
// src is the address of the client asking (zero: unknown): a topic it
// creates counts against the auto-creation caps as a send's does
// (autocreate.go), MaxAutoCreatePerSource included.
func (c *Core) RouteTopic(name string, create bool, src netip.AddrPort) (protocol.TopicConfig, error) {
	if t := c.topics.lookup(name); t != nil {
		return t.cfg, nil
	}
	if remark, ok := checkTopicName([]byte(name)); !ok {
		return protocol.TopicConfig{}, newError(ReasonTopicIllegal, remark)
	}
	if !create {
		return protocol.TopicConfig{}, newError(ReasonTopicNotExist, "topic["+name+"] not exist, apply first please!")
	}
	if isNotAllowedSendTopic([]byte(name)) {
		return protocol.TopicConfig{}, newError(ReasonTopicSendForbidden, "Sending message to topic["+name+"] is forbidden.")
	}
	if c.slave.Load() {
		return protocol.TopicConfig{}, errSlaveCreateTopic(name)
	}
	t, err := c.autoCreateTopic(&SendRequest{Topic: []byte(name), BornHost: src})
	if err != nil {
		return protocol.TopicConfig{}, err
	}
	return t.cfg, nil
}

// ForwardRequest names one received (popped) message a consumer gives up
// on: RocketMQ 5's ForwardMessageToDeadLetterQueue, which a push consumer
// sends when a message failed as often as its retry policy allows.
type ForwardRequest struct {
	Group, Topic []byte
	// QueueID, Offset and Receipt name the delivery, as for Ack.
	QueueID int32
	Offset  int64
	Receipt Receipt
	// CommitLogOffset is the message's offset in the commit log (the
	// receipt handle carries it).
	CommitLogOffset int64
}

// ForwardToDeadLetter stores a copy of a received message in the group's
// %DLQ%<group> topic (as SendBack does for a negative delay level:
// RETRY_TOPIC and ORIGIN_MESSAGE_ID set) and then acknowledges the
// delivery, so the message is done for the group. The receipt is checked
// before anything is stored: a stale handle or a message not in flight is
// NO_MESSAGE (208) as for Ack. Should the delivery go stale between the
// check and the ack (the message was received again meanwhile), the copy
// is stored all the same and the ack's refusal is returned: at least once.
// In sync-flush mode the answer waits for the returned Pending.
func (c *Core) ForwardToDeadLetter(r *ForwardRequest) (Pending, error) {
	t, err := c.receiptTopic(r.Topic, r.QueueID, r.Receipt)
	if err != nil {
		return Pending{}, err
	}
	// A change to the same invisible time is the cheapest check of the
	// handle that leaves the delivery as it is; it returns the new pop time
	// the ack must name.
	popTime, err := c.features().pops.ChangeInvisible(string(r.Group), t.name, r.QueueID, r.Offset, r.Receipt.PopTime, forwardHold)
	if err != nil {
		return Pending{}, popError(err)
	}
	p, err := c.SendBack(&SendBackRequest{Group: string(r.Group), Offset: r.CommitLogOffset, DelayLevel: -1})
	if err != nil {
		return Pending{}, err
	}
	if err := popError(c.features().pops.Ack(string(r.Group), t.name, r.QueueID, r.Offset, popTime)); err != nil {
		c.releasePending(p)
		return Pending{}, err
	}
	return p, nil
}

// forwardHold is how long ForwardToDeadLetter keeps the message invisible
// while it copies it to the dead-letter queue.
const forwardHold = 30 * time.Second

// releasePending gives back what a Pending holds when its operation's
// answer is an error and nobody will wait for it.
func (c *Core) releasePending(p Pending) {
	if p.Waiting() {
		c.inflight.Add(-p.held)
	}
}
