// Package litequeue is the index of lite topics (RocketMQ 5.5's RIP-83):
// millions of small queues, each named (parent topic, lite topic), whose
// entries point into the commit log as a consume queue's do. It sits beside
// consumequeue and index, under store, and imports only mmap and the
// file-system seam (internal/vfs, internal/durable). docs/lite-topics.md is
// the design; docs/storage.md's "Lite topics" section the summary.
//
// # Files
//
// A directory holds:
//
//   - block files, named by their start byte (20 digits), Options.FileSize
//     bytes each (64 MiB), cut into 512-byte blocks. A block belongs to one
//     lite topic and holds a 32-byte header and 24 entries of 20 bytes
//     (commit-log offset int64, size int32, tag code int64, big-endian:
//     the consume queue's entry). Header: magic "LQB1" (4), lite id (4),
//     generation (4), CRC-32C of bytes 0–11 and 16–27 (4), queue offset of
//     the first entry (8), the previous block's number (4; 0xFFFFFFFF none),
//     the next block's number (4; 0 until the next exists, not under the
//     CRC). A lite topic's blocks are a doubly linked chain; its block k
//     holds queue offsets [24k, 24k+24).
//   - JOURNAL: an append-only log of records (length, CRC-32C, payload):
//     a lite topic's creation (id, generation, parent, name), its deletion,
//     and a lite consumer group's offset (group, parent, name, offset).
//     Rewritten whole (atomic replace) when it grows past four times what
//     it would take to write the live state.
//   - TABLE: written at a clean Close only (atomic replace): every live lite
//     topic's head and tail block, min, max, last commit-log offset and
//     last store time, the allocation point, and a CRC-32C. Open loads it
//     and removes it, so a crash after Open takes the rebuild path.
//
// # Invariants
//
//  1. The commit log is the truth: the index is derived from it in
//     commit-log order by one writer (the store's dispatcher), and
//     Open + TruncateFrom + re-dispatch rebuild it. Append of an entry
//     whose commit-log offset is not above the lite topic's last one is a
//     re-dispatch and changes nothing.
//  2. Queue offsets are dense per lite topic, from 0, in commit-log order.
//  3. No file, descriptor, mapping or goroutine per lite topic: blocks are
//     allocated by bumping one position through the newest file; every
//     block file is mapped once (one mapping per 131,072 blocks); the only
//     descriptors held are the journal's and the newest block file's.
//  4. Memory per lite topic is a fixed 56-byte slot, 8 bytes of hash table
//     (at half load) and its name in an arena: no pointer per lite topic,
//     so the garbage collector does not scan them.
//  5. A lite topic's creation record reaches the journal's file, synced,
//     before Flush syncs any block of it: a checkpoint written after Flush
//     never covers an entry whose lite topic a rebuild could not name.
//  6. Open trusts no file it has not checked: TABLE by its CRC and by the
//     header of every tail block it names (any mismatch: rebuild); the
//     journal by each record's CRC (the first bad one ends it, and it is
//     cut there); a block by its magic, CRC, lite id, generation and first
//     offset, and by its place in its lite topic's chain (below).
//
// # Recovery
//
// Open replays the journal (names, deletions, offsets), then either loads
// TABLE (clean) or rebuilds (crash): every block header of every file is
// read once, in allocation order. A block of no live lite topic (deleted,
// or created after the last Flush, so never named in the journal) has its
// header cleared. A lite topic's first valid block starts its chain; each
// later one extends it when it is the next (first offset 24 more, prev the
// chain's tail; next pointers are rewritten on the way), and one that is
// not breaks the chain: it and the lite topic's later blocks are cleared.
// Flush syncs every block written before it, so what follows a break was
// never synced: it lies past the checkpoint and is dispatched again. The
// tail's entries are counted up to the first unwritten one, and the last
// entry's store time is asked of Options.StoreTime. The allocator resumes
// after the last valid block. The store then calls
// TruncateFrom(dispatched): entries at or above the checkpoint's
// dispatched offset (and unwritten ones before them: a power loss can keep
// a block's header and lose its last entries) are dropped and appended
// again by re-dispatch, with the same offsets (the dispatcher sees the
// same records in the same order).
//
// # Durability
//
// Appends are not synced. Flush writes the journal's pending records and
// fdatasyncs it, then msyncs every block file written since the last Flush.
// A crash loses at most the offsets committed since the last Flush, as the
// consumer offsets file does; entries are rebuilt from the commit log.
//
// # Who may call what
//
// One goroutine (the dispatcher) calls Append, in commit-log order;
// TruncateFrom runs with that goroutine stopped (recovery, a replica's
// truncation). Any goroutine calls the rest, DeleteBelow (retention)
// included. One RWMutex guards the table
// and the files: writers (Append, deletion, retention) hold it exclusively,
// readers (Read, Offsets, ForEach) shared, copying entries out of the
// mapping before they return; files are unmapped only under the exclusive
// lock, so readers need no mapping reference. Offsets have their own mutex;
// the journal's pending buffer another. Lock order: mu → omu → jmu.
package litequeue
