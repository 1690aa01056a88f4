package protocol

// Typed headers on the hot path (send, pull, offsets) keep their string-like fields as
// []byte views: after Decode they alias the ExtFields they were decoded from (see the
// package documentation for how long that is valid), and Encode copies them into the
// target ExtFields. Numeric fields are parsed without allocating.
//
// Decode resets the header, then reads every key it knows in one pass over the pairs
// (the last occurrence of a duplicated key wins). A required key that is missing, or
// present with an empty value, gives a *FieldError wrapping ErrMissingField; an
// unparsable number or boolean one wrapping ErrBadField. Unknown keys are ignored.

// SendMessageRequest is the header of SEND_MESSAGE (10, long keys), SEND_MESSAGE_V2 (310)
// and SEND_BATCH_MESSAGE (320) (short keys "a".."n"), and of SEND_REPLY_MESSAGE (324/325).
// Decode accepts both key sets; Encode writes long keys, EncodeV2 short ones.
type SendMessageRequest struct {
	ProducerGroup         []byte // producerGroup / a (required)
	Topic                 []byte // topic / b (required)
	DefaultTopic          []byte // defaultTopic / c ("TBW102")
	DefaultTopicQueueNums int32  // defaultTopicQueueNums / d
	QueueID               int32  // queueId / e (required)
	SysFlag               int32  // sysFlag / f (required)
	BornTimestamp         int64  // bornTimestamp / g, ms (required)
	Flag                  int32  // flag / h, the user flag (required)
	Properties            []byte // properties / i, key\x01value\x02...
	ReconsumeTimes        int32  // reconsumeTimes / j
	UnitMode              bool   // unitMode / k
	MaxReconsumeTimes     int32  // maxReconsumeTimes / l
	Batch                 bool   // batch / m
	BrokerName            []byte // bname / n (5.x; may be absent or empty)
}

const sendRequired = 1<<0 | 1<<1 | 1<<4 | 1<<5 | 1<<6 | 1<<7

var sendFieldNames = [...]string{"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp", "flag"}

// Decode reads a SEND_MESSAGE (long keys) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (short
// keys) header. Required: producerGroup, topic, queueId, sysFlag, bornTimestamp, flag.
func (h *SendMessageRequest) Decode(ext *ExtFields) error {
	*h = SendMessageRequest{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		var ok = true
		switch string(k) {
		case "producerGroup", "a":
			h.ProducerGroup = v
			seen |= nonEmpty(v, 1<<0)
		case "topic", "b":
			h.Topic = v
			seen |= nonEmpty(v, 1<<1)
		case "defaultTopic", "c":
			h.DefaultTopic = v
		case "defaultTopicQueueNums", "d":
			h.DefaultTopicQueueNums, ok = optInt32(v)
		case "queueId", "e":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<4)
		case "sysFlag", "f":
			h.SysFlag, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<5)
		case "bornTimestamp", "g":
			h.BornTimestamp, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<6)
		case "flag", "h":
			h.Flag, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<7)
		case "properties", "i":
			h.Properties = v
		case "reconsumeTimes", "j":
			h.ReconsumeTimes, ok = optInt32(v)
		case "unitMode", "k":
			h.UnitMode, ok = parseBool(v)
		case "maxReconsumeTimes", "l":
			h.MaxReconsumeTimes, ok = optInt32(v)
		case "batch", "m":
			h.Batch, ok = parseBool(v)
		case "bname", "n":
			h.BrokerName = v
		}
		if !ok {
			return badField("SendMessageRequest", k, v)
		}
	}
	return checkRequired("SendMessageRequest", seen, sendRequired, sendFieldNames[:])
}

// Encode writes the long-key (SEND_MESSAGE, code 10) form, with the keys
// rocketmq-client-go sends. bname is written only when BrokerName is not empty.
func (h *SendMessageRequest) Encode(ext *ExtFields) {
	w := writeFields(ext)
	w.bytes("producerGroup", h.ProducerGroup)
	w.bytes("topic", h.Topic)
	w.int("queueId", int64(h.QueueID))
	w.int("sysFlag", int64(h.SysFlag))
	w.int("bornTimestamp", h.BornTimestamp)
	w.int("flag", int64(h.Flag))
	w.int("reconsumeTimes", int64(h.ReconsumeTimes))
	w.bool("unitMode", h.UnitMode)
	w.int("maxReconsumeTimes", int64(h.MaxReconsumeTimes))
	w.bytes("defaultTopic", h.DefaultTopic)
	w.int("defaultTopicQueueNums", int64(h.DefaultTopicQueueNums))
	w.bool("batch", h.Batch)
	w.bytes("properties", h.Properties)
	if len(h.BrokerName) > 0 {
		w.bytes("bname", h.BrokerName)
	}
}

