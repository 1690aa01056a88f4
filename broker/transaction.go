package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/apogeemq/apogee/internal/javacompat"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// txCheckpointFileName is the transaction checker's progress in DataDir/config.
const txCheckpointFileName = "transactionCheckpoint.json"

// txCheckpoint is the checker's persisted state: every half message below
// HalfOffset is resolved; every op record naming a half message at or above
// HalfOffset sits at or above OpOffset in the op queue; Checks counts the
// checks already sent for pending half messages (by half queue offset).
type txCheckpoint struct {
	HalfOffset int64            `json:"halfOffset"`
	OpOffset   int64            `json:"opOffset"`
	Checks     map[string]int32 `json:"checks,omitempty"`
}

// txHalf is a pending half message.
type txHalf struct {
	qoff   int64  // half queue offset
	off    int64  // commit-log offset
	group  string // PGROUP
	checks int32  // checks sent so far
	next   int64  // ms: when to check it next
	orphan bool   // the last check found no live producer of its group
}

// txManager keeps the pending half messages of transactions and checks
// them back. Half messages are stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0
// (dispatched, so they have a queue offset, but no consumer subscribes to
// it); END_TRANSACTION stores the committed message and an op record
// (RMQ_SYS_TRANS_OP_HALF_TOPIC, tag "d", body = the half's queue offset) in
// one commit-log append, or only the op record for a rollback. The checker
// goroutine loads half messages and op records as the store dispatches them;
// a half message without an op record TransactionTimeout after it was
// stored is checked back with CHECK_TRANSACTION_STATE on a live connection
// of its producer group, then every TransactionCheckInterval, at most
// TransactionCheckMax times, after which it is moved to
// TRANS_CHECK_MAX_TIME_TOPIC.
type txManager struct {
	b    *Broker
	path string
	wake chan struct{}

	mu         sync.Mutex
	pending    map[int64]*txHalf // by half queue offset
	resolved   map[int64]int64   // half queue offset -> op queue offset (-1: op not loaded yet), for halves not below the pending floor
	halfLoaded int64             // next half queue offset to load
	opLoaded   int64             // next op queue offset to load
	restored   map[int64]int32   // check counts from the checkpoint, until their halves are loaded
	changes    uint64

	persistMu sync.Mutex // taken before mu
	persisted uint64

	sc    innerScratch // the checker's (its goroutine only)
	check protocol.Command
	rr    uint32
}

func newTxManager(b *Broker, cfgDir string) *txManager {
	return &txManager{
		b: b, path: filepath.Join(cfgDir, txCheckpointFileName), wake: make(chan struct{}, 1),
		pending: make(map[int64]*txHalf), resolved: make(map[int64]int64), restored: make(map[int64]int32),
	}
}

// load reads the checkpoint (or its previous version, see loadStateFile)
// if it exists.
func (t *txManager) load() error {
	ck, found, _, err := loadStateFile(t.path, t.b.opts.Logger, func(data []byte) (txCheckpoint, error) {
		var ck txCheckpoint
		return ck, json.Unmarshal(data, &ck)
	})
	if err != nil || !found {
		return err
	}
	t.halfLoaded, t.opLoaded = max(ck.HalfOffset, 0), max(ck.OpOffset, 0)
	for k, n := range ck.Checks {
		if q, err := strconv.ParseInt(k, 10, 64); err == nil && n > 0 {
			t.restored[q] = n
		}
	}
	return nil
}

func (t *txManager) arrived() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// start launches the checker.
func (t *txManager) start() {
	t.mu.Lock()
	t.halfLoaded = min(t.halfLoaded, t.b.store.MaxOffset(halfTopic, 0))
	t.opLoaded = min(t.opLoaded, t.b.store.MaxOffset(opHalfTopic, 0))
	t.mu.Unlock()
	// Load before serving: an END_TRANSACTION arriving right after a
	// restart must find the half messages resolved before it resolved.
	for _, load := range []func() error{t.loadHalves, t.loadOps} {
		if err := load(); err != nil {
			t.b.opts.Logger.Error("broker: transaction checker cannot load its queues at start", "err", err)
		}
	}
	t.b.wg.Add(1)
	go t.run()
}

