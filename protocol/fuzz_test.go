package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeFrame feeds arbitrary frames (after the length field) to DecodeFrame. Every
// frame that decodes must re-encode in both header types and decode to the same command.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameOf(SerializeJSON, []byte(gocRouteHeader), nil)[4:])
	f.Add(frameOf(SerializeJSON, []byte(gocSendHeader), []byte("body"))[4:])
	f.Add(frameOf(SerializeJSON, []byte(gocPullHeader), nil)[4:])
	f.Add(frameOf(SerializeRocketMQ, mustBinary(f, gocSendHeader), []byte("body"))[4:])
	f.Add(frameOf(SerializeRocketMQ, mustBinary(f, gocPullHeader), nil)[4:])
	f.Add([]byte{0, 0xFF, 0xFF, 0xFF})
	f.Add([]byte{1, 0, 0, 21, 0, 10, 9, 1, 61, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	var c, d Command
	f.Fuzz(func(t *testing.T, frame []byte) {
		if err := DecodeFrame(frame, &c); err != nil {
			return
		}
		for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
			c.SerializeType = st
			out, err := AppendFrame(nil, &c)
			if err != nil {
				continue // e.g. a JSON code that does not fit the binary int16
			}
			if err := DecodeFrame(out[4:], &d); err != nil {
				t.Fatalf("re-encoded %v frame does not decode: %v\n%q", st, err, out)
			}
			sameCommand(t, &c, &d)
		}
	})
}

// FuzzJSONHeader feeds arbitrary JSON header text. A header that decodes must re-encode
// to JSON that encoding/json accepts, and round-trip through our decoder unchanged.
func FuzzJSONHeader(f *testing.F) {
	for _, s := range []string{
		gocRouteHeader, gocSendHeader, gocPullHeader,
		`{"code":0,"extFields":{"msgId":"AB"},"flag":1,"language":"JAVA","opaque":9,"remark":null,"serializeTypeCurrentRPC":"JSON","version":479}`,
		`{"x":[1,{"y":null}],"remark":"\ud83d\ude00\n","extFields":{"a":null}}`,
		`{"extFields":{"queueId":1}}`,
		`{"code":1e5}`, `{}`, ``, `{"language":9}`,
	} {
		f.Add([]byte(s))
	}
	var c, d Command
	f.Fuzz(func(t *testing.T, header []byte) {
		c.Reset()
		if err := decodeJSONHeader(header, &c); err != nil {
			return
		}
		out := appendJSONHeader(nil, &c)
		if !json.Valid(out) {
			t.Fatalf("our JSON is invalid: %q", out)
		}
		d.Reset()
		if err := decodeJSONHeader(out, &d); err != nil {
			t.Fatalf("re-encoded header does not decode: %v\n%q", err, out)
		}
		c.Body, d.Body = nil, nil
		sameCommand(t, &c, &d)
	})
}

func sameCommand(t *testing.T, a, b *Command) {
	t.Helper()
	if a.Code != b.Code || a.Opaque != b.Opaque || a.Flag != b.Flag || a.Version != b.Version ||
		!bytes.Equal(a.Remark, b.Remark) || !bytes.Equal(a.Body, b.Body) || a.Ext.Len() != b.Ext.Len() {
		t.Fatalf("commands differ:\n%s\n%s", a.String(), b.String())
	}
	// A language without a name is written as OTHER in JSON.
	if a.Language != b.Language && !(a.Language > LangNodeJS && b.Language == LangOther) {
		t.Fatalf("language %v != %v", a.Language, b.Language)
	}
	for i := 0; i < a.Ext.Len(); i++ {
		ak, av := a.Ext.At(i)
		bk, bv := b.Ext.At(i)
		if !bytes.Equal(ak, bk) || !bytes.Equal(av, bv) {
			t.Fatalf("ext[%d]: %q=%q vs %q=%q", i, ak, av, bk, bv)
		}
	}
}

