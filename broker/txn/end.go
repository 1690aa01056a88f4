package txn

import (
	"strconv"
	"time"

	"github.com/apogeemq/apogee/broker/internal/reput"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// HalfProps turns a producer's transactional message m into a half message:
// it appends to dst (the properties to store, already holding the
// producer's) REAL_TOPIC, REAL_QID, __transactionId__ (the UNIQ_KEY, when
// the producer set no transaction id) and PGROUP (producerGroup, when the
// producer did not set it), moves m to HalfTopic queue 0 and clears the
// transaction bits of its sysflag so that the store dispatches it there.
// sp are the producer's properties as sent, parsed once by the send path.
// It returns dst grown and does not allocate beyond that growth (it is on
// the send path).
func (m *Manager) HalfProps(dst []byte, sp *message.SendProps, producerGroup []byte, msg *store.Message) []byte {
	dst = message.AppendProperty(dst, message.PropRealTopic, msg.Topic)
	dst = reput.AppendPropInt(dst, message.PropRealQueueID, int64(msg.QueueID))
	if uniq, ok := sp.Get(message.SendUniqKey); ok && len(uniq) > 0 && !sp.Has(message.SendTransactionID) {
		dst = appendPropBytes(dst, message.PropTransactionID, uniq)
	}
	if !sp.Has(message.SendProducerGroup) && len(producerGroup) > 0 {
		dst = appendPropBytes(dst, message.PropProducerGroup, producerGroup)
	}
	msg.Topic, msg.QueueID = HalfTopic, 0
	msg.SysFlag = message.SetTxType(msg.SysFlag, message.TxNotType)
	m.halfMessages.Add(1)
	return dst
}

// EndRequest is END_TRANSACTION's operation: which half message, and how
// its transaction ended.
type EndRequest struct {
	ProducerGroup        string
	TranStateTableOffset int64 // the half message's queue offset
	CommitLogOffset      int64 // the half message's commit-log offset
	Commit               bool  // false: roll back
}

// End ends a transaction. The half message is read at r.CommitLogOffset and
// validated as RocketMQ's EndTransactionProcessor does (it must be a half
// message, its PGROUP r.ProducerGroup, its queue offset
// r.TranStateTableOffset: ErrHalfNotFound, ErrWrongGroup,
// ErrWrongTableOffset, ErrWrongCommitLogOffset). Then a commit stores the
// committed message (its real topic and queue, the COMMIT sysflag, the
// half's commit-log offset as its prepared-transaction offset, routed
// through Host.RouteDelay) together with the op record, in one append; a
// rollback stores the op record alone. A half message whose REAL_TOPIC or
// REAL_QID is missing cannot be committed (ErrNoRealTopic).
//
// end is the commit-log offset just past what End stored, for the caller to
// answer once it is durable; it is 0 when nothing was stored because the
// transaction was ended before (or is being ended by a concurrent call):
// ending a transaction twice stores nothing the second time. A store error
// is returned as Host.Put returned it, and leaves the transaction pending.
func (m *Manager) End(r EndRequest) (end int64, err error) {
	view, err := m.host.ReadMessage(r.CommitLogOffset)
	if err != nil {
		return 0, ErrHalfNotFound
	}
	defer view.Release()
	v, err := message.Decode(view.Bytes(), false)
	if err != nil || string(v.Topic()) != HalfTopic {
		return 0, ErrHalfNotFound
	}
	if pg, _ := v.Property(message.PropProducerGroup); string(pg) != r.ProducerGroup {
		return 0, ErrWrongGroup
	}
	if v.QueueOffset() != r.TranStateTableOffset {
		return 0, ErrWrongTableOffset
	}
	if v.PhysicalOffset() != r.CommitLogOffset {
		return 0, ErrWrongCommitLogOffset
	}
	qoff := v.QueueOffset()
	claimed, ok := m.claim(qoff)
	if !ok {
		return 0, nil
	}
	if claimed == nil {
		claimed = m.halfOf(v)
	}
	s := m.getScratch()
	defer m.putScratch(s)
	if r.Commit {
		start := len(s.props)
		msg, ok := m.committedMessage(v, s)
		if !ok {
			m.unclaim(qoff, claimed)
			return 0, ErrNoRealTopic
		}
		msg.PreparedTransactionOffset = r.CommitLogOffset
		s.add(msg, start)
	}
	start := len(s.props)
	s.props = message.AppendProperty(s.props, message.PropTags, opTagRemoved)
	s.ids = strconv.AppendInt(s.ids[:0], qoff, 10)
	s.add(m.opMessage(s.ids), start)
	s.fix()
	s.res, err = m.host.Put(s.msgs, s.res[:0])
	if err != nil {
		m.unclaim(qoff, claimed)
		return 0, err
	}
	if r.Commit {
		m.commits.Add(1)
	} else {
		m.rollbacks.Add(1)
	}
	last := &s.res[len(s.res)-1]
	return last.CommitLogOffset + int64(last.Size), nil
}

func (m *Manager) getScratch() *scratch {
	if v := m.endPool.Get(); v != nil {
		return v.(*scratch)
	}
	return &scratch{}
}

func (m *Manager) putScratch(s *scratch) {
	s.reset()
	m.endPool.Put(s)
}

// committedMessage builds the message a commit stores from its half
// message v: the real topic and queue, REAL_TOPIC, REAL_QID and TRAN_MSG
// removed, the COMMIT sysflag; a delay or a timer the producer asked for is
// applied now (Host.RouteDelay). Its properties are appended to s.props;
// ok is false when v has no valid REAL_TOPIC or REAL_QID.
func (m *Manager) committedMessage(v message.View, s *scratch) (store.Message, bool) {
	realTopic, okT := v.Property(message.PropRealTopic)
	realQID, _, okQ := reput.PropInt(v.Properties(), message.PropRealQueueID)
	if !okT || len(realTopic) == 0 || !okQ || realQID < 0 || realQID > 1<<31-1 {
		return store.Message{}, false
	}
	msg := reput.Message(v)
	msg.Topic, msg.QueueID = m.host.TopicName(realTopic), int32(realQID)
	msg.SysFlag = message.SetTxType(msg.SysFlag, message.TxCommitType)
	start := len(s.props)
	s.props = reput.AppendPropsExcept(s.props, v.Properties(), message.PropRealTopic, message.PropRealQueueID, message.PropTranMsg)
	s.props = m.host.RouteDelay(&msg, s.props, start)
	return msg, true
}

// opMessage is an op record: half queue offsets (decimal, comma-separated)
// in OpHalfTopic queue 0, tag "d". Properties are set by the caller.
func (m *Manager) opMessage(body []byte) store.Message {
	return store.Message{
		Topic: OpHalfTopic, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), BornHost: m.cfg.BornHost, Body: body,
	}
}

