package client

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Request-reply (RocketMQ 4.6+): a requester sends a message with a correlation id and
// its own client ID (Producer.Request); a consumer of the request topic answers it with
// Producer.Reply, a send to the cluster's reply topic ("<cluster>_REPLY_TOPIC") with
// SEND_REPLY_MESSAGE_V2; the broker stores the reply there and pushes it
// (PUSH_REPLY_MESSAGE_TO_CLIENT) to the requester's connection, where the instance
// hands it to the waiting Request by correlation id.

var (
	// ErrReplyTimeout: the request was sent, but no reply came before its deadline.
	ErrReplyTimeout = errors.New("client: request sent, no reply before its deadline")
	// ErrNotRequest: Reply was given a message that is not a request (it lacks the
	// CLUSTER, REPLY_TO_CLIENT or CORRELATION_ID property).
	ErrNotRequest = errors.New("client: message is not a request")
)

// replyMsgType is MSG_TYPE's value on replies (RocketMQ's MixAll.REPLY_MESSAGE_FLAG).
const replyMsgType = "reply"

// replyTopic is the cluster's reply topic (MixAll.REPLY_TOPIC_POSTFIX).
func replyTopic(cluster string) string { return cluster + "_REPLY_TOPIC" }

// Request sends msg as a request and waits for its reply: the message gets a new
// CORRELATION_ID, REPLY_TO_CLIENT (this producer's client ID) and TTL (the wait, in
// milliseconds, as the Java client writes it), is sent like SendSync, and the reply a
// consumer sends with Reply comes back pushed by the broker. The wait ends at ctx's
// deadline, or after ReplyTimeout when ctx has none: ErrReplyTimeout then (the
// request was delivered; a reply arriving later is dropped). A failed send is returned
// as SendSync returns it. msg's Properties map gets the three properties (it is
// created when nil).
//
// The broker pushes a reply only to a client connected to it with a producer group in
// its heartbeats; Request sends the heartbeat to the request topic's brokers before
// the first request to a topic, so the reply of even the first request finds it.
func (p *Producer) Request(ctx context.Context, msg *Message) (*MessageExt, error) {
	if msg == nil {
		return nil, fmt.Errorf("%w: nil message", ErrBadMessage)
	}
	timeout := p.cfg.replyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("%w: %w", ErrReplyTimeout, context.DeadlineExceeded)
	}
	if _, err := p.publishRoute(ctx, msg.Topic); err != nil {
		return nil, err
	}
	p.topicMu.Lock()
	first := !p.requested[msg.Topic]
	if first {
		if p.requested == nil {
			p.requested = map[string]bool{}
		}
		p.requested[msg.Topic] = true
	}
	p.topicMu.Unlock()
	if first {
		_ = p.in.heartbeat(ctx) // failures: the periodic heartbeat retries, the reply may time out
	}

	id := string(p.in.uniq.AppendNext(nil))
	if msg.Properties == nil {
		msg.Properties = map[string]string{}
	}
	msg.Properties[message.PropCorrelationID] = id
	msg.Properties[message.PropReplyToClient] = p.in.id
	msg.Properties[message.PropTTL] = strconv.FormatInt(timeout.Milliseconds(), 10)

	ch := p.in.awaitReply(id)
	defer p.in.dropReply(id)
	if _, err := p.SendSync(ctx, msg); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: topic %s, correlation id %s, waited %v: %w", ErrReplyTimeout, msg.Topic, id, timeout, ctx.Err())
	}
}

// NewReply builds the reply to a request received by a consumer: to the reply topic
// of the request's cluster, with the request's CORRELATION_ID, REPLY_TO_CLIENT and TTL
// and MSG_TYPE=reply, and body. It fails with ErrNotRequest when request lacks them.
// Producer.Reply sends it; set Tags, Keys or Properties on it before that if needed.
func NewReply(request *MessageExt, body []byte) (*Message, error) {
	if request == nil {
		return nil, fmt.Errorf("%w: nil", ErrNotRequest)
	}
	cluster := request.Properties[message.PropCluster]
	to := request.Properties[message.PropReplyToClient]
	corr := request.Properties[message.PropCorrelationID]
	if cluster == "" || to == "" || corr == "" {
		return nil, fmt.Errorf("%w: CLUSTER=%q REPLY_TO_CLIENT=%q CORRELATION_ID=%q", ErrNotRequest, cluster, to, corr)
	}
	props := map[string]string{
		message.PropMsgType:       replyMsgType,
		message.PropCorrelationID: corr,
		message.PropReplyToClient: to,
	}
	if ttl := request.Properties[message.PropTTL]; ttl != "" {
		props[message.PropTTL] = ttl
	}
	return &Message{Topic: replyTopic(cluster), Body: body, Properties: props}, nil
}

