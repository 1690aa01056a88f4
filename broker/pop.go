package broker

// The remoting front end of POP consumption (RocketMQ 5's message-granularity
// model: POP_MESSAGE 3442, ACK_MESSAGE 3443, CHANGE_MESSAGE_INVISIBLETIME
// 3445). The bookkeeping — invisibility, redelivery, receipt handles, FIFO
// message groups, dead letters, popState.json — is package broker/pop's
// (see its doc); popHost (host_pop.go) is its view of the broker. Here:
// decoding the headers, the checks of the topic, queue and group, the
// response headers (startOffsetInfo, msgOffsetInfo, orderCountInfo) built
// from pop.Result, and the long polling of a pop that finds nothing: it is
// deferred and re-run every popPollInterval on a goroutine of its own until
// it finds messages, its pollTime (capped by LongPollMax) passes or the
// broker shuts down. Shutdown waits for the held pops (closePops) before it
// stops the manager.

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/pop"
	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Long polling of pops.
const (
	// maxHeldPops bounds the pops held for long polling; beyond, POLLING_FULL.
	maxHeldPops = 4096
	// popPollInterval is how often a held pop looks again.
	popPollInterval = 20 * time.Millisecond
	// popInitMin is the initMode value that starts a new group at a queue's
	// first message (Java's ConsumeInitMode.MIN); any other starts at its last.
	popInitMin = 0
)

// popHolds counts the held pops and waits for them at Shutdown.
type popHolds struct {
	n  atomic.Int64
	wg sync.WaitGroup
}

// closePops waits for the held pops (they answer within popPollInterval
// once closing is set), then stops the POP manager, which writes its state a
// last time. Shutdown calls it once no request runs any more.
func (b *Broker) closePops() error {
	b.popHolds.wg.Wait()
	return b.pops.Stop()
}

// handlePop serves POP_MESSAGE (3442).
func (b *Broker) handlePop(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.PopMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if h.MaxMsgNums <= 0 || h.MaxMsgNums > pop.MaxMessages {
		return fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("maxMsgNums %d is not in 1..%d", h.MaxMsgNums, pop.MaxMessages))
	}
	if !validInvisibleTime(h.InvisibleTime) {
		return fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("invisibleTime %d ms is not in 1..%d", h.InvisibleTime, maxInvisibleMs))
	}
	t := b.topics.get(h.Topic)
	if t == nil {
		return fail(resp, protocol.RespTopicNotExist, "topic["+string(h.Topic)+"] not exist, apply first please!")
	}
	if !t.readable() {
		return fail(resp, protocol.RespNoPermission, "the topic["+t.name+"] peeking message is forbidden")
	}
	if h.QueueID >= t.cfg.ReadQueueNums {
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d] consumer:[%s]",
			h.QueueID, t.name, t.cfg.ReadQueueNums, bornHost(c)))
	}
	g := b.groups.get(h.ConsumerGroup)
	if g == nil {
		if !validGroupName(h.ConsumerGroup) {
			return fail(resp, protocol.RespSubscriptionGroupNotExist,
				"subscription group ["+string(h.ConsumerGroup)+"] does not exist and its name is illegal, allowing only ^[%|a-zA-Z0-9_-]+$ up to 255 characters")
		}
		var created bool
		if g, created = b.groups.ensure(h.ConsumerGroup); created {
			b.groupsChanged(false)
		}
	}
	if !g.ConsumeEnable {
		return fail(resp, protocol.RespNoPermission, "subscription group no permission, "+g.GroupName)
	}
	var f filter.Filter
	if len(h.Exp) > 0 {
		var err error
		if f, err = b.filters.get(h.ExpType, h.Exp); err != nil {
			return fail(resp, protocol.RespSubscriptionParseFailed, "parse the consumer's subscription failed: "+err.Error())
		}
	}
	r := &pop.Request{Group: g.GroupName, Topic: t.name, QueueID: max(h.QueueID, -1), Queues: t.cfg.ReadQueueNums,
		Max: int(h.MaxMsgNums), Invisible: time.Duration(h.InvisibleTime) * time.Millisecond,
		FromFirst: h.InitMode == popInitMin, Orderly: h.Order, RetryMax: g.RetryMaxTimes}
	if f != nil {
		r.Filter = f
	}
	var res pop.Result
	if err := b.pops.Pop(r, &res); err != nil {
		return popOutcome(resp, err)
	}
	if len(res.Msgs) == 0 && h.PollTime > 0 && c != nil && !b.closing.Load() {
		if b.popHolds.n.Add(1) > maxHeldPops {
			b.popHolds.n.Add(-1)
			return fail(resp, protocol.RespPollingFull, "the broker holds too many pops")
		}
		hold := min(time.Duration(h.PollTime)*time.Millisecond, b.opts.LongPollMax)
		rsp := c.Defer(req)
		b.popHolds.wg.Add(1)
		go b.holdPop(r, rsp, time.Now().Add(hold))
		return remoting.Deferred
	}
	fillPopResponse(resp.Cmd, resp, r, &res)
	return remoting.Reply
}

