package broker

import (
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// handleSend serves SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and
// SEND_BATCH_MESSAGE (320): the typed header (long V1 or short V2 keys) is
// decoded as views of the request, core.Send stores the message(s), and the
// answer carries the offset message id(s), the queue, the queue offset and
// the UNIQ_KEY. In sync-flush mode the answer waits for the send's Pending
// (answerWhenDurable). On success it does not allocate.
func (b *Broker) handleSend(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.SendMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	r := core.SendRequest{
		ProducerGroup: h.ProducerGroup, Topic: h.Topic, DefaultTopic: h.DefaultTopic,
		DefaultTopicQueueNums: h.DefaultTopicQueueNums, QueueID: h.QueueID, SysFlag: h.SysFlag,
		BornTimestamp: h.BornTimestamp, Flag: h.Flag, Properties: h.Properties, ReconsumeTimes: h.ReconsumeTimes,
		MaxReconsumeTimes: h.MaxReconsumeTimes, HasMaxReconsumeTimes: h.HasMaxReconsumeTimes,
		Batch: req.Code == protocol.ReqSendBatchMessage, Body: req.Body, BornHost: peerAddr(c),
	}
	res, _ := b.sendPool.Get().(*core.SendResult)
	if res == nil {
		res = new(core.SendResult)
	}
	defer b.sendPool.Put(res)
	if err := b.core.Send(&r, res); err != nil {
		return fail(resp, err)
	}
	if res.Pending.Waiting() {
		a := b.acks.get(b)
		a.queueID, a.queueOffset = res.QueueID, res.QueueOffset
		a.msgID = append(a.msgID[:0], res.MsgID...)
		a.txID = append(a.txID[:0], res.TransactionID...)
		a.recall = append(a.recall[:0], res.RecallHandle...)
		return b.answerWhenDurable(c, req, resp, a, res.Pending)
	}
	if res.FlushTimeout {
		resp.Cmd.Code = protocol.RespFlushDiskTimeout
	}
	setSendResponse(&resp.Cmd.Ext, res.MsgID, res.QueueID, res.QueueOffset, res.TransactionID, res.RecallHandle)
	return remoting.Reply
}

// defaultRegion is the send response's MSG_REGION, as the Java broker's
// default gives it.
var defaultRegion = []byte("DefaultRegion")

// setSendResponse writes the ext fields the Go client reads from a send
// response (TRACE_ON is true and MSG_REGION the default, as the Java
// broker's defaults give them), and a timer message's recallHandle
// (RECALL_MESSAGE, 370).
func setSendResponse(ext *protocol.ExtFields, msgID []byte, queueID int32, queueOffset int64, uniq, recall []byte) {
	h := protocol.SendMessageResponse{MsgID: msgID, QueueID: queueID, QueueOffset: queueOffset,
		TransactionID: uniq, Region: defaultRegion, TraceOn: true, RecallHandle: recall}
	h.Encode(ext)
}

// registerSend registers the send codes.
func (b *Broker) registerSend(t *handlerTable) {
	t.add(b.handleSend, protocol.ReqSendMessage, protocol.ReqSendMessageV2, protocol.ReqSendBatchMessage)
}
