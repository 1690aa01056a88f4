package scenario

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// coreDriver runs the scenarios on the messaging core's Go methods, as a
// front end calls them: no wire.
type coreDriver struct {
	c *core.Core
	// consumer is the connection of the driver's consumer: its heartbeats
	// are its whole declaration, each replacing the last.
	consumer checkConn

	mu      sync.Mutex
	queues  map[string]int32 // write queues of the topics created
	orderly map[string]bool  // groups created orderly
}

func newCoreDriver(t *testing.T) driver {
	t.Helper()
	c, err := core.New(coreOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(func() {
		if err := c.Shutdown(); err != nil {
			t.Errorf("core Shutdown: %v", err)
		}
	})
	return &coreDriver{c: c, queues: map[string]int32{}, orderly: map[string]bool{}}
}

// The core driver's peer: what a front end passes as the client's address.
var corePeer = netip.MustParseAddrPort("127.0.0.1:40000")

func (d *coreDriver) lacks(o op) string {
	if o == opHold {
		return "the core holds nothing (core.Options.LongPollMax): a request that waits for messages is its front end's"
	}
	return ""
}

func (d *coreDriver) createTopic(t *testing.T, topic string, queues int32, typ string) {
	t.Helper()
	r := core.TopicRequest{Topic: topic, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermRead | protocol.PermWrite}
	if typ != "" {
		r.Attributes = "+message.type=" + typ
	}
	if err := d.c.Admin().CreateTopic(&r); err != nil {
		t.Fatalf("CreateTopic %s: %v", topic, err)
	}
	d.mu.Lock()
	d.queues[topic] = queues
	d.mu.Unlock()
}

func (d *coreDriver) createGroup(t *testing.T, group string, g groupConfig) {
	t.Helper()
	cfg := protocol.DefaultSubscriptionGroupConfig(group)
	if g.retryMax >= 0 {
		cfg.RetryMaxTimes = g.retryMax
	}
	cfg.ConsumeMessageOrderly = g.orderly
	if err := d.c.Admin().UpdateSubscriptionGroup(cfg); err != nil {
		t.Fatalf("UpdateSubscriptionGroup %s: %v", group, err)
	}
	d.mu.Lock()
	d.orderly[group] = g.orderly
	d.mu.Unlock()
}

// queueFor is the queue a send names: the message group's, else -1 (the
// core's round robin).
func (d *coreDriver) queueFor(m Msg) int32 {
	if m.Group == "" {
		return -1
	}
	d.mu.Lock()
	n := d.queues[m.Topic]
	d.mu.Unlock()
	if n <= 0 {
		return -1
	}
	return groupQueue(m.Group, n)
}

func (d *coreDriver) store(t *testing.T, r *core.SendRequest, id string) (Sent, error) {
	t.Helper()
	var res core.SendResult
	if err := d.c.Send(r, &res); err != nil {
		return Sent{}, coreRefusal(err)
	}
	if err := d.c.WaitDurable(res.Pending); err != nil && core.Code(err) != protocol.RespFlushDiskTimeout {
		t.Fatalf("WaitDurable: %v", err)
	}
	s := Sent{ID: id, Queue: res.QueueID, Offset: res.QueueOffset}
	_, off, err := message.ParseOffsetMsgID(string(res.MsgID))
	if err != nil {
		t.Fatalf("the send's message id %q: %v", res.MsgID, err)
	}
	s.tx = txRef{id: id, commitLog: off, offset: res.QueueOffset}
	return s, nil
}

func (d *coreDriver) send(t *testing.T, m Msg) (Sent, error) {
	t.Helper()
	id := newID()
	return d.store(t, &core.SendRequest{ProducerGroup: []byte("scenario-producer"), Topic: []byte(m.Topic), QueueID: d.queueFor(m),
		BornTimestamp: time.Now().UnixMilli(), Properties: msgProps(m, id), Body: []byte(m.Body), BornHost: corePeer}, id)
}

func (d *coreDriver) sendHalf(t *testing.T, m Msg) Sent {
	t.Helper()
	id := newID()
	p := msgProps(m, id)
	p = message.AppendProperty(p, message.PropTranMsg, "true")
	p = message.AppendProperty(p, message.PropProducerGroup, m.Topic)
	s, err := d.store(t, &core.SendRequest{ProducerGroup: []byte(m.Topic), Topic: []byte(m.Topic), QueueID: d.queueFor(m),
		SysFlag: message.SetTxType(0, message.TxPreparedType), BornTimestamp: time.Now().UnixMilli(), Properties: p,
		Body: []byte(m.Body), BornHost: corePeer}, id)
	if err != nil {
		t.Fatalf("half send: %v", err)
	}
	return s
}

// endTransactionType is a resolution's commitOrRollback (remoting's
// END_TRANSACTION, the core's request).
func endTransactionType(res resolution) int32 {
	switch res {
	case commit:
		return protocol.TransactionCommitType
	case rollback:
		return protocol.TransactionRollbackType
	}
	return protocol.TransactionNotType
}

func (d *coreDriver) endTx(t *testing.T, topic string, tx txRef, res resolution, fromCheck bool) {
	t.Helper()
	kind := endTransactionType(res)
	p, err := d.c.EndTransaction(&core.EndTransactionRequest{ProducerGroup: topic, TranStateTableOffset: tx.offset,
		CommitLogOffset: tx.commitLog, CommitOrRollback: kind, FromTransactionCheck: fromCheck, MsgID: tx.id})
	if err == nil {
		err = d.c.WaitDurable(p)
	}
	if err != nil {
		t.Fatalf("EndTransaction: %v", err)
	}
}

// checkConn is the core's ClientConn of the core driver's producer: it
// passes the checks on (copied: the check is valid during the call only).
type checkConn struct{ ch chan Check }

func (c *checkConn) RemoteAddr() string                    { return corePeer.String() }
func (c *checkConn) NotifyConsumerIDsChanged(string) error { return nil }
func (c *checkConn) ResetOffset(*core.OffsetReset) error   { return nil }
func (c *checkConn) Close() error                          { return nil }
func (c *checkConn) CheckTransaction(_ string, chk *core.TransactionCheck) error {
	g, err := gotOf(chk.Record)
	if err != nil {
		return err
	}
	select {
	case c.ch <- Check{ID: chk.MsgID, Body: g.Body, tx: txRef{id: chk.MsgID, commitLog: chk.CommitLogOffset, offset: chk.TranStateTableOffset}}:
		return nil
	default:
		return fmt.Errorf("the scenario's check queue is full")
	}
}

func (d *coreDriver) watchChecks(t *testing.T, topic string) <-chan Check {
	t.Helper()
	conn := &checkConn{ch: make(chan Check, 64)}
	hb := protocol.HeartbeatData{ClientID: "scenario-producer@" + topic, ProducerDataSet: []protocol.ProducerData{{GroupName: topic}}}
	if err := d.c.Heartbeat(conn, &hb, "GO", 317); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	t.Cleanup(func() { d.c.ClientClosed(conn) })
	return conn.ch
}

// coreRefusal is an error of the core as a refusal.
func coreRefusal(err error) error {
	return &refusal{reason: core.ReasonOf(err), msg: core.Remark(err), noTopic: core.Code(err) == protocol.RespTopicNotExist}
}

func (d *coreDriver) pull(t *testing.T, group, topic string, q int32, offset int64, f Filter) (Pulled, error) {
	t.Helper()
	var res core.PullResult
	defer res.Release()
	for {
		r := core.PullRequest{Group: []byte(group), Topic: []byte(topic), QueueID: q, Offset: offset, MaxMsgs: core.MaxPullMessages,
			OwnSubscription: f.registered == 0, ExpressionType: []byte(f.typ()), Expression: []byte(f.expr()),
			SubVersion: f.registered, Consumer: corePeer}
		if err := d.c.Pull(&r, &res); err != nil {
			return Pulled{}, coreRefusal(err)
		}
		out := Pulled{Next: res.NextOffset}
		switch res.Status {
		case core.PullFound:
			for _, rec := range res.Records {
				g, err := gotOf(rec)
				if err != nil {
					t.Fatal(err)
				}
				out.Msgs = append(out.Msgs, g)
			}
			return out, nil
		case core.PullRetryImmediately:
			// Nothing matched the filter: read on, as clients do.
			if res.NextOffset > offset {
				offset = res.NextOffset
				res.Release()
				continue
			}
		}
		return out, nil
	}
}

func (d *coreDriver) pop(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter) ([]Got, error) {
	t.Helper()
	d.mu.Lock()
	orderly := d.orderly[group]
	d.mu.Unlock()
	var res core.PopResult
	r := core.PopRequest{Group: []byte(group), Topic: []byte(topic), QueueID: -1, MaxMsgs: max, InvisibleTime: invisible.Milliseconds(),
		FromFirst: true, Orderly: orderly, ExpressionType: []byte(f.typ()), Expression: []byte(f.expr()), Consumer: corePeer}
	if err := d.c.Pop(&r, &res); err != nil {
		return nil, coreRefusal(err)
	}
	var out []Got
	for i, p := range res.Msgs {
		g, err := gotOf(res.Record(i))
		if err != nil {
			t.Fatal(err)
		}
		if g.Reconsume != p.Attempts-1 {
			t.Errorf("popped %s/%d@%d: the record's reconsumeTimes %d, the delivery's attempts %d", topic, p.QueueID, p.Offset, g.Reconsume, p.Attempts)
		}
		g.Topic, g.Queue, g.Offset, g.popTime = topic, p.QueueID, p.Offset, res.PopTime
		out = append(out, g)
	}
	return out, nil
}

func (d *coreDriver) pullHeld(t *testing.T, _, _ string, _ int32, _ int64, _ Filter, _ time.Duration) (Pulled, error) {
	t.Fatal("the core holds nothing (lacks)")
	return Pulled{}, nil
}

func (d *coreDriver) popHeld(t *testing.T, _, _ string, _ int32, _ time.Duration, _ Filter, _ time.Duration) ([]Got, error) {
	t.Fatal("the core holds nothing (lacks)")
	return nil, nil
}

// receiptRefused reports whether err is the core's refusal of a receipt
// (NO_MESSAGE: stale, not in flight, acked already), failing t otherwise.
func receiptRefused(t *testing.T, what string, err error) bool {
	t.Helper()
	if err == nil {
		return false
	}
	if core.Code(err) != protocol.RespNoMessage {
		t.Fatalf("%s: %v", what, err)
	}
	return true
}

func (d *coreDriver) ack(t *testing.T, group string, g Got) bool {
	t.Helper()
	err := d.c.Ack([]byte(group), []byte(g.Topic), g.Queue, g.Offset, core.Receipt{QueueID: g.Queue, PopTime: g.popTime})
	return !receiptRefused(t, "Ack", err)
}

func (d *coreDriver) changeInvisible(t *testing.T, group string, g Got, dur time.Duration) (Got, bool) {
	t.Helper()
	pt, err := d.c.ChangeInvisible([]byte(group), []byte(g.Topic), g.Queue, g.Offset, core.Receipt{QueueID: g.Queue, PopTime: g.popTime},
		dur.Milliseconds())
	if receiptRefused(t, "ChangeInvisible", err) {
		return g, false
	}
	g.popTime = pt
	return g, true
}

func (d *coreDriver) commitOffset(t *testing.T, group, topic string, q int32, offset int64) {
	t.Helper()
	if err := d.c.UpdateConsumerOffset([]byte(topic), []byte(group), q, offset); err != nil {
		t.Fatalf("UpdateConsumerOffset: %v", err)
	}
}

func (d *coreDriver) queryOffset(t *testing.T, group, topic string, q int32) (int64, bool) {
	t.Helper()
	off, err := d.c.QueryConsumerOffset([]byte(topic), []byte(group), q)
	if err != nil {
		if core.Code(err) == protocol.RespQueryNotFound {
			return 0, false
		}
		t.Fatalf("QueryConsumerOffset: %v", err)
	}
	return off, true
}

func (d *coreDriver) sendBack(t *testing.T, group string, g Got, delayLevel int32) {
	t.Helper()
	p, err := d.c.SendBack(&core.SendBackRequest{Group: group, Offset: g.commitLog, DelayLevel: delayLevel})
	if err == nil {
		err = d.c.WaitDurable(p)
	}
	if err != nil {
		t.Fatalf("SendBack: %v", err)
	}
}

func (d *coreDriver) readDLQ(t *testing.T, group string) []Got {
	t.Helper()
	p, err := d.pull(t, "dlq-reader", "%DLQ%"+group, 0, 0, Filter{})
	if err != nil && !topicMissing(err) {
		t.Fatalf("pull of %%DLQ%%%s: %v", group, err)
	}
	return p.Msgs
}

func (d *coreDriver) forwardDLQ(t *testing.T, group string, g Got) bool {
	t.Helper()
	p, err := d.c.ForwardToDeadLetter(&core.ForwardRequest{Group: []byte(group), Topic: []byte(g.Topic), QueueID: g.Queue,
		Offset: g.Offset, Receipt: core.Receipt{QueueID: g.Queue, PopTime: g.popTime}, CommitLogOffset: g.commitLog})
	if err == nil {
		err = d.c.WaitDurable(p)
	}
	return !receiptRefused(t, "ForwardToDeadLetter", err)
}

func (d *coreDriver) subscribe(t *testing.T, group, topic string, f Filter) int64 {
	t.Helper()
	hb, v := consumerHeartbeat("scenario-consumer", group, topic, f)
	if err := d.c.Heartbeat(&d.consumer, &hb, "GO", 317); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	return v
}
