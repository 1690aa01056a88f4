// Package store is Apogee's message store: it ties the commit log, the
// consume queues and the key index together, and is the engine the broker
// stands on.
//
// # Shape
//
//	Put ──► encode (pooled buffer, CRC) ──► commitlog.Append ──► [sync mode] WaitFlushed
//	                                             │ Assigner (inside the append critical section):
//	                                             │ queue offsets, dense per queue, in log order
//	                                     dispatcher goroutine (woken by appends)
//	                                       ├─► consumequeue entries (commit-log offset, size, tag code)
//	                                       ├─► index entries (UNIQ_KEY and every KEYS item)
//	                                       └─► OnArrival (the broker wakes long-polling pulls)
//	Get ──► consume-queue entries ──► filter by tag code ──► commit-log views (zero copy)
//
// The directory holds commitlog/ (segments), consumequeue/<topic>/<queue>/,
// index/, the store's checkpoint, the abort marker and the lock file.
//
// # Invariants
//
//  1. The commit log is the truth. Consume queues and the index are derived
//     from it, in commit-log order, by one goroutine, and can be rebuilt from it.
//  2. Queue offsets are assigned inside the commit log's append critical
//     section, so they are dense per queue and increase in log order. Records
//     of prepared or rolled-back transactions get none and are not dispatched
//     to consume queues (rolled-back ones are not indexed either).
//  3. A message is visible to Get only once dispatched: MaxOffset is the
//     consume queue's, never the counter Put assigns from.
//  4. The checkpoint's dispatched offset is written only after the consume
//     queues and the index were flushed up to it, so after a machine crash
//     re-dispatching from it restores both. Re-dispatch is idempotent.
//  5. Views returned by Get, ReadMessage and QueryByKey pin commit-log segments
//     until released; the caller must release each exactly once.
//  6. A Put appends only once the dispatcher is at most
//     Options.MaxDispatchLag bytes behind the log (so the gap stays within
//     that plus what concurrent Puts append), except while dispatch cannot
//     progress (full disk, unreadable record) or the store is closing.
//     Dispatch runs in batches of up to 16 records of one segment, all
//     decoded and prefetched before any is written (docs/storage.md).
//
// # Replication
//
// A master's store serves its log raw (ReadLog, woken by LogWritten) to
// package ha, which records each connected slave (AddReplica, Replica.Ack).
// With Options.SyncReplicas, a message is durable (DurableOffset,
// WaitDurable, OnDurable) only once that many replicas acknowledged it:
// ReplicatedOffset, which only moves up, is the need-th highest
// acknowledgement among the connected replicas. A wait checks first that
// enough replicas are connected within MaxReplicaGap of the message
// (ErrReplicaNotAvailable at once otherwise), then waits for the local flush
// and for the acknowledgements within SyncFlushTimeout (ErrReplicaTimeout);
// the message is stored whatever the answer.
//
// A replica's store (Options.Replica, SetReplica) refuses Put with ErrReplica and grows
// by AppendReplicated (validated by the commit log, dispatched as any
// append). ResetReplica starts it over at a later offset under the
// dispatcher's lock: the log's old segments are set aside and every consume
// queue and index entry below the new base goes, as after retention.
// TruncateReplica cuts it back to the last offset it shares with a new
// master; the bytes cut are kept in one file (commitlog.Log.TruncateTo),
// named in its WARN with the size kept. Clean removes what truncations and
// restarts kept after TruncatedRetention, and the oldest truncation files
// beyond TruncatedMaxBytes (commitlog.Log.RetainTruncated). A
// replica assigns no queue offsets (its records carry the master's), so its
// queue-offset counters are not kept; opening its directory as a master
// starts them from the consume queues, as every Open does, and so does a
// promotion.
//
// # Role changes in place
//
// SetReplica switches the mode of an open store (IsReplica reads it;
// Options.Replica is only the mode at Open). Demotion sets the flag Put
// checks, then has the commit log refuse Append under its append lock, so
// once it returns no Put appends any more and a Put either stored its
// message or failed with ErrReplica; the hot path pays one atomic load and
// one bool read inside the critical section it takes anyway. Promotion
// (with replication stopped by the caller) dispatches everything written,
// starts every queue-offset counter at its queue's MaxOffset as Open does,
// clamps the replicated offset to the log's end, and lets Put in again.
// Replicas (SyncReplicas, SetSyncReplicas, SetInSyncReplicas) are required
// only of a master: on a replica DurableWaits, DurableOffset and
// WaitDurable mean the flush alone; waits for what Put stored as a master
// (OnDurable, WaitPutDurable, Put's own) still need the replicas after a
// demotion.
//
// The confirm offset (ConfirmOffset): on a master whose replicas a
// SyncStateSet requires (SetInSyncReplicas with need > 0), the dispatcher
// stops where the required replicas acknowledged (or at the log's end when
// the store last became master, if that is higher), and the replicas'
// acknowledgements wake it: a message reaches the consume queues only once
// a failover cannot take it back. Elsewhere it dispatches to the written
// position.
//
// Lock order: roleMu → the dispatcher's mu → the commit log's locks
// (SetReplica, ResetReplica); replicaSet.mu is taken alone (Ack, Remove,
// waits, SetReplica's clamp).
//
// # Recovery order
//
// The commit log recovers first (clean path, or scan-validate-truncate). Then
// consume queues and the index are truncated to the log's end, damaged queues
// are dropped, and everything from the checkpoint's dispatched offset (from the
// log's start after a crash without checkpoint, or when a whole consume-queue
// or index directory is missing; from the first range the log lost, when
// that lies lower: the dispatched offset can pass what the log had synced)
// to the end is dispatched again before Open returns. Re-dispatch fills in
// the all-zero entries a power loss left in the queues and rewrites an
// entry that differs from its record (torn). Only then are the entries
// that point into a range the log lost (and the all-zero ones among them)
// made lost-message entries, and each queue's minimum raised to the log's
// (earlier, all-zero entries would pass for cleaned-up ones). Queue-offset
// counters start from the consume queues' max offsets.
package store
