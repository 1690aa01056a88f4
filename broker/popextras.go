package broker

// The rest of RocketMQ 5's POP codes, on the core's operations: PEEK_MESSAGE
// (3444: what the next pops would hand out, handed out to nobody),
// NOTIFICATION (3446: whether a pop would find a message, held in the
// long-poll holder like a POP until one comes), POLLING_INFO (3447: how
// many pops the holder holds for a topic, group and queue) and
// BATCH_ACK_MESSAGE (3543: acks of several pops' messages in one body);
// and RECALL_MESSAGE (370, RocketMQ 5.3.1+: cancel a timer message by the
// recall handle its send answer carried). Headers, bodies and answers are
// RocketMQ's (its PeekMessageProcessor, NotificationProcessor,
// PollingInfoProcessor, AckMessageProcessor and RecallMessageProcessor).

import (
	"errors"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// handlePeek serves PEEK_MESSAGE: SUCCESS with the records as body, or
// PULL_NOT_FOUND without; the header is a pop's with restNum alone set
// (the remark the store's status, as RocketMQ answers).
func (b *Broker) handlePeek(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.PeekMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	var res core.PopResult
	if err := b.core.Peek(h.ConsumerGroup, h.Topic, h.QueueID, h.MaxMsgNums, &res.Result); err != nil {
		return fail(resp, err)
	}
	(&protocol.PopMessageResponse{RestNum: res.Rest}).Encode(&resp.Cmd.Ext)
	if len(res.Msgs) == 0 {
		resp.Cmd.Code = protocol.RespPullNotFound
		resp.Cmd.SetRemark("NO_MESSAGE_IN_QUEUE")
		return remoting.Reply
	}
	resp.Cmd.SetRemark("FOUND")
	resp.Body = [][]byte{res.Body}
	return remoting.Reply
}

// handleNotification serves NOTIFICATION: SUCCESS with hasMsg. One that
// finds nothing and has a pollTime is parked in the long-poll holder (as a
// POP, woken by arrivals in the topic and the group's revives) until a pop
// would find something, its pollTime (capped by LongPollMax) or the
// broker's shutdown; then it is answered with what it finds. When the
// holder is full it is answered at once with hasMsg false (RocketMQ's
// NotificationProcessor answers so when its polling is refused).
func (b *Broker) handleNotification(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.NotificationRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	look := new(core.PopLook)
	ticket := b.holds.Ticket() // before the look: see longpoll.Wait.Ticket
	has, err := b.core.HasPopMessage(h.ConsumerGroup, h.Topic, h.QueueID, h.Order, look)
	if err != nil {
		return fail(resp, err)
	}
	if !has && h.PollTime > 0 && c != nil && !b.closing.Load() {
		hold := min(time.Duration(h.PollTime)*time.Millisecond, b.copts.LongPollMax)
		q := look.QueueID
		if q < 0 {
			q = longpoll.AnyQueue
		}
		rsp := c.Defer(req)
		// Once the holder is stopped, Park answers at once (Expire).
		_, err := b.holds.Park(longpoll.Wait{Topic: look.Topic, Queue: q, Group: look.Group, WakeAt: look.NextVisibleTime(),
			Ticket: ticket, Owner: c}, time.Now().Add(hold), heldReq{resp: rsp, notify: look})
		if errors.Is(err, longpoll.ErrFull) || errors.Is(err, longpoll.ErrOwnerFull) {
			var cmd protocol.Command
			rsp.InitResponse(&cmd, protocol.RespSuccess)
			(&protocol.NotificationResponse{HasMsg: false}).Encode(&cmd.Ext)
			_ = rsp.Reply(&remoting.Response{Cmd: &cmd})
		}
		return remoting.Deferred
	}
	(&protocol.NotificationResponse{HasMsg: has}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// handlePollingInfo serves POLLING_INFO: SUCCESS with pollingNum, the pops
// held for the topic, group and queue id (-1: the pops of any queue), as
// RocketMQ counts its polling map's entry of that key (held notifications
// are not counted, as there).
func (b *Broker) handlePollingInfo(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.PollingInfoRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	topic, group, err := b.core.CheckPopLook(h.ConsumerGroup, h.Topic, h.QueueID)
	if err != nil {
		return fail(resp, err)
	}
	n := b.polls.count(pollKey{topic: topic, group: group, queue: max(h.QueueID, -1)})
	(&protocol.PollingInfoResponse{PollingNum: n}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// handleBatchAck serves BATCH_ACK_MESSAGE: each BatchAck's offsets are
// acked as ACK_MESSAGE would ack them with the receipt handle of the pop
// its popTime names (orderly or not). As RocketMQ's AckMessageProcessor:
// the answer is SUCCESS whatever each ack finds (a stale or unknown one is
// skipped), NO_MESSAGE for a body without acks; an entry whose topic or
// queue does not exist, or that names the pop retry topic (which Apogee
// does not use: redeliveries come from the queue itself), is skipped. A
// slave refuses the whole request.
func (b *Broker) handleBatchAck(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var body protocol.BatchAckMessageRequestBody
	if len(req.Body) > 0 {
		if err := body.Decode(req.Body); err != nil {
			code := protocol.RespSystemError
			if errors.Is(err, protocol.ErrTooManyAcks) {
				code = protocol.RespInvalidParameter
			}
			return fail(resp, &core.Error{Code: code, Remark: err.Error(), Err: err})
		}
	}
	if len(body.Acks) == 0 {
		resp.Cmd.Code = protocol.RespNoMessage
		return remoting.Reply
	}
	var offs []int64
	for i := range body.Acks {
		a := &body.Acks[i]
		if a.Retry == "1" {
			continue
		}
		offs = offs[:0]
		a.Offsets(func(o int64) { offs = append(offs, o) })
		if len(offs) == 0 {
			continue
		}
		if _, err := b.core.AckBatch([]byte(a.ConsumerGroup), []byte(a.Topic), a.QueueID, a.PopTime, offs); err != nil &&
			core.ReasonOf(err) == core.ReasonSlavePop {
			return fail(resp, err)
		}
	}
	return remoting.Reply
}

// handleRecall serves RECALL_MESSAGE: the recall handle (what a timer
// message's send answer carried, on either front end) names the message;
// core.Recall cancels it. SUCCESS with msgId; TOPIC_NOT_EXIST for an
// unknown topic; ILLEGAL_OPERATION for a handle that does not parse or
// names another topic (as RocketMQ answers); QUERY_NOT_FOUND when there is
// no such pending timer message (RocketMQ stores a recall marker without
// looking and answers SUCCESS; Apogee checks, see core.Recall).
func (b *Broker) handleRecall(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.RecallMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	if !b.core.HasTopic(h.Topic) {
		return fail(resp, &core.Error{Code: protocol.RespTopicNotExist, Remark: "recall failed, the topic[" + string(h.Topic) + "] not exist"})
	}
	topic, id, off, ok := core.ParseRecallHandle(h.RecallHandle)
	if !ok {
		return fail(resp, &core.Error{Code: protocol.RespIllegalOperation, Remark: "recall failed, the recall handle is not one this broker gave"})
	}
	if topic != string(h.Topic) {
		return fail(resp, &core.Error{Code: protocol.RespIllegalOperation, Remark: "recall failed, topic not match"})
	}
	if err := b.core.Recall(topic, id, off); err != nil {
		return fail(resp, err)
	}
	(&protocol.RecallMessageResponse{MsgID: []byte(id)}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}
