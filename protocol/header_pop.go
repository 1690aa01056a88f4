package protocol

import "strconv"

// Pop consumption (RocketMQ 5's message-granularity model): POP_MESSAGE (3442),
// ACK_MESSAGE (3443) and CHANGE_MESSAGE_INVISIBLETIME (3445). Field names are the
// Java broker's (PopMessageRequestHeader, AckMessageRequestHeader,
// ChangeInvisibleTimeRequestHeader and their response headers).

// PopOrderReviveQueue is the reviveQid of an orderly pop (Java's
// KeyBuilder.POP_ORDER_REVIVE_QUEUE): a receipt handle carrying it is orderly.
const PopOrderReviveQueue int32 = 999

// PopMessageRequest is the header of POP_MESSAGE (3442).
type PopMessageRequest struct {
	ConsumerGroup []byte // consumerGroup (required)
	Topic         []byte // topic (required)
	QueueID       int32  // queueId (required); negative: any queue
	MaxMsgNums    int32  // maxMsgNums (required)
	InvisibleTime int64  // invisibleTime in ms (required)
	PollTime      int64  // pollTime in ms: how long the broker may hold the request (required)
	BornTime      int64  // bornTime, the client's clock in ms (required)
	InitMode      int32  // initMode: 0 consume from last, 1 from first, for a new group (required)
	ExpType       []byte // expType: "TAG", "SQL92" or ""
	Exp           []byte // exp: the filter expression ("" or "*": everything)
	Order         bool   // order: orderly pop
	AttemptID     []byte // attemptId (optional)
}

var popFieldNames = [...]string{"consumerGroup", "topic", "queueId", "maxMsgNums", "invisibleTime", "pollTime", "bornTime", "initMode"}

// Decode reads a pop request header. Required (as the Java broker requires them):
// consumerGroup, topic, queueId, maxMsgNums, invisibleTime, pollTime, bornTime, initMode.
func (h *PopMessageRequest) Decode(ext *ExtFields) error {
	*h = PopMessageRequest{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "consumerGroup":
			h.ConsumerGroup = v
			seen |= nonEmpty(v, 1<<0)
		case "topic":
			h.Topic = v
			seen |= nonEmpty(v, 1<<1)
		case "queueId":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<2)
		case "maxMsgNums":
			h.MaxMsgNums, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<3)
		case "invisibleTime":
			h.InvisibleTime, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<4)
		case "pollTime":
			h.PollTime, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<5)
		case "bornTime":
			h.BornTime, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<6)
		case "initMode":
			h.InitMode, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<7)
		case "expType":
			h.ExpType = v
		case "exp":
			h.Exp = v
		case "order":
			h.Order, ok = parseBool(v)
		case "attemptId":
			h.AttemptID = v
		}
		if !ok {
			return badField("PopMessageRequest", k, v)
		}
	}
	return checkRequired("PopMessageRequest", seen, 1<<8-1, popFieldNames[:])
}

// Encode writes the header; expType, exp and attemptId only when set, order always.
func (h *PopMessageRequest) Encode(ext *ExtFields) {
	ext.Set("consumerGroup", h.ConsumerGroup)
	ext.Set("topic", h.Topic)
	ext.SetInt("queueId", int64(h.QueueID))
	ext.SetInt("maxMsgNums", int64(h.MaxMsgNums))
	ext.SetInt("invisibleTime", h.InvisibleTime)
	ext.SetInt("pollTime", h.PollTime)
	ext.SetInt("bornTime", h.BornTime)
	ext.SetInt("initMode", int64(h.InitMode))
	if len(h.ExpType) > 0 {
		ext.Set("expType", h.ExpType)
	}
	if len(h.Exp) > 0 {
		ext.Set("exp", h.Exp)
	}
	ext.SetBool("order", h.Order)
	if len(h.AttemptID) > 0 {
		ext.Set("attemptId", h.AttemptID)
	}
}

// PopMessageResponse is the header of a pop response. The Java client builds each
// message's receipt handle (extraInfo, see ExtraInfo) from popTime, invisibleTime,
// reviveQid and the entry of startOffsetInfo for the message's queue.
type PopMessageResponse struct {
	PopTime         int64  // popTime in ms (required)
	InvisibleTime   int64  // invisibleTime in ms (required)
	ReviveQid       int32  // reviveQid (required)
	RestNum         int64  // restNum: messages left in the queues popped (required)
	StartOffsetInfo []byte // startOffsetInfo: "0 queueId startOffset" joined by ';'
	MsgOffsetInfo   []byte // msgOffsetInfo: "0 queueId o1,o2,..." joined by ';'
	OrderCountInfo  []byte // orderCountInfo: "0 qo<queueId>%<offset> count" joined by ';'
}

var popRespFieldNames = [...]string{"popTime", "invisibleTime", "reviveQid", "restNum"}

