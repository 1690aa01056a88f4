package auth

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/benchcpu"
	"github.com/apogeemq/apogee/protocol"
)

func mac(secret, content string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(content))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestJavaSignerVector is AclSignerTest's vector.
func TestJavaSignerVector(t *testing.T) {
	if got := mac("12345678", "RocketMQ"); got != "IUc8rrO/0gDch8CjObLQsW2rsiA=" {
		t.Fatalf("HMAC-SHA1 base64 = %s", got)
	}
}

// TestContentOrder is DefaultAuthenticationContextBuilderTest.build2: the
// content of a SEND_MESSAGE with AccessKey abc is the values in key order.
func TestContentOrder(t *testing.T) {
	var cmd protocol.Command
	cmd.InitRequest(protocol.ReqSendMessage, 1)
	cmd.Version = 441
	// Wire order is not key order.
	cmd.Ext.SetString("topic", "topic-test")
	cmd.Ext.SetString("queueId", "0")
	cmd.Ext.SetString("bornTimestamp", "117036786441330")
	cmd.Ext.SetString("bname", "brokerName-1")
	cmd.Ext.SetString("AccessKey", "abc")
	cmd.Ext.SetString("Signature", mac("secret", "abcbrokerName-11170367864413300topic-test"))
	if err := NewKey("secret").Verify(&cmd); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := NewKey("other").Verify(&cmd); !errors.Is(err, ErrSignature) {
		t.Fatalf("Verify with another secret: %v", err)
	}
}

// goClientSign signs as rocketmq-client-go's ACLInterceptor does: the
// values of AccessKey and the extension fields in key order, without the
// security token, then the body.
func goClientSign(ext map[string]string, body []byte, c Credentials) map[string]string {
	m := map[string]string{FieldAccessKey: c.AccessKey}
	order := []string{FieldAccessKey}
	for k, v := range ext {
		m[k] = v
		order = append(order, k)
	}
	sort.Strings(order)
	var content strings.Builder
	for _, k := range order {
		content.WriteString(m[k])
	}
	content.Write(body)
	out := map[string]string{}
	for k, v := range ext {
		out[k] = v
	}
	out[FieldSignature] = mac(c.SecretKey, content.String())
	out[FieldAccessKey] = c.AccessKey
	if c.SecurityToken != "" {
		out[FieldSecurityToken] = c.SecurityToken
	}
	return out
}

func command(ext map[string]string, body []byte) *protocol.Command {
	cmd := new(protocol.Command)
	cmd.InitRequest(protocol.ReqSendMessage, 7)
	keys := make([]string, 0, len(ext))
	for k := range ext {
		keys = append(keys, k)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(keys)))
	for _, k := range keys {
		cmd.Ext.SetString(k, ext[k])
	}
	cmd.Body = body
	return cmd
}

func TestGoClientSignatures(t *testing.T) {
	ext := map[string]string{"producerGroup": "pg", "topic": "t1", "queueId": "3", "properties": "KEYS\x01k\x02"}
	body := []byte("hello world")
	for _, token := range []string{"", "tok"} {
		c := Credentials{AccessKey: "ak", SecretKey: "sk", SecurityToken: token}
		cmd := command(goClientSign(ext, body, c), body)
		if err := NewKey("sk").Verify(cmd); err != nil {
			t.Errorf("token %q: Verify: %v", token, err)
		}
		cmd.Body = []byte("hello worle")
		if err := NewKey("sk").Verify(cmd); !errors.Is(err, ErrSignature) {
			t.Errorf("token %q: tampered body: %v", token, err)
		}
	}
}

func TestSignVerify(t *testing.T) {
	k := NewKey("s3cret")
	c := Credentials{AccessKey: "alice", SecretKey: "s3cret", SecurityToken: "t"}
	cmd := command(map[string]string{"topic": "t", "b": "x", "a": "g"}, []byte("body"))
	k.Sign(cmd, c)
	if err := k.Verify(cmd); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// Signing again replaces the signature; the request still verifies.
	k.Sign(cmd, c)
	if err := k.Verify(cmd); err != nil {
		t.Fatalf("Verify after a second Sign: %v", err)
	}
	// Each way of tampering fails.
	for name, tamper := range map[string]func(*protocol.Command){
		"value":         func(c *protocol.Command) { c.Ext.SetString("topic", "u") },
		"new field":     func(c *protocol.Command) { c.Ext.SetString("zz", "1") },
		"removed field": func(c *protocol.Command) { c.Ext.Delete("a") },
		"access key":    func(c *protocol.Command) { c.Ext.SetString(FieldAccessKey, "bob") },
		"body":          func(c *protocol.Command) { c.Body = []byte("bodz") },
		"token":         func(c *protocol.Command) { c.Ext.SetString(FieldSecurityToken, "u") },
		"signature":     func(c *protocol.Command) { c.Ext.SetString(FieldSignature, "AAAAAAAAAAAAAAAAAAAAAAAAAAA=") },
		"non-canonical": func(c *protocol.Command) {
			// The same 20 bytes with a padding bit set: only Java's
			// exact string is accepted.
			sig, _ := c.Ext.GetString(FieldSignature)
			const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
			v := strings.IndexByte(alphabet, sig[26])
			c.Ext.SetString(FieldSignature, sig[:26]+string(alphabet[v^1])+"=")
		},
	} {
		c2 := new(protocol.Command)
		c2.Ext.CopyFrom(&cmd.Ext)
		c2.Body = cmd.Body
		c2.Version = cmd.Version
		tamper(c2)
		if err := k.Verify(c2); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: Verify = %v, want ErrSignature", name, err)
		}
	}
	cmd.Ext.Delete(FieldSignature)
	if err := k.Verify(cmd); !errors.Is(err, ErrNoSignature) {
		t.Errorf("no signature: %v", err)
	}
}

