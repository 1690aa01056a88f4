package protocol

import (
	"strconv"

	"github.com/apogeemq/apogee/internal/javacompat"
)

// Pop consumption (RocketMQ 5's message-granularity model): POP_MESSAGE (3442),
// ACK_MESSAGE (3443) and CHANGE_MESSAGE_INVISIBLETIME (3445). Field names are the
// Java broker's (PopMessageRequestHeader, AckMessageRequestHeader,
// ChangeInvisibleTimeRequestHeader and their response headers).

// PopOrderReviveQueue is the reviveQid of an orderly pop (Java's
// KeyBuilder.POP_ORDER_REVIVE_QUEUE): a receipt handle carrying it is orderly.
const PopOrderReviveQueue int32 = 999

// PopMessageRequest is the header of POP_MESSAGE (3442). The required keys are the ones
// the Java broker requires.
type PopMessageRequest struct {
	ConsumerGroup []byte `rmq:"consumerGroup,required"`
	Topic         []byte `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"` // negative: any queue
	MaxMsgNums    int32  `rmq:"maxMsgNums,required"`
	InvisibleTime int64  `rmq:"invisibleTime,required"` // ms
	PollTime      int64  `rmq:"pollTime,required"`      // ms: how long the broker may hold the request
	BornTime      int64  `rmq:"bornTime,required"`      // the client's clock, ms
	InitMode      int32  `rmq:"initMode,required"`      // for a new group: 0 (ConsumeInitMode.MIN) from the first message, 1 (MAX) from the last
	ExpType       []byte `rmq:"expType,omitempty"`      // "TAG", "SQL92" or ""
	Exp           []byte `rmq:"exp,omitempty"`          // the filter expression ("" or "*": everything)
	Order         bool   `rmq:"order"`                  // orderly pop
	AttemptID     []byte `rmq:"attemptId,omitempty"`
}

// PopMessageResponse is the header of a pop response. The Java client builds each
// message's receipt handle (extraInfo, see ExtraInfo) from popTime, invisibleTime,
// reviveQid and the entry of startOffsetInfo for the message's queue.
type PopMessageResponse struct {
	PopTime         int64  `rmq:"popTime,required"`       // ms
	InvisibleTime   int64  `rmq:"invisibleTime,required"` // ms
	ReviveQid       int32  `rmq:"reviveQid,required"`
	RestNum         int64  `rmq:"restNum,required"`          // messages left in the queues popped
	StartOffsetInfo []byte `rmq:"startOffsetInfo,omitempty"` // "0 queueId startOffset" joined by ';'
	MsgOffsetInfo   []byte `rmq:"msgOffsetInfo,omitempty"`   // "0 queueId o1,o2,..." joined by ';'
	OrderCountInfo  []byte `rmq:"orderCountInfo,omitempty"`  // "0 qo<queueId>%<offset> count" joined by ';'
}

// AckMessageRequest is the header of ACK_MESSAGE (3443); every key is required.
type AckMessageRequest struct {
	ConsumerGroup []byte `rmq:"consumerGroup,required"`
	Topic         []byte `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"`
	ExtraInfo     []byte `rmq:"extraInfo,required"` // the receipt handle
	Offset        int64  `rmq:"offset,required"`    // the message's queue offset
}

// ChangeInvisibleTimeRequest is the header of CHANGE_MESSAGE_INVISIBLETIME (3445); every
// key is required.
type ChangeInvisibleTimeRequest struct {
	ConsumerGroup []byte `rmq:"consumerGroup,required"`
	Topic         []byte `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"`
	ExtraInfo     []byte `rmq:"extraInfo,required"`     // the receipt handle
	Offset        int64  `rmq:"offset,required"`        // the message's queue offset
	InvisibleTime int64  `rmq:"invisibleTime,required"` // ms, from now
}

// ChangeInvisibleTimeResponse is the header of a change-invisible-time response: the
// client builds the message's new receipt handle from it.
type ChangeInvisibleTimeResponse struct {
	PopTime       int64 `rmq:"popTime,required"`       // ms
	InvisibleTime int64 `rmq:"invisibleTime,required"` // ms
	ReviveQid     int32 `rmq:"reviveQid,required"`
}

// PeekMessageRequest is the header of PEEK_MESSAGE (3444): the messages a
// group's next pops would read, without popping them. The answer is a
// PopMessageResponse (restNum; the rest zero) with the records as body.
type PeekMessageRequest struct {
	ConsumerGroup []byte `rmq:"consumerGroup,required"`
	Topic         []byte `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"` // negative: every queue
	MaxMsgNums    int32  `rmq:"maxMsgNums,required"`
}

// NotificationRequest is the header of NOTIFICATION (3446): whether a pop
// of the group would find a message, held up to pollTime until one comes.
type NotificationRequest struct {
	ConsumerGroup []byte `rmq:"consumerGroup,required"`
	Topic         []byte `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"`  // negative: every queue
	PollTime      int64  `rmq:"pollTime,required"` // ms
	BornTime      int64  `rmq:"bornTime,required"` // the client's clock, ms
	Order         bool   `rmq:"order"`             // for an orderly pop
	AttemptID     []byte `rmq:"attemptId,omitempty"`
}

// NotificationResponse is the header of a NOTIFICATION answer.
type NotificationResponse struct {
	HasMsg bool `rmq:"hasMsg,required"`
}

// PollingInfoRequest is the header of POLLING_INFO (3447): how many pops
// of the group are held for (topic, queue).
type PollingInfoRequest struct {
	ConsumerGroup []byte `rmq:"consumerGroup,required"`
	Topic         []byte `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"` // negative: the pops of any queue
}

// PollingInfoResponse is the header of a POLLING_INFO answer.
type PollingInfoResponse struct {
	PollingNum int32 `rmq:"pollingNum,required"`
}

// RecallMessageRequest is the header of RECALL_MESSAGE (370, RocketMQ
// 5.3.1+): cancel a timer message before its delivery time by the recall
// handle its send answer carried.
type RecallMessageRequest struct {
	ProducerGroup []byte `rmq:"producerGroup,omitempty"`
	Topic         []byte `rmq:"topic,required"`
	RecallHandle  []byte `rmq:"recallHandle,required"`
}

// RecallMessageResponse is the header of a RECALL_MESSAGE answer: the
// recalled message's id (UNIQ_KEY).
type RecallMessageResponse struct {
	MsgID []byte `rmq:"msgId,required"`
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
	x.CkQueueOffset, ok1 = javacompat.ParseInt64(fields[0])
	x.PopTime, ok2 = javacompat.ParseInt64(fields[1])
	x.InvisibleTime, ok3 = javacompat.ParseInt64(fields[2])
	x.ReviveQid, ok4 = javacompat.ParseInt32(fields[3])
	x.QueueID, ok5 = javacompat.ParseInt32(fields[6])
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
		if x.QueueOffset, ok = javacompat.ParseInt64(fields[7]); !ok || x.QueueOffset < 0 {
			return bad()
		}
	}
	return x, nil
}