// Decode reads a pop response header; popTime, invisibleTime, reviveQid and restNum
// are required.
func (h *PopMessageResponse) Decode(ext *ExtFields) error {
	*h = PopMessageResponse{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "popTime":
			h.PopTime, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<0)
		case "invisibleTime":
			h.InvisibleTime, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<1)
		case "reviveQid":
			h.ReviveQid, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<2)
		case "restNum":
			h.RestNum, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<3)
		case "startOffsetInfo":
			h.StartOffsetInfo = v
		case "msgOffsetInfo":
			h.MsgOffsetInfo = v
		case "orderCountInfo":
			h.OrderCountInfo = v
		}
		if !ok {
			return badField("PopMessageResponse", k, v)
		}
	}
	return checkRequired("PopMessageResponse", seen, 1<<4-1, popRespFieldNames[:])
}

// Encode writes the header; the three info strings only when set.
func (h *PopMessageResponse) Encode(ext *ExtFields) {
	ext.SetInt("popTime", h.PopTime)
	ext.SetInt("invisibleTime", h.InvisibleTime)
	ext.SetInt("reviveQid", int64(h.ReviveQid))
	ext.SetInt("restNum", h.RestNum)
	if len(h.StartOffsetInfo) > 0 {
		ext.Set("startOffsetInfo", h.StartOffsetInfo)
	}
	if len(h.MsgOffsetInfo) > 0 {
		ext.Set("msgOffsetInfo", h.MsgOffsetInfo)
	}
	if len(h.OrderCountInfo) > 0 {
		ext.Set("orderCountInfo", h.OrderCountInfo)
	}
}

// AckMessageRequest is the header of ACK_MESSAGE (3443).
type AckMessageRequest struct {
	ConsumerGroup []byte // consumerGroup (required)
	Topic         []byte // topic (required)
	QueueID       int32  // queueId (required)
	ExtraInfo     []byte // extraInfo: the receipt handle (required)
	Offset        int64  // offset: the message's queue offset (required)
}

var ackFieldNames = [...]string{"consumerGroup", "topic", "queueId", "extraInfo", "offset"}

// Decode reads an ack request header; every field is required.
func (h *AckMessageRequest) Decode(ext *ExtFields) error {
	*h = AckMessageRequest{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "consumerGroup":
			h.ConsumerGroup = v
			seen |= nonEmpty(v, 1<<0)
		case "topic":
			h.Topic = v
			seen |= nonEmpty(v, 1<<1)
		case "queueId":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<2)
		case "extraInfo":
			h.ExtraInfo = v
			seen |= nonEmpty(v, 1<<3)
		case "offset":
			h.Offset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<4)
		}
		if !ok {
			return badField("AckMessageRequest", k, v)
		}
	}
	return checkRequired("AckMessageRequest", seen, 1<<5-1, ackFieldNames[:])
}

// Encode writes every field.
func (h *AckMessageRequest) Encode(ext *ExtFields) {
	ext.Set("consumerGroup", h.ConsumerGroup)
	ext.Set("topic", h.Topic)
	ext.SetInt("queueId", int64(h.QueueID))
	ext.Set("extraInfo", h.ExtraInfo)
	ext.SetInt("offset", h.Offset)
}

// ChangeInvisibleTimeRequest is the header of CHANGE_MESSAGE_INVISIBLETIME (3445).
type ChangeInvisibleTimeRequest struct {
	ConsumerGroup []byte // consumerGroup (required)
	Topic         []byte // topic (required)
	QueueID       int32  // queueId (required)
	ExtraInfo     []byte // extraInfo: the receipt handle (required)
	Offset        int64  // offset: the message's queue offset (required)
	InvisibleTime int64  // invisibleTime in ms, from now (required)
}

var changeInvisibleFieldNames = [...]string{"consumerGroup", "topic", "queueId", "extraInfo", "offset", "invisibleTime"}

// Decode reads a change-invisible-time request header; every field is required.
func (h *ChangeInvisibleTimeRequest) Decode(ext *ExtFields) error {
	*h = ChangeInvisibleTimeRequest{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "consumerGroup":
			h.ConsumerGroup = v
			seen |= nonEmpty(v, 1<<0)
		case "topic":
			h.Topic = v
			seen |= nonEmpty(v, 1<<1)
		case "queueId":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<2)
		case "extraInfo":
			h.ExtraInfo = v
			seen |= nonEmpty(v, 1<<3)
		case "offset":
			h.Offset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<4)
		case "invisibleTime":
			h.InvisibleTime, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<5)
		}
		if !ok {
			return badField("ChangeInvisibleTimeRequest", k, v)
		}
	}
	return checkRequired("ChangeInvisibleTimeRequest", seen, 1<<6-1, changeInvisibleFieldNames[:])
}

