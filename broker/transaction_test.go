package broker

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// checkRequest is a CHECK_TRANSACTION_STATE a producer received.
type checkRequest struct {
	hdr  protocol.CheckTransactionStateRequest
	body []byte
	rec  message.View
}

// checkRecorder is a producer's handler that records transaction checks.
type checkRecorder struct{ ch chan checkRequest }

func newCheckRecorder() *checkRecorder { return &checkRecorder{ch: make(chan checkRequest, 64)} }

func (r *checkRecorder) ServeRemoting(_ *remoting.Conn, req *protocol.Command, _ *remoting.Response) remoting.Action {
	if req.Code == protocol.ReqCheckTransactionState {
		var c checkRequest
		_ = c.hdr.Decode(&req.Ext)
		c.body = append([]byte(nil), req.Body...)
		c.rec, _ = message.Decode(c.body, true)
		r.ch <- c
	}
	return remoting.NoReply
}

// wait returns the next check, waiting for it up to internal/wait's bound.
func (r *checkRecorder) wait(t testing.TB) checkRequest {
	t.Helper()
	select {
	case c := <-r.ch:
		return c
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("no CHECK_TRANSACTION_STATE")
		return checkRequest{}
	}
}

// halfSend is a transactional half message as the Go client sends it.
func halfSend(topic string, queueID int32, body, uniq, group string) *protocol.Command {
	req := sendRequest(topic, queueID, []byte(body), props("UNIQ_KEY", uniq, "TRAN_MSG", "true", "PGROUP", group, "TAGS", "tx"))
	req.Ext.SetString("producerGroup", group)
	req.Ext.SetString("sysFlag", strconv.Itoa(int(message.TxPreparedType)))
	return req
}

// endTx is END_TRANSACTION as the Go client sends it after its local
// transaction: the commit-log offset from the send response's msgId.
func endTx(t testing.TB, group string, sendResp *protocol.Command, state int32, fromCheck bool) *protocol.Command {
	t.Helper()
	_, off, err := message.ParseOffsetMsgID(ext(sendResp, "msgId"))
	if err != nil {
		t.Fatalf("half msgId %q: %v", ext(sendResp, "msgId"), err)
	}
	qoff, _ := strconv.ParseInt(ext(sendResp, "queueOffset"), 10, 64)
	return endTxAt(group, qoff, off, ext(sendResp, "transactionId"), state, fromCheck)
}

func endTxAt(group string, qoff, off int64, uniq string, state int32, fromCheck bool) *protocol.Command {
	cmd := goRequest(protocol.ReqEndTransaction)
	(&protocol.EndTransactionRequest{ProducerGroup: group, TranStateTableOffset: qoff, CommitLogOffset: off,
		CommitOrRollback: state, FromTransactionCheck: fromCheck, MsgID: uniq, TransactionID: uniq, BrokerName: "broker-a"}).Encode(&cmd.Ext)
	return cmd
}

