package broker

// The remoting front end of POP consumption (RocketMQ 5's message-granularity
// model: POP_MESSAGE 3442, ACK_MESSAGE 3443, CHANGE_MESSAGE_INVISIBLETIME
// 3445). The checks and the bookkeeping are the core's (core.Pop, Ack,
// ChangeInvisible, on package broker/pop). Here: decoding the headers and
// the receipt handles, and the response headers (startOffsetInfo,
// msgOffsetInfo, orderCountInfo) built from the popped messages. A pop
// that finds nothing and has a pollTime is deferred and parked in the
// long-poll holder (host_longpoll.go), keyed by its topic, queue (or all)
// and group, until an arrival there, a revive of the group's messages
// (core.OnRevive), the time the next of them becomes visible again
// (PopResult.NextVisible), its pollTime (capped by LongPollMax) or the
// broker's shutdown; then the holder runs it again (core.PopAgain) and
// it is answered.

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// popInitMin is the initMode value that starts a new group at a queue's
// first message (Java's ConsumeInitMode.MIN); any other starts at its last.
const popInitMin = 0

// handlePop serves POP_MESSAGE (3442): core.Pop checks and pops; a pop
// that finds nothing and has a pollTime is parked in the long-poll holder
// (POLLING_FULL when it holds too many).
func (b *Broker) handlePop(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.PopMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	res := new(core.PopResult)
	ticket := b.holds.Ticket() // before the look: see longpoll.Wait.Ticket
	if err := b.core.Pop(&core.PopRequest{Group: h.ConsumerGroup, Topic: h.Topic, QueueID: h.QueueID,
		MaxMsgs: h.MaxMsgNums, InvisibleTime: h.InvisibleTime, FromFirst: h.InitMode == popInitMin,
		Orderly: h.Order, ExpressionType: h.ExpType, Expression: h.Exp, Consumer: peerAddr(c)}, res); err != nil {
		return fail(resp, err)
	}
	if len(res.Msgs) == 0 && h.PollTime > 0 && c != nil && !b.closing.Load() {
		hold := min(time.Duration(h.PollTime)*time.Millisecond, b.copts.LongPollMax)
		q := h.QueueID
		if q < 0 {
			q = longpoll.AnyQueue
		}
		rsp := c.Defer(req)
		pk := pollKey{topic: res.Topic(), group: res.Group(), queue: max(h.QueueID, -1)}
		b.polls.hold(pk) // released when answered (POLLING_INFO counts it meanwhile)
		// Once the holder is stopped, Park answers at once (Expire).
		_, err := b.holds.Park(longpoll.Wait{Topic: res.Topic(), Queue: q, Group: res.Group(), WakeAt: res.NextVisibleTime(),
			Ticket: ticket, Owner: c}, time.Now().Add(hold), heldReq{resp: rsp, pop: res, polled: pk})
		if errors.Is(err, longpoll.ErrFull) || errors.Is(err, longpoll.ErrOwnerFull) {
			b.polls.release(pk)
			refuse(rsp, nil, protocol.RespPollingFull, "the broker holds too many pops: "+err.Error())
		}
		return remoting.Deferred
	}
	fillPopResponse(resp.Cmd, resp, res)
	return remoting.Reply
}

// fillPopResponse sets the code (SUCCESS or PULL_NOT_FOUND), headers and body.
func fillPopResponse(cmd *protocol.Command, resp *remoting.Response, res *core.PopResult) {
	if len(res.Msgs) == 0 {
		cmd.Code = protocol.RespPullNotFound
		cmd.SetRemark("no new message")
	}
	hdr := protocol.PopMessageResponse{PopTime: res.PopTime, InvisibleTime: res.Invisible.Milliseconds(), RestNum: res.Rest}
	if res.Orderly {
		hdr.ReviveQid = protocol.PopOrderReviveQueue
	}
	hdr.StartOffsetInfo, hdr.MsgOffsetInfo, hdr.OrderCountInfo = appendPopInfo(res.Msgs, res.Orderly)
	hdr.Encode(&cmd.Ext)
	if len(res.Msgs) > 0 {
		resp.Body = [][]byte{res.Body}
	}
}