// Encode writes every field.
func (h *ChangeInvisibleTimeRequest) Encode(ext *ExtFields) {
	ext.Set("consumerGroup", h.ConsumerGroup)
	ext.Set("topic", h.Topic)
	ext.SetInt("queueId", int64(h.QueueID))
	ext.Set("extraInfo", h.ExtraInfo)
	ext.SetInt("offset", h.Offset)
	ext.SetInt("invisibleTime", h.InvisibleTime)
}

// ChangeInvisibleTimeResponse is the header of a change-invisible-time response:
// the client builds the message's new receipt handle from it.
type ChangeInvisibleTimeResponse struct {
	PopTime       int64 // popTime in ms (required)
	InvisibleTime int64 // invisibleTime in ms (required)
	ReviveQid     int32 // reviveQid (required)
}

var changeInvisibleRespFieldNames = [...]string{"popTime", "invisibleTime", "reviveQid"}

// Decode reads the header; all three fields are required.
func (h *ChangeInvisibleTimeResponse) Decode(ext *ExtFields) error {
	*h = ChangeInvisibleTimeResponse{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "popTime":
			h.PopTime, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<0)
		case "invisibleTime":
			h.InvisibleTime, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<1)
		case "reviveQid":
			h.ReviveQid, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<2)
		}
		if !ok {
			return badField("ChangeInvisibleTimeResponse", k, v)
		}
	}
	return checkRequired("ChangeInvisibleTimeResponse", seen, 1<<3-1, changeInvisibleRespFieldNames[:])
}

// Encode writes all three fields.
func (h *ChangeInvisibleTimeResponse) Encode(ext *ExtFields) {
	ext.SetInt("popTime", h.PopTime)
	ext.SetInt("invisibleTime", h.InvisibleTime)
	ext.SetInt("reviveQid", int64(h.ReviveQid))
}

// ExtraInfo is a popped message's receipt handle (the POP_CK property and the
// extraInfo header of ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME): Java's
// ExtraInfoUtil format, fields separated by one space:
//
//	ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId [queueOffset]
//
// retry is "1" when the message came from a pop retry topic, else "0".
type ExtraInfo struct {
	CkQueueOffset int64  // the pop's start offset in the queue
	PopTime       int64  // when the message was popped (ms)
	InvisibleTime int64  // for how long (ms)
	ReviveQid     int32  // PopOrderReviveQueue for an orderly pop
	Retry         bool   // from a pop retry topic
	BrokerName    []byte // the broker that popped it
	QueueID       int32  // the message's queue
	QueueOffset   int64  // the message's queue offset; -1 when the handle has only 7 fields
}

// Orderly reports whether the handle comes from an orderly pop.
func (x *ExtraInfo) Orderly() bool { return x.ReviveQid == PopOrderReviveQueue }

// AppendExtraInfo appends the 8-field form of x to dst (7 fields when
// x.QueueOffset < 0).
func AppendExtraInfo(dst []byte, x *ExtraInfo) []byte {
	dst = strconv.AppendInt(dst, x.CkQueueOffset, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, x.PopTime, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, x.InvisibleTime, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(x.ReviveQid), 10)
	if x.Retry {
		dst = append(dst, " 1 "...)
	} else {
		dst = append(dst, " 0 "...)
	}
	dst = append(dst, x.BrokerName...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(x.QueueID), 10)
	if x.QueueOffset >= 0 {
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, x.QueueOffset, 10)
	}
	return dst
}

// ParseExtraInfo reads a receipt handle of 7 or 8 fields. BrokerName aliases b.
// It never panics and does not allocate.
func ParseExtraInfo(b []byte) (ExtraInfo, error) {
	var x ExtraInfo
	var fields [8][]byte
	n := 0
	start := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != ' ' {
			continue
		}
		if n == len(fields) {
			return ExtraInfo{}, &FieldError{Header: "ExtraInfo", Field: "extraInfo", Value: string(b), Err: ErrBadField}
		}
		fields[n] = b[start:i]
		n++
		start = i + 1
	}
	bad := func() (ExtraInfo, error) {
		return ExtraInfo{}, &FieldError{Header: "ExtraInfo", Field: "extraInfo", Value: string(b), Err: ErrBadField}
	}
	if n < 7 {
		return bad()
	}
	var ok1, ok2, ok3, ok4, ok5 bool
	x.CkQueueOffset, ok1 = parseInt64(fields[0])
	x.PopTime, ok2 = parseInt64(fields[1])
	x.InvisibleTime, ok3 = parseInt64(fields[2])
	x.ReviveQid, ok4 = parseInt32(fields[3])
	x.QueueID, ok5 = parseInt32(fields[6])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return bad()
	}
	switch string(fields[4]) {
	case "0":
	case "1":
		x.Retry = true
	default:
		return bad()
	}
	x.BrokerName = fields[5]
	x.QueueOffset = -1
	if n == 8 {
		var ok bool
		if x.QueueOffset, ok = parseInt64(fields[7]); !ok || x.QueueOffset < 0 {
			return bad()
		}
	}
	return x, nil
}
