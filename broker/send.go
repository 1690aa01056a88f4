package broker

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// defaultRegion is the send response's MSG_REGION, as the Java broker's
// default gives it (and TRACE_ON is true, as there).
var defaultRegion = []byte("DefaultRegion")

// sendScratch is the pooled working memory of one send request.
type sendScratch struct {
	props []byte // properties of the stored message(s), back to back
	spans []span // batch: each entry's properties in props
	msgs  []store.Message
	res   []store.PutResult
	ids   []byte // msgId(s)
}

type span struct{ start, end int }

func (b *Broker) getSendScratch() *sendScratch {
	if v := b.sendPool.Get(); v != nil {
		return v.(*sendScratch)
	}
	return &sendScratch{}
}

func (b *Broker) putSendScratch(s *sendScratch) {
	clear(s.msgs) // drop references to request bytes
	s.msgs, s.res, s.spans = s.msgs[:0], s.res[:0], s.spans[:0]
	s.props, s.ids = s.props[:0], s.ids[:0]
	b.sendPool.Put(s)
}

// bornHost is the producer's address (the record's BORNHOST).
func bornHost(c *remoting.Conn) netip.AddrPort {
	if c == nil {
		return netip.AddrPort{}
	}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	return netip.AddrPort{}
}

// handleSend serves SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and
// SEND_BATCH_MESSAGE (320). On success it does not allocate: the header is
// a view of the request, properties are built in a pooled buffer, and the
// store's put is the only work per message.
func (b *Broker) handleSend(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	b.stats.sendRequests.Add(1)
	var h protocol.SendMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		b.stats.sendErrors.Add(1)
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	batch := req.Code == protocol.ReqSendBatchMessage
	if code, remark := b.checkSend(&h, req.Body, batch); code != protocol.RespSuccess {
		b.stats.sendErrors.Add(1)
		return fail(resp, code, remark)
	}

	// Back-pressure: refuse at once rather than queue without bound.
	now := b.sinceStart()
	if b.putBusy(now) {
		b.stats.busyRejects.Add(1)
		return fail(resp, protocol.RespSystemBusy, "[PC_SYNCHRONIZED]broker busy: the store has completed no put for "+
			b.opts.BusyTimeout.String()+", start flow control for a while")
	}
	n := int64(len(req.Body))
	if b.inflight.Add(n) > b.opts.MaxInFlightBytes && n > 0 {
		b.inflight.Add(-n)
		b.stats.busyRejects.Add(1)
		return fail(resp, protocol.RespSystemBusy, "[TOO_MANY_REQUESTS]broker busy: too many message bytes in flight, start flow control for a while")
	}
	owned := false // the in-flight bytes were handed to the sync acker
	defer func() {
		if !owned {
			b.inflight.Add(-n)
		}
	}()

	t := b.topics.get(h.Topic)
	if t == nil {
		var code int32
		var remark string
		if t, code, remark = b.autoCreateTopic(&h); t == nil {
			b.stats.sendErrors.Add(1)
			return fail(resp, code, remark)
		}
	}
	if !t.writable() {
		b.stats.sendErrors.Add(1)
		return fail(resp, protocol.RespNoPermission, "the topic["+t.name+"] sending message is forbidden")
	}
	qid := h.QueueID
	if qid >= t.queueLimit() {
		b.stats.sendErrors.Add(1)
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("request queueId[%d] is illegal, topic:[%s] writeQueueNums:[%d] readQueueNums:[%d] Producer: %s",
			qid, t.name, t.cfg.WriteQueueNums, t.cfg.ReadQueueNums, bornHost(c)))
	}
	if qid < 0 {
		if t.cfg.WriteQueueNums <= 0 {
			b.stats.sendErrors.Add(1)
			return fail(resp, protocol.RespSystemError, "the topic["+t.name+"] has no write queue")
		}
		qid = int32(t.rr.Add(1) % uint32(t.cfg.WriteQueueNums))
	}
	sysFlag := h.SysFlag &^ (message.FlagBornHostV6 | message.FlagStoreHostV6)
	if batch || message.TxType(sysFlag) == message.TxCommitType {
		// A producer cannot commit by itself: COMMIT comes from END_TRANSACTION.
		sysFlag = message.SetTxType(sysFlag, message.TxNotType)
	}
	if t.cfg.TopicFilterType == filterMultiTag {
		sysFlag |= message.FlagMultiTags
	}
	noWait := false
	if v, ok := message.LookupProperty(h.Properties, message.PropWait); ok && string(v) == "false" {
		noWait = true
	}

	s := b.getSendScratch()
	defer b.putSendScratch(s)
	m := store.Message{
		Topic: t.name, QueueID: qid, Flag: h.Flag, SysFlag: sysFlag, BornTimestamp: h.BornTimestamp,
		BornHost: bornHost(c), ReconsumeTimes: h.ReconsumeTimes, NoWait: noWait || b.syncFlush,
	}
	if batch {
		if code, remark := b.checkType(t, sendRoute{}, len(req.Body)); code != protocol.RespSuccess {
			b.stats.sendErrors.Add(1)
			return fail(resp, code, remark)
		}
		if code, remark := b.buildBatch(s, &h, req.Body, &m); code != protocol.RespSuccess {
			b.stats.sendErrors.Add(1)
			return fail(resp, code, remark)
		}
	} else {
		s.props = b.appendStoredProps(s.props[:0], h.Properties, nil)
		if len(s.props) > message.MaxPropertiesSize {
			b.stats.sendErrors.Add(1)
			return fail(resp, protocol.RespMessageIllegal, "the message properties are longer than 32767 bytes once the broker's are added")
		}
		m.Body, m.Properties = req.Body, s.props
		if code, remark := b.routeSend(s, &h, t, &m, len(req.Body)); code != protocol.RespSuccess {
			b.stats.sendErrors.Add(1)
			return fail(resp, code, remark)
		}
		s.msgs = append(s.msgs, m)
	}

	if b.putsActive.Load() == 0 {
		b.lastProgress.Store(now)
	}
	b.putsActive.Add(1)
	var err error
	s.res, err = b.store.PutBatch(s.msgs, s.res[:0])
	b.lastProgress.Store(b.sinceStart())
	b.putsActive.Add(-1)
	if err != nil {
		b.stats.sendErrors.Add(1)
		code, remark := putErrorCode(err)
		return fail(resp, code, remark)
	}
	b.stats.sendMessages.Add(int64(len(s.res)))

	for i := range s.res {
		if i > 0 {
			s.ids = append(s.ids, ',')
		}
		s.ids = b.store.AppendMsgID(s.ids, &s.res[i])
	}
	uniq, _ := message.LookupProperty(h.Properties, message.PropUniqKey)
	first := &s.res[0]
	code := protocol.RespSuccess
	if first.Status == store.StatusFlushDiskTimeout {
		code = protocol.RespFlushDiskTimeout
	}

	if b.syncFlush && !noWait {
		last := &s.res[len(s.res)-1]
		a := b.acks.get(b)
		a.end = last.CommitLogOffset + int64(last.Size)
		a.queueID, a.queueOffset = qid, first.QueueOffset
		a.msgID = append(a.msgID[:0], s.ids...)
		a.txID = append(a.txID[:0], uniq...)
		a.bytes = n
		owned = true
		return b.answerWhenDurable(c, req, resp, a)
	}
	resp.Cmd.Code = code
	setSendResponse(&resp.Cmd.Ext, s.ids, qid, first.QueueOffset, uniq)
	return remoting.Reply
}

