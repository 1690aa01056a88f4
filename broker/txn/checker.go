package txn

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/apogeemq/apogee/broker/internal/reput"

	"github.com/apogeemq/apogee/internal/javacompat"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// blankEntrySize marks a consume queue's pre-fill entries.
const blankEntrySize = 0x7FFFFFFF

// run is the checker: it loads what the half and op queues received, checks
// back what is due, and sleeps until the next check is due, a queue grows
// (Arrived), a producer joins (ProducerJoined) or Stop.
func (m *Manager) run() {
	defer close(m.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		failed := false
		if err := m.loadHalves(); err != nil {
			m.log.Error("broker: transaction checker cannot read the half queue", "err", err)
			failed = true
		}
		if err := m.loadOps(); err != nil {
			m.log.Error("broker: transaction checker cannot read the op queue", "err", err)
			failed = true
		}
		next := m.checkDue()
		d := time.Duration(-1)
		if next > 0 {
			d = max(time.Duration(next-time.Now().UnixMilli())*time.Millisecond, time.Millisecond)
		}
		if failed {
			d = retryAfter
		}
		if d > 0 {
			timer.Reset(d)
		}
		select {
		case <-m.stop:
			return
		case <-m.wake:
			timer.Stop() // Go 1.23+ timers: nothing stale is received later
		case <-timer.C:
		}
	}
}

// loadHalves reads the half messages stored since the last call.
func (m *Manager) loadHalves() error { return m.follow(HalfTopic, &m.halfLoaded, m.loadHalf) }

// loadOps reads the op records stored since the last call.
func (m *Manager) loadOps() error { return m.follow(OpHalfTopic, &m.opLoaded, m.loadOp) }

