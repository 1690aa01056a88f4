package core

import (
	"github.com/apogeemq/apogee/broker/delay"
	"github.com/apogeemq/apogee/broker/internal/reput"
	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// System topics of the messaging features (RocketMQ's TopicValidator names).
const (
	scheduleTopic  = delay.Topic
	timerTopic     = timerwheel.Topic
	propTimerOutMS = timerwheel.PropTimerOutMS
	blankEntrySize = reput.BlankEntrySize // a consume queue's pre-fill entries
)

// The properties edits of re-stored records are reput's (shared with the
// feature packages); these names keep the core's call sites short.

// appendPropsExcept appends src's pairs to dst, minus those whose key is one
// of drop (reput.AppendPropsExcept).
func appendPropsExcept(dst, src []byte, drop ...string) []byte {
	return reput.AppendPropsExcept(dst, src, drop...)
}

// appendPropInt appends "key\x01<v>\x02" without allocating.
func appendPropInt(dst []byte, key string, v int64) []byte { return reput.AppendPropInt(dst, key, v) }

// propInt looks an integer property up; ok is false when it is absent or
// not a number (reput.PropInt: Long.parseLong, as the Java broker).
func propInt(props []byte, key string) (v int64, present, ok bool) { return reput.PropInt(props, key) }

// recordMessage is the store.Message that re-stores the record v as it is
// (reput.Message); callers then change what they need and set Properties.
func recordMessage(v message.View) store.Message { return reput.Message(v) }

// putInner stores messages the core makes itself (retries, dead letters,
// redeliveries of delayed messages and timers, committed transactions, op
// records). When answers wait for durability (sync flush, a SYNC_MASTER)
// it returns only once they are durable; a wait that ends with them stored
// but not durable (a flush timeout, a slave that did not acknowledge:
// store.NotDurable) counts as stored, as for producers, and they are never
// put again. It blocks then: the features' goroutines call it, never an
// operation a front end calls on a connection's goroutine (those return a
// Pending).
func (c *Core) putInner(msgs []store.Message, res []store.PutResult) ([]store.PutResult, error) {
	for i := range msgs {
		msgs[i].NoWait = true
	}
	n := len(res)
	res, err := c.store.PutBatch(msgs, res)
	if err != nil {
		return res, err
	}
	c.stats.innerPuts.Add(int64(len(msgs)))
	if c.waitDurable.Load() {
		last := &res[len(res)-1]
		if err := c.store.WaitPutDurable(last.CommitLogOffset + int64(last.Size)); err != nil &&
			!store.NotDurable(err) {
			return res[:n], err
		}
	}
	return res, nil
}
