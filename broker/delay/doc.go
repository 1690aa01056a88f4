// Package delay runs RocketMQ's delay levels (the DELAY property).
//
// A message sent with DELAY = n (clamped to the last level) is stored by
// the broker in the schedule topic (Topic, SCHEDULE_TOPIC_XXXX) queue n-1,
// with its real topic and queue in REAL_TOPIC / REAL_QID. The store asks
// the Scheduler for that record's consume-queue tag code (TagCode): its
// delivery time, store time + the level's delay. One scanner per level
// reads its queue in order with the entries alone, re-stores every due
// message to its real topic through the host's inner put (DELAY removed,
// WAIT=false, the tag code computed from TAGS again by the store), and
// sleeps until the next message is due, or, when its queue is empty, until
// the store reports an arrival (Arrived).
//
// # Invariants
//
//   - Within a level, delivery times never decrease along the queue (one
//     delay per level, store times non-decreasing), so a scanner stops at
//     the first entry not due: nothing behind it is due either. A clock
//     that went back is handled by delivering an entry whose due time is
//     further away than the level's delay at once.
//   - offsets[i] is the next queue offset of level i+1 to deliver: every
//     entry below it has been stored to its real topic (or skipped: blank
//     entries, and records without a valid REAL_TOPIC / REAL_QID). It moves
//     only forward, only after the put of the entries it passes returned,
//     except to a queue's min offset (retention removed entries before
//     their delivery: logged) or, at Start, down to a queue's max offset
//     (an async-flush crash lost entries the persisted offset had passed).
//   - A re-put batch holds at most reput.MaxBatchLength records and
//     reput.MaxBatchBytes bytes (at least one record); its records stay
//     pinned until the put returns.
//
// # Goroutines and locks
//
// Start launches one scanner goroutine per level; Stop closes the stop
// channel and waits for them (a put in flight completes first). Each
// scanner owns its scratch and record reader. mu guards the offsets and
// their change count; persistMu serialises Persist and is taken before mu.
// Both are leaves: nothing else is locked, and the host is not called,
// while mu is held; Persist calls the host's WriteState under persistMu
// alone. TagCode and Arrived take no lock and never block: the store's
// dispatcher calls them.
//
// # Crash cost
//
// The progress file (StateFile, RocketMQ's config/delayOffset.json) is
// written by Persist, which the broker calls every ProgressFlushInterval
// when the offsets changed and at Shutdown. After a crash the scanners
// resume from the last written offsets: what was delivered after that write
// is delivered again (at least once, never lost). The records themselves
// are the store's: a delayed message acknowledged in sync-flush mode
// survives a crash like any other.
package delay
