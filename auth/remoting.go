package auth

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"encoding/binary"

	"github.com/apogeemq/apogee/protocol"
)

// b64 is strict: only the canonical encoding of a sum decodes to it, so
// comparing decoded bytes is comparing the strings as Java does.
var b64 = base64.StdEncoding.Strict()

// AccessKey returns the request's AccessKey field (a view of its extension
// fields, valid as long as they are) and whether it has one.
func AccessKey(cmd *protocol.Command) ([]byte, bool) {
	ak, ok := cmd.Ext.Get(FieldAccessKey)
	return ak, ok && len(ak) > 0
}

// Verify checks the request's Signature against this key: ErrNoSignature
// when it has none, ErrSignature when it does not match (with or without
// SecurityToken in the content, see the package documentation). It reads
// the request only and allocates nothing in the steady state.
func (k *Key) Verify(cmd *protocol.Command) error {
	sig, ok := cmd.Ext.Get(FieldSignature)
	if !ok || len(sig) == 0 {
		return ErrNoSignature
	}
	s := k.get()
	defer k.put(s)
	n, err := b64.Decode(s.got[:], sig)
	if len(sig) != b64.EncodedLen(len(s.sum)) || err != nil || n != len(s.sum) {
		return ErrSignature
	}
	got := s.got[:n]
	k.content(s, cmd, false)
	if hmac.Equal(s.mac.Sum(s.sum[:0]), got) {
		return nil
	}
	if cmd.Ext.Has(FieldSecurityToken) {
		s.mac.Reset()
		k.content(s, cmd, true)
		if hmac.Equal(s.mac.Sum(s.sum[:0]), got) {
			return nil
		}
	}
	return ErrSignature
}

// Sign sets the request's AccessKey (and SecurityToken, when c has one)
// and its Signature, computed as the Java client computes it: over every
// extension field, the token included, and the body. Call it after every
// other field is set; a Signature already there (a request signed before
// and sent again) is replaced. The access key is c.AccessKey; the secret
// is k's.
func (k *Key) Sign(cmd *protocol.Command, c Credentials) {
	cmd.Ext.Delete(FieldSignature)
	cmd.Ext.SetString(FieldAccessKey, c.AccessKey)
	if c.SecurityToken != "" {
		cmd.Ext.SetString(FieldSecurityToken, c.SecurityToken)
	} else {
		cmd.Ext.Delete(FieldSecurityToken)
	}
	s := k.get()
	k.content(s, cmd, false)
	sum := s.mac.Sum(s.sum[:0])
	b64.Encode(s.enc[:], sum)
	cmd.Ext.Set(FieldSignature, s.enc[:])
	k.put(s)
}

// content writes the signed content of cmd into s.mac: the values of the
// extension fields but Signature (and SecurityToken when skipToken), in
// key order, each key once with its last value, then the body.
func (k *Key) content(s *scratch, cmd *protocol.Command, skipToken bool) {
	ext := &cmd.Ext
	n := ext.Len()
	skipUnique := cmd.Version <= versionV493
	ents := s.ents[:0]
	if n > maxSorted {
		ents = s.more[:0] // more fields than a scratch sorts in place: rare enough to allocate
	}
	for i := 0; i < n; i++ {
		key, _ := ext.At(i)
		switch string(key) {
		case FieldSignature:
			continue
		case FieldSecurityToken:
			if skipToken {
				continue
			}
		case uniqueKeyQuery:
			if skipUnique {
				continue
			}
		}
		ents = append(ents, sortEnt{pfx: prefix(key), i: i})
	}
	if n > maxSorted {
		s.more = ents
	}
	// Insertion sort by key, then by position: a request has a few dozen
	// fields at most, and most keys differ in their first eight bytes.
	for i := 1; i < len(ents); i++ {
		for j := i; j > 0 && ents[j].less(ext, ents[j-1]); j-- {
			ents[j], ents[j-1] = ents[j-1], ents[j]
		}
	}
	// The values are gathered into one buffer and hashed with one Write:
	// a Write per value costs more than the copy (a request has a dozen or
	// more short values).
	buf := s.buf[:0]
	for i, e := range ents {
		key, val := ext.At(e.i)
		if i+1 < len(ents) && ents[i+1].pfx == e.pfx {
			if next, _ := ext.At(ents[i+1].i); bytes.Equal(key, next) {
				continue // the last occurrence of a key wins
			}
		}
		buf = append(buf, val...)
	}
	s.mac.Write(buf)
	if cap(buf) <= maxKeptValues {
		s.buf = buf[:0]
	}
	s.mac.Write(cmd.Body)
}

// sortEnt is a field to sort: its index and the first eight bytes of its
// key, big-endian (zero-padded), which order most keys without a look at
// the rest.
type sortEnt struct {
	pfx uint64
	i   int
}

func prefix(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.BigEndian.Uint64(key)
	}
	var b [8]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:])
}

// less orders by key bytes, then by position.
func (e sortEnt) less(ext *protocol.ExtFields, o sortEnt) bool {
	if e.pfx != o.pfx {
		return e.pfx < o.pfx
	}
	ke, _ := ext.At(e.i)
	ko, _ := ext.At(o.i)
	if c := bytes.Compare(ke, ko); c != 0 {
		return c < 0
	}
	return e.i < o.i
}

// Signer signs requests with one set of credentials: the remoting
// client's Signer (remoting.ClientOptions.Signer), so that every request a
// connection sends carries AccessKey and Signature.
type Signer struct {
	key *Key
	c   Credentials
}

// NewSigner returns a Signer for c.
func NewSigner(c Credentials) *Signer { return &Signer{key: NewKey(c.SecretKey), c: c} }

// Sign signs req (Key.Sign).
func (s *Signer) Sign(req *protocol.Command) { s.key.Sign(req, s.c) }