// appendPopInfo builds the response's startOffsetInfo ("0 <queueId>
// <first offset>" per queue), msgOffsetInfo ("0 <queueId> <o1>,<o2>,..."
// per queue) and, for an orderly pop, orderCountInfo ("0
// qo<queueId>%<offset> <earlier deliveries>" per message), each
// ';'-separated, from the popped messages. Each queue has one entry, in the
// order the queues first appear: a priority pop lists a queue's new
// messages and, after other queues', its redeliveries. RocketMQ's Java
// client refuses a queue named twice and matches a queue's offsets with its
// messages in the order they come, so a queue's offsets are listed in the
// messages' order. All three are nil without messages.
func appendPopInfo(msgs []core.Popped, orderly bool) (start, offs, counts []byte) {
	var seen []int32
	for i := range msgs {
		qid := msgs[i].QueueID
		if slices.Contains(seen, qid) {
			continue
		}
		seen = append(seen, qid)
		var mine []core.Popped
		for _, p := range msgs[i:] {
			if p.QueueID == qid {
				mine = append(mine, p)
			}
		}
		low := mine[0].Offset
		for _, p := range mine {
			low = min(low, p.Offset)
		}
		start = appendInfoSep(start)
		start = append(start, "0 "...)
		start = strconv.AppendInt(start, int64(qid), 10)
		start = append(start, ' ')
		start = strconv.AppendInt(start, low, 10)
		offs = appendInfoSep(offs)
		offs = append(offs, "0 "...)
		offs = strconv.AppendInt(offs, int64(qid), 10)
		offs = append(offs, ' ')
		for k, p := range mine {
			if k > 0 {
				offs = append(offs, ',')
			}
			offs = strconv.AppendInt(offs, p.Offset, 10)
		}
		if orderly {
			for _, p := range mine {
				counts = appendInfoSep(counts)
				counts = append(counts, "0 qo"...)
				counts = strconv.AppendInt(counts, int64(qid), 10)
				counts = append(counts, '%')
				counts = strconv.AppendInt(counts, p.Offset, 10)
				counts = append(counts, ' ')
				counts = strconv.AppendInt(counts, int64(p.Attempts-1), 10)
			}
		}
	}
	return start, offs, counts
}

func appendInfoSep(b []byte) []byte {
	if len(b) > 0 {
		b = append(b, ';')
	}
	return b
}

// receipt parses the receipt handle of ACK and CHANGE_INVISIBLETIME
// (INVALID_PARAMETER when it does not parse).
func receipt(extra []byte) (protocol.ExtraInfo, core.Receipt, error) {
	x, err := protocol.ParseExtraInfo(extra)
	if err != nil {
		return x, core.Receipt{}, &core.Error{Code: protocol.RespInvalidParameter, Remark: "bad receipt handle: " + err.Error(), Err: err}
	}
	return x, core.Receipt{QueueID: x.QueueID, PopTime: x.PopTime}, nil
}

// handleAck serves ACK_MESSAGE (3443).
func (b *Broker) handleAck(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.AckMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	_, rc, err := receipt(h.ExtraInfo)
	if err == nil {
		err = b.core.Ack(h.ConsumerGroup, h.Topic, h.QueueID, h.Offset, rc)
	}
	if err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleChangeInvisible serves CHANGE_MESSAGE_INVISIBLETIME (3445): the
// answer carries the delivery's new pop time, from which the client builds
// its new receipt handle.
func (b *Broker) handleChangeInvisible(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ChangeInvisibleTimeRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	x, rc, err := receipt(h.ExtraInfo)
	if err != nil {
		return fail(resp, err)
	}
	popTime, err := b.core.ChangeInvisible(h.ConsumerGroup, h.Topic, h.QueueID, h.Offset, rc, h.InvisibleTime)
	if err != nil {
		return fail(resp, err)
	}
	(&protocol.ChangeInvisibleTimeResponse{PopTime: popTime, InvisibleTime: h.InvisibleTime, ReviveQid: x.ReviveQid}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// registerPop registers POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
// and PEEK_MESSAGE, NOTIFICATION, POLLING_INFO, BATCH_ACK_MESSAGE
// (popextras.go).
func (b *Broker) registerPop(t *handlerTable) {
	t.add(b.handlePop, protocol.ReqPopMessage)
	t.add(noConn(b.handleAck), protocol.ReqAckMessage)
	t.add(noConn(b.handleChangeInvisible), protocol.ReqChangeMessageInvisibleTime)
	t.add(noConn(b.handlePeek), protocol.ReqPeekMessage)
	t.add(b.handleNotification, protocol.ReqNotification)
	t.add(noConn(b.handlePollingInfo), protocol.ReqPollingInfo)
	t.add(noConn(b.handleBatchAck), protocol.ReqBatchAckMessage)
	t.add(noConn(b.handleRecall), protocol.ReqRecallMessage)
}
