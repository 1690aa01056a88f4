package core

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/apogeemq/apogee/broker/core/stats"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// SendRequest is a producer's send: one message, or a batch (Batch, the
// body then holds the entries in RocketMQ's batch format). Its byte slices
// may alias the front end's request buffer: Send reads them during the call
// and keeps none (SendResult.TransactionID aliases Properties).
type SendRequest struct {
	ProducerGroup []byte
	Topic         []byte
	// DefaultTopic is the template of an auto-created topic ("" means
	// TBW102); DefaultTopicQueueNums its queue count (capped by the
	// template's).
	DefaultTopic          []byte
	DefaultTopicQueueNums int32
	// QueueID < 0 lets the core choose (round-robin over the write queues).
	QueueID        int32
	SysFlag        int32
	BornTimestamp  int64 // ms
	Flag           int32 // the user flag
	Properties     []byte
	ReconsumeTimes int32
	// MaxReconsumeTimes, when HasMaxReconsumeTimes, replaces the group's
	// limit for a message sent to a %RETRY% topic.
	MaxReconsumeTimes    int32
	HasMaxReconsumeTimes bool
	Batch                bool
	Body                 []byte
	// Entries, when not empty, is a batch given as its messages rather
	// than as a body in RocketMQ's batch format (Batch and Body are then
	// ignored): the gRPC front end's SendMessage of several messages,
	// which arrive decoded. They are stored as a remoting batch's entries
	// are (one PutBatch, in one queue, under a batch's rules: NORMAL for
	// the type check, no delay, no transaction, no retry topic), each
	// checked as a single message is (its body against MaxMessageSize, its
	// properties with the broker's added against MaxPropertiesSize).
	Entries []BatchEntry
	// CheckTopicType refuses a message whose type (TRANSACTION, DELAY,
	// FIFO by its __SHARDINGKEY, else NORMAL; a batch is NORMAL) its topic
	// does not accept (AcceptedMessageTypes), with
	// ReasonTopicMessageTypeMismatch: RocketMQ 5's proxy's check
	// (enableTopicMessageTypeCheck, on by default), which the gRPC front
	// end asks for. RocketMQ's broker does not check on its remoting port,
	// nor does the remoting front end. Sends to %RETRY% and %DLQ% topics
	// are never checked.
	CheckTopicType bool
	// BornHost is the producer's address (the record's BORNHOST, and the
	// remark of a refusal).
	BornHost netip.AddrPort
}

// BatchEntry is one message of a batch given as entries
// (SendRequest.Entries). Its slices may alias the front end's request, as
// SendRequest's do.
type BatchEntry struct {
	Flag int32 // the user flag
	// SysFlag adds to the request's: only message.FlagCompressed is taken
	// (a compressed body is the entry's own).
	SysFlag int32
	// BornTimestamp (ms) is the entry's; 0 means the request's.
	BornTimestamp int64
	// Properties are the entry's own (the broker's are added as to a
	// single message's), with or without the trailing separator.
	Properties []byte
	Body       []byte
}

// isBatch reports whether r is a batch (a body of entries, or Entries).
func (r *SendRequest) isBatch() bool { return r.Batch || len(r.Entries) > 0 }

// bodyBytes is the bytes r's message bodies hold: what it holds in flight.
func (r *SendRequest) bodyBytes() int64 {
	if len(r.Entries) == 0 {
		return int64(len(r.Body))
	}
	var n int64
	for i := range r.Entries {
		n += int64(len(r.Entries[i].Body))
	}
	return n
}

// SendResult is what Send stored. It is the caller's, reused across calls
// (MsgID keeps its capacity), so that Send does not allocate.
type SendResult struct {
	// MsgID holds the offset message ids (store host + commit-log offset)
	// of the messages stored, comma-separated for a batch.
	MsgID []byte
	// QueueID and QueueOffset are the queue and the consume-queue offset of
	// the (first) message as the producer sees it: its topic's queue, also
	// when the message was routed to a system topic. A batch's messages
	// are consecutive in that queue (one append): the i-th is at
	// QueueOffset+i.
	QueueID     int32
	QueueOffset int64
	// TransactionID is the message's UNIQ_KEY (a view of the request's
	// properties).
	TransactionID []byte
	// Messages is the number of messages stored.
	Messages int
	// RecallHandle names a timer message for Recall (AppendRecallHandle);
	// empty for any other send, and for a timer message without UNIQ_KEY.
	RecallHandle []byte
	// FlushTimeout: the messages are stored, but the store's flush did not
	// cover them in time (FLUSH_DISK_TIMEOUT, a success to clients).
	FlushTimeout bool
	// Pending: in sync-flush mode, the answer must wait until the messages
	// are durable; see Pending. Its in-flight bytes are held until then.
	Pending Pending
}

