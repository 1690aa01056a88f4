package grpcfe

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"fmt"
	"hash/crc32"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/rmqpb"
)

// Translation between the protocol's messages and RocketMQ's stored
// records (whose properties are what remoting clients read: a message sent
// by either protocol is consumed by the other).

// propTimerOutMS is the property the timer wheel leaves on a message it
// delivered: its delivery time (ms).
const propTimerOutMS = "TIMER_OUT_MS"

// propTraceContext carries SystemProperties.trace_context.
const propTraceContext = "TRACE_CONTEXT"

// reserved are the property names RocketMQ keeps for itself
// (MessageConst's): a producer may not set them as user properties, and
// they are not shown to consumers as such.
var reserved = map[string]bool{}

func init() {
	for _, k := range []string{
		message.PropUniqKey, message.PropKeys, message.PropTags, message.PropWait, message.PropDelay,
		message.PropRetryTopic, message.PropRealTopic, message.PropRealQueueID, message.PropTranMsg,
		message.PropProducerGroup, message.PropTransactionID, message.PropMinOffset, message.PropMaxOffset,
		message.PropCluster, message.PropOriginMessageID, message.PropReconsumeTime, message.PropMaxReconsumeTimes,
		message.PropConsumeStartTime, message.PropTranPreparedQueueOffset, message.PropTransactionCheckTimes,
		message.PropCheckImmunityTimeInSeconds, message.PropMsgRegion, message.PropTraceOn,
		message.PropTimerDeliverMS, message.PropTimerDelayMS, message.PropTimerDelaySec, message.PropJavaShardingKey, message.PropPriority,
		message.PropCorrelationID, message.PropReplyToClient, message.PropTTL, message.PropMsgType, message.PropArriveTime,
		message.PropBuyerID, message.PropTransferFlag, message.PropCorrectionFlag, propTimerOutMS, propTraceContext,
		"POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TIMER_ROLL_TIMES", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
		"TIMER_DEL_UNIQKEY", "INSTANCE_ID", "DUP_INFO", "EXTEND_UNIQ_INFO", "BORN_HOST", "BORN_TIMESTAMP",
		"PROPERTY_POP_CK", "__BORNHOST", "__STARTDELIVERTIME",
	} {
		reserved[k] = true
	}
}

// protoTypes are the protocol's names of the core's message types.
var protoTypes = [...]rmqpb.MessageType{
	core.MessageNormal: rmqpb.MessageType_NORMAL, core.MessageFIFO: rmqpb.MessageType_FIFO,
	core.MessageDelay: rmqpb.MessageType_DELAY, core.MessageTransaction: rmqpb.MessageType_TRANSACTION,
	core.MessagePriority: rmqpb.MessageType_PRIORITY, core.MessageLite: rmqpb.MessageType_LITE,
}

// outgoing is one message of a SendMessage, translated for core.Send.
type outgoing struct {
	topic    string
	props    []byte
	body     []byte
	sysFlag  int32
	born     int64
	bornHost netip.AddrPort
	group    string // message group ("" when none)
	typ      rmqpb.MessageType
	timer    bool // has a delivery timestamp in the future
	// plain: a NORMAL message with no message group, delivery time,
	// priority or lite topic, which the core stores as it comes (no
	// routing): one that may share a batch (sendMany).
	plain bool
}

