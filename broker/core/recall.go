package core

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"time"

	"github.com/apogeemq/apogee/message"
)

// Recall cancels a scheduled message before its delivery time (RocketMQ
// 5's RecallMessage): the timer record stored at commitLogOffset, which
// must be a pending timer message of topic with UNIQ_KEY msgID. The timer
// wheel then drops it when it comes due (package broker/timerwheel,
// Wheel.Recall); Recall returns once that is persisted. Refusals:
// QUERY_NOT_FOUND (22) when there is no such pending timer message (a
// wrong handle, or one already delivered), SYSTEM_ERROR when the state
// could not be written. Messages scheduled with a delay level are not
// recallable (only timer messages: a delivery timestamp). A slave refuses
// it as it refuses a send.
func (c *Core) Recall(topic, msgID string, commitLogOffset int64) error {
	if c.slave.Load() {
		return errSlaveSend
	}
	notFound := func(why string) error {
		return newError(ReasonRecallNotFound, "no scheduled message "+msgID+" of topic "+topic+" to recall: "+why)
	}
	view, err := c.store.ReadMessage(commitLogOffset)
	if err != nil {
		return notFound("nothing is stored at its offset")
	}
	defer view.Release()
	v, err := message.Decode(view.Bytes(), false)
	if err != nil || string(v.Topic()) != timerTopic {
		return notFound("it is not a timer message")
	}
	if rt, _ := v.Property(message.PropRealTopic); string(rt) != topic {
		return notFound("it is of another topic")
	}
	if string(v.UniqKey()) != msgID {
		return notFound("the handle names another message")
	}
	out, _ := v.Property(propTimerOutMS)
	due, err := strconv.ParseInt(string(out), 10, 64)
	if err != nil {
		return notFound("its delivery time is unreadable")
	}
	if due <= time.Now().UnixMilli() {
		return notFound("it was delivered already")
	}
	if err := c.features().timers.Recall(msgID, due); err != nil {
		return wrapError(ReasonPersistFailed, "the recall could not be persisted: "+err.Error(), err)
	}
	return nil
}

// AppendRecallHandle appends to dst the recall handle of a timer message
// (what a send's answer carries and Recall's callers parse back with
// ParseRecallHandle): its topic, its message id (UNIQ_KEY) and its
// commit-log offset, space-separated and base64url-encoded. Every front
// end issues and accepts the same handles.
func AppendRecallHandle(dst []byte, topic string, msgID []byte, commitLogOffset int64) []byte {
	var buf [256]byte
	raw := append(buf[:0], topic...)
	raw = append(raw, ' ')
	raw = append(raw, msgID...)
	raw = append(raw, ' ')
	raw = strconv.AppendInt(raw, commitLogOffset, 10)
	return base64.RawURLEncoding.AppendEncode(dst, raw)
}

// ParseRecallHandle undoes AppendRecallHandle; ok is false for anything
// else.
func ParseRecallHandle(h []byte) (topic, msgID string, commitLogOffset int64, ok bool) {
	raw, err := base64.RawURLEncoding.AppendDecode(nil, h)
	if err != nil {
		return "", "", 0, false
	}
	t, rest, ok1 := bytes.Cut(raw, []byte{' '})
	id, off, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 || len(t) == 0 || len(id) == 0 || bytes.IndexByte(off, ' ') >= 0 {
		return "", "", 0, false
	}
	n, err := strconv.ParseInt(string(off), 10, 64)
	if err != nil || n < 0 {
		return "", "", 0, false
	}
	return string(t), string(id), n, true
}

// HasTopic reports whether the topic table has topic.
func (c *Core) HasTopic(topic []byte) bool { return c.topics.get(topic) != nil }
