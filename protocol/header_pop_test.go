package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// roundTrip encodes with enc, frames the command in both header encodings, decodes the
// frame and returns the decoded ExtFields of each.
func popRoundTrip(t *testing.T, enc func(*ExtFields)) []*ExtFields {
	t.Helper()
	var out []*ExtFields
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		var c Command
		c.InitRequest(ReqPopMessage, 7)
		c.SerializeType = st
		enc(&c.Ext)
		f, err := AppendFrame(nil, &c)
		if err != nil {
			t.Fatal(err)
		}
		var d Command
		if err := DecodeFrame(f[4:], &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, &d.Ext)
	}
	return out
}

func TestPopHeadersRoundTrip(t *testing.T) {
	pop := PopMessageRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), QueueID: -1, MaxMsgNums: 32,
		InvisibleTime: 30000, PollTime: 15000, BornTime: 1700000000000, InitMode: 1, ExpType: []byte("TAG"),
		Exp: []byte("a || b"), Order: true, AttemptID: []byte("att")}
	for _, ext := range popRoundTrip(t, pop.Encode) {
		var got PopMessageRequest
		if err := got.Decode(ext); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, pop) {
			t.Fatalf("pop: got %+v want %+v", got, pop)
		}
	}
	resp := PopMessageResponse{PopTime: 1, InvisibleTime: 2, ReviveQid: 999, RestNum: 4,
		StartOffsetInfo: []byte("0 1 5"), MsgOffsetInfo: []byte("0 1 5,6"), OrderCountInfo: []byte("0 qo1%5 0")}
	for _, ext := range popRoundTrip(t, resp.Encode) {
		var got PopMessageResponse
		if err := got.Decode(ext); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, resp) {
			t.Fatalf("pop response: got %+v want %+v", got, resp)
		}
	}
	ack := AckMessageRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), QueueID: 3, ExtraInfo: []byte("0 1 2 0 0 b 3 9"), Offset: 9}
	for _, ext := range popRoundTrip(t, ack.Encode) {
		var got AckMessageRequest
		if err := got.Decode(ext); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, ack) {
			t.Fatalf("ack: got %+v want %+v", got, ack)
		}
	}
	ch := ChangeInvisibleTimeRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), QueueID: 3, ExtraInfo: []byte("x"), Offset: 9, InvisibleTime: 5000}
	for _, ext := range popRoundTrip(t, ch.Encode) {
		var got ChangeInvisibleTimeRequest
		if err := got.Decode(ext); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, ch) {
			t.Fatalf("change: got %+v want %+v", got, ch)
		}
	}
	chr := ChangeInvisibleTimeResponse{PopTime: 10, InvisibleTime: 20, ReviveQid: 0}
	for _, ext := range popRoundTrip(t, chr.Encode) {
		var got ChangeInvisibleTimeResponse
		if err := got.Decode(ext); err != nil {
			t.Fatal(err)
		}
		if got != chr {
			t.Fatalf("change response: got %+v want %+v", got, chr)
		}
	}
}

func TestPopHeadersBad(t *testing.T) {
	full := func() *ExtFields {
		var e ExtFields
		(&AckMessageRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), QueueID: 1, ExtraInfo: []byte("x"), Offset: 1}).Encode(&e)
		return &e
	}
	tests := []struct {
		name  string
		edit  func(*ExtFields)
		field string
		want  error
	}{
		{"missing group", func(e *ExtFields) { e.Delete("consumerGroup") }, "consumerGroup", ErrMissingField},
		{"empty extraInfo", func(e *ExtFields) { e.SetString("extraInfo", "") }, "extraInfo", ErrMissingField},
		{"bad offset", func(e *ExtFields) { e.SetString("offset", "x1") }, "offset", ErrBadField},
		{"bad queue", func(e *ExtFields) { e.SetString("queueId", "99999999999") }, "queueId", ErrBadField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := full()
			tt.edit(e)
			var h AckMessageRequest
			err := h.Decode(e)
			var fe *FieldError
			if !errors.Is(err, tt.want) || !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("got %v, want %v on %s", err, tt.want, tt.field)
			}
		})
	}
	var e ExtFields
	(&PopMessageRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), MaxMsgNums: 1, InvisibleTime: 1, PollTime: 1, BornTime: 1}).Encode(&e)
	e.SetString("order", "maybe")
	var p PopMessageRequest
	if err := p.Decode(&e); !errors.Is(err, ErrBadField) {
		t.Fatalf("order=maybe: %v", err)
	}
	e.SetString("order", "true")
	e.Delete("invisibleTime")
	if err := p.Decode(&e); !errors.Is(err, ErrMissingField) {
		t.Fatalf("no invisibleTime: %v", err)
	}
}

func TestExtraInfo(t *testing.T) {
	x := ExtraInfo{CkQueueOffset: 5, PopTime: 1700000000000, InvisibleTime: 30000, ReviveQid: PopOrderReviveQueue,
		BrokerName: []byte("broker-a"), QueueID: 3, QueueOffset: 17}
	got := AppendExtraInfo(nil, &x)
	if want := "5 1700000000000 30000 999 0 broker-a 3 17"; string(got) != want {
		t.Fatalf("got %q want %q", got, want)
	}
	y, err := ParseExtraInfo(got)
	if err != nil || !reflect.DeepEqual(x, y) || !y.Orderly() {
		t.Fatalf("parse: %+v %v", y, err)
	}
	y, err = ParseExtraInfo([]byte("5 1 2 0 1 b 3"))
	if err != nil || y.QueueOffset != -1 || !y.Retry || y.Orderly() {
		t.Fatalf("7 fields: %+v %v", y, err)
	}
	for _, bad := range []string{"", "1 2 3", "a 1 2 0 0 b 3 4", "1 2 3 0 2 b 3 4", "1 2 3 0 0 b 3 4 5", "1 2 3 0 0 b 3 -4", "1 2 3 0 0 b x"} {
		if _, err := ParseExtraInfo([]byte(bad)); !errors.Is(err, ErrBadField) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseExtraInfo(got) }); n != 0 {
		t.Fatalf("ParseExtraInfo allocates %v", n)
	}
}

// FuzzParseExtraInfo: ParseExtraInfo never panics, and what it accepts re-encodes to
// a handle that parses to the same value.
func FuzzParseExtraInfo(f *testing.F) {
	f.Add([]byte("0 1700000000000 30000 0 0 broker-a 3 17"))
	f.Add([]byte("5 1 2 999 1 b 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := ParseExtraInfo(b)
		if err != nil {
			return
		}
		if bytes.IndexByte(x.BrokerName, ' ') >= 0 {
			t.Fatalf("broker name with a space: %q", x.BrokerName)
		}
		y, err := ParseExtraInfo(AppendExtraInfo(nil, &x))
		if err != nil || !reflect.DeepEqual(x, y) {
			t.Fatalf("re-encoded %+v: %+v %v", x, y, err)
		}
	})
}
