package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// remotingDriver runs the scenarios through the remoting front end (package
// broker) over TCP, with the remoting frames RocketMQ's 4.x clients send,
// built from package protocol's typed headers. It speaks frames rather than
// package client's producers and consumers: a scenario names single
// operations (a pull from one offset, a pop, a send-back, a commit), which
// the client's consumers wrap in behaviour of their own (rebalancing,
// automatic send-back and offset commits) that would then be what the
// scenario tests.
type remotingDriver struct {
	cl *remoting.Client

	mu      sync.Mutex
	queues  map[string]int32 // write queues of the topics created
	next    map[string]int32 // round robin of sends without a message group
	orderly map[string]bool  // groups created orderly
	checks  chan Check       // the producer's checks (watchChecks)
}

// brokerOptions are the remoting front end's options on a core of options
// co: the same core options as every other driver's.
func brokerOptions(t testing.TB, co core.Options) broker.Options {
	return broker.Options{Core: co, Remoting: &remoting.Options{Logger: testlog.New(t, "remoting")}}
}

// newRemotingDriver starts a broker (the core and its remoting front end)
// and returns a driver connected to it.
func newRemotingDriver(t *testing.T) driver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := brokerOptions(t, coreOptions(t))
	opts.Core.AdvertiseAddr = l.Addr().String()
	b, err := broker.New(opts)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		b.Serve(l)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("broker Shutdown: %v", err)
		}
		<-served
	})
	return dialRemoting(t, l.Addr().String())
}

// dialRemoting returns a driver connected to the remoting front end at
// addr (closed when the test ends, before what was started earlier stops).
func dialRemoting(t *testing.T, addr string) *remotingDriver {
	t.Helper()
	d := &remotingDriver{queues: map[string]int32{}, next: map[string]int32{}, orderly: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Handler: d,
		Options: remoting.Options{Logger: testlog.New(t, "client")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	d.cl = cl
	return d
}

// ServeRemoting serves what the broker pushes: CHECK_TRANSACTION_STATE goes
// to the checks channel (copied: the request is valid during the call only).
func (d *remotingDriver) ServeRemoting(_ *remoting.Conn, req *protocol.Command, _ *remoting.Response) remoting.Action {
	if req.Code != protocol.ReqCheckTransactionState {
		return remoting.NoReply
	}
	var h protocol.CheckTransactionStateRequest
	if err := h.Decode(&req.Ext); err != nil {
		return remoting.NoReply
	}
	g, err := gotOf(append([]byte(nil), req.Body...))
	if err != nil {
		return remoting.NoReply
	}
	d.mu.Lock()
	ch := d.checks
	d.mu.Unlock()
	if ch != nil {
		select {
		case ch <- Check{ID: h.MsgID, Body: g.Body, tx: txRef{id: h.MsgID, commitLog: h.CommitLogOffset, offset: h.TranStateTableOffset}}:
		default:
		}
	}
	return remoting.NoReply
}

func (d *remotingDriver) lacks(op) string { return "" }

// request is a request as rocketmq-client-go shapes it: language GO,
// version 317.
func request(code int32) *protocol.Command {
	cmd := new(protocol.Command)
	cmd.InitRequest(code, 0)
	cmd.Language = protocol.LangGo
	cmd.Version = 317
	return cmd
}

// invoke sends req and returns the answer (copied body), failing t on a
// transport error.
func (d *remotingDriver) invoke(t *testing.T, req *protocol.Command) *protocol.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := d.cl.Invoke(ctx, req)
	if err != nil {
		t.Fatalf("request %d: %v", req.Code, err)
	}
	resp.Body = append([]byte(nil), resp.Body...)
	return resp
}

// mustInvoke is invoke that fails t unless the answer is SUCCESS.
func (d *remotingDriver) mustInvoke(t *testing.T, req *protocol.Command) *protocol.Command {
	t.Helper()
	resp := d.invoke(t, req)
	if resp.Code != protocol.RespSuccess {
		t.Fatalf("request %d: code %d %s", req.Code, resp.Code, resp.Remark)
	}
	return resp
}

func (d *remotingDriver) createTopic(t *testing.T, topic string, queues int32, typ string) {
	t.Helper()
	req := request(protocol.ReqUpdateAndCreateTopic)
	h := protocol.CreateTopicRequest{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: queues, WriteQueueNums: queues,
		Perm: protocol.PermRead | protocol.PermWrite, TopicFilterType: "SINGLE_TAG"}
	if typ != "" {
		h.Attributes = "+message.type=" + typ
	}
	h.Encode(&req.Ext)
	d.mustInvoke(t, req)
	d.mu.Lock()
	d.queues[topic] = queues
	d.mu.Unlock()
}

func (d *remotingDriver) createGroup(t *testing.T, group string, g groupConfig) {
	t.Helper()
	cfg := protocol.DefaultSubscriptionGroupConfig(group)
	if g.retryMax >= 0 {
		cfg.RetryMaxTimes = g.retryMax
	}
	cfg.ConsumeMessageOrderly = g.orderly
	body, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := request(protocol.ReqUpdateAndCreateSubscription)
	req.Body = body
	d.mustInvoke(t, req)
	d.mu.Lock()
	d.orderly[group] = g.orderly
	d.mu.Unlock()
}

// queueFor picks a send's queue as a client does: the message group's
// hash, else round robin.
func (d *remotingDriver) queueFor(m Msg) int32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.queues[m.Topic]
	if n <= 0 {
		return 0
	}
	if m.Group != "" {
		return groupQueue(m.Group, n)
	}
	q := d.next[m.Topic] % n
	d.next[m.Topic]++
	return q
}

