// Package protocol implements RocketMQ's "remoting" wire format: frames, the JSON and
// ROCKETMQ (binary) command headers, request and response codes, typed custom headers
// carried in extFields, and the JSON bodies exchanged by clients, brokers and name servers.
//
// It is pure encode/decode: no sockets, no goroutines, no global state, and it imports
// nothing from this module. remoting, namesrv, broker and client build on it.
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
//     Command. A slice returned by ExtFields.Get (and the []byte fields of hot-path typed
//     headers filled by Decode, which are such slices) is valid until the Command is
//     decoded into again, Reset, or that ExtFields is modified by Set, Delete or Reset.
//     Copy (string(v)) what must outlive that.
//   - Typed headers hold no buffers of their own: Encode copies their values into the
//     ExtFields it is given.
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