// sendScratch is the pooled working memory of one send.
type sendScratch struct {
	// sp is the request's properties parsed once (checkSend): every later
	// step reads it rather than scanning them again.
	sp    message.SendProps
	props []byte // properties of the stored message(s), back to back
	spans []span // batch: each entry's properties in props
	msgs  []store.Message
	res   []store.PutResult
}

type span struct{ start, end int }

func (c *Core) getSendScratch() *sendScratch {
	if v := c.sendPool.Get(); v != nil {
		return v.(*sendScratch)
	}
	return &sendScratch{}
}

func (c *Core) putSendScratch(s *sendScratch) {
	clear(s.msgs) // drop references to request bytes
	s.msgs, s.res, s.spans = s.msgs[:0], s.res[:0], s.spans[:0]
	s.props = s.props[:0]
	s.sp.Reset()
	c.sendPool.Put(s)
}

// Send stores a producer's message or batch (SEND_MESSAGE 10,
// SEND_MESSAGE_V2 310, SEND_BATCH_MESSAGE 320): it validates the topic name,
// body size and properties; applies back-pressure (SYSTEM_BUSY at once when
// the in-flight message bytes exceed MaxInFlightBytes or the store has
// completed no put for BusyTimeout); looks the topic up, auto-creating it
// from TBW102 (or a %RETRY% topic with one queue) when allowed; builds the
// stored properties (the producer's plus CLUSTER) in a pooled buffer; routes
// delay, timer, half and retried messages (routeSend); and puts the
// message, or every batch entry in one PutBatch (a batch comes as a
// body in RocketMQ's batch format, or as SendRequest.Entries). It does not
// allocate on success.
//
// In sync-flush mode (unless the message says WAIT=false) the store does
// not wait: res.Pending says how long the answer must wait, and the caller
// hands it to WaitDurable or WhenDurable.
func (c *Core) Send(r *SendRequest, res *SendResult) error {
	c.stats.sendRequests.Add(1)
	res.MsgID, res.RecallHandle = res.MsgID[:0], res.RecallHandle[:0]
	res.TransactionID, res.Messages, res.FlushTimeout, res.Pending = nil, 0, false, Pending{}
	if c.slave.Load() {
		c.stats.sendErrors.Add(1)
		return errSlaveSend
	}
	if e := c.gate.Load(); e != nil {
		c.stats.sendErrors.Add(1)
		return e
	}
	s := c.getSendScratch()
	defer c.putSendScratch(s)
	if err := c.checkSend(r, &s.sp); err != nil {
		c.stats.sendErrors.Add(1)
		return err
	}

	// Back-pressure: refuse at once rather than queue without bound.
	now := c.sinceStart()
	if c.putBusy(now) {
		c.stats.busyRejects.Add(1)
		return newError(ReasonStoreStalled, "[PC_SYNCHRONIZED]broker busy: the store has completed no put for "+
			c.opts.BusyTimeout.String()+", start flow control for a while")
	}
	n := r.bodyBytes()
	if c.inflight.Add(n) > c.opts.MaxInFlightBytes && n > 0 {
		c.inflight.Add(-n)
		c.stats.busyRejects.Add(1)
		return newError(ReasonInFlightFull, "[TOO_MANY_REQUESTS]broker busy: too many message bytes in flight, start flow control for a while")
	}
	err := c.send(s, r, res, now, n)
	if !res.Pending.Waiting() {
		c.inflight.Add(-n)
	}
	if err != nil {
		c.stats.sendErrors.Add(1)
	}
	return err
}

