package auth

import (
	"errors"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// FuzzVerify decodes arbitrary frames and verifies them: it never panics,
// and a frame signed by Sign verifies while the same frame with its body
// changed does not.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"code":10,"extFields":{"topic":"t","AccessKey":"ak","Signature":"IUc8rrO/0gDch8CjObLQsW2rsiA="}}`), []byte("body"))
	f.Add([]byte(`{"code":10,"extFields":{"a":"1","a":"2","Signature":"x"}}`), []byte{})
	f.Add([]byte(`{"code":12,"version":300,"extFields":{"_UNIQUE_KEY_QUERY":"true","SecurityToken":"t"}}`), []byte("b"))
	k := NewKey("secret")
	f.Fuzz(func(t *testing.T, header, body []byte) {
		frame := make([]byte, 0, 8+len(header)+len(body))
		frame = append(frame, 0, 0, 0, 0)
		frame[0], frame[1], frame[2], frame[3] = byte(len(header)>>24), byte(len(header)>>16), byte(len(header)>>8), byte(len(header))
		frame = append(frame, header...)
		frame = append(frame, body...)
		var cmd protocol.Command
		if err := protocol.DecodeFrame(frame, &cmd); err != nil {
			return
		}
		_ = k.Verify(&cmd) // must not panic
		k.Sign(&cmd, Credentials{AccessKey: "ak", SecretKey: "secret"})
		if err := k.Verify(&cmd); err != nil {
			t.Fatalf("a signed request does not verify: %v", err)
		}
		cmd.Body = append(append([]byte(nil), cmd.Body...), 'x')
		if err := k.Verify(&cmd); !errors.Is(err, ErrSignature) {
			t.Fatalf("a tampered request verifies: %v", err)
		}
	})
}

// FuzzParseV2 parses arbitrary authorization headers: no panic, and what
// parses verifies only with the right signature.
func FuzzParseV2(f *testing.F) {
	k := NewKey("sk")
	h, dt := k.SignV2("alice", time.Unix(1700000000, 0))
	f.Add(h, dt)
	f.Add("MQv2-HMAC-SHA1 Credential=abc, SignedHeaders=x-mq-date-time, Signature=D18A9CBCDDBA9041D6693268FEF15A989E64430B", "20231227T194619Z")
	f.Add("MQv2-HMAC-SHA1 ,,,=", "x")
	f.Fuzz(func(t *testing.T, authorization, dateTime string) {
		a, err := ParseV2(authorization, dateTime)
		if err != nil {
			if !errors.Is(err, ErrBadAuthorization) {
				t.Fatalf("error %v does not wrap ErrBadAuthorization", err)
			}
			return
		}
		if a.AccessKey == "" || a.DateTime != dateTime {
			t.Fatalf("parsed %+v", a)
		}
		_ = CheckDateTime(a.DateTime, time.Now(), 0)
		// The view (signature decoded by VerifyV2) parses and verifies
		// exactly as the decoded form.
		view, verr := ParseV2View(authorization, dateTime)
		if verr != nil || view.AccessKey != a.AccessKey || view.DateTime != a.DateTime {
			t.Fatalf("ParseV2View: %+v, %v; ParseV2: %+v", view, verr, a)
		}
		if (k.VerifyV2(view) == nil) != (k.VerifyV2(a) == nil) {
			t.Fatalf("VerifyV2 of the view and of the decoded form disagree on %q", authorization)
		}
		if err := k.VerifyV2(a); err == nil && authorization != h {
			// Only a header carrying the right HMAC of its date-time verifies.
			want, _ := k.SignV2(a.AccessKey, time.Now())
			_ = want
			s := k.get()
			s.mac.Write([]byte(a.DateTime))
			sum := s.mac.Sum(nil)
			k.put(s)
			if string(sum) != string(a.Signature) {
				t.Fatalf("verified a wrong signature")
			}
		}
	})
}
