// Package consumequeue stores Apogee's consume queues: per topic and queue, a
// dense sequence of fixed 20-byte entries (commitlog offset int64, record size
// int32, tag code int64, big-endian) that point into the commitlog, in
// RocketMQ's file format.
//
// # Files
//
// A queue lives in <root>/<topic>/<queueId>/, as files named by their start
// BYTE offset, 20-digit zero-padded, each Options.EntriesPerFile entries long
// (300,000 entries = 6,000,000 bytes by default). Queue offset N is at byte
// N*20 of the queue's file sequence. Files are preallocated to full size when
// created, so unwritten entries read as 20 zero bytes. RocketMQ's blank entry
// (offset 0, size 0x7FFFFFFF, tag 0) pre-fills a queue that starts at a
// non-zero offset; a queue whose old files were cleaned up has files only from
// the one holding its MinOffset.
//
// # Invariants
//
//   - Entries are written densely and in commitlog order: within a queue the
//     written entries are a prefix of its file sequence (zeros after), and
//     commitlog offsets increase. Append enforces both.
//   - MaxOffset is published (atomically) after the entry's bytes are written;
//     readers read only below the MaxOffset they loaded, so they never see a
//     half-written entry. MinOffset is raised before files are deleted.
//   - TruncateAfter, the only rewrite below a published MaxOffset, runs under
//     a sequence lock: readers retry a read that overlapped it.
//   - Every touch of a file's bytes happens under an mmap reference
//     (Acquire/Release). A file's mapping is created on first use (read-only
//     for readers, read-write for the tail the writer appends to) and is also
//     referenced by the set until Sweep finds it idle or the file is deleted;
//     the region is unmapped when the last reference goes. Files are removed
//     with unlink, never truncated, so a reader's mapping stays valid.
//     Readers of unmapped (cold) files map them too; no pread path.
//   - No file descriptor is kept open: files are opened to be mapped, synced
//     or created, and closed at once.
//
// # Who may call what
//
// One goroutine (the store's dispatcher) calls Queue.Append and
// Queue.TruncateAfter (and Set.TruncateAfter). Any number of goroutines call
// Get, Read, LastEntry, SearchByTime and the offset accessors. Set.Flush,
// Set.Sweep, Set.DeleteBelow, Set.ForEach and Set.MaxCommitLogEnd may run from
// other goroutines at the same time. DropQueue, DeleteTopic and Close must not
// race with Append on the same queue; readers of a dropped queue get ErrClosed.
//
// Lock order: Set.mu (only to copy the queue table, never held while calling
// a queue) → Queue.wmu → Queue.flushMu → segment.mu.
//
// # Recovery
//
// OpenSet lists the directories and, per queue, checks the file names and
// sizes (a missing middle file, a misaligned name or a wrong size marks the
// queue damaged: see Set.Damaged and Set.DropQueue), binary-searches the last
// file for the end of its data and validates the Options.RecoveryWindow
// entries before it, zeroing any torn or corrupt tail. Damage further back
// (e.g. pages lost in a power failure more than a window before the end) is
// not detected there; the store's recovery truncates queues to the commitlog
// (TruncateAfter) and re-dispatches, which reports conflicts (ErrConflict).
//
// # Durability
//
// Appends are not synced. Flush msyncs each queue's range written since the
// last Flush (or fdatasyncs the file if it was unmapped meanwhile) and fsyncs
// directories that gained or lost files; the store calls it about every
// second. Queues are rebuilt from the commitlog after a crash, so this is lazy
// by design. MinOffset advances made by DeleteBelow inside a file are not
// persisted: call DeleteBelow with the commitlog's minimum offset after OpenSet.
package consumequeue