// translate checks a message of a SendMessage and appends its stored
// properties to o.props (which the caller empties for a message of its
// own, or keeps to hold several messages' back to back); on a refusal
// o.props is as it was. The topic, tag, key, message-group
// and message-type rules are the core's (core.CheckClientTopic, CheckTag,
// CheckKey, CheckMessageGroup, CheckMessageType: *core.Error refusals);
// the protocol's own (message id, encoding, body, digest, property keys)
// are *statusError.
func translate(m *rmqpb.Message, o *outgoing, maxBody int) error {
	o.topic = m.GetTopic().GetName()
	if err := core.CheckClientTopic(o.topic); err != nil {
		return err
	}
	sp := m.GetSystemProperties()
	if sp == nil {
		return badRequest(rmqpb.Code_BAD_REQUEST, "the message has no system properties")
	}
	id := sp.GetMessageId()
	if id == "" || len(id) > 128 || strings.ContainsAny(id, "\x01\x02") {
		return badRequest(rmqpb.Code_ILLEGAL_MESSAGE_ID, fmt.Sprintf("message id %q is empty, too long or has control characters", id))
	}
	o.body, o.sysFlag = m.GetBody(), 0
	switch sp.GetBodyEncoding() {
	case rmqpb.Encoding_GZIP:
		body, zlibBody, err := gzipBody(o.body, maxBody)
		if err != nil {
			return err
		}
		o.body = body
		if zlibBody {
			o.sysFlag |= message.FlagCompressed
		}
	case rmqpb.Encoding_ENCODING_UNSPECIFIED, rmqpb.Encoding_IDENTITY:
	default:
		return badRequest(rmqpb.Code_BAD_REQUEST, "unsupported body encoding "+sp.GetBodyEncoding().String())
	}
	if len(o.body) == 0 {
		return badRequest(rmqpb.Code_MESSAGE_BODY_EMPTY, "the message body is empty")
	}
	if len(o.body) > maxBody {
		return badRequest(rmqpb.Code_MESSAGE_BODY_TOO_LARGE, fmt.Sprintf("the message body size %d exceeds the limit of %d bytes", len(o.body), maxBody))
	}
	if d := sp.GetBodyDigest(); d != nil && d.GetType() == rmqpb.DigestType_CRC32 && d.GetChecksum() != "" {
		if !strings.EqualFold(d.GetChecksum(), strconv.FormatUint(uint64(crc32.ChecksumIEEE(m.GetBody())), 16)) {
			return badRequest(rmqpb.Code_MESSAGE_CORRUPTED, "the body does not match its CRC32 digest")
		}
	}

	p, start := o.props, len(o.props)
	for k, v := range m.GetUserProperties() {
		if k == "" || reserved[k] || strings.ContainsAny(k, "\x01\x02") {
			return badRequest(rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, fmt.Sprintf("property key %q is reserved or illegal", k))
		}
		if strings.ContainsAny(v, "\x01\x02") {
			return badRequest(rmqpb.Code_BAD_REQUEST, fmt.Sprintf("property %q has control characters", k))
		}
		p = message.AppendProperty(p, k, v)
	}
	p = message.AppendProperty(p, message.PropUniqKey, id)
	if tag := sp.GetTag(); tag != "" {
		if err := core.CheckTag(tag); err != nil {
			return err
		}
		p = message.AppendProperty(p, message.PropTags, tag)
	}
	if keys := sp.GetKeys(); len(keys) > 0 {
		empty := 0
		for _, k := range keys {
			if err := core.CheckKey(k); err != nil {
				return err
			}
			if k == "" {
				empty++
			}
		}
		if empty > 0 { // an empty key is no key (the request is not changed)
			kept := make([]string, 0, len(keys)-empty)
			for _, k := range keys {
				if k != "" {
					kept = append(kept, k)
				}
			}
			keys = kept
		}
		if len(keys) > 0 {
			p = message.AppendProperty(p, message.PropKeys, strings.Join(keys, message.PropKeysSeparator))
		}
	}
	if tc := sp.GetTraceContext(); tc != "" && !strings.ContainsAny(tc, "\x01\x02") {
		p = message.AppendProperty(p, propTraceContext, tc)
	}

	o.group, o.timer = sp.GetMessageGroup(), false
	hasGroup := o.group != ""
	if err := core.CheckMessageGroup(o.group); err != nil {
		return err
	}
	hasDelivery := sp.DeliveryTimestamp != nil
	typ := sp.GetMessageType()
	var ct core.MessageType
	switch typ {
	case rmqpb.MessageType_MESSAGE_TYPE_UNSPECIFIED:
		ct = core.InferMessageType(hasGroup, hasDelivery)
		if ct == core.MessageNormal && sp.Priority != nil {
			ct = core.MessagePriority
		}
		if ct == core.MessageNormal && sp.LiteTopic != nil {
			ct = core.MessageLite
		}
		typ = protoTypes[ct]
	case rmqpb.MessageType_NORMAL:
		ct = core.MessageNormal
	case rmqpb.MessageType_FIFO:
		ct = core.MessageFIFO
	case rmqpb.MessageType_DELAY:
		ct = core.MessageDelay
	case rmqpb.MessageType_TRANSACTION:
		ct = core.MessageTransaction
	case rmqpb.MessageType_PRIORITY:
		ct = core.MessagePriority
	case rmqpb.MessageType_LITE:
		ct = core.MessageLite
	default:
		return badRequest(rmqpb.Code_UNSUPPORTED, "message type "+typ.String()+" is not supported")
	}
	o.typ = typ
	if err := core.CheckMessageType(ct, hasGroup, hasDelivery); err != nil {
		return err
	}
	if hasGroup {
		p = message.AppendProperty(p, message.PropJavaShardingKey, o.group)
	}
	if lt := sp.LiteTopic; lt != nil || ct == core.MessageLite {
		if err := liteProperty(&p, sp.GetLiteTopic(), ct); err != nil {
			return err
		}
	}
	if sp.Priority != nil {
		// RocketMQ's proxy sets the priority on its Message, whose setter
		// throws for a negative one: INTERNAL_SERVER_ERROR. The core routes
		// the message by it, or drops it from a FIFO, DELAY or
		// TRANSACTION message (broker/core/route.go).
		pr := sp.GetPriority()
		if pr < 0 {
			return badRequest(rmqpb.Code_INTERNAL_SERVER_ERROR, fmt.Sprintf("the priority %d is negative: a message's priority must be greater than or equal to 0", pr))
		}
		p = message.AppendProperty(p, message.PropPriority, strconv.FormatInt(int64(pr), 10))
	}
	if hasDelivery {
		ts := sp.GetDeliveryTimestamp()
		if err := ts.CheckValid(); err != nil {
			return badRequest(rmqpb.Code_ILLEGAL_DELIVERY_TIME, "delivery timestamp: "+err.Error())
		}
		// Set whether due or not, as RocketMQ's proxy does: the message is
		// a DELAY one (the topic's type check), stored as it is when due.
		ms := ts.AsTime().UnixMilli()
		o.timer = ms > time.Now().UnixMilli()
		p = message.AppendProperty(p, message.PropTimerDeliverMS, strconv.FormatInt(ms, 10))
	}
	if typ == rmqpb.MessageType_TRANSACTION {
		o.sysFlag = message.SetTxType(o.sysFlag, message.TxPreparedType)
		p = message.AppendProperty(p, message.PropTranMsg, "true")
		// RocketMQ 5's clients have no producer group: a transaction
		// belongs to its topic, whose producers are asked about it.
		p = message.AppendProperty(p, message.PropProducerGroup, o.topic)
		if d := sp.GetOrphanedTransactionRecoveryDuration(); d != nil && d.IsValid() && d.AsDuration() >= time.Second {
			p = message.AppendProperty(p, message.PropCheckImmunityTimeInSeconds, strconv.FormatInt(int64(d.AsDuration()/time.Second), 10))
		}
	}
	if len(p)-start > message.MaxPropertiesSize {
		return badRequest(rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE, fmt.Sprintf("%d bytes of properties exceed %d", len(p)-start, message.MaxPropertiesSize))
	}
	o.props = p
	o.plain = typ == rmqpb.MessageType_NORMAL && !hasGroup && !hasDelivery && sp.Priority == nil && sp.LiteTopic == nil
	o.born = time.Now().UnixMilli()
	if bt := sp.GetBornTimestamp(); bt != nil && bt.IsValid() {
		o.born = bt.AsTime().UnixMilli()
	}
	return nil
}

