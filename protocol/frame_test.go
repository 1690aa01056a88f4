package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

// gocRouteHeader is the header rocketmq-client-go sends for GET_ROUTEINFO_BY_TOPIC "T"
// with opaque 1 (reference §1.1: 100 bytes).
const gocRouteHeader = `{"code":105,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"","extFields":{"topic":"T"}}`

// gocSendHeader is a SEND_MESSAGE header shaped like rocketmq-client-go's (jsoniter map
// order is random; this is one order). Properties use \u0001 and \u0002 separators.
const gocSendHeader = `{"code":10,"language":"GO","version":317,"opaque":42,"flag":0,"remark":"","extFields":{` +
	`"producerGroup":"pg","topic":"TopicTest","queueId":"3","sysFlag":"0","bornTimestamp":"1700000000123",` +
	`"flag":"0","reconsumeTimes":"0","unitMode":"false","maxReconsumeTimes":"0","defaultTopic":"TBW102",` +
	`"defaultTopicQueueNums":"4","batch":"false",` +
	`"properties":"KEYS\u0001k1\u0002UNIQ_KEY\u0001C0A8000100002A9F0000000000000001\u0002TAGS\u0001tagA\u0002WAIT\u0001true\u0002",` +
	`"bname":"broker-a"}}`

// gocPullHeader is a PULL_MESSAGE header shaped like a push consumer's.
const gocPullHeader = `{"code":11,"language":"GO","version":317,"opaque":7,"flag":0,"remark":"","extFields":{` +
	`"consumerGroup":"cg","topic":"TopicTest","queueId":"1","queueOffset":"1234","maxMsgNums":"32",` +
	`"sysFlag":"3","commitOffset":"1200","suspendTimeoutMillis":"20000","subscription":"","subVersion":"0",` +
	`"expressionType":"TAG","bname":"broker-a"}}`

// frameOf builds a whole frame (with its length field) around a header and a body.
func frameOf(typ SerializeType, header, body []byte) []byte {
	f := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(body)))
	f = binary.BigEndian.AppendUint32(f, uint32(typ)<<24|uint32(len(header)))
	f = append(f, header...)
	return append(f, body...)
}