// maxInvisibleMs is pop.MaxInvisible in the headers' unit.
const maxInvisibleMs = int64(pop.MaxInvisible / time.Millisecond)

// validInvisibleTime reports whether a header's invisibleTime (ms) is in
// 1..maxInvisibleMs.
func validInvisibleTime(ms int64) bool { return ms > 0 && ms <= maxInvisibleMs }

// fillPopResponse sets the code (SUCCESS or PULL_NOT_FOUND), headers and body.
func fillPopResponse(cmd *protocol.Command, resp *remoting.Response, r *pop.Request, res *pop.Result) {
	if len(res.Msgs) == 0 {
		cmd.Code = protocol.RespPullNotFound
		cmd.SetRemark("no new message")
	}
	hdr := protocol.PopMessageResponse{PopTime: res.PopTime, InvisibleTime: r.Invisible.Milliseconds(), RestNum: res.Rest}
	if r.Orderly {
		hdr.ReviveQid = protocol.PopOrderReviveQueue
	}
	hdr.StartOffsetInfo, hdr.MsgOffsetInfo, hdr.OrderCountInfo = appendPopInfo(res.Msgs, r.Orderly)
	hdr.Encode(&cmd.Ext)
	if len(res.Msgs) > 0 {
		resp.Body = [][]byte{res.Body}
	}
}

// appendPopInfo builds the response's startOffsetInfo ("0 <queueId>
// <first offset>" per queue), msgOffsetInfo ("0 <queueId> <o1>,<o2>,..."
// per queue) and, for an orderly pop, orderCountInfo ("0
// qo<queueId>%<offset> <earlier deliveries>" per message), each
// ';'-separated, from the popped messages (queue by queue, as pop.Result
// lists them). All three are nil without messages.
func appendPopInfo(msgs []pop.Popped, orderly bool) (start, offs, counts []byte) {
	for i := 0; i < len(msgs); {
		qid := msgs[i].QueueID
		j := i
		low := msgs[i].Offset
		for j < len(msgs) && msgs[j].QueueID == qid {
			low = min(low, msgs[j].Offset)
			j++
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
		for k, p := range msgs[i:j] {
			if k > 0 {
				offs = append(offs, ',')
			}
			offs = strconv.AppendInt(offs, p.Offset, 10)
		}
		if orderly {
			for _, p := range msgs[i:j] {
				counts = appendInfoSep(counts)
				counts = append(counts, "0 qo"...)
				counts = strconv.AppendInt(counts, int64(qid), 10)
				counts = append(counts, '%')
				counts = strconv.AppendInt(counts, p.Offset, 10)
				counts = append(counts, ' ')
				counts = strconv.AppendInt(counts, int64(p.Attempts-1), 10)
			}
		}
		i = j
	}
	return start, offs, counts
}

func appendInfoSep(b []byte) []byte {
	if len(b) > 0 {
		b = append(b, ';')
	}
	return b
}

// holdPop re-runs a pop that found nothing every popPollInterval until it
// finds messages, its deadline passes or the broker shuts down, then
// answers it.
func (b *Broker) holdPop(r *pop.Request, rsp remoting.Responder, deadline time.Time) {
	defer b.popHolds.wg.Done()
	defer b.popHolds.n.Add(-1)
	var res pop.Result
	t := time.NewTicker(popPollInterval)
	defer t.Stop()
	for {
		<-t.C
		last := !time.Now().Before(deadline) || b.closing.Load()
		if err := b.pops.Pop(r, &res); err != nil || len(res.Msgs) > 0 || last {
			break // err: the request was checked when it came; not reached
		}
	}
	var cmd protocol.Command
	rsp.InitResponse(&cmd, protocol.RespSuccess)
	out := remoting.Response{Cmd: &cmd}
	fillPopResponse(&cmd, &out, r, &res)
	if err := rsp.Reply(&out); err != nil && len(res.Msgs) > 0 {
		b.opts.Logger.Debug("broker: held pop answered on a closed connection; its messages become visible after their invisible time",
			"group", r.Group, "topic", r.Topic, "err", err)
	}
}

// receipt decodes and checks the common part of ACK and CHANGE_INVISIBLETIME:
// the topic, the queue and the receipt handle.
func (b *Broker) receipt(resp *remoting.Response, topic, extra []byte, qid int32) (*topicEntry, protocol.ExtraInfo, bool) {
	t := b.topics.get(topic)
	if t == nil {
		fail(resp, protocol.RespTopicNotExist, "topic["+string(topic)+"] not exist, apply first please!")
		return nil, protocol.ExtraInfo{}, false
	}
	if qid < 0 || qid >= t.cfg.ReadQueueNums {
		fail(resp, protocol.RespMessageIllegal, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d]", qid, t.name, t.cfg.ReadQueueNums))
		return nil, protocol.ExtraInfo{}, false
	}
	x, err := protocol.ParseExtraInfo(extra)
	if err != nil {
		fail(resp, protocol.RespInvalidParameter, "bad receipt handle: "+err.Error())
		return nil, protocol.ExtraInfo{}, false
	}
	if x.QueueID != qid {
		fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("the receipt handle is of queue %d, not %d", x.QueueID, qid))
		return nil, protocol.ExtraInfo{}, false
	}
	return t, x, true
}

