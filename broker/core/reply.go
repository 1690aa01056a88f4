package core

import (
	"strconv"

	"github.com/apogeemq/apogee/message"
)

// Request-reply (RocketMQ 4.6+). A reply is a send to the cluster's reply topic
// (ReplyTopic) whose REPLY_TO_CLIENT property names the requesting client; the
// remoting front end stores it with Send and pushes it to that client's connection
// (ReplyConn) with PUSH_REPLY_MESSAGE_TO_CLIENT, carrying PushedReplyProperties.

// ReplyTo returns a reply's REPLY_TO_CLIENT property: the client ID of the requester
// it is to be pushed to. ok is false when the property is absent.
func ReplyTo(props []byte) (clientID string, ok bool) {
	v, ok := message.LookupProperty(props, message.PropReplyToClient)
	return string(v), ok
}

// ReplyToMissing is the remark of a reply without REPLY_TO_CLIENT, as RocketMQ's
// ReplyMessageProcessor words it.
const ReplyToMissing = "reply message properties[" + message.PropReplyToClient + "] is null"

// PushedReplyProperties returns the properties a reply is pushed to its requester
// with: the reply's own, plus PUSH_REPLY_TIME (now, in ms), as RocketMQ adds it.
func PushedReplyProperties(props []byte, nowMs int64) string {
	out := make([]byte, 0, len(props)+len(message.PropPushReplyTime)+16)
	out = append(out, props...)
	if n := len(out); n > 0 && out[n-1] != message.PropertySeparator {
		out = append(out, message.PropertySeparator)
	}
	return string(message.AppendProperty(out, message.PropPushReplyTime, strconv.FormatInt(nowMs, 10)))
}