// Reply sends body as the reply to request (a message a consumer received from
// Request): NewReply's message, sent with SEND_REPLY_MESSAGE_V2 like SendSync. The
// broker stores it in the reply topic and pushes it to the requester; a requester that
// is not connected to that broker (gone, or connected elsewhere) makes the broker
// answer SYSTEM_ERROR, which is retried on another broker like any send. Use it from a
// consumer's listener:
//
//	func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
//		for _, m := range msgs {
//			if _, err := replier.Reply(ctx, m, answer(m.Body)); err != nil {
//				return client.ConsumeRetryLater
//			}
//		}
//		return client.ConsumeSuccess
//	}
func (p *Producer) Reply(ctx context.Context, request *MessageExt, body []byte) (SendResult, error) {
	m, err := NewReply(request, body)
	if err != nil {
		return SendResult{}, err
	}
	return p.SendSync(ctx, m)
}

// isReply reports whether m is a reply (MSG_TYPE=reply): it is sent with
// SEND_REPLY_MESSAGE_V2.
func isReply(m *Message) bool { return m.Properties[message.PropMsgType] == replyMsgType }

// awaitReply registers a waiter for the reply with correlation id id.
func (in *instance) awaitReply(id string) <-chan *MessageExt {
	ch := make(chan *MessageExt, 1)
	in.replyMu.Lock()
	if in.replies == nil {
		in.replies = map[string]chan *MessageExt{}
	}
	in.replies[id] = ch
	in.replyMu.Unlock()
	return ch
}

func (in *instance) dropReply(id string) {
	in.replyMu.Lock()
	delete(in.replies, id)
	in.replyMu.Unlock()
}

// servePushReply handles PUSH_REPLY_MESSAGE_TO_CLIENT (326): the reply goes to the
// Request waiting for its correlation id; one nobody waits for (timed out, or a
// duplicate) is dropped. The answer is SUCCESS either way, as the Java and Go clients
// answer; a header that does not decode is SYSTEM_ERROR.
func (in *instance) servePushReply(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ReplyMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		resp.Cmd.Code = protocol.RespSystemError
		resp.Cmd.SetRemark(err.Error())
		return remoting.Reply
	}
	m := &MessageExt{queue: MessageQueue{Topic: h.Topic, QueueID: h.QueueID}}
	m.Queue = &m.queue
	m.Topic = h.Topic
	m.Flag = h.Flag
	m.SysFlag = int32(h.SysFlag)
	m.ReconsumeTimes = h.ReconsumeTimes
	m.BornTimestamp = time.UnixMilli(h.BornTimestamp)
	m.StoreTimestamp = time.UnixMilli(h.StoreTimestamp)
	m.BornHost = parseJavaAddr(h.BornHost)
	m.StoreHost = parseJavaAddr(h.StoreHost)
	m.Properties = message.ParsePropertiesString(h.Properties)
	m.Tags = m.Properties[message.PropTags]
	if k := m.Properties[message.PropKeys]; k != "" {
		m.Keys = strings.Split(k, message.PropKeysSeparator)
	}
	m.MsgID = m.Properties[message.PropUniqKey]
	m.Body = append([]byte(nil), req.Body...) // req's buffer is the connection's
	if m.SysFlag&message.FlagCompressed != 0 {
		if out, err := decompress(m.Body, m.SysFlag); err == nil {
			m.Body = out
		} else {
			in.log.Warn("client: a reply's body does not inflate; it is delivered as sent", "err", err)
		}
	}
	corr := m.Properties[message.PropCorrelationID]
	in.replyMu.Lock()
	ch := in.replies[corr]
	delete(in.replies, corr)
	in.replyMu.Unlock()
	if ch != nil {
		ch <- m // buffered, one reply per id
	} else {
		in.log.Debug("client: a reply no request waits for (timed out, or a duplicate)", "correlationId", corr,
			"broker", c.RemoteAddr().String())
	}
	resp.Cmd.Code = protocol.RespSuccess
	return remoting.Reply
}

// parseJavaAddr reads an address as Java's InetSocketAddress.toString writes it
// ("host/ip:port" or "/ip:port"); the zero value when it does not parse.
func parseJavaAddr(s string) netip.AddrPort {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	ap, _ := netip.ParseAddrPort(s)
	return ap
}
