package protocol

import (
	"reflect"
	"testing"
)

// The hot path (decode a send or pull request, encode its response header) must not
// allocate once the Command, typed header and output buffer are warm.

func TestAllocsDecodeSendRequest(t *testing.T) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		frame := sendFrame(t, st)[4:]
		var c Command
		var h SendMessageRequest
		allocs := testing.AllocsPerRun(200, func() {
			if err := DecodeFrame(frame, &c); err != nil {
				t.Fatal(err)
			}
			if err := h.Decode(&c.Ext); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 || h.QueueID != 3 || string(c.Body) != "hello world" {
			t.Fatalf("%v: %v allocs per decode (queueId %d)", st, allocs, h.QueueID)
		}
	}
}

func TestAllocsDecodePullRequest(t *testing.T) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		var frame []byte
		if st == SerializeJSON {
			frame = frameOf(st, []byte(gocPullHeader), nil)[4:]
		} else {
			frame = frameOf(st, mustBinary(t, gocPullHeader), nil)[4:]
		}
		var c Command
		var h PullMessageRequest
		allocs := testing.AllocsPerRun(200, func() {
			if err := DecodeFrame(frame, &c); err != nil {
				t.Fatal(err)
			}
			if err := h.Decode(&c.Ext); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 || h.QueueOffset != 1234 {
			t.Fatalf("%v: %v allocs per decode", st, allocs)
		}
	}
}

func TestAllocsEncodeResponses(t *testing.T) {
	req := decodeFixture(t, gocSendHeader)
	var resp Command
	buf := make([]byte, 0, 1024)
	sendResp := SendMessageResponse{MsgID: []byte("7F00000100002A9F0000000000001000"), QueueID: 3, QueueOffset: 123456,
		TransactionID: []byte("C0A8000100002A9F0000000000000001"), Region: []byte("DefaultRegion")}
	allocs := testing.AllocsPerRun(200, func() {
		resp.InitResponse(req, RespSuccess)
		sendResp.Encode(&resp.Ext)
		var err error
		buf, err = AppendFrameHeader(buf[:0], &resp, 0)
		if err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("send response header: %v allocs", allocs)
	}

	pullReq := decodeFixture(t, gocPullHeader)
	pullResp := PullMessageResponse{NextBeginOffset: 1266, MinOffset: 0, MaxOffset: 1300}
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		pullReq.SerializeType = st
		allocs = testing.AllocsPerRun(200, func() {
			resp.InitResponse(pullReq, RespSuccess)
			pullResp.Encode(&resp.Ext)
			var err error
			buf, err = AppendFrameHeader(buf[:0], &resp, 256<<10)
			if err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%v pull response header: %v allocs", st, allocs)
		}
	}
	// And the result decodes as what rocketmq-client-go needs.
	var d Command
	if err := DecodeFrame(append(buf[4:], make([]byte, 256<<10)...), &d); err != nil {
		t.Fatal(err)
	}
	var got PullMessageResponse
	if err := got.Decode(&d.Ext); err != nil || got != pullResp || !d.IsResponse() || d.Opaque != 7 {
		t.Fatalf("%+v %v %s", got, err, d.String())
	}
}

// sendFrame returns a whole GoC-shaped SEND_MESSAGE frame with an 11-byte body.
func sendFrame(t testing.TB, st SerializeType) []byte {
	if st == SerializeJSON {
		return frameOf(st, []byte(gocSendHeader), []byte("hello world"))
	}
	return frameOf(st, mustBinary(t, gocSendHeader), []byte("hello world"))
}

func BenchmarkDecodeSendRequest(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		b.Run(st.String(), func(b *testing.B) {
			frame := sendFrame(b, st)[4:]
			var c Command
			var h SendMessageRequest
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if err := DecodeFrame(frame, &c); err != nil {
					b.Fatal(err)
				}
				if err := h.Decode(&c.Ext); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodeSendResponse(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		b.Run(st.String(), func(b *testing.B) {
			var req Command
			if err := DecodeFrame(sendFrame(b, st)[4:], &req); err != nil {
				b.Fatal(err)
			}
			var resp Command
			buf := make([]byte, 0, 1024)
			h := SendMessageResponse{MsgID: []byte("7F00000100002A9F0000000000001000"), QueueID: 3, QueueOffset: 123456,
				TransactionID: []byte("C0A8000100002A9F0000000000000001"), Region: []byte("DefaultRegion")}
			b.ReportAllocs()
			for b.Loop() {
				resp.InitResponse(&req, RespSuccess)
				h.Encode(&resp.Ext)
				var err error
				if buf, err = AppendFrameHeader(buf[:0], &resp, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}

func BenchmarkDecodePullRequest(b *testing.B) {
	frame := frameOf(SerializeJSON, []byte(gocPullHeader), nil)[4:]
	var c Command
	var h PullMessageRequest
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := DecodeFrame(frame, &c); err != nil {
			b.Fatal(err)
		}
		if err := h.Decode(&c.Ext); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodePullResponse(b *testing.B) {
	req := decodeFixture(b, gocPullHeader)
	var resp Command
	buf := make([]byte, 0, 1024)
	h := PullMessageResponse{NextBeginOffset: 1266, MinOffset: 0, MaxOffset: 1300}
	b.ReportAllocs()
	for b.Loop() {
		resp.InitResponse(req, RespSuccess)
		h.Encode(&resp.Ext)
		var err error
		if buf, err = AppendFrameHeader(buf[:0], &resp, 256<<10); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeSendRequest encodes a producer's SEND_MESSAGE request header
// into a reused command, as the client does for every message.
func BenchmarkEncodeSendRequest(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		b.Run(st.String(), func(b *testing.B) {
			var req Command
			buf := make([]byte, 0, 1024)
			// HasMaxReconsumeTimes: the same 14 keys as before presence was tracked.
			h := SendMessageRequest{ProducerGroup: []byte("bench-producer"), Topic: []byte("apogee-bench"),
				DefaultTopic: []byte("TBW102"), DefaultTopicQueueNums: 4, QueueID: 3, BornTimestamp: 1764489600000,
				Properties: []byte("UNIQ_KEY\x017F0000010F4C18B4AAC2190B47A80000\x02WAIT\x01true\x02"), BrokerName: []byte("broker-a"),
				HasMaxReconsumeTimes: true}
			b.ReportAllocs()
			for b.Loop() {
				req.InitRequest(ReqSendMessage, 0)
				req.SerializeType = st
				h.Encode(&req.Ext)
				var err error
				if buf, err = AppendFrameHeader(buf[:0], &req, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}

// TestAllocsEveryHeader: every generated encoder writes into a warm ExtFields without
// allocating, and every decoder allocates only the strings it copies (none for a
// header whose text fields are []byte views).
func TestAllocsEveryHeader(t *testing.T) {
	for _, gh := range goldenHeaders {
		h := gh.new()
		fillHeader(h)
		var ext ExtFields
		h.Encode(&ext)
		allocs := testing.AllocsPerRun(100, func() {
			ext.Reset()
			h.Encode(&ext)
		})
		if allocs != 0 {
			t.Errorf("%s.Encode: %v allocs", gh.name, allocs)
		}
		strs := 0
		ht := reflect.TypeOf(h).Elem()
		for i := 0; i < ht.NumField(); i++ {
			if ht.Field(i).Type.Kind() == reflect.String {
				strs++
			}
		}
		d := gh.new()
		allocs = testing.AllocsPerRun(100, func() {
			if err := d.Decode(&ext); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > float64(strs) {
			t.Errorf("%s.Decode: %v allocs for %d string fields", gh.name, allocs, strs)
		}
	}
}