func (d *remotingDriver) sendFrame(t *testing.T, producerGroup string, m Msg, sysFlag int32, props []byte, id string) (Sent, error) {
	t.Helper()
	req := request(protocol.ReqSendMessageV2)
	h := protocol.SendMessageRequest{ProducerGroup: []byte(producerGroup), Topic: []byte(m.Topic), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 4, QueueID: d.queueFor(m), SysFlag: sysFlag, BornTimestamp: time.Now().UnixMilli(),
		Properties: props, BrokerName: []byte("broker-a")}
	h.EncodeV2(&req.Ext)
	req.Body = []byte(m.Body)
	resp := d.invoke(t, req)
	if resp.Code != protocol.RespSuccess {
		return Sent{}, remotingRefusal(resp)
	}
	var r protocol.SendMessageResponse
	if err := r.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	_, off, err := message.ParseOffsetMsgID(string(r.MsgID))
	if err != nil {
		t.Fatalf("the send's msgId %q: %v", r.MsgID, err)
	}
	return Sent{ID: id, Queue: r.QueueID, Offset: r.QueueOffset, tx: txRef{id: id, commitLog: off, offset: r.QueueOffset}}, nil
}

func (d *remotingDriver) send(t *testing.T, m Msg) (Sent, error) {
	t.Helper()
	id := newID()
	return d.sendFrame(t, "scenario-producer", m, 0, msgProps(m, id), id)
}

func (d *remotingDriver) sendHalf(t *testing.T, m Msg) Sent {
	t.Helper()
	id := newID()
	p := msgProps(m, id)
	p = message.AppendProperty(p, message.PropTranMsg, "true")
	p = message.AppendProperty(p, message.PropProducerGroup, m.Topic)
	s, err := d.sendFrame(t, m.Topic, m, message.SetTxType(0, message.TxPreparedType), p, id)
	if err != nil {
		t.Fatalf("half send: %v", err)
	}
	return s
}

func (d *remotingDriver) endTx(t *testing.T, topic string, tx txRef, res resolution, fromCheck bool) {
	t.Helper()
	kind := endTransactionType(res)
	req := request(protocol.ReqEndTransaction)
	(&protocol.EndTransactionRequest{ProducerGroup: topic, TranStateTableOffset: tx.offset, CommitLogOffset: tx.commitLog,
		CommitOrRollback: kind, FromTransactionCheck: fromCheck, MsgID: tx.id, TransactionID: tx.id, BrokerName: "broker-a"}).Encode(&req.Ext)
	d.mustInvoke(t, req)
}

func (d *remotingDriver) watchChecks(t *testing.T, topic string) <-chan Check {
	t.Helper()
	ch := make(chan Check, 64)
	d.mu.Lock()
	d.checks = ch
	d.mu.Unlock()
	hb := protocol.HeartbeatData{ClientID: "127.0.0.1@scenario", ProducerDataSet: []protocol.ProducerData{{GroupName: topic}}}
	body, err := hb.Encode()
	if err != nil {
		t.Fatal(err)
	}
	req := request(protocol.ReqHeartBeat)
	req.Body = body
	d.mustInvoke(t, req)
	return ch
}

// records decodes a pull or pop body (records back to back).
func records(t *testing.T, body []byte) []Got {
	t.Helper()
	var out []Got
	if err := message.ForEachRecord(body, true, func(v message.View) error {
		g, err := gotOf(v.Bytes())
		out = append(out, g)
		return err
	}); err != nil {
		t.Fatalf("decode records: %v", err)
	}
	return out
}