// claim marks a half message resolved (End or the checker's give-up) and
// reports false if it already was. It returns the pending entry it removed
// (nil if the half message was not loaded yet).
func (m *Manager) claim(qoff int64) (*half, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.resolved[qoff]; ok {
		return nil, false
	}
	h, ok := m.pending[qoff]
	if !ok && qoff < m.halfLoaded {
		return nil, false // loaded and not pending: resolved before
	}
	delete(m.pending, qoff)
	m.resolved[qoff] = -1
	m.changes++
	return h, true
}

// unclaim undoes claim after a failed put: h is pending again (if the
// loader has passed it).
func (m *Manager) unclaim(qoff int64, h *half) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.resolved, qoff)
	if qoff < m.halfLoaded && h != nil {
		m.pending[qoff] = h
	}
}

// halfOf is the pending entry of a half message record: checked first
// Config.Timeout (or its CHECK_IMMUNITY_TIME_IN_SECONDS) after it was
// stored. Its group is a fresh string; the loader uses halfValue and
// interns the group instead.
func (m *Manager) halfOf(v message.View) *half {
	h := m.halfValue(v)
	pg, _ := v.Property(message.PropProducerGroup)
	h.group = string(pg)
	return &h
}

// halfValue is halfOf without the group and without allocating.
func (m *Manager) halfValue(v message.View) half {
	timeout := m.cfg.Timeout.Milliseconds()
	if sec, _, ok := reput.PropInt(v.Properties(), message.PropCheckImmunityTimeInSeconds); ok && sec > 0 {
		timeout = sec * 1000
	}
	return half{qoff: v.QueueOffset(), off: v.PhysicalOffset(), next: v.StoreTimestamp() + timeout}
}
