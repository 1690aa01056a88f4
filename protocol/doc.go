// Package protocol implements RocketMQ's "remoting" wire format: frames, the JSON and
// ROCKETMQ (binary) command headers, request and response codes, typed custom headers
// carried in extFields, and the JSON bodies exchanged by clients, brokers and name servers.
//
// It is pure encode/decode: no sockets, no goroutines, no global state, and the only
// package of this module it imports is internal/javacompat (Java's number parsing).
// remoting, namesrv, broker and client build on it.
//
// # Frames
//
//	| length int32 | type<<24 | headerLen (int32) | header (headerLen bytes) | body |
//
// length counts everything after itself (4 + headerLen + bodyLen). The type byte selects
// the header encoding: 0 = JSON, 1 = ROCKETMQ binary. All integers are big-endian.
// ReadFrame reads one frame (bounded by a maximum size checked before allocating),
// DecodeFrame parses it into a Command, AppendFrameHeader / AppendFrame encode one.
//
// # Ownership and lifetimes
//
//   - A Command is owned by its caller and meant to be reused: decoding into an existing
//     Command reuses its buffers, so the steady state decodes with zero allocations.
//   - After DecodeFrame, Command.Body aliases the frame passed in. It is valid only as long
//     as the caller keeps that frame buffer unchanged (for ReadFrame's buffer: until the
//     next ReadFrame into it).
//   - Remark and every key and value held by ExtFields live in buffers owned by the
//     Command. A slice returned by ExtFields.Get (and the []byte fields of typed headers
//     filled by Decode, which are such slices) is valid until the Command is decoded
//     into again, Reset, or that ExtFields is modified by Set, Delete or Reset. Copy
//     (string(v)) what must outlive that.
//   - Typed headers hold no buffers of their own: Encode copies their values into the
//     ExtFields it is given.
//
// # Typed headers
//
// A request or response header (RocketMQ's CommandCustomHeader) is a struct whose
// fields carry rmq tags; the tags are the header's table, and its Decode and Encode
// (and EncodeV2 where it has short keys) are generated from them into headers_gen.go
// by protocol/internal/headergen:
//
//	type PullMessageRequest struct {
//		ConsumerGroup []byte `rmq:"consumerGroup,required"`
//		QueueID       int32  `rmq:"queueId,required"`
//		MaxMsgBytes   int32  `rmq:"maxMsgBytes,omitempty"`
//		BrokerName    []byte `rmq:"bname,omitempty"`
//		...
//	}
//
// The tag is the extFields key, then options: required; short=K (the SEND_MESSAGE_V2
// key); alias=K (another spelling Decode accepts); omitempty (Encode leaves a zero or
// default value out); default=N (an integer's value when absent); has=F (F, an untagged
// bool field, records presence: Decode sets it when the key comes with a value, and
// Encode writes the key only when F is true). The Go type is the kind: []byte (a view,
// no copy), string (a copy), int32, int64, bool. The keys, which are optional and the
// number formats follow the Java broker's header classes and rocketmq-client-go.
//
// To add or change a header, edit its struct and run
//
//	go generate ./protocol
//
// then commit headers_gen.go with it; a test (protocol/internal/headergen) fails while
// the generated file is stale, and testdata/headers.golden pins what every header
// writes and reads, so a change of wire behaviour shows as a diff there.
//
// The generated codecs follow one set of rules. Decode resets the header, then reads
// every key it knows in one pass over the pairs; the last occurrence of a duplicated key
// wins, and unknown keys are ignored. An empty value counts as absent: a required key
// that is missing or empty gives a *FieldError wrapping ErrMissingField, an optional one
// leaves the zero value (or the default), and a has= flag stays false. An unparsable
// number or boolean gives a *FieldError wrapping ErrBadField. Numbers are decimal text
// as Java's Integer.parseInt and Long.parseLong read it; booleans are true/false in any
// letter case, or 1/0. Encode writes decimal numbers and "true"/"false", appending
// without a search when the ExtFields holds no pair yet (a command just reset) and
// replacing existing keys otherwise. Neither allocates, except Decode's copy of each
// non-empty string field. Callers test presence through the header (HasX fields,
// defaults), never by looking up wire keys.
//
// # Compatibility rules that shape the API
//
//   - extFields values are always JSON strings on the wire; the official Go client
//     (rocketmq-client-go) drops a whole response whose extFields holds a number.
//     ExtFields therefore only stores bytes; SetInt/SetBool format decimal text.
//   - A response must carry FlagResponse and echo the request's opaque (see
//     Command.InitResponse).
//   - The Go client always sends JSON headers; it accepts both header types in responses.
//   - Route data (TopicRouteData) is hand-parsed by the Go client: it must be compact
//     (no whitespace) and brokerAddrs must be present; see TopicRouteData.AppendJSON.
//
// Decoders never panic and never allocate more than a small multiple of their input on
// malformed input; they return errors wrapping ErrBadFrame, ErrBadHeader,
// ErrFrameTooLarge, ErrMissingField, ErrBadField or ErrBadBody.
package protocol
