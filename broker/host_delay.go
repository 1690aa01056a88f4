package broker

import (
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The delay levels (package delay): the broker routes DELAY > 0 to the
// schedule topic (routeSend, scheduleProps, committedMessage), feeds the
// scheduler the store's TagCode and OnArrival for that topic (New), persists
// its progress with the others (persistProgress) and serves its request
// code here. The scheduler reaches the store through innerHost.

// handleAllDelayOffsets serves GET_ALL_DELAY_OFFSET (45): the delay
// scanners' progress, as config/delayOffset.json holds it.
func (b *Broker) handleAllDelayOffsets(resp *remoting.Response) remoting.Action {
	offs := b.sched.Offsets()
	w := protocol.DelayOffsetSerializeWrapper{OffsetTable: make(map[int32]int64, len(offs))}
	for i, off := range offs {
		w.OffsetTable[int32(i+1)] = off
	}
	body, err := w.Encode()
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = body
	return remoting.Reply
}

// registerDelay registers GET_ALL_DELAY_OFFSET.
func (b *Broker) registerDelay(t *handlerTable) {
	t.add(respOnly(b.handleAllDelayOffsets), protocol.ReqGetAllDelayOffset)
}