// gzipBody decodes a body the producer says is GZIP-encoded. RocketMQ's
// clients compress with zlib (RFC 1950) or gzip (RFC 1952): a zlib body is
// stored as it is, compressed (what remoting producers store, and what the
// remoting consumers decompress); a gzip body is decompressed, so that
// every consumer reads it.
func gzipBody(b []byte, maxBody int) (body []byte, zlib bool, err error) {
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, false, badRequest(rmqpb.Code_MESSAGE_CORRUPTED, "the gzip body does not decode: "+err.Error())
		}
		out, err := io.ReadAll(io.LimitReader(zr, int64(maxBody)+1))
		if err != nil {
			return nil, false, badRequest(rmqpb.Code_MESSAGE_CORRUPTED, "the gzip body does not decode: "+err.Error())
		}
		return out, false, nil
	}
	if len(b) >= 2 && b[0]&0x0f == 8 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0 {
		return b, true, nil
	}
	return nil, false, badRequest(rmqpb.Code_MESSAGE_CORRUPTED, "the body is marked GZIP but is neither gzip nor zlib")
}

// delivery is what a delivered message's system properties say beyond the
// record: its receipt handle (received messages), the delivery count and
// invisible duration.
type delivery struct {
	receipt   string
	attempt   int32
	invisible time.Duration
}