// TestDuplicateKeys: a key sent twice counts once, with its last value.
func TestDuplicateKeys(t *testing.T) {
	body := []byte("b")
	var cmd protocol.Command
	cmd.InitRequest(protocol.ReqSendMessage, 1)
	frame := []byte(`{"code":10,"flag":0,"language":"GO","opaque":1,"serializeTypeCurrentRPC":"JSON","version":317,"extFields":{"topic":"first","AccessKey":"ak","topic":"second","Signature":"` +
		mac("sk", "aksecond"+"b") + `"}}`)
	buf := make([]byte, 0, 256)
	buf = append(buf, 0, 0, 0, 0, 0, 0, 0, byte(len(frame)))
	buf = append(buf, frame...)
	buf = append(buf, body...)
	total := len(buf) - 4
	buf[0], buf[1], buf[2], buf[3] = byte(total>>24), byte(total>>16), byte(total>>8), byte(total)
	if err := protocol.DecodeFrame(buf[4:], &cmd); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if err := NewKey("sk").Verify(&cmd); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

// TestUniqueKeyQuery: clients up to V4_9_3 did not sign _UNIQUE_KEY_QUERY.
func TestUniqueKeyQuery(t *testing.T) {
	for _, tc := range []struct {
		version int32
		signed  bool
	}{{399, false}, {317, false}, {401, true}} {
		cmd := command(map[string]string{"topic": "t", "key": "k", uniqueKeyQuery: "true", FieldAccessKey: "ak"}, nil)
		cmd.Version = tc.version
		content := "ak" + "k" + "t"
		if tc.signed {
			content = "ak" + "true" + "k" + "t"
		}
		cmd.Ext.SetString(FieldSignature, mac("sk", content))
		if err := NewKey("sk").Verify(cmd); err != nil {
			t.Errorf("version %d: %v", tc.version, err)
		}
	}
}

// TestManyFields goes past the in-place sort's capacity.
func TestManyFields(t *testing.T) {
	ext := map[string]string{}
	for i := 0; i < 3*maxSorted; i++ {
		ext[strings.Repeat("k", i%7+1)+string(rune('a'+i%26))+string(rune('a'+i/26))] = strings.Repeat("v", i%5)
	}
	c := Credentials{AccessKey: "ak", SecretKey: "sk"}
	cmd := command(goClientSign(ext, []byte("x"), c), []byte("x"))
	if err := NewKey("sk").Verify(cmd); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestV2(t *testing.T) {
	// DefaultAuthenticationContextBuilderTest.build1's header.
	a, err := ParseV2("MQv2-HMAC-SHA1 Credential=abc, SignedHeaders=x-mq-date-time, Signature=D18A9CBCDDBA9041D6693268FEF15A989E64430B", "20231227T194619Z")
	if err != nil {
		t.Fatal(err)
	}
	if a.AccessKey != "abc" || base64.StdEncoding.EncodeToString(a.Signature) != "0YqcvN26kEHWaTJo/vFamJ5kQws=" || a.DateTime != "20231227T194619Z" {
		t.Fatalf("parsed %+v", a)
	}

	k := NewKey("sk")
	now := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	h, dt := k.SignV2("alice", now)
	if dt != "20250304T050607Z" {
		t.Fatalf("date-time %s", dt)
	}
	a, err = ParseV2(h, dt)
	if err != nil || a.AccessKey != "alice" {
		t.Fatalf("ParseV2(%q) = %+v, %v", h, a, err)
	}
	if err := k.VerifyV2(a); err != nil {
		t.Fatalf("VerifyV2: %v", err)
	}
	if err := NewKey("other").VerifyV2(a); !errors.Is(err, ErrSignature) {
		t.Fatalf("VerifyV2 with another key: %v", err)
	}
	// The rocketmq-clients Go client's own form: Credential=AK//Rocketmq.
	m := hmac.New(sha1.New, []byte("sk"))
	m.Write([]byte(dt))
	h2 := "MQv2-HMAC-SHA1 Credential=alice//Rocketmq, SignedHeaders=x-mq-date-time, Signature=" + hex.EncodeToString(m.Sum(nil))
	if a, err := ParseV2(h2, dt); err != nil || k.VerifyV2(a) != nil {
		t.Fatalf("client form: %+v %v", a, err)
	}
	// A replayed header is refused once the clock moved past the skew.
	if err := CheckDateTime(dt, now.Add(14*time.Minute), 0); err != nil {
		t.Fatalf("within skew: %v", err)
	}
	if err := CheckDateTime(dt, now.Add(16*time.Minute), 0); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("past skew: %v", err)
	}
	if err := CheckDateTime(dt, now.Add(-16*time.Minute), 0); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("before skew: %v", err)
	}
	if err := CheckDateTime("2025-03-04", now, 0); !errors.Is(err, ErrBadAuthorization) {
		t.Fatalf("bad date-time: %v", err)
	}
	for _, bad := range []string{"", "MQv2-HMAC-SHA1", "Basic Credential=a, Signature=00", "MQv2-HMAC-SHA1 Credential=a, Signature=zz",
		"MQv2-HMAC-SHA1 Signature=00", "MQv2-HMAC-SHA1 Credential=a", "MQv2-HMAC-SHA1 Credential"} {
		if _, err := ParseV2(bad, dt); !errors.Is(err, ErrBadAuthorization) {
			t.Errorf("ParseV2(%q) = %v", bad, err)
		}
	}
	if _, err := ParseV2(h, ""); !errors.Is(err, ErrBadAuthorization) {
		t.Errorf("no date-time: %v", err)
	}
}

func TestVerifyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates (sync.Pool drops items under it); scripts/test.sh runs this without -race")
	}
	k := NewKey("sk")
	cmd := command(map[string]string{"topic": "t", "producerGroup": "g", "queueId": "1", "bornTimestamp": "12345", "flag": "0", "properties": "a\x01b\x02"}, make([]byte, 1024))
	k.Sign(cmd, Credentials{AccessKey: "ak", SecretKey: "sk"})
	if err := k.Verify(cmd); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(200, func() {
		if err := k.Verify(cmd); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Verify allocates %v per call", n)
	}
	if n := testing.AllocsPerRun(200, func() { k.Sign(cmd, Credentials{AccessKey: "ak", SecretKey: "sk"}) }); n != 0 {
		t.Fatalf("Sign allocates %v per call", n)
	}
}

// BenchmarkVerify is the broker's cost of authenticating one request: a
// SEND_MESSAGE with the Go client's header fields and a body of each size.
func BenchmarkVerify(b *testing.B) {
	for _, size := range []int{128, 1024, 4096} {
		b.Run(byteSize(size), func(b *testing.B) {
			k := NewKey("a-secret-key-of-some-length")
			cmd := command(map[string]string{"producerGroup": "PG", "topic": "BenchTopic", "defaultTopic": "TBW102",
				"defaultTopicQueueNums": "4", "queueId": "3", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
				"properties": "UNIQ_KEY\x01AC110001000018B4AAC2\x02WAIT\x01true\x02", "reconsumeTimes": "0", "unitMode": "false",
				"batch": "false", "bname": "broker-a"}, make([]byte, size))
			k.Sign(cmd, Credentials{AccessKey: "bench", SecretKey: "a-secret-key-of-some-length"})
			b.ReportAllocs()
			b.SetBytes(int64(size))
			done := benchcpu.Report(b)
			for b.Loop() {
				if err := k.Verify(cmd); err != nil {
					b.Fatal(err)
				}
			}
			done()
		})
	}
}

func byteSize(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// TestParseV2View: the per-request parse verifies what ParseV2 verifies,
// in either case of hex, and refuses a wrong, short or long signature.
func TestParseV2View(t *testing.T) {
	k := NewKey("sk")
	h, dt := k.SignV2("alice", time.Now())
	for _, c := range []struct {
		name, header string
		ok           bool
	}{
		{"as signed", h, true},
		{"upper-case hex", h[:strings.LastIndex(h, "=")+1] + strings.ToUpper(h[strings.LastIndex(h, "=")+1:]), true},
		{"one digit changed", h[:len(h)-1] + map[bool]string{true: "1", false: "0"}[h[len(h)-1] == '0'], false},
		{"short", h[:len(h)-2], false},
		{"long", h + "00", false},
	} {
		a, err := ParseV2View(c.header, dt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if a.Signature != nil {
			t.Errorf("%s: the view decoded the signature", c.name)
		}
		if got := k.VerifyV2(a) == nil; got != c.ok {
			t.Errorf("%s: verified %v, want %v", c.name, got, c.ok)
		}
	}
	if _, err := ParseV2View(strings.Replace(h, "Signature=", "Signature=zz", 1), dt); !errors.Is(err, ErrBadAuthorization) {
		t.Errorf("non-hex signature: %v", err)
	}
}
