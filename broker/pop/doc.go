// Package pop is the bookkeeping of POP consumption, RocketMQ 5's
// message-granularity model: consumers of a group receive single messages
// (Pop), each invisible to the rest of the group until it is acked (Ack) or
// its invisible time passes, when the next pop delivers it again; a
// consumer may move that time (ChangeInvisible). docs/simple-consumer.md
// describes the behaviour from the client's side.
//
// The package knows no wire format: the messaging core (broker/core's Pop,
// Ack, ChangeInvisible) checks the topic, queue and group and calls a
// Manager; a front end (the remoting handlers in package broker, a gRPC
// front end later) decodes, calls the core, encodes, and holds a pop that
// found nothing for long polling. Everything the manager needs from the
// broker — the store's queues, the offset table, the dead-letter topic, the
// state file — comes through Host (broker/core/host_pop.go). The clock is the
// time package's: tests control it with testing/synctest.
//
// # State and invariants
//
// Per (group, topic, queue), in memory:
//
//   - next: the first queue offset never handed out to the group. Every
//     offset below it is done (acked, rejected by the pop's filter,
//     dead-lettered, or removed by retention) or in flight.
//   - inflight: offset → {visibleAt, popTime, attempts, message group}, for
//     offsets below next only. A popped message is invisible until
//     visibleAt (wall clock, unix ms); once that passes without an ack, the
//     next pop of the group hands it out again (attempts + 1, the copy's
//     reconsumeTimes raised to attempts - 1) before any new message of
//     its queue; a priority pop (Request.Priority) takes it after the new
//     messages of every queue instead. A
//     message delivered 1 + RetryMax times that becomes visible once more
//     is stored in %DLQ%<group> instead (Host.Put, no flush wait) and is
//     done, whether or not that put succeeds.
//   - FIFO: an orderly pop hands out the messages of a message group
//     (SHARDING_KEY or __SHARDINGKEY) in order, consecutive ones in one
//     answer (a batch, as RocketMQ's orderly pop returns consecutive
//     messages of a queue, up to the pop's max); a message whose group has
//     an earlier message in flight from an earlier pop (or one that could
//     not join this answer) is kept as a waiting entry (popTime 0) until
//     that one is done. Groups do not block each other.
//   - A receipt handle names a delivery by its popTime. Ack and
//     ChangeInvisible with the popTime of an older delivery fail with
//     ErrStaleHandle; ChangeInvisible gives the delivery a new popTime
//     (now, and always greater than the old one), so the old handle is
//     void. An ack of a message already done succeeds.
//   - At most MaxInflight entries per (group, topic, queue): a queue at
//     the limit hands out redeliveries only.
//   - Every change of a queue's state commits the group's consumer offset
//     (Host.CommitOffset): the lowest offset not yet done.
//
// A group new to a queue starts at its committed offset, else at the
// queue's first message (Request.FromFirst) or its last one.
//
// # Persistence and what a crash costs
//
// Persist encodes the whole state as JSON and writes it with
// Host.WriteState (the broker: config/popState.json, written atomically with
// a .bak). The persister goroutine (Start) does so every
// Config.FlushInterval when the state changed; Stop does it a last time.
// Load reads it back at start. After a crash, what changed since the last
// write is lost — at most FlushInterval of it: a lost ack means the message
// is delivered again (delivery is at least once), a lost pop means the
// message is visible again at once. After a clean stop nothing is lost:
// in-flight messages stay invisible until their visibleAt and handles issued
// before the restart still work (visibleAt and popTime are wall-clock).
//
// # Locking and goroutines
//
// Manager.mu guards every queue's state; pops of all groups are serialised
// by it (a pop copies the records it hands out, so nothing is pinned
// afterwards; not the broker's hot path). It is held while the Host is
// called: reads of the store, offset commits, the dead-letter topic and
// put. So the Host's locks come after mu, and no Host method may call back
// into the Manager. persistMu serialises state-file writes and is taken
// before mu; the state is copied under mu, then encoded and written under
// persistMu alone.
// runMu (Start, Stop) is a leaf. Counters are atomics.
//
// The only goroutine is the persister, between Start and Stop; Stop waits
// for it. Held pops (long polling) are the caller's: it re-runs Pop with the
// same Request. Redelivery is lazy (the next pop after a message's
// invisible time hands it out), so the manager tells a held pop when to
// look: a pop that finds nothing sets Result.NextVisible, the earliest
// visibleAt of the group's in-flight messages it passed over, and
// OnVisible's listeners hear, after mu is released, of what makes messages
// visible sooner than that (ChangeInvisible's new time; an Ack that
// unblocks a FIFO message group or frees room in a queue at MaxInflight).
package pop