// halfProps moves a half message to RMQ_SYS_TRANS_HALF_TOPIC queue 0 with
// REAL_TOPIC, REAL_QID, __transactionId__ (its UNIQ_KEY) and PGROUP (the
// producer group, when the producer did not set it); the transaction bits
// of its sysflag are cleared so that it is dispatched to the half queue.
func (b *Broker) halfProps(props []byte, h *protocol.SendMessageRequest, m *store.Message) []byte {
	props = message.AppendProperty(props, message.PropRealTopic, m.Topic)
	props = appendPropInt(props, message.PropRealQueueID, int64(m.QueueID))
	if uniq, ok := message.LookupProperty(h.Properties, message.PropUniqKey); ok && len(uniq) > 0 {
		if _, ok := message.LookupProperty(h.Properties, message.PropTransactionID); !ok {
			props = append(props, message.PropTransactionID...)
			props = append(props, message.NameValueSeparator)
			props = append(props, uniq...)
			props = append(props, message.PropertySeparator)
		}
	}
	if _, ok := message.LookupProperty(h.Properties, message.PropProducerGroup); !ok && len(h.ProducerGroup) > 0 {
		props = append(props, message.PropProducerGroup...)
		props = append(props, message.NameValueSeparator)
		props = append(props, h.ProducerGroup...)
		props = append(props, message.PropertySeparator)
	}
	m.Topic, m.QueueID = halfTopic, 0
	m.SysFlag = message.SetTxType(m.SysFlag, message.TxNotType)
	b.stats.halfMessages.Add(1)
	return props
}

// handleEndTransaction serves END_TRANSACTION (37). The half message is
// looked up by commitLogOffset and validated as RocketMQ's
// EndTransactionProcessor does (it must be a half message, its PGROUP the
// request's producer group, its half-queue offset the request's
// tranStateTableOffset); then a commit stores the real message (its real
// topic and queue, the COMMIT sysflag, the half's commit-log offset in the
// prepared-transaction-offset field; delays and timers apply) together with
// the op record, and a rollback stores the op record alone. Ending a
// transaction already ended is answered SUCCESS without storing anything
// again. "Unknown" (0) changes nothing: the checker will ask again.
func (b *Broker) handleEndTransaction(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.EndTransactionRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	switch h.CommitOrRollback {
	case protocol.TransactionCommitType, protocol.TransactionRollbackType:
	case protocol.TransactionNotType:
		if h.FromTransactionCheck {
			b.opts.Logger.Debug("broker: transaction check answered unknown", "producerGroup", h.ProducerGroup,
				"msgId", h.MsgID, "remark", string(req.Remark))
		}
		return remoting.Reply
	default:
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("commitOrRollback %d is none of 0, 8, 12", h.CommitOrRollback))
	}
	view, err := b.store.ReadMessage(h.CommitLogOffset)
	if err != nil {
		return fail(resp, protocol.RespSystemError, "Find prepared transaction message failed")
	}
	defer view.Release()
	v, err := message.Decode(view.Bytes(), false)
	if err != nil || string(v.Topic()) != halfTopic {
		return fail(resp, protocol.RespSystemError, "Find prepared transaction message failed")
	}
	if pg, _ := v.Property(message.PropProducerGroup); string(pg) != h.ProducerGroup {
		return fail(resp, protocol.RespSystemError, "The producer group wrong")
	}
	if v.QueueOffset() != h.TranStateTableOffset {
		return fail(resp, protocol.RespSystemError, "The transaction state table offset wrong")
	}
	if v.PhysicalOffset() != h.CommitLogOffset {
		return fail(resp, protocol.RespSystemError, "The commit log offset wrong")
	}
	qoff := v.QueueOffset()
	claimed, ok := b.tx.claim(qoff)
	if !ok {
		return remoting.Reply // ended before (or being ended by a concurrent request)
	}
	if claimed == nil {
		claimed = b.halfOf(v)
	}
	s := b.getSendScratch()
	defer b.putSendScratch(s)
	commit := h.CommitOrRollback == protocol.TransactionCommitType
	if commit {
		m, ok := b.committedMessage(v, s)
		if !ok {
			b.tx.unclaim(qoff, claimed)
			return fail(resp, protocol.RespSystemError, "the prepared transaction message has no valid REAL_TOPIC/REAL_QID")
		}
		m.PreparedTransactionOffset = h.CommitLogOffset
		s.msgs = append(s.msgs, m)
	}
	start := len(s.props)
	s.props = message.AppendProperty(s.props, message.PropTags, opTagRemoved)
	s.spans = append(s.spans, span{start, len(s.props)})
	s.ids = strconv.AppendInt(s.ids[:0], qoff, 10)
	s.msgs = append(s.msgs, b.opMessage(s.ids))
	// s.props may have grown: point every message at its properties again.
	if commit {
		s.msgs[0].Properties = s.props[s.spans[0].start:s.spans[0].end]
	}
	s.msgs[len(s.msgs)-1].Properties = s.props[s.spans[len(s.spans)-1].start:s.spans[len(s.spans)-1].end]
	for i := range s.msgs {
		s.msgs[i].NoWait = true
	}
	s.res, err = b.store.PutBatch(s.msgs, s.res[:0])
	if err != nil {
		b.tx.unclaim(qoff, claimed)
		code, remark := putErrorCode(err)
		return fail(resp, code, remark)
	}
	b.stats.innerPuts.Add(int64(len(s.msgs)))
	if commit {
		b.stats.txCommits.Add(1)
	} else {
		b.stats.txRollbacks.Add(1)
	}
	if !b.syncFlush {
		return remoting.Reply
	}
	last := &s.res[len(s.res)-1]
	a := b.acks.get(b)
	a.end, a.plain = last.CommitLogOffset+int64(last.Size), true
	return b.answerWhenDurable(c, req, resp, a)
}

