package broker

import (
	"time"

	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// The timer wheel (package timerwheel): the broker routes timer messages to
// the timer topic (routeSend, the retry policy of send-backs,
// committedMessage) with the two helpers below, feeds the wheel the store's
// TagCode and OnArrival for that topic (New), stops it before persisting
// its checkpoint (Shutdown) and reports its counters (RuntimeInfo). The
// wheel reaches the store through innerHost.

// timerDeliverTime reads a message's timer properties
// (timerwheel.DeliverTime, bounded by TimerMaxDelay) and answers
// MESSAGE_ILLEGAL with RocketMQ's remark for a malformed value or a delay
// beyond the max. isTimer is false when there are none or the time has
// already come. It does not allocate unless it refuses.
func (b *Broker) timerDeliverTime(props []byte, now func() time.Time) (deliver int64, isTimer bool, code int32, remark string) {
	deliver, isTimer, err := timerwheel.DeliverTime(props, now, b.opts.TimerMaxDelay)
	if err != nil {
		return 0, false, protocol.RespMessageIllegal, err.Error()
	}
	return deliver, isTimer, protocol.RespSuccess, ""
}

// timerProps moves m to the timer topic for delivery at deliverMs
// (timerwheel.AppendRoute: REAL_TOPIC, REAL_QID and TIMER_OUT_MS are
// appended to props) and counts it.
func (b *Broker) timerProps(props []byte, m *store.Message, deliverMs int64) []byte {
	b.stats.timers.Add(1)
	return timerwheel.AppendRoute(props, m, deliverMs)
}
