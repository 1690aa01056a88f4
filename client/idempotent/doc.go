// Package idempotent makes a consumer's listener consume each message key once,
// however many times the message is delivered. RocketMQ delivers at least once:
// a producer retrying a send whose acknowledgement was lost stores the message
// twice (with the same UNIQ_KEY), and a rebalance, a lost offset commit or a
// consumer restart delivers messages again. A Guard wraps a listener
// (client.ConcurrentListener or client.OrderlyListener) and keeps, in a Store
// shared by the group's consumers, a small state machine per key:
//
//	absent ──TryBegin──► processing (owner, lease) ──listener succeeds──► done (TTL)
//	   ▲                    │    │  ▲                                          │
//	   │   listener fails   │    │  └── renewed every RenewEvery while         │
//	   └──── (Release) ─────┘    │      the listener runs                      │
//	   ▲                         └── lease expires (the owner died):           │
//	   │                             the next TryBegin takes it over           │
//	   └──────────────────────── TTL expires ──────────────────────────────────┘
//
// For each message of a batch the Guard takes the key (KeyBy; default the
// UNIQ_KEY message id) and asks the store to begin it:
//
//   - absent, or processing under an expired lease: the key is now held by this
//     Guard; the message is handed to the listener. While the listener runs, a
//     renewal timer (one per listener call, armed only while the call lasts, no
//     goroutine unless it fires) renews every held key. When the listener returns,
//     each message it consumed moves to done for DoneTTL, and each one it failed
//     (or all of them, if it panicked) is released so the redelivery runs it again.
//   - done: a duplicate. It is acknowledged without calling the listener.
//   - processing by someone else under a live lease: the message is retried later
//     (ConsumeRetryLater; ConsumeSuspend for orderly listeners), never run
//     concurrently with the holder.
//   - a store error: retried later too; the listener never runs unguarded.
//
// Messages whose key is empty are handed to the listener unguarded. Two messages
// of one batch with the same key run once. When only some messages of a
// concurrent batch must be retried, the batch's ConsumeContext.AckIndex
// acknowledges those before the first of them (the rest are redelivered; the
// ones that were done are skipped then).
//
// # What is guaranteed
//
// The listener runs at most once per key per lease: never twice concurrently,
// never again once the key is done (within DoneTTL). It runs again when it
// failed, and when its consumer died (or stopped renewing for a whole lease)
// before the key was done: a crash between the listener's side effect and the
// done record makes the message run again after the lease, because losing the
// message would be worse. A listener whose effects must not happen twice even
// then should make them conditional on the key too (an upsert, a unique
// constraint), or use a transaction spanning the effect and its own done mark.
// When a renewal finds the key held by someone else, the listener's context is
// cancelled with cause ErrLeaseLost (see CancelOnLeaseLost) and Stats counts it.
//
// Stores differ in how far "shared" reaches: MemoryStore (this process only),
// BrokerStore (every process of the group, through the broker's own topic and
// index, eventually consistent: read its documentation), and the Redis store in
// the separate module github.com/apogeemq/apogee/client/idempotent/redisstore.
// Package storetest checks any Store against the interface's contract.
//
// # Ownership and concurrency
//
// A Guard, MemoryStore and BrokerStore are safe for concurrent use. A Guard
// does not keep the messages it is given beyond the listener call. A Guard's
// owner name identifies it in the store (one per Guard: two Guards of one
// process are two owners); keys it holds are recorded in a map private to the
// Guard, so a duplicate delivered to another goroutine of the same Guard while
// the first runs is retried without asking the store.
package idempotent