// follow reads queue 0 of topic from *next (guarded by mu) up to its end, in
// batches, and passes each entry with its queue offset to load, which moves
// *next past it. A *next that retention left behind moves up to the queue's
// minimum.
func (m *Manager) follow(topic string, next *int64, load func(qoff int64, e store.QueueEntry)) error {
	for {
		m.mu.Lock()
		from := *next
		m.mu.Unlock()
		ents, err := m.host.ReadEntries(topic, 0, from, m.sc.entries(256))
		m.sc.ents = ents[:0]
		if err != nil {
			if errors.Is(err, store.ErrOffsetOutOfRange) {
				first := m.host.MinOffset(topic, 0)
				m.mu.Lock()
				*next = first
				m.mu.Unlock()
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
// It allocates nothing per message in the steady state: the pending entry
// comes from newHalf's chunks and the producer group is interned.
func (m *Manager) loadHalf(qoff int64, e store.QueueEntry) {
	var h half
	var group []byte
	readable := false
	if e.Size > 0 && e.Size != blankEntrySize {
		if view, err := m.host.ReadMessage(e.CommitLogOffset); err != nil {
			m.log.Error("broker: half message unreadable; dropped", "queueOffset", qoff, "err", err)
		} else {
			v, _ := message.Decode(view.Bytes(), false)
			h = m.halfValue(v)
			h.qoff, h.off = qoff, e.CommitLogOffset
			pg, _ := v.Property(message.PropProducerGroup)
			group = append(m.groupBuf[:0], pg...) // the view is released before mu is taken
			m.groupBuf = group
			readable = true
			view.Release()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if qoff != m.halfLoaded {
		return
	}
	m.halfLoaded = qoff + 1
	if !readable {
		return
	}
	if _, done := m.resolved[qoff]; done {
		return
	}
	h.group = m.internGroup(group)
	if n, ok := m.restored[qoff]; ok {
		h.checks = n
		delete(m.restored, qoff)
		h.next = max(h.next, time.Now().UnixMilli()+min(m.cfg.CheckInterval, m.cfg.Timeout).Milliseconds())
	}
	p := m.newHalf()
	*p = h
	m.pending[qoff] = p
}

// halfChunk is how many pending entries newHalf allocates at once. A chunk
// stays allocated while any of its entries is pending, so a long-lived
// half message can keep at most halfChunk-1 resolved neighbours' 56 bytes
// alive.
const halfChunk = 32

// maxInternedGroups bounds internGroup's table: producer group names come
// from clients.
const maxInternedGroups = 4096

// newHalf returns a zeroed pending entry from the current chunk. mu held.
func (m *Manager) newHalf() *half {
	if len(m.halfFree) == 0 {
		m.halfFree = make([]half, halfChunk)
	}
	h := &m.halfFree[0]
	m.halfFree = m.halfFree[1:]
	return h
}

// internGroup returns the producer group's name as a string shared by
// every pending entry of the group (allocated once per group, up to
// maxInternedGroups names). mu held.
func (m *Manager) internGroup(b []byte) string {
	if s, ok := m.groups[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(m.groups) < maxInternedGroups {
		m.groups[s] = s
	}
	return s
}

// loadOp marks the half messages an op record names as resolved.
func (m *Manager) loadOp(opq int64, e store.QueueEntry) {
	var body []byte
	var view store.View
	read := false
	if e.Size > 0 && e.Size != blankEntrySize {
		var err error
		if view, err = m.host.ReadMessage(e.CommitLogOffset); err != nil {
			// Its half messages stay pending and are checked back again.
			m.log.Error("broker: transaction op record unreadable; skipped", "queueOffset", opq, "err", err)
		} else {
			read = true
			v, _ := message.Decode(view.Bytes(), false)
			body = v.Body()
		}
	}
	m.mu.Lock()
	for len(body) > 0 {
		item := body
		if i := bytes.IndexByte(body, ','); i >= 0 {
			item, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if q, ok := javacompat.ParseInt64(item); ok && q >= 0 {
			delete(m.pending, q)
			if cur, ok := m.resolved[q]; !ok || cur < 0 {
				m.resolved[q] = opq
			}
		}
	}
	m.opLoaded = opq + 1
	m.changes++
	m.mu.Unlock()
	if read {
		view.Release()
	}
}

// checkDue checks back every pending half message whose time has come and
// returns the earliest next check time in ms (0: none pending).
func (m *Manager) checkDue() int64 {
	now := time.Now().UnixMilli()
	var due []*half
	m.mu.Lock()
	for _, h := range m.pending {
		if h.next <= now {
			due = append(due, h)
		}
	}
	m.mu.Unlock()
	for _, h := range due {
		m.mu.Lock()
		checks := h.checks
		h.joined = false // a producer that joins from here on is looked for again
		m.mu.Unlock()
		if checks >= int32(m.cfg.CheckMax) {
			if !m.giveUp(h) {
				m.mu.Lock()
				h.next = now + retryAfter.Milliseconds()
				m.mu.Unlock()
			}
			continue
		}
		counted := m.sendCheck(h)
		m.mu.Lock()
		if counted {
			h.checks++
			m.changes++
		}
		if !counted && h.joined {
			// No producer when the check looked, but one joined since:
			// ProducerJoined may have run before this check marked the
			// half an orphan, or set next before it is overwritten here.
			// Check again at once rather than a check interval later.
			h.next = now
		} else {
			h.next = now + m.cfg.CheckInterval.Milliseconds()
		}
		m.mu.Unlock()
	}
	var next int64
	m.mu.Lock()
	for _, h := range m.pending {
		if next == 0 || h.next < next {
			next = h.next
		}
	}
	m.mu.Unlock()
	return next
}

// sendCheck has CHECK_TRANSACTION_STATE for h sent to one live connection
// of its producer group (Host.SendCheck). It reports whether the check
// counts: without a live connection of the group (RocketMQ counts the
// attempt all the same) it does not, and the half message is checked as
// soon as a producer of the group joins. A half message that cannot be
// read counts (after CheckMax of them it is given up like any other).
func (m *Manager) sendCheck(h *half) bool {
	m.mu.Lock()
	checks := h.checks
	m.mu.Unlock()
	var c Check
	if err := m.buildCheck(h.off, checks+1, &c); err != nil {
		m.log.Error("broker: half message unreadable; check not sent", "offset", h.off, "err", err)
		return true
	}
	err := m.host.SendCheck(h.group, &c)
	if errors.Is(err, ErrNoProducer) {
		m.mu.Lock()
		first := !h.orphan
		h.orphan = true
		m.mu.Unlock()
		if first {
			m.log.Warn("broker: transaction check deferred: no live producer of the group", "group", h.group, "halfOffset", h.qoff)
		}
		return false
	}
	m.mu.Lock()
	h.orphan = false
	m.mu.Unlock()
	m.checks.Add(1)
	if err != nil {
		m.log.Warn("broker: transaction check could not be sent", "group", h.group, "err", err)
	}
	return true
}

// buildCheck fills c for the half message at commit-log offset off, checked
// for the times-th time: the body is its record with its real topic and
// queue restored (PGROUP and UNIQ_KEY kept) and TRANSACTION_CHECK_TIMES set
// to times, as the Go client needs it.
func (m *Manager) buildCheck(off int64, times int32, c *Check) error {
	view, err := m.host.ReadMessage(off)
	if err != nil {
		return err
	}
	defer view.Release()
	v, err := message.Decode(view.Bytes(), false)
	if err != nil {
		return err
	}
	realTopic, _ := v.Property(message.PropRealTopic)
	realQID, _, _ := reput.PropInt(v.Properties(), message.PropRealQueueID)
	props := reput.AppendPropsExcept(nil, v.Properties(), message.PropTransactionCheckTimes)
	props = reput.AppendPropInt(props, message.PropTransactionCheckTimes, int64(times))
	rec := message.Record{
		Topic: string(realTopic), QueueID: int32(realQID), Flag: v.Flag(), QueueOffset: v.QueueOffset(),
		PhysicalOffset: v.PhysicalOffset(), SysFlag: v.SysFlag(), BornTimestamp: v.BornTimestamp(),
		BornHost: v.BornHost(), StoreTimestamp: v.StoreTimestamp(), StoreHost: v.StoreHost(),
		ReconsumeTimes: v.ReconsumeTimes(), PreparedTransactionOffset: v.PreparedTransactionOffset(),
		Body: v.Body(), Properties: props,
	}
	body, err := message.AppendRecord(nil, &rec)
	if err != nil {
		return err
	}
	uniq, _ := v.Property(message.PropUniqKey)
	txID, ok := v.Property(message.PropTransactionID)
	if !ok || len(txID) == 0 {
		txID = uniq
	}
	*c = Check{
		TranStateTableOffset: v.QueueOffset(), CommitLogOffset: v.PhysicalOffset(), MsgID: string(uniq),
		TransactionID: string(txID), OffsetMsgID: string(v.AppendOffsetMsgID(nil)), Topic: string(realTopic),
		Record: body,
	}
	return nil
}

// giveUp moves a half message checked CheckMax times to CheckMaxTopic and
// resolves it with an op record, in one append, and waits for them to be
// durable (so that a checkpoint never counts it resolved before its op
// record is). It reports false when that failed (the half message is
// pending again).
func (m *Manager) giveUp(h *half) bool {
	if _, ok := m.claim(h.qoff); !ok {
		return true
	}
	topic, err := m.host.EnsureTopic(CheckMaxTopic, 1)
	if err != nil {
		m.unclaim(h.qoff, h)
		m.log.Error("broker: could not create "+CheckMaxTopic, "err", err)
		return false
	}
	sc := &m.sc
	defer sc.reset()
	if view, err := m.host.ReadMessage(h.off); err == nil {
		sc.views = append(sc.views, view)
		v, _ := message.Decode(view.Bytes(), false)
		msg := reput.Message(v)
		msg.Topic, msg.QueueID = topic, 0
		start := len(sc.props)
		sc.props = reput.AppendPropsExcept(sc.props, v.Properties(), message.PropTransactionCheckTimes)
		sc.props = reput.AppendPropInt(sc.props, message.PropTransactionCheckTimes, int64(h.checks))
		sc.add(msg, start)
	}
	start := len(sc.props)
	sc.props = message.AppendProperty(sc.props, message.PropTags, opTagRemoved)
	sc.ids = strconv.AppendInt(sc.ids[:0], h.qoff, 10)
	sc.add(m.opMessage(sc.ids), start)
	sc.fix()
	res, err := m.host.Put(sc.msgs, sc.res[:0])
	if err == nil {
		sc.res = res
		last := &res[len(res)-1]
		if werr := m.host.WaitDurable(last.CommitLogOffset + int64(last.Size)); werr != nil && !store.NotDurable(werr) {
			err = werr // stored, but not known durable: resolved only once it is
		}
	}
	if err != nil {
		m.unclaim(h.qoff, h)
		m.log.Error("broker: could not move a half message to "+CheckMaxTopic, "err", err)
		return false
	}
	m.checkMaxed.Add(1)
	m.log.Warn("broker: half message checked too many times; moved to "+CheckMaxTopic,
		"group", h.group, "halfOffset", h.qoff, "checks", h.checks)
	return true
}