// toMessage builds the protocol's message of a stored record (a view of the
// record: the body is not copied; protobuf's encoding copies it once into
// the response). topic is the record's topic as a string (the caller's,
// from the topic table), storeHost the broker's name for store_host.
func toMessage(v message.View, topic, storeHost string, d *delivery) *rmqpb.Message {
	sp := &rmqpb.SystemProperties{
		BodyEncoding: rmqpb.Encoding_IDENTITY,
		MessageType:  rmqpb.MessageType_NORMAL,
		BornHost:     v.BornHost().Addr().String(),
		StoreHost:    storeHost,
		QueueId:      v.QueueID(),
	}
	m := &rmqpb.Message{Topic: &rmqpb.Resource{Name: topic}, SystemProperties: sp}
	body := v.Body()
	if v.SysFlag()&message.FlagCompressed != 0 {
		// zlib (or LZ4/ZSTD from RocketMQ 5's remoting clients), sent as is:
		// RocketMQ 5's clients detect the format of a GZIP-marked body.
		sp.BodyEncoding = rmqpb.Encoding_GZIP
	}
	m.Body = body
	sp.BodyDigest = bodyDigest(body)
	sp.BornTimestamp = msTimestamp(v.BornTimestamp())
	sp.StoreTimestamp = msTimestamp(v.StoreTimestamp())
	qo := v.QueueOffset()
	sp.QueueOffset = &qo

	var uniq, retryTopic, originID []byte
	var priority *int32
	message.ForEachProperty(v.Properties(), func(k, val []byte) bool {
		switch string(k) {
		case message.PropPriority:
			if pr, err := strconv.ParseInt(string(val), 10, 32); err == nil && pr >= 0 {
				p := int32(pr)
				priority = &p
			}
		case message.PropUniqKey:
			uniq = val
		case message.PropTags:
			t := string(val)
			sp.Tag = &t
		case message.PropKeys:
			for _, key := range strings.Split(string(val), message.PropKeysSeparator) {
				if key != "" {
					sp.Keys = append(sp.Keys, key)
				}
			}
		case message.PropJavaShardingKey:
			g := string(val)
			sp.MessageGroup = &g
			sp.MessageType = rmqpb.MessageType_FIFO
		case propTimerOutMS, message.PropTimerDeliverMS:
			if ms, err := strconv.ParseInt(string(val), 10, 64); err == nil {
				sp.DeliveryTimestamp = msTimestamp(ms)
				sp.MessageType = rmqpb.MessageType_DELAY
			}
		case propTraceContext:
			tc := string(val)
			sp.TraceContext = &tc
		case message.PropRetryTopic:
			retryTopic = val
		case message.PropOriginMessageID:
			originID = val
		default:
			if !reserved[string(k)] {
				if m.UserProperties == nil {
					m.UserProperties = make(map[string]string)
				}
				m.UserProperties[string(k)] = string(val)
			}
		}
		return true
	})
	if message.TxType(v.SysFlag()) != message.TxNotType {
		sp.MessageType = rmqpb.MessageType_TRANSACTION
	}
	if priority != nil {
		sp.Priority = priority
		if sp.MessageType == rmqpb.MessageType_NORMAL {
			sp.MessageType = rmqpb.MessageType_PRIORITY
		}
	}
	if len(uniq) > 0 {
		sp.MessageId = string(uniq)
	} else {
		sp.MessageId = string(v.AppendOffsetMsgID(nil))
	}
	if strings.HasPrefix(topic, "%DLQ%") && len(retryTopic) > 0 {
		sp.DeadLetterQueue = &rmqpb.DeadLetterQueue{Topic: string(retryTopic), MessageId: string(originID)}
	}
	if d != nil {
		if d.receipt != "" {
			sp.ReceiptHandle = &d.receipt
		}
		a := d.attempt
		sp.DeliveryAttempt = &a
		if d.invisible > 0 {
			sp.InvisibleDuration = durationpb.New(d.invisible)
		}
	}
	return m
}

func msTimestamp(ms int64) *timestamppb.Timestamp {
	return &timestamppb.Timestamp{Seconds: ms / 1000, Nanos: int32(ms%1000) * 1e6}
}

// bodyDigest is the digest a delivered message carries: MD5 in upper-case
// hex, as RocketMQ's proxy sends. The SDKs disagree on CRC32's text (the Go
// SDK expects lower-case hex, the Node.js SDK decimal) but the Java and
// Node.js SDKs both check MD5 this way, and their push consumers discard a
// message whose digest does not match (the Go SDK v5.1.2 only marks it).
func bodyDigest(body []byte) *rmqpb.Digest {
	const digits = "0123456789ABCDEF"
	sum := md5.Sum(body)
	var text [2 * md5.Size]byte
	for i, b := range sum {
		text[2*i], text[2*i+1] = digits[b>>4], digits[b&0xF]
	}
	return &rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: string(text[:])}
}