// EncodeV2 writes the short-key form used by SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE
// (320). "n" is written only when BrokerName is not empty.
func (h *SendMessageRequest) EncodeV2(ext *ExtFields) {
	w := writeFields(ext)
	w.bytes("a", h.ProducerGroup)
	w.bytes("b", h.Topic)
	w.bytes("c", h.DefaultTopic)
	w.int("d", int64(h.DefaultTopicQueueNums))
	w.int("e", int64(h.QueueID))
	w.int("f", int64(h.SysFlag))
	w.int("g", h.BornTimestamp)
	w.int("h", int64(h.Flag))
	w.bytes("i", h.Properties)
	w.int("j", int64(h.ReconsumeTimes))
	w.bool("k", h.UnitMode)
	w.int("l", int64(h.MaxReconsumeTimes))
	w.bool("m", h.Batch)
	if len(h.BrokerName) > 0 {
		w.bytes("n", h.BrokerName)
	}
}

// SendMessageResponse is the header of a send response.
type SendMessageResponse struct {
	MsgID         []byte // msgId: offset message id, 32 hex chars for IPv4; comma-joined for batches (required)
	QueueID       int32  // queueId (required)
	QueueOffset   int64  // queueOffset: consume-queue offset of the (first) message (required)
	TransactionID []byte // transactionId: the message's UNIQ_KEY for transactional sends
	Region        []byte // MSG_REGION; rocketmq-client-go uses "DefaultRegion" when empty
	TraceOn       bool   // TRACE_ON
}

var sendRespFieldNames = [...]string{"msgId", "queueId", "queueOffset"}

// Decode reads a send response header. Required: msgId, queueId, queueOffset.
func (h *SendMessageResponse) Decode(ext *ExtFields) error {
	*h = SendMessageResponse{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "msgId":
			h.MsgID = v
			seen |= nonEmpty(v, 1<<0)
		case "queueId":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<1)
		case "queueOffset":
			h.QueueOffset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<2)
		case "transactionId":
			h.TransactionID = v
		case "MSG_REGION":
			h.Region = v
		case "TRACE_ON":
			h.TraceOn, ok = parseBool(v)
		}
		if !ok {
			return badField("SendMessageResponse", k, v)
		}
	}
	return checkRequired("SendMessageResponse", seen, 1<<0|1<<1|1<<2, sendRespFieldNames[:])
}

// Encode writes msgId, queueId, queueOffset, transactionId (when set), MSG_REGION (when
// set) and TRACE_ON.
func (h *SendMessageResponse) Encode(ext *ExtFields) {
	w := writeFields(ext)
	w.bytes("msgId", h.MsgID)
	w.int("queueId", int64(h.QueueID))
	w.int("queueOffset", h.QueueOffset)
	if len(h.TransactionID) > 0 {
		w.bytes("transactionId", h.TransactionID)
	}
	if len(h.Region) > 0 {
		w.bytes("MSG_REGION", h.Region)
	}
	w.bool("TRACE_ON", h.TraceOn)
}

// nonEmpty returns bit if v is not empty: an empty value counts as absent.
func nonEmpty(v []byte, bit uint32) uint32 {
	if len(v) == 0 {
		return 0
	}
	return bit
}

// optInt32 parses v; an empty value is 0 (and is reported missing if required).
func optInt32(v []byte) (int32, bool) {
	if len(v) == 0 {
		return 0, true
	}
	return parseInt32(v)
}

// optInt64 parses v; an empty value is 0 (and is reported missing if required).
func optInt64(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, true
	}
	return parseInt64(v)
}

// checkRequired reports the first required field (bit i of want, named names[i]) not in seen.
func checkRequired(header string, seen, want uint32, names []string) error {
	if missing := want &^ seen; missing != 0 {
		for i := range names {
			if missing&(1<<i) != 0 {
				return missingField(header, names[i])
			}
		}
	}
	return nil
}