// remotingRefusal is an answer's code and remark as a refusal.
func remotingRefusal(resp *protocol.Command) error {
	return &refusal{remoting: resp.Code, msg: string(resp.Remark), noTopic: resp.Code == protocol.RespTopicNotExist}
}

func (d *remotingDriver) pull(t *testing.T, group, topic string, q int32, offset int64, f Filter) (Pulled, error) {
	t.Helper()
	return d.pullHeld(t, group, topic, q, offset, f, 0)
}

// pullHeld is a pull with the suspend flag and suspendTimeoutMillis.
func (d *remotingDriver) pullHeld(t *testing.T, group, topic string, q int32, offset int64, f Filter, hold time.Duration) (Pulled, error) {
	t.Helper()
	flags := int32(0)
	if f.registered == 0 {
		flags |= protocol.PullFlagSubscription
	}
	if hold > 0 {
		flags |= protocol.PullFlagSuspend
	}
	for {
		req := request(protocol.ReqPullMessage)
		(&protocol.PullMessageRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: q, QueueOffset: offset,
			MaxMsgNums: 32, SysFlag: flags, SuspendTimeoutMillis: hold.Milliseconds(), Subscription: []byte(f.expr()),
			ExpressionType: []byte(f.typ()), SubVersion: f.registered, BrokerName: []byte("broker-a")}).Encode(&req.Ext)
		resp := d.invoke(t, req)
		var h protocol.PullMessageResponse
		switch resp.Code {
		case protocol.RespSuccess, protocol.RespPullNotFound, protocol.RespPullRetryImmediately, protocol.RespPullOffsetMoved:
			if err := h.Decode(&resp.Ext); err != nil {
				t.Fatalf("pull answer %d: %v", resp.Code, err)
			}
		default:
			return Pulled{}, remotingRefusal(resp)
		}
		out := Pulled{Next: h.NextBeginOffset}
		switch resp.Code {
		case protocol.RespSuccess:
			out.Msgs = records(t, resp.Body)
		case protocol.RespPullRetryImmediately:
			// Nothing matched the filter: read on, as clients do.
			if h.NextBeginOffset > offset {
				offset = h.NextBeginOffset
				continue
			}
		}
		return out, nil
	}
}

func (d *remotingDriver) pop(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter) ([]Got, error) {
	t.Helper()
	return d.popHeld(t, group, topic, max, invisible, f, 0)
}

// popHeld is a pop with a pollTime.
func (d *remotingDriver) popHeld(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter, hold time.Duration) ([]Got, error) {
	t.Helper()
	d.mu.Lock()
	orderly := d.orderly[group]
	d.mu.Unlock()
	req := request(protocol.ReqPopMessage)
	// initMode 0 is Java's ConsumeInitMode.MIN: a new group starts at a
	// queue's first message.
	(&protocol.PopMessageRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: -1, MaxMsgNums: max,
		InvisibleTime: invisible.Milliseconds(), PollTime: hold.Milliseconds(), BornTime: time.Now().UnixMilli(), InitMode: 0, Order: orderly,
		ExpType: []byte(f.typ()), Exp: []byte(f.expr())}).Encode(&req.Ext)
	resp := d.invoke(t, req)
	switch resp.Code {
	case protocol.RespPullNotFound:
		return nil, nil
	case protocol.RespSuccess:
	default:
		return nil, remotingRefusal(resp)
	}
	var h protocol.PopMessageResponse
	if err := h.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	// The receipt handles, as the Java client builds them: the pop's
	// time, invisible time and revive queue, and the start offset of the
	// message's queue ("0 queueId offset" entries joined by ';').
	starts := map[int32]int64{}
	for _, part := range strings.Split(string(h.StartOffsetInfo), ";") {
		var q int32
		var off int64
		if _, err := fmt.Sscanf(part, "0 %d %d", &q, &off); err != nil {
			t.Fatalf("startOffsetInfo %q: %v", h.StartOffsetInfo, err)
		}
		starts[q] = off
	}
	out := records(t, resp.Body)
	for i := range out {
		x := protocol.ExtraInfo{CkQueueOffset: starts[out[i].Queue], PopTime: h.PopTime, InvisibleTime: h.InvisibleTime,
			ReviveQid: h.ReviveQid, BrokerName: []byte("broker-a"), QueueID: out[i].Queue, QueueOffset: out[i].Offset}
		out[i].handle = string(protocol.AppendExtraInfo(nil, &x))
	}
	return out, nil
}