// FuzzHeartbeat feeds arbitrary heartbeat bodies. A body that decodes must encode, and
// the encoding must be a fixed point of decode+encode.
func FuzzHeartbeat(f *testing.F) {
	f.Add([]byte(gocHeartbeat))
	f.Add([]byte(javaHeartbeat))
	f.Add([]byte(`{"clientID":"c","consumerDataSet":[{"subscriptionDataSet":[{"codeSet":["x",null,"4294967297",1.5],"subVersion":"42"}]}]}`))
	f.Add([]byte(`{"clientID":"\ud800","producerDataSet":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var h HeartbeatData
		if err := h.Decode(body); err != nil {
			return
		}
		enc1, err := h.Encode()
		if err != nil {
			t.Fatalf("decoded heartbeat does not encode: %v", err)
		}
		var h2 HeartbeatData
		if err := h2.Decode(enc1); err != nil {
			t.Fatalf("encoded heartbeat does not decode: %v\n%s", err, enc1)
		}
		enc2, err := h2.Encode()
		if err != nil || !bytes.Equal(enc1, enc2) {
			t.Fatalf("not a fixed point:\n%s\n%s", enc1, enc2)
		}
	})
}

// FuzzTopicRouteData feeds arbitrary route bodies through the lenient decoder and checks
// that quoteBareKeys leaves valid JSON untouched.
func FuzzTopicRouteData(f *testing.F) {
	r := sampleRoute()
	f.Add(r.AppendJSON(nil, false))
	f.Add(r.AppendJSON(nil, true))
	f.Add([]byte(`{"offsetTable":{"T@g":{0:123,1:98}}}`))
	f.Add([]byte(`{"a\"{7:":{8:9}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		q := quoteBareKeys(body)
		if json.Valid(body) && !bytes.Equal(q, body) {
			t.Fatalf("valid JSON changed:\n%q\n%q", body, q)
		}
		var rd TopicRouteData
		if err := rd.Decode(body); err != nil {
			return
		}
		for _, standard := range []bool{false, true} {
			var back TopicRouteData
			if err := back.Decode(rd.AppendJSON(nil, standard)); err != nil {
				t.Fatalf("re-encoded route does not decode: %v\n%s", err, rd.AppendJSON(nil, standard))
			}
		}
	})
}

// FuzzHeaders decodes arbitrary extFields (pairs separated by NUL, key and value by
// '=') into every typed header. Decode must not panic, and a header that decodes must
// be a fixed point of Encode then Decode, in both key sets where it has two.
func FuzzHeaders(f *testing.F) {
	for _, h := range []string{gocSendHeader, gocPullHeader, gocRouteHeader} {
		c := decodeFixture(f, h)
		var b []byte
		for i := 0; i < c.Ext.Len(); i++ {
			k, v := c.Ext.At(i)
			b = append(append(append(append(b, k...), '='), v...), 0)
		}
		f.Add(b)
	}
	f.Add([]byte("topic=T\x00Topic=\x00queueId=+7\x00QueueId=007\x00offset=-1\x00maxReconsumeTimes=\x00l=3"))
	f.Add([]byte("a=pg\x00b=T\x00e=1\x00f=0\x00g=1\x00h=0\x00unitMode=TRUE\x00batch=1\x00timestamp=9223372036854775807"))
	f.Add([]byte("namespace=ns\x00key=k\x00value=\x00groupName=g\x00cleanOffset=false\x00cluster=c"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ext ExtFields
		for _, p := range bytes.Split(data, []byte{0}) {
			k, v, _ := bytes.Cut(p, []byte("="))
			addPair(&ext, k, v)
		}
		for _, gh := range goldenHeaders {
			h := gh.new()
			if err := h.Decode(&ext); err != nil {
				continue
			}
			want := headerState(h)
			encoders := []func(*ExtFields){h.Encode}
			if v2, ok := h.(interface{ EncodeV2(*ExtFields) }); ok {
				encoders = append(encoders, v2.EncodeV2)
			}
			for i, enc := range encoders {
				var out ExtFields
				enc(&out)
				h2 := gh.new()
				if err := h2.Decode(&out); err != nil {
					t.Fatalf("%s: encoder %d's output does not decode: %v\n%s", gh.name, i, err, renderPairs(&out))
				}
				if got := headerState(h2); got != want {
					t.Fatalf("%s: encoder %d, not a fixed point:\n got %s\nwant %s", gh.name, i, got, want)
				}
			}
		}
	})
}

// headerState renders every exported field of h, presence flags included.
func headerState(h typedHeader) string {
	v := reflect.ValueOf(h).Elem()
	var b strings.Builder
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		if f.Kind() == reflect.Slice {
			fmt.Fprintf(&b, " %s=%q", sf.Name, f.Bytes())
		} else {
			fmt.Fprintf(&b, " %s=%#v", sf.Name, f.Interface())
		}
	}
	return b.String()
}
