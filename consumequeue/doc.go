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
// N*20 of the queue's file sequence. Files are created sparse at full size,
// so unwritten entries read as 20 zero bytes, and the writer reserves blocks
// (fallocate) 128 KiB ahead of itself: thousands of queues cost disk for what
// they hold, not 6 MB each, and a full disk fails an Append instead of
// faulting a write through the mapping. RocketMQ's blank entry
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
//   - TruncateAfter and the filling of an all-zero hole by Append, the only
//     rewrites below a published MaxOffset, run under a sequence lock: readers
//     retry a read that overlapped one.
//   - Every touch of a file's bytes happens under an mmap reference
//     (Acquire/Release). A file's mapping is created on first use (read-only
//     for readers, read-write for the tail the writer appends to) and is also
//     referenced by the set until Sweep finds it idle or the file is deleted;
//     the region is unmapped when the last reference goes. Files are removed
//     with unlink, never truncated, so a reader's mapping stays valid.
//     Readers of unmapped (cold) files map them too; no pread path.
//   - The only file descriptors kept open are those of tails being written,
//     for the first write into each page (a pwrite, see segment.touched): at
//     most 1,024 per set (past that a file is opened and closed for each such
//     write), closed when the tail rolls, when Sweep finds it idle, and when
//     the file is retired. Other files are opened to be mapped, synced or
//     created, and closed at once.
//
// Every file operation goes through Options.FS (internal/vfs), the
// clean-shutdown record is written with durable.WriteFile, and directories
// are synced with durable.SyncDir. A file that cannot be read or written
// while a queue is recovered makes OpenSet fail with the cause: unlike a
// file that fails a check, it proves no damage, and a queue dropped for it
// would be rebuilt without the offsets of records retention removed.
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
// sizes (a missing middle file, a misaligned name, a wrong size, or a full
// file ending in an unwritten entry marks the queue damaged: see Set.Damaged
// and Set.DropQueue). It binary-searches the last file for the first all-zero
// entry and validates the Options.RecoveryWindow entries before it (and the
// previous file's last entry when the window reaches the file's start): the
// queue ends before the first torn or corrupt entry, blank after a message,
// or commitlog offset going backwards. If the window's first entry is already
// bad, the search landed past a hole and is repeated below it. Non-zero bytes
// after the end are zeroed (a window's worth, or the whole rest of the file
// when the tail was damaged) and the file is sized to full length again.
// No file is mapped and no file descriptor stays open.
//
// After a crash (not after a clean shutdown) a file followed by others
// that ends with an unwritten or torn entry is where the torn tail begins:
// Flush syncs a queue's files in order, so the files after it hold nothing
// synced; they are removed and the tail is cut in that file. (A power loss
// can make a new file's name durable before the last entries of the file
// before it: a journal commits a create whenever it likes.)
//
// A process crash leaves a clean prefix (the page cache has every byte), so
// this finds the end exactly. After a power failure, pages lost more than a
// window before the end are not detected here: such a hole reads as all-zero
// entries until the store's re-dispatch, which fills all-zero entries in
// (Append below MaxOffset), and reports a differing entry as ErrConflict.
// The store truncates every queue to the recovered commitlog (TruncateAfter)
// before it re-dispatches.
//
// # Durability
//
// Appends are not synced. Flush msyncs each queue's range written since the
// last Flush (or fdatasyncs the file if it was unmapped meanwhile) and fsyncs
// directories that gained or lost files before it started (the flags are
// taken before the range is read, so a new file's name is never made
// durable ahead of the entries before it); the store calls it about every
// second. A new file's size is fdatasynced when it is created, so its name
// is never durable over an empty file. Queues are rebuilt from the commitlog after a crash, so this is lazy
// by design. MinOffset advances made by DeleteBelow inside a file are not
// persisted: call DeleteBelow with the commitlog's minimum offset after OpenSet.
package consumequeue
