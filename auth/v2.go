package auth

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// RocketMQ 5's gRPC authentication metadata.
const (
	HeaderAuthorization = "authorization"
	HeaderDateTime      = "x-mq-date-time"
	// SchemeV2 is the only algorithm RocketMQ 5 clients use.
	SchemeV2 = "MQv2-HMAC-SHA1"
	// DateTimeLayout is x-mq-date-time's form (UTC).
	DateTimeLayout = "20060102T150405Z"
	// DefaultMaxSkew bounds how far x-mq-date-time may be from the broker's
	// clock, either way.
	DefaultMaxSkew = 15 * time.Minute
)

// V2 is a parsed gRPC authorization: who claims to send it, the signature
// and the signed date-time.
type V2 struct {
	AccessKey string
	Signature []byte // the HMAC-SHA1, decoded from hex (nil from ParseV2View)
	DateTime  string // x-mq-date-time, the signed content

	sigHex string // the header's hex signature (ParseV2View), a view of it
}

// ParseV2 reads the authorization and x-mq-date-time metadata of a gRPC
// request as the Java proxy does: the scheme, then comma-separated
// key=value items; Credential's part before the first "/" is the access
// key, Signature is hex. Other items (SignedHeaders) are ignored. Errors
// wrap ErrBadAuthorization.
func ParseV2(authorization, dateTime string) (V2, error) {
	a, err := ParseV2View(authorization, dateTime)
	if err != nil {
		return a, err
	}
	a.Signature, _ = hex.DecodeString(a.sigHex) // checked by ParseV2View
	return a, nil
}

// ParseV2View is ParseV2 without decoding the signature, for the
// per-request path: Signature stays nil and VerifyV2 decodes the header's
// hex into its pooled scratch, so that neither allocates. The result holds
// views of authorization.
func ParseV2View(authorization, dateTime string) (V2, error) {
	var a V2
	hasSig := false
	if authorization == "" {
		return a, fmt.Errorf("%w: no authorization header", ErrBadAuthorization)
	}
	if dateTime == "" {
		return a, fmt.Errorf("%w: no %s header", ErrBadAuthorization, HeaderDateTime)
	}
	scheme, rest, ok := strings.Cut(authorization, " ")
	if !ok {
		return a, fmt.Errorf("%w: no credentials after the scheme", ErrBadAuthorization)
	}
	if scheme != SchemeV2 {
		return a, fmt.Errorf("%w: scheme %.40q is not %s", ErrBadAuthorization, scheme, SchemeV2)
	}
	for item := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return a, fmt.Errorf("%w: item %.40q is not key=value", ErrBadAuthorization, item)
		}
		switch k {
		case "Credential":
			a.AccessKey, _, _ = strings.Cut(v, "/")
		case "Signature":
			if !isHex(v) {
				return a, fmt.Errorf("%w: signature is not hex", ErrBadAuthorization)
			}
			a.sigHex, hasSig = v, true
		}
	}
	if a.AccessKey == "" {
		return a, fmt.Errorf("%w: no Credential", ErrBadAuthorization)
	}
	if !hasSig {
		return a, fmt.Errorf("%w: no Signature", ErrBadAuthorization)
	}
	a.DateTime = dateTime
	return a, nil
}

// CheckDateTime reports ErrClockSkew (wrapped) when dateTime, in
// DateTimeLayout, is more than maxSkew from now, and ErrBadAuthorization
// when it does not parse. maxSkew <= 0 means DefaultMaxSkew.
func CheckDateTime(dateTime string, now time.Time, maxSkew time.Duration) error {
	if maxSkew <= 0 {
		maxSkew = DefaultMaxSkew
	}
	t, err := time.Parse(DateTimeLayout, dateTime)
	if err != nil {
		return fmt.Errorf("%w: %s %.40q is not %s", ErrBadAuthorization, HeaderDateTime, dateTime, DateTimeLayout)
	}
	if d := now.Sub(t); d > maxSkew || d < -maxSkew {
		return fmt.Errorf("%w: %s is %v from now (at most %v)", ErrClockSkew, dateTime, d.Round(time.Second), maxSkew)
	}
	return nil
}

// VerifyV2 checks a parsed authorization's signature with this key
// (ErrSignature when it does not match). The caller checks the clock
// (CheckDateTime) and that a.AccessKey names this key's user.
func (k *Key) VerifyV2(a V2) error {
	s := k.get()
	defer k.put(s)
	s.buf = append(s.buf[:0], a.DateTime...) // no conversion: it would escape to the hash
	s.mac.Write(s.buf)
	sig := a.Signature
	if sig == nil {
		// From ParseV2View: a signature longer than a SHA-1 cannot match.
		if len(a.sigHex) != 2*sha1.Size {
			return ErrSignature
		}
		for i := range sha1.Size {
			s.got[i] = unhex(a.sigHex[2*i])<<4 | unhex(a.sigHex[2*i+1])
		}
		sig = s.got[:sha1.Size]
	}
	if !hmac.Equal(s.mac.Sum(s.sum[:0]), sig) {
		return ErrSignature
	}
	return nil
}

// isHex reports whether v is hex digits, an even number of them.
func isHex(v string) bool {
	if len(v)%2 != 0 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// unhex is a hex digit's value (the digit was checked by isHex).
func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// SignV2 returns the authorization and x-mq-date-time metadata a RocketMQ
// 5 client sends at time now (formatted in UTC), signed with this key for
// accessKey.
func (k *Key) SignV2(accessKey string, now time.Time) (authorization, dateTime string) {
	dateTime = now.UTC().Format(DateTimeLayout)
	s := k.get()
	s.mac.Write([]byte(dateTime))
	sig := hex.EncodeToString(s.mac.Sum(s.sum[:0]))
	k.put(s)
	return fmt.Sprintf("%s Credential=%s/%s/%s, SignedHeaders=%s, Signature=%s", SchemeV2, accessKey, "", "Rocketmq", HeaderDateTime, sig), dateTime
}