func TestTransactionCommitAndRollback(t *testing.T) {
	h := featureHarness(t, func(o *Options) { o.Core.TransactionTimeout = time.Hour })
	cl := h.dial(nil)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@9", "", nil))

	r1 := mustSend(t, cl, halfSend("TX", 2, "commit-me", "UNIQ1", "pg"))
	r2 := mustSend(t, cl, halfSend("TX", 2, "roll-me-back", "UNIQ2", "pg"))
	if ext(r1, "queueOffset") != "0" || ext(r2, "queueOffset") != "1" || ext(r1, "transactionId") != "UNIQ1" || ext(r1, "queueId") != "2" {
		t.Fatalf("half send responses: %v / %v", r1.Ext, r2.Ext)
	}
	h.waitMax(txn.HalfTopic, 0, 2)
	if n := h.b.Store().MaxOffset("TX", 2); n != 0 {
		t.Fatalf("half messages visible in the real topic: %d", n)
	}
	_, halfOff, _ := message.ParseOffsetMsgID(ext(r1, "msgId"))
	half, err := h.b.Store().ReadMessage(halfOff)
	if err != nil {
		t.Fatal(err)
	}
	hv, _ := message.Decode(half.Bytes(), true)
	if string(hv.Topic()) != txn.HalfTopic || hv.QueueID() != 0 || message.TxType(hv.SysFlag()) != message.TxNotType ||
		prop(hv, message.PropRealTopic) != "TX" || prop(hv, message.PropRealQueueID) != "2" || prop(hv, message.PropTransactionID) != "UNIQ1" {
		t.Fatalf("half record: topic %s queue %d sysflag %d props %q", hv.Topic(), hv.QueueID(), hv.SysFlag(), hv.Properties())
	}
	half.Release()

	// Validation, as RocketMQ's EndTransactionProcessor.
	for _, c := range []struct {
		name string
		req  *protocol.Command
		text string
	}{
		{"wrong producer group", endTx(t, "other", r1, protocol.TransactionCommitType, false), "The producer group wrong"},
		{"wrong table offset", endTxAt("pg", 7, halfOff, "UNIQ1", protocol.TransactionCommitType, false), "The transaction state table offset wrong"},
		{"no half message there", endTxAt("pg", 0, 1<<40, "UNIQ1", protocol.TransactionCommitType, false), "Find prepared transaction message failed"},
		{"bad state", endTxAt("pg", 0, halfOff, "UNIQ1", 5, false), "commitOrRollback"},
	} {
		if r := invoke(t, cl, c.req); r.Code != protocol.RespSystemError || !strings.Contains(string(r.Remark), c.text) {
			t.Errorf("%s: %d %q", c.name, r.Code, r.Remark)
		}
	}
	// A record that is not a half message.
	plain := mustSend(t, cl, sendRequest("TX", 0, []byte("plain"), ""))
	if r := invoke(t, cl, endTx(t, "pg", plain, protocol.TransactionCommitType, false)); r.Code != protocol.RespSystemError {
		t.Errorf("commit of an ordinary message: %d %s", r.Code, r.Remark)
	}
	// Unknown changes nothing.
	if r := invoke(t, cl, endTx(t, "pg", r1, protocol.TransactionNotType, false)); r.Code != 0 {
		t.Fatalf("unknown: %d %s", r.Code, r.Remark)
	}

	if r := invoke(t, cl, endTx(t, "pg", r1, protocol.TransactionCommitType, false)); r.Code != 0 {
		t.Fatalf("commit: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, endTx(t, "pg", r2, protocol.TransactionRollbackType, false)); r.Code != 0 {
		t.Fatalf("rollback: %d %s", r.Code, r.Remark)
	}
	// Ending again (the check path racing the normal one) stores nothing more.
	if r := invoke(t, cl, endTx(t, "pg", r1, protocol.TransactionCommitType, true)); r.Code != 0 {
		t.Fatalf("second commit: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, endTx(t, "pg", r2, protocol.TransactionCommitType, true)); r.Code != 0 {
		t.Fatalf("commit after rollback: %d %s", r.Code, r.Remark)
	}

	// Everything the END_TRANSACTIONs put was stored before their answers:
	// once it is dispatched, the queues hold all there will be.
	h.waitDispatched()
	if n := h.b.Store().MaxOffset("TX", 2); n != 1 {
		t.Fatalf("%d messages in the real topic, want the committed one", n)
	}
	got := pullN(t, cl, "TX", 2, 0, 1, arrive)
	if len(got) != 1 {
		t.Fatalf("%d messages pulled from the real topic, want the committed one", len(got))
	}
	c := got[0]
	if string(c.Body()) != "commit-me" || message.TxType(c.SysFlag()) != message.TxCommitType || c.PreparedTransactionOffset() != halfOff ||
		c.QueueID() != 2 || prop(c.View, message.PropUniqKey) != "UNIQ1" || prop(c.View, message.PropTranMsg) != "" ||
		prop(c.View, message.PropRealTopic) != "" || prop(c.View, message.PropProducerGroup) != "pg" {
		t.Fatalf("committed record: body %q sysflag %d prepared %d props %q", c.Body(), c.SysFlag(), c.PreparedTransactionOffset(), c.Properties())
	}
	if n := h.b.Store().MaxOffset(txn.OpHalfTopic, 0); n != 2 {
		t.Fatalf("%d op records, want 2", n)
	}
	ops := pullN(t, cl, txn.OpHalfTopic, 0, 0, 2, arrive)
	if len(ops) != 2 || string(ops[0].Body()) != "0" || string(ops[1].Body()) != "1" || prop(ops[0].View, "TAGS") != "d" {
		t.Fatalf("op records: %d", len(ops))
	}
	if n := runtimeInt(t, h.b, "halfMessagesPending"); n != 0 {
		t.Fatalf("%d half messages still pending", n)
	}

	// Per-type size limit and batches.
	big := halfSend("TX", 0, strings.Repeat("x", 65<<10), "UNIQ3", "pg")
	if r := invoke(t, cl, big); r.Code != protocol.RespMessageIllegal {
		t.Fatalf("65 KiB half message: %d %s", r.Code, r.Remark)
	}
	batch := sendV2Request(protocol.ReqSendBatchMessage, "TX", 0, batchBody(batchEntry{"a", ""}), "")
	batch.Ext.SetString("f", strconv.Itoa(int(message.TxPreparedType)))
	if r := invoke(t, cl, batch); r.Code != protocol.RespMessageIllegal {
		t.Fatalf("transactional batch: %d %s", r.Code, r.Remark)
	}
}

// TestTransactionCheckBack leaves a transaction unknown: the broker checks
// it back on the producer group's connection, the producer commits from the
// check path, and the message is delivered.
func TestTransactionCheckBack(t *testing.T) {
	h := featureHarness(t, nil)
	rec := newCheckRecorder()
	cl := h.dial(rec)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@9", "", nil))
	other := newCheckRecorder()
	ocl := h.dial(other)
	hb := protocol.HeartbeatData{ClientID: "127.0.0.1@10", ProducerDataSet: []protocol.ProducerData{{GroupName: "another"}}}
	body, _ := hb.Encode()
	hbReq := goRequest(protocol.ReqHeartBeat)
	hbReq.Body = body
	invoke(t, ocl, hbReq)

	sent := time.Now()
	r := mustSend(t, cl, halfSend("TC", 1, "checked", "UNIQC", "pg"))
	if res := invoke(t, cl, endTx(t, "pg", r, protocol.TransactionNotType, false)); res.Code != 0 {
		t.Fatalf("unknown: %d", res.Code)
	}
	c := rec.wait(t)
	// The broker times from the half's store timestamp, in milliseconds:
	// up to 1 ms before sent.
	if d := time.Since(sent); d < h.opts.Core.TransactionTimeout-time.Millisecond {
		t.Errorf("checked after %v, before the transaction timeout", d)
	}
	_, halfOff, _ := message.ParseOffsetMsgID(ext(r, "msgId"))
	if c.hdr.TranStateTableOffset != 0 || c.hdr.CommitLogOffset != halfOff || c.hdr.MsgID != "UNIQC" || c.hdr.TransactionID != "UNIQC" ||
		c.hdr.OffsetMsgID != ext(r, "msgId") || c.hdr.Topic != "TC" {
		t.Fatalf("check header %+v", c.hdr)
	}
	if string(c.rec.Topic()) != "TC" || c.rec.QueueID() != 1 || prop(c.rec, message.PropProducerGroup) != "pg" ||
		prop(c.rec, message.PropUniqKey) != "UNIQC" || string(c.rec.Body()) != "checked" || c.rec.PhysicalOffset() != halfOff {
		t.Fatalf("check body: topic %s queue %d props %q", c.rec.Topic(), c.rec.QueueID(), c.rec.Properties())
	}
	// Not answered: checked again after the check interval.
	c2 := rec.wait(t)
	if prop(c2.rec, message.PropTransactionCheckTimes) != "2" {
		t.Errorf("second check carries %s = %q", message.PropTransactionCheckTimes, prop(c2.rec, message.PropTransactionCheckTimes))
	}
	// The producer answers from the check path.
	if res := invoke(t, cl, endTxAt("pg", c2.hdr.TranStateTableOffset, c2.hdr.CommitLogOffset, c2.hdr.MsgID, protocol.TransactionCommitType, true)); res.Code != 0 {
		t.Fatalf("commit from check: %d %s", res.Code, res.Remark)
	}
	if got := pullN(t, cl, "TC", 1, 0, 1, arrive); len(got) != 1 || string(got[0].Body()) != "checked" {
		t.Fatal("checked transaction not delivered")
	}
	// Two check intervals without a check: the window is what is tested.
	select {
	case c := <-rec.ch:
		t.Fatalf("checked again after the commit: %+v", c.hdr)
	case c := <-other.ch:
		t.Fatalf("another producer group was checked: %+v", c.hdr)
	case <-time.After(2 * h.opts.Core.TransactionCheckInterval):
	}
}

// TestTransactionCheckMax: a half message nobody resolves is checked
// TransactionCheckMax times, then moved to TRANS_CHECK_MAX_TIME_TOPIC.
func TestTransactionCheckMax(t *testing.T) {
	h := featureHarness(t, func(o *Options) {
		o.Core.TransactionTimeout = 50 * time.Millisecond
		o.Core.TransactionCheckInterval = 100 * time.Millisecond
		o.Core.TransactionCheckMax = 3
	})
	rec := newCheckRecorder()
	cl := h.dial(rec)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@9", "", nil))
	r := mustSend(t, cl, halfSend("TM", 0, "forgotten", "UNIQM", "pg"))
	for i := 0; i < 3; i++ {
		rec.wait(t)
	}
	wait.Until(t, txn.CheckMaxTopic+" created", func() bool { return lookupTopic(h.b, txn.CheckMaxTopic) != nil })
	got := pullN(t, cl, txn.CheckMaxTopic, 0, 0, 1, arrive)
	if len(got) != 1 || string(got[0].Body()) != "forgotten" || prop(got[0].View, message.PropRealTopic) != "TM" {
		t.Fatalf("%s: %d records", txn.CheckMaxTopic, len(got))
	}
	// Resolved now: a late commit stores nothing and no check follows.
	if res := invoke(t, cl, endTx(t, "pg", r, protocol.TransactionCommitType, true)); res.Code != 0 {
		t.Fatalf("late commit: %d", res.Code)
	}
	// Three check intervals without a check: the window is what is tested.
	select {
	case <-rec.ch:
		t.Fatal("checked after the give-up")
	case <-time.After(3 * h.opts.Core.TransactionCheckInterval):
	}
	if n := h.b.Store().MaxOffset("TM", 0); n != 0 {
		t.Fatalf("late commit stored %d messages", n)
	}
}

// TestTransactionSurvivesRestart: a half message pending at shutdown is
// checked back after the restart, and its check count is kept.
func TestTransactionSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	mutate := func(o *Options) {
		o.Core.ProgressFlushInterval = 20 * time.Millisecond
		o.Core.TransactionTimeout = 100 * time.Millisecond
		o.Core.TransactionCheckInterval = 200 * time.Millisecond
	}
	h := startHarness(t, testOptions(t, dir), mutate)
	rec := newCheckRecorder()
	cl := h.dial(rec)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@9", "", nil))
	r := mustSend(t, cl, halfSend("TR", 0, "survivor", "UNIQR", "pg"))
	done := mustSend(t, cl, halfSend("TR", 0, "done", "UNIQD", "pg"))
	invoke(t, cl, endTx(t, "pg", done, protocol.TransactionCommitType, false))
	rec.wait(t)
	h.close()

	h2 := startHarness(t, testOptions(t, dir), mutate)
	rec2 := newCheckRecorder()
	cl2 := h2.dial(rec2)
	invoke(t, cl2, heartbeatRequest(t, "127.0.0.1@9", "", nil))
	c := rec2.wait(t)
	if c.hdr.MsgID != "UNIQR" || prop(c.rec, message.PropTransactionCheckTimes) != "2" {
		t.Fatalf("check after restart: %+v, %s = %q", c.hdr, message.PropTransactionCheckTimes, prop(c.rec, message.PropTransactionCheckTimes))
	}
	invoke(t, cl2, endTx(t, "pg", r, protocol.TransactionCommitType, true))
	h2.waitDispatched()
	if n := h2.b.Store().MaxOffset("TR", 0); n != 2 {
		t.Fatalf("%d committed messages after the restart, want 2", n)
	}
	if got := pullN(t, cl2, "TR", 0, 0, 2, arrive); len(got) != 2 {
		t.Fatalf("%d committed messages pulled after the restart, want 2", len(got))
	}
}

// TestTransactionWithDelay: a committed transactional message that asked
// for a delay level is delayed from the commit on.
func TestTransactionWithDelay(t *testing.T) {
	h := featureHarness(t, func(o *Options) { o.Core.TransactionTimeout = time.Hour })
	cl := h.dial(nil)
	req := sendRequest("TD", 0, []byte("later"), props("UNIQ_KEY", "U", "TRAN_MSG", "true", "PGROUP", "pg", "DELAY", "8"))
	req.Ext.SetString("sysFlag", strconv.Itoa(int(message.TxPreparedType)))
	r := mustSend(t, cl, req)
	// Not synchronisation: the half waits longer than its delay, so that a
	// delay counted from the send would deliver it at once on the commit.
	time.Sleep(levelDelay(8))
	committed := time.Now()
	if res := invoke(t, cl, endTx(t, "pg", r, protocol.TransactionCommitType, false)); res.Code != 0 {
		t.Fatalf("commit: %d %s", res.Code, res.Remark)
	}
	got := pullN(t, cl, "TD", 0, 0, 1, arrive)
	if len(got) != 1 {
		t.Fatal("delayed transactional message not delivered")
	}
	if d := time.UnixMilli(got[0].StoreTimestamp()).Sub(committed); d < levelDelay(8)-2*time.Millisecond {
		t.Fatalf("delivered %v after the commit, before level 8", d)
	}
	if message.TxType(got[0].SysFlag()) != message.TxCommitType {
		t.Fatalf("sysflag %d", got[0].SysFlag())
	}
}

// TestTransactionCheckWaitsForProducer: a half message whose producer group
// has no live connection is not counted as checked; it is checked as soon
// as a producer of the group sends its heartbeat.
func TestTransactionCheckWaitsForProducer(t *testing.T) {
	h := featureHarness(t, func(o *Options) {
		o.Core.TransactionTimeout = 50 * time.Millisecond
		o.Core.TransactionCheckInterval = time.Hour
	})
	cl := h.dial(nil)
	mustSend(t, cl, halfSend("TW", 0, "orphan", "UNIQW", "pg"))
	wait.Equal(t, "the orphan's first check", 1, func() int64 { return runtimeInt(t, h.b, "halfMessagesWaiting") })
	rec := newCheckRecorder()
	pcl := h.dial(rec)
	invoke(t, pcl, heartbeatRequest(t, "127.0.0.1@9", "", nil))
	c := rec.wait(t)
	if c.hdr.MsgID != "UNIQW" || prop(c.rec, message.PropTransactionCheckTimes) != "1" {
		t.Fatalf("check %+v, %s = %q", c.hdr, message.PropTransactionCheckTimes, prop(c.rec, message.PropTransactionCheckTimes))
	}
}

// TestFeaturesSyncFlush runs send-back, delayed sends, timers and a
// transaction in sync-flush mode: the answers wait for the flush off the
// connection's goroutine, and everything arrives.
func TestFeaturesSyncFlush(t *testing.T) {
	h := featureHarness(t, func(o *Options) {
		o.Core.Store.FlushMode = store.FlushSync
		o.Core.TransactionTimeout = time.Hour
	})
	cl := h.dial(nil)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@1", "cg", map[string]string{"SF": "*"}))
	mustSend(t, cl, sendRequest("SF", 0, []byte("plain"), ""))
	mustSend(t, cl, sendRequest("SF", 0, []byte("delayed"), props("DELAY", "2")))
	mustSend(t, cl, sendRequest("SF", 0, []byte("timer"), props("TIMER_DELAY_MS", "80")))
	r := mustSend(t, cl, halfSend("SF", 0, "tx", "USF", "pg"))
	if res := invoke(t, cl, endTx(t, "pg", r, protocol.TransactionCommitType, false)); res.Code != 0 {
		t.Fatalf("commit: %d %s", res.Code, res.Remark)
	}
	got := pullN(t, cl, "SF", 0, 0, 4, arrive)
	if len(got) != 4 {
		t.Fatalf("%d of 4 messages", len(got))
	}
	if res := invoke(t, cl, sendBackRequest("cg", got[0].PhysicalOffset(), 1, 16, "SF", "")); res.Code != 0 {
		t.Fatalf("send-back: %d %s", res.Code, res.Remark)
	}
	if r := pullN(t, cl, "%RETRY%cg", 0, 0, 1, arrive); len(r) != 1 {
		t.Fatal("retry not delivered")
	}
	if got := h.b.Store().Log().FlushedOffset(); got < h.b.Store().Log().WrittenOffset()-1<<20 {
		t.Fatalf("flushed %d", got)
	}
}