// send is Send once the request passed validation and back-pressure; n is
// the in-flight bytes it holds (res.Pending keeps them when it waits), s
// the send's scratch with its properties parsed (s.sp).
func (c *Core) send(s *sendScratch, r *SendRequest, res *SendResult, now, n int64) error {
	t := c.topics.get(r.Topic)
	if t == nil {
		var err error
		if t, err = c.autoCreateTopic(r); err != nil {
			return err
		}
	}
	if !t.writable() {
		return newError(ReasonTopicPermission, "the topic["+t.name+"] sending message is forbidden")
	}
	if !c.brokerWritable() {
		return newError(ReasonBrokerPermission, "the broker["+c.opts.AdvertiseAddr+"] sending message is forbidden")
	}
	qid := r.QueueID
	if qid >= t.queueLimit() {
		return newError(ReasonQueueIllegal, fmt.Sprintf("request queueId[%d] is illegal, topic:[%s] writeQueueNums:[%d] readQueueNums:[%d] Producer: %s",
			qid, t.name, t.cfg.WriteQueueNums, t.cfg.ReadQueueNums, r.BornHost))
	}
	if qid < 0 {
		if t.cfg.WriteQueueNums <= 0 {
			return newError(ReasonTopicNoWriteQueue, "the topic["+t.name+"] has no write queue")
		}
		qid = int32(t.rr.Add(1) % uint32(t.cfg.WriteQueueNums))
	}
	batch := r.isBatch()
	sysFlag := r.SysFlag &^ (message.FlagBornHostV6 | message.FlagStoreHostV6)
	if batch || message.TxType(sysFlag) == message.TxCommitType {
		// A producer cannot commit by itself: COMMIT comes from END_TRANSACTION.
		sysFlag = message.SetTxType(sysFlag, message.TxNotType)
	}
	if t.cfg.TopicFilterType == filterMultiTag {
		sysFlag |= message.FlagMultiTags
	}
	noWait := s.sp.Is(message.SendWait, "false")
	waitDurable := c.waitDurable.Load() // once: SetRole may change it meanwhile

	m := store.Message{
		Topic: t.name, QueueID: qid, Flag: r.Flag, SysFlag: sysFlag, BornTimestamp: r.BornTimestamp,
		BornHost: r.BornHost, ReconsumeTimes: r.ReconsumeTimes, NoWait: noWait || waitDurable,
	}
	switch {
	case len(r.Entries) > 0:
		// Each entry's body was checked against MaxMessageSize, a NORMAL
		// message's limit (checkSend).
		if err := c.checkType(t, sendRoute{check: r.CheckTopicType}, 0); err != nil {
			return err
		}
		if err := c.buildEntries(s, r, &m, !isLiteParent(t)); err != nil {
			return err
		}
	case r.Batch:
		if err := c.checkType(t, sendRoute{check: r.CheckTopicType}, len(r.Body)); err != nil {
			return err
		}
		if err := c.buildBatch(s, r, &m, !isLiteParent(t)); err != nil {
			return err
		}
	default:
		s.props = c.appendStoredProps(s.props[:0], r.Properties, nil)
		if len(s.props) > message.MaxPropertiesSize {
			return newError(ReasonMessagePropertiesTooLarge, "the message properties are longer than 32767 bytes once the broker's are added")
		}
		m.Body, m.Properties = r.Body, s.props
		if err := c.routeSend(s, r, t, &m, len(r.Body)); err != nil {
			return err
		}
		if m.Topic == t.name {
			qid = m.QueueID // a priority message's queue (route.go)
		}
		s.msgs = append(s.msgs, m)
	}

	if c.putsActive.Load() == 0 {
		c.lastProgress.Store(now)
	}
	c.putsActive.Add(1)
	var err error
	s.res, err = c.store.PutBatch(s.msgs, s.res[:0])
	c.lastProgress.Store(c.sinceStart())
	c.putsActive.Add(-1)
	if err != nil {
		if errors.Is(err, store.ErrReplica) {
			// The broker became a slave after the check above (SetRole).
			c.stats.sendErrors.Add(1)
			return errSlaveSend
		}
		return storeError(err)
	}
	c.stats.sendMessages.Add(int64(len(s.res)))
	c.putCounter(t).Put(int64(len(s.res)), n)

	for i := range s.res {
		if i > 0 {
			res.MsgID = append(res.MsgID, ',')
		}
		res.MsgID = c.store.AppendMsgID(res.MsgID, &s.res[i])
	}
	first := &s.res[0]
	res.QueueID, res.QueueOffset = qid, first.QueueOffset
	res.TransactionID, _ = s.sp.Get(message.SendUniqKey)
	res.Messages = len(s.res)
	if !batch && s.msgs[0].Topic == timerTopic && len(res.TransactionID) > 0 {
		res.RecallHandle = AppendRecallHandle(res.RecallHandle[:0], t.name, res.TransactionID, first.CommitLogOffset)
	}
	res.FlushTimeout = first.Status == store.StatusFlushDiskTimeout
	if waitDurable && !noWait {
		last := &s.res[len(s.res)-1]
		res.Pending = Pending{end: last.CommitLogOffset + int64(last.Size), held: n}
	}
	return nil
}

