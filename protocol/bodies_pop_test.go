package protocol

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBatchAckBody(t *testing.T) {
	// Java's shape (fastjson2, short keys, the bitmap as base64 of
	// BitSet.toByteArray): bits 0, 2 and 9 set.
	java := `{"acks":[{"b":"BQI=","c":"G","it":30000,"pt":1700000000000,"q":3,"r":"0","rq":999,"so":100,"t":"T"}],"brokerName":"broker-a"}`
	var b BatchAckMessageRequestBody
	if err := b.Decode([]byte(java)); err != nil {
		t.Fatal(err)
	}
	a := b.Acks[0]
	if b.BrokerName != "broker-a" || a.ConsumerGroup != "G" || a.Topic != "T" || a.QueueID != 3 || a.ReviveQueueID != 999 ||
		a.StartOffset != 100 || a.PopTime != 1700000000000 || a.InvisibleTime != 30000 || a.Retry != "0" {
		t.Fatalf("decoded %+v", b)
	}
	var offs []int64
	a.Offsets(func(o int64) { offs = append(offs, o) })
	if !slices.Equal(offs, []int64{100, 102, 109}) || a.Count() != 3 {
		t.Fatalf("offsets %v", offs)
	}
	// Round trip, and the long keys with the bitmap as a byte array.
	enc, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var again BatchAckMessageRequestBody
	if err := again.Decode(enc); err != nil || !slices.Equal(again.Acks[0].BitSet, a.BitSet) || again.Acks[0].StartOffset != 100 {
		t.Fatalf("round trip %s: %+v, %v", enc, again, err)
	}
	long := `{"brokerName":"b","acks":[{"consumerGroup":"G","topic":"T","queueId":1,"startOffset":"7","popTime":5,"bitSet":[-128,1]}]}`
	if err := again.Decode([]byte(long)); err != nil {
		t.Fatal(err)
	}
	offs = offs[:0]
	again.Acks[0].Offsets(func(o int64) { offs = append(offs, o) })
	if !slices.Equal(offs, []int64{14, 15}) {
		t.Fatalf("long keys: offsets %v", offs)
	}
	// Too many offsets.
	huge := `{"acks":[{"c":"G","t":"T","b":"` + strings.Repeat("////", MaxBatchAckOffsets/24+1) + `"}]}`
	if err := again.Decode([]byte(huge)); !errors.Is(err, ErrTooManyAcks) || !errors.Is(err, ErrBadBody) {
		t.Fatalf("a huge bitmap: %v", err)
	}
	for _, bad := range []string{`{"acks":[{"q":"x"}]}`, `{"acks":[{"b":"!!"}]}`, `{"acks":[{"b":[300]}]}`, `{"acks":[{"q":4294967296}]}`} {
		if err := again.Decode([]byte(bad)); !errors.Is(err, ErrBadBody) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