// committedMessage builds the message a commit stores from its half
// message: the real topic and queue, REAL_TOPIC, REAL_QID and TRAN_MSG
// removed, the COMMIT sysflag; a delay or a timer the producer asked for is
// applied now. Its properties are the last span of s.
func (b *Broker) committedMessage(v message.View, s *sendScratch) (store.Message, bool) {
	realTopic, okT := v.Property(message.PropRealTopic)
	realQID, _, okQ := propInt(v.Properties(), message.PropRealQueueID)
	if !okT || len(realTopic) == 0 || !okQ || realQID < 0 {
		return store.Message{}, false
	}
	m := recordMessage(v)
	m.Topic, m.QueueID = b.topicName(realTopic), int32(realQID)
	m.SysFlag = message.SetTxType(m.SysFlag, message.TxCommitType)
	start := len(s.props)
	s.props = appendPropsExcept(s.props, v.Properties(), message.PropRealTopic, message.PropRealQueueID, message.PropTranMsg)
	if deliver, isTimer, code, _ := b.timerDeliverTime(s.props[start:], time.Now); code == protocol.RespSuccess && isTimer {
		s.props = b.timerProps(s.props, &m, deliver)
	} else if level, _, ok := propInt(s.props[start:], message.PropDelay); ok && level > 0 {
		lv := b.sched.ClampLevel(level)
		s.props = message.AppendProperty(s.props, message.PropRealTopic, m.Topic)
		s.props = appendPropInt(s.props, message.PropRealQueueID, int64(m.QueueID))
		m.Topic, m.QueueID = scheduleTopic, lv-1
		b.stats.delayed.Add(1)
	}
	s.spans = append(s.spans, span{start, len(s.props)})
	return m, true
}

// opMessage is an op record: half queue offsets (decimal, comma-separated)
// in RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, tag "d". Properties are set by
// the caller.
func (b *Broker) opMessage(body []byte) store.Message {
	return store.Message{
		Topic: opHalfTopic, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), BornHost: b.host, Body: body,
	}
}

// claim marks a half message resolved (END_TRANSACTION or the checker's
// give-up) and reports false if it already was. It returns the pending
// entry it removed (nil if the half message was not loaded yet).
func (t *txManager) claim(qoff int64) (*txHalf, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.resolved[qoff]; ok {
		return nil, false
	}
	h, ok := t.pending[qoff]
	if !ok && qoff < t.halfLoaded {
		return nil, false // loaded and not pending: resolved before
	}
	delete(t.pending, qoff)
	t.resolved[qoff] = -1
	t.changes++
	return h, true
}

// unclaim undoes claim after a failed put: h is pending again (if the
// loader has passed it).
func (t *txManager) unclaim(qoff int64, h *txHalf) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.resolved, qoff)
	if qoff < t.halfLoaded && h != nil {
		t.pending[qoff] = h
	}
}

// halfOf is the pending entry of a half message record.
func (b *Broker) halfOf(v message.View) *txHalf {
	pg, _ := v.Property(message.PropProducerGroup)
	timeout := b.opts.TransactionTimeout.Milliseconds()
	if sec, _, ok := propInt(v.Properties(), message.PropCheckImmunityTimeInSeconds); ok && sec > 0 {
		timeout = sec * 1000
	}
	return &txHalf{qoff: v.QueueOffset(), off: v.PhysicalOffset(), group: string(pg), next: v.StoreTimestamp() + timeout}
}