// putCounter returns t's put statistics, resolving them on the topic's
// first send (two sends racing resolve the same items).
func (c *Core) putCounter(t *topicEntry) *stats.PutCounter {
	if pc := t.puts.Load(); pc != nil {
		return pc
	}
	pc := c.rstats.PutCounter(t.name)
	t.puts.Store(pc)
	return pc
}

// checkSend validates what can be checked before the topic is looked up:
// the topic name, reserved topics, the body size and the properties, which
// it parses into sp on the way (the one pass over them a send makes).
func (c *Core) checkSend(r *SendRequest, sp *message.SendProps) error {
	if remark, ok := checkTopicName(r.Topic); !ok {
		return newError(ReasonTopicIllegal, remark)
	}
	if isNotAllowedSendTopic(r.Topic) {
		return newError(ReasonTopicSendForbidden, "Sending message to topic["+string(r.Topic)+"] is forbidden.")
	}
	if len(r.Entries) == 0 && len(r.Body) > c.opts.MaxMessageSize {
		return bodyTooLarge(len(r.Body), c.opts.MaxMessageSize)
	}
	for i := range r.Entries {
		if n := len(r.Entries[i].Body); n > c.opts.MaxMessageSize {
			return bodyTooLarge(n, c.opts.MaxMessageSize)
		}
	}
	if err := sp.Parse(r.Properties); err != nil {
		return wrapError(ReasonMessagePropertiesTooLarge, "the message properties are malformed or longer than 32767 bytes: "+err.Error(), err)
	}
	if r.isBatch() {
		if len(r.Topic) >= len(retryTopicPrefix) && string(r.Topic[:len(retryTopicPrefix)]) == retryTopicPrefix {
			return newError(ReasonBatchUnsupported, "batch request does not support retry group "+string(r.Topic))
		}
		if sp.Has(message.SendDelay) {
			return newError(ReasonBatchUnsupported, "batch request does not support delay message")
		}
		if message.TxType(r.SysFlag) == message.TxPreparedType {
			return newError(ReasonBatchUnsupported, "batch request does not support transaction message")
		}
	}
	return nil
}

func bodyTooLarge(n, limit int) error {
	return newError(ReasonMessageBodyTooLarge, fmt.Sprintf("the message body size %d exceeds the limit of %d bytes", n, limit))
}

// appendStoredProps appends the properties a message is stored with: its own
// (inner), the batch wrapper's (outer, for batch entries), and CLUSTER, as
// the Java broker adds it.
func (c *Core) appendStoredProps(dst, inner, outer []byte) []byte {
	dst = appendPropsWithSep(dst, inner)
	dst = appendPropsWithSep(dst, outer)
	return message.AppendProperty(dst, message.PropCluster, c.opts.ClusterName)
}

// appendPropsWithSep appends a properties string, closing it with 0x02 if it
// lacks the trailing separator.
func appendPropsWithSep(dst, p []byte) []byte {
	if len(p) == 0 {
		return dst
	}
	dst = append(dst, p...)
	if p[len(p)-1] != message.PropertySeparator {
		dst = append(dst, message.PropertySeparator)
	}
	return dst
}

// buildBatch splits a producer batch body (rocketmq-protocol.md §6.5) into
// s.msgs, all sharing m's topic, queue, flags and born fields. dropLite
// drops the lite topic property of the entries and the batch (a topic that
// is not a LITE parent: see routeSend).
func (c *Core) buildBatch(s *sendScratch, r *SendRequest, m *store.Message, dropLite bool) error {
	var bad string
	outer := r.Properties
	if dropLite {
		outer = dropLiteTopic(outer)
	}
	err := message.ForEachBatchEntry(r.Body, func(_ int32, _, props []byte) error {
		if err := message.ValidateProperties(props); err != nil {
			bad = "a batch entry's properties are malformed: " + err.Error()
			return err
		}
		if dropLite {
			props = dropLiteTopic(props)
		}
		start := len(s.props)
		s.props = c.appendStoredProps(s.props, props, outer)
		if len(s.props)-start > message.MaxPropertiesSize {
			bad = "a batch entry's properties are longer than 32767 bytes once the broker's are added"
			return message.ErrPropertiesTooLarge
		}
		s.spans = append(s.spans, span{start, len(s.props)})
		return nil
	})
	if err != nil {
		if bad == "" {
			bad = "malformed batch body: " + err.Error()
		}
		reason := ReasonMessageMalformed
		if errors.Is(err, message.ErrPropertiesTooLarge) {
			reason = ReasonMessagePropertiesTooLarge
		}
		return wrapError(reason, bad, err)
	}
	if len(s.spans) == 0 {
		return newError(ReasonMessageMalformed, "empty batch")
	}
	i := 0
	_ = message.ForEachBatchEntry(r.Body, func(flag int32, entryBody, _ []byte) error {
		e := *m
		e.Flag = flag
		e.Body = entryBody
		e.Properties = s.props[s.spans[i].start:s.spans[i].end]
		s.msgs = append(s.msgs, e)
		i++
		return nil
	})
	return nil
}

