package broker

import (
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// replyPushTimeout bounds PUSH_REPLY_MESSAGE_TO_CLIENT's wait for the requesting
// client's answer: Java's Broker2Client.callClient waits 10 s.
const replyPushTimeout = 10 * time.Second

// handleReply serves SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325), as
// RocketMQ's ReplyMessageProcessor: the reply (a send to the cluster's reply topic, or
// any topic the replier names) is stored with core.Send, so the send's checks apply
// and a refused reply is neither stored nor pushed; then it is pushed with
// PUSH_REPLY_MESSAGE_TO_CLIENT (326) to the connection of the client its REPLY_TO_CLIENT
// property names (core.ReplyConn: a client that declared a producer group in its
// heartbeat to this broker). The answer's code is the push's: SUCCESS when the client
// acknowledged it, SYSTEM_ERROR with RocketMQ's remark when the property is missing,
// when no such client is connected here (the reply stays stored in the reply topic),
// or when the client failed or did not answer within 10 s. Its header is the send's
// (offset message id, queue, queue offset).
//
// RocketMQ pushes before it stores and answers the push's code even when the store
// failed; Apogee stores first, so a store failure (disk full, a slave) is the answer
// and nothing is pushed.
func (b *Broker) handleReply(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.SendMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	r := core.SendRequest{
		ProducerGroup: h.ProducerGroup, Topic: h.Topic, DefaultTopic: h.DefaultTopic,
		DefaultTopicQueueNums: h.DefaultTopicQueueNums, QueueID: h.QueueID, SysFlag: h.SysFlag,
		BornTimestamp: h.BornTimestamp, Flag: h.Flag, Properties: h.Properties, ReconsumeTimes: h.ReconsumeTimes,
		Body: req.Body, BornHost: peerAddr(c),
	}
	var res core.SendResult
	if err := b.core.Send(&r, &res); err != nil {
		return fail(resp, err)
	}
	// Everything the push and the deferred answer need, copied: the request's
	// buffer is reused once this handler returns.
	p := &replyPush{
		b: b, storeRes: res,
		hdr: protocol.ReplyMessageRequest{
			ProducerGroup: string(h.ProducerGroup), Topic: string(h.Topic), DefaultTopic: string(h.DefaultTopic),
			DefaultTopicQueueNums: h.DefaultTopicQueueNums, QueueID: h.QueueID, SysFlag: h.SysFlag,
			BornTimestamp: h.BornTimestamp, Flag: h.Flag, ReconsumeTimes: h.ReconsumeTimes, UnitMode: h.UnitMode,
			BornHost: javaAddr(peerAddr(c).String()), StoreHost: javaAddr(b.copts.AdvertiseAddr),
		},
		props: append([]byte(nil), h.Properties...),
		body:  append([]byte(nil), req.Body...),
	}
	p.replyTo, p.hasReplyTo = core.ReplyTo(h.Properties)
	if c == nil { // driven directly (tests): no deferral
		if res.Pending.Waiting() {
			p.storeErr = b.core.WaitDurable(res.Pending)
		}
		done := make(chan struct{})
		p.answer = func(code int32, remark string) {
			p.fill(resp.Cmd, code, remark)
			close(done)
		}
		p.push()
		<-done
		return remoting.Reply
	}
	rs := c.Defer(req)
	p.answer = func(code int32, remark string) {
		var cmd protocol.Command
		rs.InitResponse(&cmd, code)
		p.fill(&cmd, code, remark)
		_ = rs.Reply(&remoting.Response{Cmd: &cmd})
	}
	if res.Pending.Waiting() {
		go func() {
			p.storeErr = b.core.WaitDurable(res.Pending)
			p.push()
		}()
		return remoting.Deferred
	}
	p.push()
	return remoting.Deferred
}

// replyPush is one reply on its way to the requesting client.
type replyPush struct {
	b          *Broker
	storeRes   core.SendResult
	storeErr   error // a sync flush's outcome
	hdr        protocol.ReplyMessageRequest
	props      []byte
	body       []byte
	replyTo    string
	hasReplyTo bool
	answer     func(code int32, remark string) // once
}

// push sends PUSH_REPLY_MESSAGE_TO_CLIENT and answers the replier when the client
// did, or at once when there is no client to push to.
func (p *replyPush) push() {
	if p.storeErr != nil && !core.NotDurable(p.storeErr) {
		p.finish(core.Code(p.storeErr), core.Remark(p.storeErr))
		return
	}
	if !p.hasReplyTo {
		p.finish(protocol.RespSystemError, core.ReplyToMissing)
		return
	}
	cc, ok := p.b.core.ReplyConn(p.replyTo)
	rc, remotingConn := cc.(clientConn)
	if !ok || !remotingConn {
		p.finish(protocol.RespSystemError, "push reply message fail, channel of <"+p.replyTo+"> not found.")
		return
	}
	now := time.Now().UnixMilli()
	p.hdr.Properties = core.PushedReplyProperties(p.props, now)
	p.hdr.StoreTimestamp = now
	var cmd protocol.Command
	cmd.InitRequest(protocol.ReqPushReplyMessageToClient, 0)
	p.hdr.Encode(&cmd.Ext)
	cmd.Body = p.body
	failed := "push reply message to " + p.replyTo + "fail." // RocketMQ's remark, spacing included
	err := rc.c.InvokeAsync(&cmd, replyPushTimeout, func(r *protocol.Command, err error) {
		if err != nil || r.Code != protocol.RespSuccess {
			p.finish(protocol.RespSystemError, failed)
			return
		}
		p.finish(protocol.RespSuccess, "")
	})
	if err != nil {
		p.finish(protocol.RespSystemError, failed)
	}
}

// finish answers the replier.
func (p *replyPush) finish(code int32, remark string) { p.answer(code, remark) }

// fill sets the answer's code and remark, and the stored reply's send fields unless
// the store failed.
func (p *replyPush) fill(cmd *protocol.Command, code int32, remark string) {
	cmd.Code = code
	if remark != "" {
		cmd.SetRemark(remark)
	}
	if p.storeErr == nil || core.NotDurable(p.storeErr) {
		setSendResponse(&cmd.Ext, p.storeRes.MsgID, p.storeRes.QueueID, p.storeRes.QueueOffset, nil, nil)
	}
}

// javaAddr writes host:port as Java's InetSocketAddress.toString does for an address
// given by IP: "/host:port".
func javaAddr(hostPort string) string { return "/" + hostPort }

// registerReply registers the request-reply codes.
func (b *Broker) registerReply(t *handlerTable) {
	t.add(b.handleReply, protocol.ReqSendReplyMessage, protocol.ReqSendReplyMessageV2)
}