// txRetry is how long the checker waits after a failure.
const txRetry = time.Second

func (t *txManager) run() {
	b := t.b
	defer b.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		failed := false
		if err := t.loadHalves(); err != nil {
			b.opts.Logger.Error("broker: transaction checker cannot read the half queue", "err", err)
			failed = true
		}
		if err := t.loadOps(); err != nil {
			b.opts.Logger.Error("broker: transaction checker cannot read the op queue", "err", err)
			failed = true
		}
		next := t.checkDue()
		d := time.Duration(-1)
		if next > 0 {
			d = max(time.Duration(next-time.Now().UnixMilli())*time.Millisecond, time.Millisecond)
		}
		if failed {
			d = txRetry
		}
		if d > 0 {
			timer.Reset(d)
		}
		select {
		case <-b.stop:
			return
		case <-t.wake:
			if d > 0 && !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// loadHalves reads the half messages stored since the last call.
func (t *txManager) loadHalves() error { return t.follow(halfTopic, &t.halfLoaded, t.loadHalf) }

// loadOps reads the op records stored since the last call.
func (t *txManager) loadOps() error { return t.follow(opHalfTopic, &t.opLoaded, t.loadOp) }

// follow reads queue 0 of topic from *next (guarded by mu) up to its end, in
// batches, and passes each entry with its queue offset to load, which moves
// *next past it. A *next that retention left behind moves up to the queue's
// minimum.
func (t *txManager) follow(topic string, next *int64, load func(qoff int64, e store.QueueEntry)) error {
	b := t.b
	for {
		t.mu.Lock()
		from := *next
		t.mu.Unlock()
		ents, err := b.store.ReadEntries(topic, 0, from, t.sc.entries(256))
		t.sc.ents = ents[:0]
		if err != nil {
			if errors.Is(err, store.ErrOffsetOutOfRange) {
				t.mu.Lock()
				*next = b.store.MinOffset(topic, 0)
				t.mu.Unlock()
				continue
			}
			return err
		}
		if len(ents) == 0 {
			return nil
		}
		for i, e := range ents {
			load(from+int64(i), e)
		}
	}
}

// loadHalf adds one half message to the pending ones unless it is resolved.
func (t *txManager) loadHalf(qoff int64, e store.QueueEntry) {
	b := t.b
	var h *txHalf
	if e.Size > 0 && e.Size != blankEntrySize {
		if view, err := b.store.ReadMessage(e.CommitLogOffset); err != nil {
			b.opts.Logger.Error("broker: half message unreadable; dropped", "queueOffset", qoff, "err", err)
		} else {
			v, _ := message.Decode(view.Bytes(), false)
			h = b.halfOf(v)
			h.qoff, h.off = qoff, e.CommitLogOffset
			view.Release()
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if qoff != t.halfLoaded {
		return
	}
	t.halfLoaded = qoff + 1
	if h == nil {
		return
	}
	if _, done := t.resolved[qoff]; done {
		return
	}
	if n, ok := t.restored[qoff]; ok {
		h.checks = n
		delete(t.restored, qoff)
		h.next = max(h.next, time.Now().UnixMilli()+min(b.opts.TransactionCheckInterval, b.opts.TransactionTimeout).Milliseconds())
	}
	t.pending[qoff] = h
}

// loadOp marks the half messages an op record names as resolved.
func (t *txManager) loadOp(opq int64, e store.QueueEntry) {
	var body []byte
	var view store.View
	if e.Size > 0 && e.Size != blankEntrySize {
		var err error
		if view, err = t.b.store.ReadMessage(e.CommitLogOffset); err != nil {
			// Its half messages stay pending and are checked back again.
			t.b.opts.Logger.Error("broker: transaction op record unreadable; skipped", "queueOffset", opq, "err", err)
		} else {
			v, _ := message.Decode(view.Bytes(), false)
			body = v.Body()
		}
	}
	t.mu.Lock()
	for len(body) > 0 {
		item := body
		if i := indexByte(body, ','); i >= 0 {
			item, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if q, ok := javacompat.ParseInt64(item); ok && q >= 0 {
			delete(t.pending, q)
			if cur, ok := t.resolved[q]; !ok || cur < 0 {
				t.resolved[q] = opq
			}
		}
	}
	t.opLoaded = opq + 1
	t.changes++
	t.mu.Unlock()
	if view.Bytes() != nil {
		view.Release()
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// checkDue checks back every pending half message whose time has come and
// returns the earliest next check time (0: none pending).
func (t *txManager) checkDue() int64 {
	b := t.b
	now := time.Now().UnixMilli()
	var due []*txHalf
	t.mu.Lock()
	for _, h := range t.pending {
		if h.next <= now {
			due = append(due, h)
		}
	}
	t.mu.Unlock()
	for _, h := range due {
		t.mu.Lock()
		checks := h.checks
		t.mu.Unlock()
		if checks >= int32(b.opts.TransactionCheckMax) {
			if !t.giveUp(h) {
				t.mu.Lock()
				h.next = now + txRetry.Milliseconds()
				t.mu.Unlock()
			}
			continue
		}
		sent := t.sendCheck(h)
		t.mu.Lock()
		if sent {
			h.checks++
			t.changes++
		}
		h.next = now + b.opts.TransactionCheckInterval.Milliseconds()
		t.mu.Unlock()
	}
	var next int64
	t.mu.Lock()
	for _, h := range t.pending {
		if next == 0 || h.next < next {
			next = h.next
		}
	}
	t.mu.Unlock()
	return next
}

func (t *txManager) pendingHalf(qoff int64) (*txHalf, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.pending[qoff]
	return h, ok
}

// sendCheck sends CHECK_TRANSACTION_STATE for h to one live connection of
// its producer group; the body is the half message's record with its real
// topic and queue restored (PGROUP and UNIQ_KEY kept), as the Go client
// needs it. It reports whether a check was sent: without a live connection
// of the group (RocketMQ counts the attempt all the same) it is not, and
// the half message is checked as soon as a producer of the group sends its
// heartbeat.
func (t *txManager) sendCheck(h *txHalf) bool {
	b := t.b
	conns := b.clients.producerConns(h.group)
	if len(conns) == 0 {
		t.mu.Lock()
		first := !h.orphan
		h.orphan = true
		t.mu.Unlock()
		if first {
			b.opts.Logger.Warn("broker: transaction check deferred: no live producer of the group", "group", h.group, "halfOffset", h.qoff)
		}
		return false
	}
	t.mu.Lock()
	h.orphan = false
	t.mu.Unlock()
	b.stats.txChecks.Add(1)
	t.rr++
	c := conns[int(t.rr)%len(conns)]
	view, err := b.store.ReadMessage(h.off)
	if err != nil {
		b.opts.Logger.Error("broker: half message unreadable; check not sent", "offset", h.off, "err", err)
		return true
	}
	defer view.Release()
	v, _ := message.Decode(view.Bytes(), false)
	realTopic, _ := v.Property(message.PropRealTopic)
	realQID, _, _ := propInt(v.Properties(), message.PropRealQueueID)
	props := appendPropsExcept(nil, v.Properties(), message.PropTransactionCheckTimes)
	props = appendPropInt(props, message.PropTransactionCheckTimes, int64(h.checks+1))
	rec := message.Record{
		Topic: string(realTopic), QueueID: int32(realQID), Flag: v.Flag(), QueueOffset: v.QueueOffset(),
		PhysicalOffset: v.PhysicalOffset(), SysFlag: v.SysFlag(), BornTimestamp: v.BornTimestamp(),
		BornHost: v.BornHost(), StoreTimestamp: v.StoreTimestamp(), StoreHost: v.StoreHost(),
		ReconsumeTimes: v.ReconsumeTimes(), PreparedTransactionOffset: v.PreparedTransactionOffset(),
		Body: v.Body(), Properties: props,
	}
	body, err := message.AppendRecord(nil, &rec)
	if err != nil {
		b.opts.Logger.Error("broker: cannot encode a transaction check", "offset", h.off, "err", err)
		return true
	}
	uniq, _ := v.Property(message.PropUniqKey)
	txID, ok := v.Property(message.PropTransactionID)
	if !ok || len(txID) == 0 {
		txID = uniq
	}
	cmd := &t.check
	cmd.InitRequest(protocol.ReqCheckTransactionState, 0)
	(&protocol.CheckTransactionStateRequest{
		TranStateTableOffset: v.QueueOffset(), CommitLogOffset: v.PhysicalOffset(), MsgID: string(uniq),
		TransactionID: string(txID), OffsetMsgID: string(v.AppendOffsetMsgID(nil)), Topic: string(realTopic),
		BrokerName: b.opts.BrokerName,
	}).Encode(&cmd.Ext)
	cmd.Body = body
	if err := c.InvokeOneway(cmd); err != nil {
		b.opts.Logger.Warn("broker: transaction check could not be sent", "group", h.group, "err", err)
	}
	cmd.Body = nil
	return true
}

// producerJoined checks at once the due half messages of a producer group
// that had no live connection when their check came.
func (t *txManager) producerJoined(group string) {
	woke := false
	t.mu.Lock()
	for _, h := range t.pending {
		if h.orphan && h.group == group {
			h.next = 0
			woke = true
		}
	}
	t.mu.Unlock()
	if woke {
		t.arrived()
	}
}

// giveUp moves a half message checked TransactionCheckMax times to
// TRANS_CHECK_MAX_TIME_TOPIC and resolves it with an op record, in one
// append.
func (t *txManager) giveUp(h *txHalf) bool {
	b := t.b
	if _, ok := t.claim(h.qoff); !ok {
		return true
	}
	tt, err := b.ensureGroupTopic(transCheckMaxTopic, 1)
	if err != nil {
		t.unclaim(h.qoff, h)
		return false
	}
	view, err := b.store.ReadMessage(h.off)
	sc := &t.sc
	defer sc.reset()
	if err == nil {
		sc.views = append(sc.views, view)
		v, _ := message.Decode(view.Bytes(), false)
		m := recordMessage(v)
		m.Topic, m.QueueID = tt.name, 0
		start := len(sc.props)
		sc.props = appendPropsExcept(sc.props, v.Properties(), message.PropTransactionCheckTimes)
		sc.props = appendPropInt(sc.props, message.PropTransactionCheckTimes, int64(h.checks))
		sc.add(m, start)
	}
	start := len(sc.props)
	sc.props = message.AppendProperty(sc.props, message.PropTags, opTagRemoved)
	sc.add(b.opMessage(strconv.AppendInt(nil, h.qoff, 10)), start)
	sc.fix()
	if _, err := b.putInner(sc.msgs, sc.res[:0]); err != nil {
		t.unclaim(h.qoff, h)
		b.opts.Logger.Error("broker: could not move a half message to "+transCheckMaxTopic, "err", err)
		return false
	}
	b.stats.txCheckMaxed.Add(1)
	b.opts.Logger.Warn("broker: half message checked too many times; moved to "+transCheckMaxTopic,
		"group", h.group, "halfOffset", h.qoff, "checks", h.checks)
	return true
}

// checkpoint returns the state to persist and drops what it makes useless.
func (t *txManager) checkpoint() (txCheckpoint, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	floor := t.halfLoaded
	for q := range t.pending {
		floor = min(floor, q)
	}
	ck := txCheckpoint{HalfOffset: floor, OpOffset: t.opLoaded}
	for q, op := range t.resolved {
		switch {
		case q < floor && op >= 0:
			delete(t.resolved, q)
		case op >= 0:
			ck.OpOffset = min(ck.OpOffset, op)
		}
	}
	for q, h := range t.pending {
		if h.checks > 0 {
			if ck.Checks == nil {
				ck.Checks = make(map[string]int32)
			}
			ck.Checks[strconv.FormatInt(q, 10)] = h.checks
		}
	}
	for q, n := range t.restored {
		if ck.Checks == nil {
			ck.Checks = make(map[string]int32)
		}
		ck.Checks[strconv.FormatInt(q, 10)] = n
	}
	return ck, t.changes
}

// persist writes the checkpoint if anything changed (always with force).
func (t *txManager) persist(force bool) error {
	t.persistMu.Lock()
	defer t.persistMu.Unlock()
	ck, changes := t.checkpoint()
	if changes == t.persisted && !force {
		return nil
	}
	data, err := json.Marshal(ck)
	if err != nil {
		return fmt.Errorf("broker: encode transaction checkpoint: %w", err)
	}
	if err := t.b.opts.WriteConfigFile(t.path, data); err != nil {
		return err
	}
	t.persisted = changes
	return nil
}

// pendingCount is the number of unresolved half messages loaded.
func (t *txManager) pendingCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// registerTransactions registers END_TRANSACTION.
func (b *Broker) registerTransactions(t *handlerTable) {
	t.add(b.handleEndTransaction, protocol.ReqEndTransaction)
}