// buildEntries is buildBatch for a batch given as entries (r.Entries):
// each entry's properties are checked and stored as a batch entry's are,
// its flag, compressed bit, born time and body are its own.
func (c *Core) buildEntries(s *sendScratch, r *SendRequest, m *store.Message, dropLite bool) error {
	outer := r.Properties
	if dropLite {
		outer = dropLiteTopic(outer)
	}
	for i := range r.Entries {
		props := r.Entries[i].Properties
		if err := message.ValidateProperties(props); err != nil {
			reason := ReasonMessageMalformed
			if errors.Is(err, message.ErrPropertiesTooLarge) {
				reason = ReasonMessagePropertiesTooLarge
			}
			return wrapError(reason, "a batch entry's properties are malformed: "+err.Error(), err)
		}
		if dropLite {
			props = dropLiteTopic(props)
		}
		start := len(s.props)
		s.props = c.appendStoredProps(s.props, props, outer)
		if len(s.props)-start > message.MaxPropertiesSize {
			return newError(ReasonMessagePropertiesTooLarge, "a batch entry's properties are longer than 32767 bytes once the broker's are added")
		}
		s.spans = append(s.spans, span{start, len(s.props)})
	}
	for i := range r.Entries {
		en := &r.Entries[i]
		e := *m
		e.Flag = en.Flag
		e.SysFlag |= en.SysFlag & message.FlagCompressed
		if en.BornTimestamp != 0 {
			e.BornTimestamp = en.BornTimestamp
		}
		e.Body = en.Body
		e.Properties = s.props[s.spans[i].start:s.spans[i].end]
		s.msgs = append(s.msgs, e)
	}
	return nil
}

// autoCreateTopic creates a topic a producer sends to without creating it
// first, the way the Java broker's autoCreateTopicEnable works: from the
// producer's default topic (TBW102) when that one has the inherit
// permission, with min(defaultTopicQueueNums, its write queues) queues and
// its permission minus inherit; %RETRY% topics get 1 read-write queue. The
// configuration's record is in the log before the topic is in the table
// (configlog.go). A slave never creates one (ReasonSlaveCreate).
func (c *Core) autoCreateTopic(r *SendRequest) (*topicEntry, error) {
	name := string(r.Topic)
	var cfg protocol.TopicConfig
	if strings.HasPrefix(name, retryTopicPrefix) {
		cfg = newTopicConfig(name, 1, protocol.PermRead|protocol.PermWrite)
	} else {
		def := r.DefaultTopic
		if len(def) == 0 {
			def = []byte(topicAutoCreateKey)
		}
		d := c.topics.get(def)
		if d == nil || d.cfg.Perm&protocol.PermInherit == 0 ||
			(c.opts.DisableAutoCreateTopic && d.name == topicAutoCreateKey) {
			return nil, newError(ReasonTopicNotExist, "topic["+name+"] not exist, apply first please!")
		}
		queues := r.DefaultTopicQueueNums
		if queues <= 0 || queues > d.cfg.WriteQueueNums {
			queues = d.cfg.WriteQueueNums
		}
		cfg = newTopicConfig(name, max(queues, 1), d.cfg.Perm&^protocol.PermInherit)
		if err := c.autoCreate.allow("topic", c.topics.count(), r.BornHost.Addr().Unmap(), c.opts.Logger); err != nil {
			return nil, newError(ReasonTopicNotExist, "topic["+name+"] not exist, "+err.Error())
		}
	}
	if c.slave.Load() {
		return nil, errSlaveCreateTopic(name)
	}
	t, created, err := c.setTopic(cfg, true)
	if err != nil {
		return nil, err
	}
	if created {
		c.opts.Logger.Info("broker: topic auto-created", "topic", name, "queues", cfg.WriteQueueNums, "perm", cfg.Perm)
	}
	return t, nil
}

// putBusy reports whether the store is stalled: puts are in progress and
// none completed within BusyTimeout. now is sinceStart.
func (c *Core) putBusy(now int64) bool {
	return c.putsActive.Load() > 0 && now-c.lastProgress.Load() > int64(c.opts.BusyTimeout)
}
