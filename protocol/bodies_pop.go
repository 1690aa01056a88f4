package protocol

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/bits"
)

// BatchAckMessageRequestBody is the body of BATCH_ACK_MESSAGE (3543):
// acks of popped messages, grouped by the pop that delivered them.
type BatchAckMessageRequestBody struct {
	BrokerName string     `json:"brokerName"`
	Acks       []BatchAck `json:"acks"`
}

// BatchAck acks messages of one queue delivered by one pop: those at
// StartOffset + i for every bit i set in BitSet. The JSON keys are Java's
// short names ("c", "t", "r", "so", "q", "rq", "pt", "it", "b"); Decode
// also accepts the long ones (consumerGroup, topic, ...), as fastjson's
// alternateNames do.
type BatchAck struct {
	ConsumerGroup string
	Topic         string
	Retry         string // "1": the messages came from the pop retry topic
	StartOffset   int64
	QueueID       int32
	ReviveQueueID int32
	PopTime       int64
	InvisibleTime int64
	// BitSet is Java's BitSet.toByteArray(): bit i is bit i%8 of byte i/8
	// (little-endian). In JSON it is a base64 string (fastjson's byte[]),
	// or an array of (signed or unsigned) byte values.
	BitSet []byte
}

// MaxBatchAckOffsets bounds the offsets one BATCH_ACK_MESSAGE may name
// (the bits set over all its acks): RocketMQ's clients send the acks of a
// few pops at a time (32 messages each at most).
const MaxBatchAckOffsets = 1 << 16

// ErrTooManyAcks: a batch ack names more than MaxBatchAckOffsets offsets.
var ErrTooManyAcks = errors.New("protocol: a batch ack names too many offsets")

// Offsets calls fn with each offset the ack names, in increasing order.
func (a *BatchAck) Offsets(fn func(offset int64)) {
	for i, b := range a.BitSet {
		for b != 0 {
			k := bits.TrailingZeros8(b)
			fn(a.StartOffset + int64(i)*8 + int64(k))
			b &^= 1 << k
		}
	}
}

// Count returns how many offsets the ack names.
func (a *BatchAck) Count() int {
	n := 0
	for _, b := range a.BitSet {
		n += bits.OnesCount8(b)
	}
	return n
}

// batchAckJSON is BatchAck's wire shape with the short keys.
type batchAckJSON struct {
	C  string          `json:"c"`
	T  string          `json:"t"`
	R  string          `json:"r,omitempty"`
	SO int64           `json:"so"`
	Q  int32           `json:"q"`
	RQ int32           `json:"rq"`
	PT int64           `json:"pt"`
	IT int64           `json:"it"`
	B  json.RawMessage `json:"b,omitempty"`
}

// MarshalJSON writes the short keys and the bitmap as base64.
func (a BatchAck) MarshalJSON() ([]byte, error) {
	w := batchAckJSON{C: a.ConsumerGroup, T: a.Topic, R: a.Retry, SO: a.StartOffset, Q: a.QueueID,
		RQ: a.ReviveQueueID, PT: a.PopTime, IT: a.InvisibleTime}
	if a.BitSet != nil {
		b, err := json.Marshal(base64.StdEncoding.EncodeToString(a.BitSet))
		if err != nil {
			return nil, err
		}
		w.B = b
	}
	return json.Marshal(&w)
}

// UnmarshalJSON reads the short or the long keys.
func (a *BatchAck) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*a = BatchAck{}
	get := func(short, long string) json.RawMessage {
		if v, ok := m[short]; ok {
			return v
		}
		return m[long]
	}
	str := func(short, long string, dst *string) error {
		if v := get(short, long); v != nil && string(v) != "null" {
			return json.Unmarshal(v, dst)
		}
		return nil
	}
	i64 := func(short, long string, dst *int64) error {
		if v := get(short, long); v != nil && string(v) != "null" {
			n, ok := lenientInt(v)
			if !ok {
				return errors.New("field " + short + " is not an integer")
			}
			*dst = n
		}
		return nil
	}
	var so, q, rq, pt, it int64
	for _, err := range []error{
		str("c", "consumerGroup", &a.ConsumerGroup), str("t", "topic", &a.Topic), str("r", "retry", &a.Retry),
		i64("so", "startOffset", &so), i64("q", "queueId", &q), i64("rq", "reviveQueueId", &rq),
		i64("pt", "popTime", &pt), i64("it", "invisibleTime", &it),
	} {
		if err != nil {
			return err
		}
	}
	if q != int64(int32(q)) || rq != int64(int32(rq)) {
		return errors.New("a queue id is out of range")
	}
	a.StartOffset, a.QueueID, a.ReviveQueueID, a.PopTime, a.InvisibleTime = so, int32(q), int32(rq), pt, it
	b := get("b", "bitSet")
	if b == nil || string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		dec, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return err
		}
		a.BitSet = dec
		return nil
	}
	var arr []int16
	if err := json.Unmarshal(b, &arr); err != nil {
		return err
	}
	a.BitSet = make([]byte, len(arr))
	for i, v := range arr {
		if v < -128 || v > 255 {
			return errors.New("a bitSet byte is out of range")
		}
		a.BitSet[i] = byte(v)
	}
	return nil
}

// Encode writes the body.
func (b *BatchAckMessageRequestBody) Encode() ([]byte, error) {
	cp := *b
	cp.Acks = nonNil(cp.Acks)
	return json.Marshal(&cp)
}

// Decode parses the body; it fails with ErrTooManyAcks when the acks name
// more than MaxBatchAckOffsets offsets.
func (b *BatchAckMessageRequestBody) Decode(body []byte) error {
	*b = BatchAckMessageRequestBody{}
	if err := json.Unmarshal(body, b); err != nil {
		return bodyErr("BatchAckMessageRequestBody", err)
	}
	n := 0
	for i := range b.Acks {
		if n += b.Acks[i].Count(); n > MaxBatchAckOffsets {
			return bodyErr("BatchAckMessageRequestBody", ErrTooManyAcks)
		}
	}
	return nil
}
