package auth

import (
	"crypto/hmac"
	"crypto/sha1"
	"errors"
	"hash"
	"sync"
)

// Extension fields of a signed remoting request.
const (
	FieldAccessKey     = "AccessKey"
	FieldSignature     = "Signature"
	FieldSecurityToken = "SecurityToken"

	// uniqueKeyQuery is MixAll.UNIQUE_MSG_QUERY_FLAG: clients up to V4_9_3
	// added it to QUERY_MESSAGE after signing.
	uniqueKeyQuery = "_UNIQUE_KEY_QUERY"
	// versionV493 is MQVersion.Version.V4_9_3's ordinal.
	versionV493 = 399
)

// Errors of authentication. Every one means "refuse the request"; callers
// branch on them only to word the answer.
var (
	ErrNoAccessKey      = errors.New("auth: no AccessKey in the request")
	ErrNoSignature      = errors.New("auth: no Signature in the request")
	ErrSignature        = errors.New("auth: check signature failed")
	ErrBadAuthorization = errors.New("auth: malformed authorization header")
	ErrClockSkew        = errors.New("auth: x-mq-date-time is too far from the broker's clock")
)

// Credentials are what a client signs with: rocketmq-client-go's
// primitive.Credentials.
type Credentials struct {
	AccessKey     string
	SecretKey     string
	SecurityToken string // optional; sent and signed, never checked
}

// IsEmpty reports whether the credentials cannot sign (no access or secret
// key), as primitive.Credentials.IsEmpty.
func (c Credentials) IsEmpty() bool { return c.AccessKey == "" || c.SecretKey == "" }

// Key is one secret, ready to sign and verify: it pools the HMAC-SHA1
// state and the scratch space of a verification, so that neither
// allocates in the steady state. Its methods are safe for concurrent use.
// A Key never exposes its secret.
type Key struct {
	secret []byte
	pool   sync.Pool // *scratch
}

// maxSorted is how many extension fields a scratch sorts without
// allocating; more (never seen from a real client) fall back to the heap.
const maxSorted = 64

// scratch is a verification's working state.
type scratch struct {
	mac  hash.Hash
	sum  [sha1.Size]byte
	got  [sha1.Size + 2]byte // a decoded signature (room to detect a longer one)
	enc  [28]byte            // base64 of a sum
	ents [maxSorted]sortEnt
	more []sortEnt
	buf  []byte // the values of the fields, gathered (kept up to maxKeptValues)
}

// maxKeptValues bounds the gathered values a scratch keeps for the next
// request: headers are small; a rare large one is not held on to.
const maxKeptValues = 16 << 10

// NewKey returns a Key for secret (a user's secret key, RocketMQ 5's
// "password").
func NewKey(secret string) *Key {
	k := &Key{secret: []byte(secret)}
	k.pool.New = func() any { return &scratch{mac: hmac.New(sha1.New, k.secret), buf: make([]byte, 0, 1024)} }
	return k
}

func (k *Key) get() *scratch {
	s := k.pool.Get().(*scratch)
	s.mac.Reset()
	return s
}

func (k *Key) put(s *scratch) { k.pool.Put(s) }