// setSendResponse writes the ext fields the Go client reads from a send response.
func setSendResponse(ext *protocol.ExtFields, msgID []byte, queueID int32, queueOffset int64, uniq []byte) {
	h := protocol.SendMessageResponse{MsgID: msgID, QueueID: queueID, QueueOffset: queueOffset,
		TransactionID: uniq, Region: defaultRegion, TraceOn: true}
	h.Encode(ext)
}

// checkSend validates what can be checked before the topic is looked up:
// the topic name, reserved topics, the body size and the properties.
func (b *Broker) checkSend(h *protocol.SendMessageRequest, body []byte, batch bool) (int32, string) {
	if remark, ok := checkTopicName(h.Topic); !ok {
		return protocol.RespSystemError, remark
	}
	if isNotAllowedSendTopic(h.Topic) {
		return protocol.RespNoPermission, "Sending message to topic[" + string(h.Topic) + "] is forbidden."
	}
	if len(body) > b.opts.MaxMessageSize {
		return protocol.RespMessageIllegal, fmt.Sprintf("the message body size %d exceeds the limit of %d bytes", len(body), b.opts.MaxMessageSize)
	}
	if err := message.ValidateProperties(h.Properties); err != nil {
		return protocol.RespMessageIllegal, "the message properties are malformed or longer than 32767 bytes: " + err.Error()
	}
	if batch {
		if len(h.Topic) >= len(retryTopicPrefix) && string(h.Topic[:len(retryTopicPrefix)]) == retryTopicPrefix {
			return protocol.RespMessageIllegal, "batch request does not support retry group " + string(h.Topic)
		}
		if _, ok := message.LookupProperty(h.Properties, message.PropDelay); ok {
			return protocol.RespMessageIllegal, "batch request does not support delay message"
		}
		if message.TxType(h.SysFlag) == message.TxPreparedType {
			return protocol.RespMessageIllegal, "batch request does not support transaction message"
		}
	}
	return protocol.RespSuccess, ""
}

