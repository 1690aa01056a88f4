package protocol

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps one of them.
var (
	// ErrFrameTooLarge: a frame's length field exceeds the caller's limit, or an encoded
	// frame would not fit the int32 length field.
	ErrFrameTooLarge = errors.New("protocol: frame too large")
	// ErrBadFrame: a frame is truncated or its length fields are inconsistent.
	ErrBadFrame = errors.New("protocol: malformed frame")
	// ErrBadHeader: a command header (JSON or binary) cannot be decoded, or a Command
	// cannot be encoded with the requested header type.
	ErrBadHeader = errors.New("protocol: malformed header")
	// ErrMissingField: a typed header lacks a required extFields key.
	ErrMissingField = errors.New("protocol: missing field")
	// ErrBadField: an extFields value cannot be parsed as the field's type.
	ErrBadField = errors.New("protocol: invalid field")
	// ErrBadBody: a JSON body cannot be decoded.
	ErrBadBody = errors.New("protocol: malformed body")
)

// SerializeType selects the header encoding of a frame (the top byte of the second int32).
type SerializeType byte

// Header encodings.
const (
	SerializeJSON     SerializeType = 0 // JSON object header; what rocketmq-client-go sends
	SerializeRocketMQ SerializeType = 1 // compact binary header (RocketMQSerializable)
)

// String returns "JSON", "ROCKETMQ" or "SerializeType(n)".
func (t SerializeType) String() string {
	switch t {
	case SerializeJSON:
		return "JSON"
	case SerializeRocketMQ:
		return "ROCKETMQ"
	}
	return fmt.Sprintf("SerializeType(%d)", byte(t))
}

// Language is the sender's language code: a byte in binary headers, the enum name in JSON.
type Language byte

// Language codes (Java LanguageCode). LangUnknown is what a JSON header with an
// unrecognised language name decodes to; it is encoded as "OTHER" in JSON.
const (
	LangJava    Language = 0
	LangCPP     Language = 1
	LangDotNet  Language = 2
	LangPython  Language = 3
	LangDelphi  Language = 4
	LangErlang  Language = 5
	LangRuby    Language = 6
	LangOther   Language = 7
	LangHTTP    Language = 8
	LangGo      Language = 9
	LangPHP     Language = 10
	LangOMS     Language = 11
	LangRust    Language = 12
	LangNodeJS  Language = 13
	LangUnknown Language = 127
)

var languageNames = [...]string{
	LangJava: "JAVA", LangCPP: "CPP", LangDotNet: "DOTNET", LangPython: "PYTHON",
	LangDelphi: "DELPHI", LangErlang: "ERLANG", LangRuby: "RUBY", LangOther: "OTHER",
	LangHTTP: "HTTP", LangGo: "GO", LangPHP: "PHP", LangOMS: "OMS", LangRust: "RUST",
	LangNodeJS: "NODE_JS",
}

// String returns the Java enum name ("GO", "JAVA", ...) or "UNKNOWN".
func (l Language) String() string {
	if int(l) < len(languageNames) {
		return languageNames[l]
	}
	return "UNKNOWN"
}

// jsonName is the name written in JSON headers: unknown codes become "OTHER" because a
// Java peer rejects names outside its enum.
func (l Language) jsonName() string {
	if int(l) < len(languageNames) {
		return languageNames[l]
	}
	return "OTHER"
}

// languageByName maps a JSON language name to its code; unknown names give LangUnknown.
func languageByName(name []byte) Language {
	for i, n := range languageNames {
		if string(name) == n {
			return Language(i)
		}
	}
	return LangUnknown
}

// Command flag bits.
const (
	FlagResponse int32 = 1 << 0 // the frame is a response, matched to its request by Opaque
	FlagOneway   int32 = 1 << 1 // the request expects no response (rocketmq-client-go never sets it)
)

// MQVersion ordinals carried in Command.Version (Java MQVersion.Version.ordinal()).
const (
	VersionV3_0_6 int32 = 27
	VersionV4_0_0 int32 = 213
	VersionV4_1_0 int32 = 233
	VersionV4_5_2 int32 = 317 // what rocketmq-client-go sends
	VersionV4_9_1 int32 = 395
	VersionV4_9_4 int32 = 401 // from here on, name servers answer routes in standard JSON
	VersionV5_3_3 int32 = 479

	// DefaultVersion is what Apogee puts in the commands it originates. It must stay
	// >= 0: rocketmq-client-go refuses TAG pulls from a broker whose heartbeat response
	// carries a negative version.
	DefaultVersion = VersionV4_9_4
)

// Command is one remoting frame: its header fields and its body.
//
// A Command is caller-owned and reusable. DecodeFrame overwrites every field and reuses
// the buffers behind Remark and Ext; Body aliases the decoded frame. See the package
// documentation for how long decoded slices stay valid.
type Command struct {
	Code     int32    // request code (Req*) or response code (Resp*)
	Language Language // sender's language
	Version  int32    // sender's MQVersion ordinal; int16 on the wire in binary headers
	Opaque   int32    // request id; a response echoes its request's
	Flag     int32    // FlagResponse | FlagOneway
	Remark   []byte   // error text of a response; empty when absent, null or ""

	Ext  ExtFields
	Body []byte // aliases the frame after DecodeFrame

	// SerializeType is how this header was decoded, and how AppendFrameHeader encodes it.
	SerializeType SerializeType

	remark  []byte // owned storage behind Remark after decoding or SetRemark
	scratch []byte // decoding scratch space (escaped JSON keys)
}

// IsResponse reports whether FlagResponse is set.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether FlagOneway is set.
func (c *Command) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// Reset clears every field but keeps the buffers for reuse.
func (c *Command) Reset() {
	remark, scratch := c.remark[:0], c.scratch[:0]
	ext := c.Ext
	ext.Reset()
	*c = Command{Ext: ext, remark: remark, scratch: scratch}
}

// SetRemark copies s into the Command's own remark buffer and points Remark at it.
func (c *Command) SetRemark(s string) {
	c.remark = append(c.remark[:0], s...)
	c.Remark = c.remark
}

// InitRequest resets c as a request with the given code and opaque, language Go,
// DefaultVersion, and a JSON header (what the official clients and brokers all accept).
func (c *Command) InitRequest(code, opaque int32) {
	c.Reset()
	c.Code = code
	c.Opaque = opaque
	c.Language = LangGo
	c.Version = DefaultVersion
	c.SerializeType = SerializeJSON
}

// InitResponse resets c as the response to req with the given response code: same
// opaque and header type as the request, FlagResponse set, language Go, DefaultVersion.
// req may be c itself only if the caller no longer needs the request's fields.
func (c *Command) InitResponse(req *Command, code int32) {
	opaque, st := req.Opaque, req.SerializeType
	c.Reset()
	c.Code = code
	c.Opaque = opaque
	c.Flag = FlagResponse
	c.Language = LangGo
	c.Version = DefaultVersion
	c.SerializeType = st
}

// String is a short human-readable description for logs (it allocates).
func (c *Command) String() string {
	kind := "request"
	if c.IsResponse() {
		kind = "response"
	}
	return fmt.Sprintf("%s{code=%d opaque=%d flag=%d lang=%s version=%d remark=%q ext=%d body=%d}",
		kind, c.Code, c.Opaque, c.Flag, c.Language, c.Version, c.Remark, c.Ext.Len(), len(c.Body))
}