func TestGoldenGoCRouteRequest(t *testing.T) {
	if len(gocRouteHeader) != 100 {
		t.Fatalf("fixture: header is %d bytes, want 100", len(gocRouteHeader))
	}
	var c Command
	c.InitRequest(ReqGetRouteInfoByTopic, 1)
	c.Version = VersionV4_5_2
	(&GetRouteInfoRequest{Topic: []byte("T")}).Encode(&c.Ext)
	got, err := AppendFrame(nil, &c)
	if err != nil {
		t.Fatal(err)
	}
	want := frameOf(SerializeJSON, []byte(gocRouteHeader), nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("frame:\n got %q\nwant %q", got, want)
	}
	if p := hex.EncodeToString(got[:9]); p != "00000068000000647b" {
		t.Fatalf("prefix %s, want 00000068000000647b", p)
	}

	var d Command
	if err := DecodeFrame(got[4:], &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != 105 || d.Language != LangGo || d.Version != 317 || d.Opaque != 1 || d.Flag != 0 ||
		len(d.Remark) != 0 || d.Body != nil || d.SerializeType != SerializeJSON {
		t.Fatalf("decoded %v", d.String())
	}
	var h GetRouteInfoRequest
	if err := h.Decode(&d.Ext); err != nil || string(h.Topic) != "T" {
		t.Fatalf("route header %+v %v", h, err)
	}
}

func TestGoldenBinaryHeader(t *testing.T) {
	var c Command
	c.Code = 10
	c.Language = LangJava
	c.Version = 401
	c.Opaque = 0x01020304
	c.Flag = FlagResponse
	c.SerializeType = SerializeRocketMQ
	c.SetRemark("ok")
	c.Ext.SetString("k", "vv")
	c.Body = []byte("BODY")
	got, err := AppendFrame(nil, &c)
	if err != nil {
		t.Fatal(err)
	}
	header := []byte{
		0x00, 0x0a, // code
		0x00,       // language JAVA
		0x01, 0x91, // version 401
		0x01, 0x02, 0x03, 0x04, // opaque
		0x00, 0x00, 0x00, 0x01, // flag
		0x00, 0x00, 0x00, 0x02, 'o', 'k', // remark
		0x00, 0x00, 0x00, 0x09, // ext length
		0x00, 0x01, 'k', 0x00, 0x00, 0x00, 0x02, 'v', 'v',
	}
	want := frameOf(SerializeRocketMQ, header, []byte("BODY"))
	if !bytes.Equal(got, want) {
		t.Fatalf("frame:\n got % x\nwant % x", got, want)
	}
	var d Command
	if err := DecodeFrame(got[4:], &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != 10 || d.Language != LangJava || d.Version != 401 || d.Opaque != 0x01020304 ||
		!d.IsResponse() || d.IsOneway() || string(d.Remark) != "ok" || string(d.Body) != "BODY" ||
		d.SerializeType != SerializeRocketMQ {
		t.Fatalf("decoded %s", d.String())
	}
	if v, _ := d.Ext.GetString("k"); v != "vv" {
		t.Fatalf("ext k = %q", v)
	}
}

// TestRoundTripJSONBinary encodes a command in one header type, decodes it, re-encodes in
// the other type and decodes again: every field must survive both ways.
func TestRoundTripJSONBinary(t *testing.T) {
	cases := []struct {
		name   string
		remark string
		ext    [][2]string
		body   string
	}{
		{"empty", "", nil, ""},
		{"goc-send", "", [][2]string{{"topic", "T"}, {"properties", "A\x01b\x02TAGS\x01x\x02"}}, "hello"},
		{"escapes", "line1\nline2 \"quoted\" \\ tab\t ctrl\x01 é 日本 😀", [][2]string{{"k\"ey", "v\\al\u2028"}, {"", ""}}, "\x00\xff"},
		{"many", "err", func() [][2]string {
			var kv [][2]string
			for i := 0; i < 50; i++ {
				kv = append(kv, [2]string{strings.Repeat("k", i+1), strings.Repeat("v", 2*i)})
			}
			return kv
		}(), strings.Repeat("b", 1000)},
	}
	for _, tc := range cases {
		for _, first := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
			t.Run(tc.name+"/"+first.String(), func(t *testing.T) {
				var c Command
				c.InitRequest(ReqSendMessage, -5)
				c.Flag = FlagOneway
				c.SerializeType = first
				if tc.remark != "" {
					c.SetRemark(tc.remark)
				}
				for _, kv := range tc.ext {
					c.Ext.SetString(kv[0], kv[1])
				}
				c.Body = []byte(tc.body)
				check := func(d *Command) {
					t.Helper()
					if d.Code != c.Code || d.Opaque != c.Opaque || d.Flag != c.Flag || d.Language != c.Language ||
						d.Version != c.Version || string(d.Remark) != tc.remark || string(d.Body) != tc.body ||
						d.Ext.Len() != len(tc.ext) {
						t.Fatalf("decoded %s, want %s", d.String(), c.String())
					}
					for i, kv := range tc.ext {
						k, v := d.Ext.At(i)
						if string(k) != kv[0] || string(v) != kv[1] {
							t.Fatalf("ext[%d] = %q:%q, want %q:%q", i, k, v, kv[0], kv[1])
						}
					}
				}
				f1, err := AppendFrame(nil, &c)
				if err != nil {
					t.Fatal(err)
				}
				var d1 Command
				if err := DecodeFrame(f1[4:], &d1); err != nil {
					t.Fatal(err)
				}
				check(&d1)
				d1.SerializeType = 1 - first
				f2, err := AppendFrame(nil, &d1)
				if err != nil {
					t.Fatal(err)
				}
				var d2 Command
				if err := DecodeFrame(f2[4:], &d2); err != nil {
					t.Fatal(err)
				}
				check(&d2)
				if first == SerializeJSON {
					// The JSON header must also be valid JSON to a standard parser.
					hl := binary.BigEndian.Uint32(f1[4:]) & 0xFFFFFF
					var m map[string]any
					if err := json.Unmarshal(f1[8:8+hl], &m); err != nil {
						t.Fatalf("encoding/json rejects our header: %v\n%s", err, f1[8:8+hl])
					}
					if tc.remark != "" && m["remark"] != tc.remark {
						t.Fatalf("encoding/json reads remark %q", m["remark"])
					}
				}
			})
		}
	}
}

func TestDecodeJSONHeaderVariants(t *testing.T) {
	cases := []struct {
		name   string
		header string
		check  func(t *testing.T, c *Command)
	}{
		{"java-alphabetical", `{"code":0,"extFields":{"msgId":"AB","queueId":"1"},"flag":1,"language":"JAVA","opaque":9,"remark":null,"serializeTypeCurrentRPC":"JSON","version":479}`,
			func(t *testing.T, c *Command) {
				if c.Code != 0 || c.Language != LangJava || c.Version != 479 || c.Opaque != 9 || !c.IsResponse() || c.Remark != nil {
					t.Fatalf("%s", c.String())
				}
				if v, _ := c.Ext.GetString("msgId"); v != "AB" {
					t.Fatalf("msgId %q", v)
				}
			}},
		{"whitespace-and-unknown-keys", " \n{ \"unknown\" : {\"a\":[1,2.5e3,-0.1,true,false,null,{\"x\":\"}\"}]} , \"code\" : 11 ,\"language\":9, \"extFields\" : null } \t",
			func(t *testing.T, c *Command) {
				if c.Code != 11 || c.Language != LangGo || c.Ext.Len() != 0 {
					t.Fatalf("%s", c.String())
				}
			}},
		{"unknown-language", `{"code":1,"language":"COBOL"}`, func(t *testing.T, c *Command) {
			if c.Language != LangUnknown || c.Language.String() != "UNKNOWN" {
				t.Fatalf("language %v", c.Language)
			}
		}},
		{"null-ext-value", `{"code":1,"extFields":{"a":null,"b":"x"}}`, func(t *testing.T, c *Command) {
			if v, ok := c.Ext.Get("a"); !ok || len(v) != 0 {
				t.Fatalf("a = %q %v", v, ok)
			}
		}},
		{"unicode-escapes", `{"code":1,"remark":"\u00e9\ud83d\ude00\ud800x\u0041\/","extFields":{"\u006b":"\ud83d\ude00"}}`,
			func(t *testing.T, c *Command) {
				if string(c.Remark) != "é😀\uFFFDxA/" {
					t.Fatalf("remark %q", c.Remark)
				}
				if v, _ := c.Ext.GetString("k"); v != "😀" {
					t.Fatalf("k = %q", v)
				}
			}},
		{"escaped-header-key", `{"c\u006fde":12,"remark":"r"}`, func(t *testing.T, c *Command) {
			if c.Code != 12 || string(c.Remark) != "r" {
				t.Fatalf("%s", c.String())
			}
		}},
		{"duplicate-ext-last-wins", `{"extFields":{"k":"1","k":"2"}}`, func(t *testing.T, c *Command) {
			if v, _ := c.Ext.GetString("k"); v != "2" {
				t.Fatalf("k = %q", v)
			}
		}},
		{"negative-opaque", `{"opaque":-2147483648}`, func(t *testing.T, c *Command) {
			if c.Opaque != math.MinInt32 {
				t.Fatalf("opaque %d", c.Opaque)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Command
			c.SetRemark("stale")
			c.Ext.SetString("stale", "x")
			if err := DecodeFrame(frameOf(SerializeJSON, []byte(tc.header), nil)[4:], &c); err != nil {
				t.Fatal(err)
			}
			if c.Ext.Has("stale") {
				t.Fatal("stale ext survived decode")
			}
			tc.check(t, &c)
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	bin := func(b ...byte) []byte { return b }
	binHeader := func(remarkLen int32, ext []byte) []byte {
		h := []byte{0, 10, 9, 1, 61, 0, 0, 0, 1, 0, 0, 0, 0}
		h = binary.BigEndian.AppendUint32(h, uint32(remarkLen))
		h = binary.BigEndian.AppendUint32(h, uint32(len(ext)))
		return append(h, ext...)
	}
	cases := []struct {
		name  string
		frame []byte // after the length field
		want  error
	}{
		{"empty", nil, ErrBadFrame},
		{"short", bin(0, 0), ErrBadFrame},
		{"header-past-end", bin(0, 0, 0, 10, '{', '}'), ErrBadFrame},
		{"huge-headerLen", bin(0, 0xFF, 0xFF, 0xFF, '{', '}'), ErrBadFrame},
		{"unknown-type", frameOf(2, []byte("{}"), nil)[4:], ErrBadHeader},
		{"json-empty", frameOf(SerializeJSON, nil, nil)[4:], ErrBadHeader},
		{"json-truncated", frameOf(SerializeJSON, []byte(gocRouteHeader[:50]), nil)[4:], ErrBadHeader},
		{"json-not-object", frameOf(SerializeJSON, []byte(`[1]`), nil)[4:], ErrBadHeader},
		{"json-trailing", frameOf(SerializeJSON, []byte(`{}x`), nil)[4:], ErrBadHeader},
		{"json-number-ext", frameOf(SerializeJSON, []byte(`{"extFields":{"queueId":1}}`), nil)[4:], ErrBadHeader},
		{"json-object-ext", frameOf(SerializeJSON, []byte(`{"extFields":{"a":{}}}`), nil)[4:], ErrBadHeader},
		{"json-bool-ext", frameOf(SerializeJSON, []byte(`{"extFields":{"a":true}}`), nil)[4:], ErrBadHeader},
		{"json-ext-array", frameOf(SerializeJSON, []byte(`{"extFields":["a"]}`), nil)[4:], ErrBadHeader},
		{"json-code-string", frameOf(SerializeJSON, []byte(`{"code":"10"}`), nil)[4:], ErrBadHeader},
		{"json-code-float", frameOf(SerializeJSON, []byte(`{"code":1.5}`), nil)[4:], ErrBadHeader},
		{"json-code-overflow", frameOf(SerializeJSON, []byte(`{"code":2147483648}`), nil)[4:], ErrBadHeader},
		{"json-code-huge", frameOf(SerializeJSON, []byte(`{"code":99999999999999999999999}`), nil)[4:], ErrBadHeader},
		{"json-bad-escape", frameOf(SerializeJSON, []byte(`{"remark":"\x"}`), nil)[4:], ErrBadHeader},
		{"json-bad-u-escape", frameOf(SerializeJSON, []byte(`{"remark":"\u12G4"}`), nil)[4:], ErrBadHeader},
		{"json-unterminated-string", frameOf(SerializeJSON, []byte(`{"remark":"abc`), nil)[4:], ErrBadHeader},
		{"json-missing-colon", frameOf(SerializeJSON, []byte(`{"code" 1}`), nil)[4:], ErrBadHeader},
		{"json-deep-nesting", frameOf(SerializeJSON, []byte(`{"x":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}`), nil)[4:], ErrBadHeader},
		{"json-bad-literal", frameOf(SerializeJSON, []byte(`{"x":nul}`), nil)[4:], ErrBadHeader},
		{"json-remark-number", frameOf(SerializeJSON, []byte(`{"remark":5}`), nil)[4:], ErrBadHeader},
		{"bin-short", frameOf(SerializeRocketMQ, make([]byte, 20), nil)[4:], ErrBadHeader},
		{"bin-remark-too-long", frameOf(SerializeRocketMQ, binHeader(1000, nil), nil)[4:], ErrBadHeader},
		{"bin-remark-negative", frameOf(SerializeRocketMQ, binHeader(-1, nil), nil)[4:], ErrBadHeader},
		{"bin-ext-truncated-key", frameOf(SerializeRocketMQ, binHeader(0, []byte{0}), nil)[4:], ErrBadHeader},
		{"bin-ext-key-too-long", frameOf(SerializeRocketMQ, binHeader(0, []byte{0, 9, 'a', 0, 0, 0, 0}), nil)[4:], ErrBadHeader},
		{"bin-ext-key-negative", frameOf(SerializeRocketMQ, binHeader(0, []byte{0xFF, 0xFF, 0, 0, 0, 0}), nil)[4:], ErrBadHeader},
		{"bin-ext-value-too-long", frameOf(SerializeRocketMQ, binHeader(0, []byte{0, 1, 'a', 0, 0, 0, 5, 'x'}), nil)[4:], ErrBadHeader},
		{"bin-ext-value-negative", frameOf(SerializeRocketMQ, binHeader(0, []byte{0, 1, 'a', 0xFF, 0xFF, 0xFF, 0xFF}), nil)[4:], ErrBadHeader},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Command
			err := DecodeFrame(tc.frame, &c)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReadFrame(t *testing.T) {
	f1 := frameOf(SerializeJSON, []byte(gocRouteHeader), nil)
	f2 := frameOf(SerializeJSON, []byte(gocSendHeader), []byte(strings.Repeat("x", 3000)))
	r := bytes.NewReader(append(append([]byte{}, f1...), f2...))
	buf := make([]byte, 0, 16)
	frame, err := ReadFrame(r, buf, 0)
	if err != nil || !bytes.Equal(frame, f1[4:]) {
		t.Fatalf("first frame %q %v", frame, err)
	}
	frame, err = ReadFrame(r, frame, 0)
	if err != nil || !bytes.Equal(frame, f2[4:]) {
		t.Fatalf("second frame %v", err)
	}
	if _, err = ReadFrame(r, frame, 0); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
	// Reusing a large enough buffer does not allocate.
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(f2)
		if _, err := ReadFrame(r, frame, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReadFrame allocates %v times per frame with a reused buffer", allocs)
	}
}

func TestReadFrameErrors(t *testing.T) {
	cases := []struct {
		name  string
		input []byte
		max   int
		want  error
	}{
		{"2GiB", []byte{0x80, 0, 0, 0}, 0, ErrFrameTooLarge},
		{"4GiB-1-no-limit", []byte{0xFF, 0xFF, 0xFF, 0xFF}, math.MaxInt, ErrFrameTooLarge},
		{"over-limit", binary.BigEndian.AppendUint32(nil, 1025), 1024, ErrFrameTooLarge},
		{"length-below-4", []byte{0, 0, 0, 3, 0, 0, 0}, 0, ErrBadFrame},
		{"truncated-length", []byte{0, 0}, 0, io.ErrUnexpectedEOF},
		{"truncated-frame", []byte{0, 0, 0, 10, 0, 0, 0, 2, '{'}, 0, io.ErrUnexpectedEOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var frame []byte
			var err error
			r := bytes.NewReader(nil)
			buf := make([]byte, 0, 64)
			allocs := testing.AllocsPerRun(10, func() {
				r.Reset(tc.input)
				frame, err = ReadFrame(r, buf, tc.max)
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if len(frame) != 0 {
				t.Fatalf("frame %q returned with an error", frame)
			}
			if allocs != 0 {
				t.Fatalf("rejecting an oversized frame allocated %v times", allocs)
			}
		})
	}
}

func TestAppendFrameHeaderErrors(t *testing.T) {
	var c Command
	c.SerializeType = SerializeRocketMQ
	c.Code = 40000
	if _, err := AppendFrame(nil, &c); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("code 40000 in binary header: %v", err)
	}
	c.Code = 10
	c.Version = -40000
	if _, err := AppendFrame(nil, &c); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("version -40000 in binary header: %v", err)
	}
	c.Version = 1
	c.SerializeType = 7
	dst := []byte("keep")
	out, err := AppendFrame(dst, &c)
	if !errors.Is(err, ErrBadHeader) || string(out) != "keep" {
		t.Fatalf("unknown serialize type: %v %q", err, out)
	}
	c.SerializeType = SerializeJSON
	if _, err := AppendFrameHeader(nil, &c, math.MaxInt32); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("2 GiB body: %v", err)
	}
	if _, err := AppendFrameHeader(nil, &c, -1); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("negative body: %v", err)
	}
	c.Ext.SetString(strings.Repeat("k", 40000), "v")
	c.SerializeType = SerializeRocketMQ
	if _, err := AppendFrame(nil, &c); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("40000-byte key in binary header: %v", err)
	}
	// The JSON form has no such limit; a 17 MiB header is too large for 24 bits.
	c.SerializeType = SerializeJSON
	c.Ext.Reset()
	c.Ext.SetString("big", strings.Repeat("v", MaxHeaderLen))
	if _, err := AppendFrame(nil, &c); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("17 MiB JSON header: %v", err)
	}
}

func TestAppendFrameHeaderThenBody(t *testing.T) {
	var c Command
	c.InitRequest(ReqSendMessage, 3)
	c.Ext.SetString("a", "b")
	body := []byte("the body")
	hdr, err := AppendFrameHeader([]byte("prefix"), &c, len(body))
	if err != nil {
		t.Fatal(err)
	}
	c.Body = body
	whole, err := AppendFrame([]byte("prefix"), &c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(hdr, body...), whole) {
		t.Fatalf("header+body %q != frame %q", append(hdr, body...), whole)
	}
	if got := binary.BigEndian.Uint32(whole[6:]); int(got) != len(whole)-6-4 {
		t.Fatalf("length field %d, frame after it %d", got, len(whole)-10)
	}
}

func TestCommandHelpers(t *testing.T) {
	var req Command
	if err := DecodeFrame(frameOf(SerializeRocketMQ, mustBinary(t, gocPullHeader), nil)[4:], &req); err != nil {
		t.Fatal(err)
	}
	var resp Command
	resp.SetRemark("old")
	resp.Ext.SetString("old", "x")
	resp.Body = []byte("old")
	resp.InitResponse(&req, RespPullNotFound)
	if resp.Code != RespPullNotFound || resp.Opaque != 7 || !resp.IsResponse() || resp.SerializeType != SerializeRocketMQ ||
		resp.Remark != nil || resp.Ext.Len() != 0 || resp.Body != nil || resp.Version != DefaultVersion {
		t.Fatalf("InitResponse: %s", resp.String())
	}
	if RequestCodeName(ReqPullMessage) != "PULL_MESSAGE" || ResponseCodeName(RespPullOffsetMoved) != "PULL_OFFSET_MOVED" ||
		RequestCodeName(-1) != "" {
		t.Fatal("code names")
	}
	if LangNodeJS.String() != "NODE_JS" || Language(200).String() != "UNKNOWN" || Language(200).jsonName() != "OTHER" {
		t.Fatal("language names")
	}
}

// mustBinary converts a JSON header fixture into the equivalent binary header.
func mustBinary(t testing.TB, jsonHeader string) []byte {
	t.Helper()
	var c Command
	if err := DecodeFrame(frameOf(SerializeJSON, []byte(jsonHeader), nil)[4:], &c); err != nil {
		t.Fatal(err)
	}
	c.SerializeType = SerializeRocketMQ
	f, err := AppendFrame(nil, &c)
	if err != nil {
		t.Fatal(err)
	}
	return f[8:]
}