// appendStoredProps appends the properties a message is stored with: its own
// (inner), the batch wrapper's (outer, for batch entries), and CLUSTER, as
// the Java broker adds it.
func (b *Broker) appendStoredProps(dst, inner, outer []byte) []byte {
	dst = appendPropsWithSep(dst, inner)
	dst = appendPropsWithSep(dst, outer)
	return message.AppendProperty(dst, message.PropCluster, b.opts.ClusterName)
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
// s.msgs, all sharing m's topic, queue, flags and born fields.
func (b *Broker) buildBatch(s *sendScratch, h *protocol.SendMessageRequest, body []byte, m *store.Message) (int32, string) {
	var bad string
	err := message.ForEachBatchEntry(body, func(_ int32, _, props []byte) error {
		if err := message.ValidateProperties(props); err != nil {
			bad = "a batch entry's properties are malformed: " + err.Error()
			return err
		}
		start := len(s.props)
		s.props = b.appendStoredProps(s.props, props, h.Properties)
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
		return protocol.RespMessageIllegal, bad
	}
	if len(s.spans) == 0 {
		return protocol.RespMessageIllegal, "empty batch"
	}
	i := 0
	_ = message.ForEachBatchEntry(body, func(flag int32, entryBody, _ []byte) error {
		e := *m
		e.Flag = flag
		e.Body = entryBody
		e.Properties = s.props[s.spans[i].start:s.spans[i].end]
		s.msgs = append(s.msgs, e)
		i++
		return nil
	})
	return protocol.RespSuccess, ""
}

// autoCreateTopic creates a topic a producer sends to without creating it
// first, the way the Java broker's autoCreateTopicEnable works: from the
// producer's default topic (TBW102) when that one has the inherit
// permission, with min(defaultTopicQueueNums, its write queues) queues and
// its permission minus inherit; %RETRY% topics get 1 read-write queue.
func (b *Broker) autoCreateTopic(h *protocol.SendMessageRequest) (*topicEntry, int32, string) {
	name := string(h.Topic)
	var cfg protocol.TopicConfig
	if strings.HasPrefix(name, retryTopicPrefix) {
		cfg = newTopicConfig(name, 1, protocol.PermRead|protocol.PermWrite)
	} else {
		def := h.DefaultTopic
		if len(def) == 0 {
			def = []byte(topicAutoCreateKey)
		}
		d := b.topics.get(def)
		if d == nil || d.cfg.Perm&protocol.PermInherit == 0 ||
			(b.opts.DisableAutoCreateTopic && d.name == topicAutoCreateKey) {
			return nil, protocol.RespTopicNotExist, "topic[" + name + "] not exist, apply first please!"
		}
		queues := h.DefaultTopicQueueNums
		if queues <= 0 || queues > d.cfg.WriteQueueNums {
			queues = d.cfg.WriteQueueNums
		}
		cfg = newTopicConfig(name, max(queues, 1), d.cfg.Perm&^protocol.PermInherit)
	}
	t, created := b.topics.createIfAbsent(cfg)
	if created {
		b.opts.Logger.Info("broker: topic auto-created", "topic", name, "queues", cfg.WriteQueueNums, "perm", cfg.Perm)
		b.topicChanged(name, false)
	}
	return t, protocol.RespSuccess, ""
}

// putErrorCode maps a store error to a send response code (rocketmq-protocol.md §3).
func putErrorCode(err error) (int32, string) {
	switch {
	case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, store.ErrBadMessage),
		errors.Is(err, store.ErrRecordTooLarge):
		return protocol.RespMessageIllegal, "the message is illegal: " + err.Error()
	case errors.Is(err, store.ErrDiskFull):
		return protocol.RespServiceNotAvailable, "service not available now: the broker's disk is full"
	case errors.Is(err, store.ErrClosed):
		return protocol.RespServiceNotAvailable, "service not available now: the message store is shut down"
	case errors.Is(err, store.ErrLogFailed):
		return protocol.RespServiceNotAvailable, "service not available now: the commit log failed: " + err.Error()
	}
	return protocol.RespSystemError, "store error: " + err.Error()
}

// putBusy reports whether the store is stalled: puts are in progress and
// none completed within BusyTimeout. now is sinceStart.
func (b *Broker) putBusy(now int64) bool {
	return b.putsActive.Load() > 0 && now-b.lastProgress.Load() > int64(b.opts.BusyTimeout)
}

// registerSend registers the send codes.
func (b *Broker) registerSend(t *handlerTable) {
	t.add(b.handleSend, protocol.ReqSendMessage, protocol.ReqSendMessageV2, protocol.ReqSendBatchMessage)
}