// receiptAnswer reports whether a receipt operation succeeded: false for
// NO_MESSAGE (the receipt is stale, or the message not in flight), a
// failure of t for any other refusal.
func receiptAnswer(t *testing.T, what string, resp *protocol.Command) bool {
	t.Helper()
	switch resp.Code {
	case protocol.RespSuccess:
		return true
	case protocol.RespNoMessage:
		return false
	}
	t.Fatalf("%s: code %d %s", what, resp.Code, resp.Remark)
	return false
}

func (d *remotingDriver) ack(t *testing.T, group string, g Got) bool {
	t.Helper()
	req := request(protocol.ReqAckMessage)
	(&protocol.AckMessageRequest{ConsumerGroup: []byte(group), Topic: []byte(g.Topic), QueueID: g.Queue,
		ExtraInfo: []byte(g.handle), Offset: g.Offset}).Encode(&req.Ext)
	return receiptAnswer(t, "ack", d.invoke(t, req))
}

func (d *remotingDriver) changeInvisible(t *testing.T, group string, g Got, dur time.Duration) (Got, bool) {
	t.Helper()
	req := request(protocol.ReqChangeMessageInvisibleTime)
	(&protocol.ChangeInvisibleTimeRequest{ConsumerGroup: []byte(group), Topic: []byte(g.Topic), QueueID: g.Queue,
		ExtraInfo: []byte(g.handle), Offset: g.Offset, InvisibleTime: dur.Milliseconds()}).Encode(&req.Ext)
	resp := d.invoke(t, req)
	if !receiptAnswer(t, "change invisible time", resp) {
		return g, false
	}
	var h protocol.ChangeInvisibleTimeResponse
	if err := h.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	x, err := protocol.ParseExtraInfo([]byte(g.handle))
	if err != nil {
		t.Fatal(err)
	}
	x.PopTime, x.InvisibleTime = h.PopTime, h.InvisibleTime
	g.handle = string(protocol.AppendExtraInfo(nil, &x))
	return g, true
}

func (d *remotingDriver) commitOffset(t *testing.T, group, topic string, q int32, offset int64) {
	t.Helper()
	req := request(protocol.ReqUpdateConsumerOffset)
	(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: q, CommitOffset: offset}).Encode(&req.Ext)
	d.mustInvoke(t, req)
}

func (d *remotingDriver) queryOffset(t *testing.T, group, topic string, q int32) (int64, bool) {
	t.Helper()
	req := request(protocol.ReqQueryConsumerOffset)
	(&protocol.QueryConsumerOffsetRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: q}).Encode(&req.Ext)
	resp := d.invoke(t, req)
	switch resp.Code {
	case protocol.RespQueryNotFound:
		return 0, false
	case protocol.RespSuccess:
	default:
		t.Fatalf("query consumer offset: code %d %s", resp.Code, resp.Remark)
	}
	var h protocol.QueryConsumerOffsetResponse
	if err := h.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	return h.Offset, true
}

func (d *remotingDriver) sendBack(t *testing.T, group string, g Got, delayLevel int32) {
	t.Helper()
	origin := g.Topic
	if g.RetryTopic != "" {
		origin = g.RetryTopic
	}
	req := request(protocol.ReqConsumerSendMsgBack)
	(&protocol.ConsumerSendMsgBackRequest{Group: group, Offset: g.commitLog, DelayLevel: delayLevel, OriginMsgID: g.ID,
		OriginTopic: origin, BrokerName: "broker-a"}).Encode(&req.Ext)
	d.mustInvoke(t, req)
}

func (d *remotingDriver) readDLQ(t *testing.T, group string) []Got {
	t.Helper()
	p, err := d.pull(t, "dlq-reader", "%DLQ%"+group, 0, 0, Filter{})
	if err != nil && !topicMissing(err) {
		t.Fatalf("pull of %%DLQ%%%s: %v", group, err)
	}
	return p.Msgs
}

// forwardDLQ is what RocketMQ's proxy sends its broker for a gRPC
// ForwardMessageToDeadLetterQueue, the remoting protocol having no request
// of its own for it: CONSUMER_SEND_MSG_BACK with delay level -1 (straight
// to the DLQ), then ACK_MESSAGE of the delivery.
func (d *remotingDriver) forwardDLQ(t *testing.T, group string, g Got) bool {
	t.Helper()
	d.sendBack(t, group, g, -1)
	return d.ack(t, group, g)
}

func (d *remotingDriver) subscribe(t *testing.T, group, topic string, f Filter) int64 {
	t.Helper()
	hb, v := consumerHeartbeat("127.0.0.1@scenario", group, topic, f)
	body, err := hb.Encode()
	if err != nil {
		t.Fatal(err)
	}
	req := request(protocol.ReqHeartBeat)
	req.Body = body
	d.mustInvoke(t, req)
	return v
}
