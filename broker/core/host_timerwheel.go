package core

import (
	"time"

	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// The timer wheel (package timerwheel): the core routes timer messages to
// the timer topic (routeSend, the retry policy of send-backs,
// committedMessage) with the two helpers below, feeds the wheel the store's
// TagCode and OnArrival for that topic (New), stops it before persisting
// its checkpoint (Shutdown) and reports its counters (RuntimeInfo). The
// wheel reaches the store through innerHost.

// timerDeliverTime reads a message's timer properties
// (timerwheel.DeliverTime, bounded by TimerMaxDelay) and refuses with
// MESSAGE_ILLEGAL and RocketMQ's remark a malformed value or a delay beyond
// the max. isTimer is false when there are none or the time has already
// come. It does not allocate unless it refuses.
func (c *Core) timerDeliverTime(sp *message.SendProps, now func() time.Time) (deliver int64, isTimer bool, err error) {
	deliver, isTimer, err = timerwheel.DeliverTime(sp, now, c.opts.TimerMaxDelay)
	if err != nil {
		return 0, false, wrapError(ReasonDeliveryTimeIllegal, err.Error(), err)
	}
	return deliver, isTimer, nil
}

// timerProps moves m to the timer topic for delivery at deliverMs
// (timerwheel.AppendRoute: REAL_TOPIC, REAL_QID and TIMER_OUT_MS are
// appended to props) and counts it.
func (c *Core) timerProps(props []byte, m *store.Message, deliverMs int64) []byte {
	c.stats.timers.Add(1)
	return timerwheel.AppendRoute(props, m, deliverMs)
}
