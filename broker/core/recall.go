package core

import (
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
// recallable (only timer messages: a delivery timestamp).
func (c *Core) Recall(topic, msgID string, commitLogOffset int64) error {
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