// popOutcome answers a request the POP manager refused: NO_MESSAGE for an
// ack or change with a stale handle, of a message not in flight or already
// acked; INVALID_PARAMETER for arguments out of bounds.
func popOutcome(resp *remoting.Response, err error) remoting.Action {
	switch {
	case err == nil:
		return remoting.Reply
	case errors.Is(err, pop.ErrStaleHandle):
		return fail(resp, protocol.RespNoMessage, "the receipt handle is expired: the message was received again since")
	case errors.Is(err, pop.ErrNotInFlight):
		return fail(resp, protocol.RespNoMessage, "the message is not in flight for the group")
	case errors.Is(err, pop.ErrAcked):
		return fail(resp, protocol.RespNoMessage, "the message was acked already")
	case errors.Is(err, pop.ErrInvalidArgument):
		return fail(resp, protocol.RespInvalidParameter, err.Error())
	}
	return fail(resp, protocol.RespSystemError, err.Error())
}

// handleAck serves ACK_MESSAGE (3443).
func (b *Broker) handleAck(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.AckMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	t, x, ok := b.receipt(resp, h.Topic, h.ExtraInfo, h.QueueID)
	if !ok {
		return remoting.Reply
	}
	return popOutcome(resp, b.pops.Ack(string(h.ConsumerGroup), t.name, h.QueueID, h.Offset, x.PopTime))
}

// handleChangeInvisible serves CHANGE_MESSAGE_INVISIBLETIME (3445).
func (b *Broker) handleChangeInvisible(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ChangeInvisibleTimeRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if !validInvisibleTime(h.InvisibleTime) {
		return fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("invisibleTime %d ms is not in 1..%d", h.InvisibleTime, maxInvisibleMs))
	}
	t, x, ok := b.receipt(resp, h.Topic, h.ExtraInfo, h.QueueID)
	if !ok {
		return remoting.Reply
	}
	popTime, err := b.pops.ChangeInvisible(string(h.ConsumerGroup), t.name, h.QueueID, h.Offset, x.PopTime,
		time.Duration(h.InvisibleTime)*time.Millisecond)
	if err != nil {
		return popOutcome(resp, err)
	}
	(&protocol.ChangeInvisibleTimeResponse{PopTime: popTime, InvisibleTime: h.InvisibleTime, ReviveQid: x.ReviveQid}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// registerPop registers POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME.
func (b *Broker) registerPop(t *handlerTable) {
	t.add(b.handlePop, protocol.ReqPopMessage)
	t.add(noConn(b.handleAck), protocol.ReqAckMessage)
	t.add(noConn(b.handleChangeInvisible), protocol.ReqChangeMessageInvisibleTime)
}
