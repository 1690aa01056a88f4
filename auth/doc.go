// Package auth authenticates RocketMQ requests and signs them: the remoting
// protocol's AccessKey/Signature extension fields (what RocketMQ 4.x and
// 5.x brokers verify, and what rocketmq-client-go's primitive.Credentials
// and the Java client's AclClientRPCHook send) and RocketMQ 5's gRPC
// "authorization" header (MQv2-HMAC-SHA1 over x-mq-date-time).
//
// It holds no users: a caller looks the access key up in its own table
// (package acl) and verifies the request with that user's Key. It imports
// only package protocol.
//
// # The remoting signature
//
// Signature = base64(HMAC-SHA1(secret, content)), where content is the
// values of the request's extension fields, sorted by key, concatenated,
// followed by the body. Exactly as the Java broker builds it
// (DefaultAuthenticationContextBuilder and AclUtils.combineRequestContent):
//
//   - every field but Signature takes part, AccessKey and SecurityToken
//     included; a key sent twice counts once, with its last value (the
//     broker decodes into a hash map);
//   - _UNIQUE_KEY_QUERY is left out of requests whose version is at most
//     V4_9_3 (ordinal 399), whose clients added it after signing;
//   - keys sort by their bytes (Java sorts by UTF-16 code units; the two
//     orders agree on the ASCII field names every client sends);
//   - values and the body are taken as the bytes on the wire.
//
// rocketmq-client-go leaves SecurityToken out of what it signs but sends
// it: a request whose signature fails with the token in the content is
// checked once more without it, so those clients are accepted too (the
// token itself is not a secret and is not checked by the Java broker
// either). The remoting signature has no timestamp or nonce: a recorded
// request can be replayed as it is (only TLS prevents recording it).
//
// # The gRPC header
//
// authorization: MQv2-HMAC-SHA1 Credential=AK/..., SignedHeaders=x-mq-date-time, Signature=HEX
// with HEX = hex(HMAC-SHA1(secret, x-mq-date-time)) and x-mq-date-time in
// the form 20060102T150405Z. ParseV2 reads it as the Java proxy does
// (Credential's first part is the access key; other items are ignored);
// CheckDateTime bounds the clock skew, which bounds how long a captured
// header can be replayed. Note that rocketmq-clients' Go client writes its
// local time with a literal Z: clients in another zone than UTC need
// TZ=UTC or a larger MaxSkew.
//
// # Cost
//
// Key pools its HMAC state: Verify and Sign allocate nothing in the
// steady state. A remoting verification costs one HMAC-SHA1 over the
// header values and the body (about a microsecond for 1 KiB on this
// project's 2-core VM; see docs/benchmarks.md).
package auth
