// Package commitlog is Apogee's append-only log: every topic's messages, one
// after another, in fixed-size memory-mapped segment files.
//
// # Layout
//
// Offsets are global byte positions. Segment files live in one directory and
// are named by their start offset, 20 decimal digits zero-padded; every
// segment has the same size (Options.SegmentSize). A record never spans two
// segments: when one does not fit (with 8 bytes to spare) the rest of the
// segment is closed with an 8-byte blank-end marker (TOTALSIZE = the bytes
// left, MAGIC = message.MagicBlank) and the record starts the next segment.
// Beside the segments, the file "CHECKPOINT" holds the last flushed offset and
// the clean-shutdown flag, the directory DamagedDir what recovery set aside,
// the files "recycle-<segment name>" the retired segment files kept for reuse
// (Options.RecycleSegments), and the file "RECYCLED" the bases of the
// segments that are such files and may still hold an older segment's bytes.
//
// # Invariants
//
//  1. Appends are serialised by Log.mu. Records arrive encoded (and CRC'd) by
//     the caller; inside the critical section the log only lays them out,
//     patches PHYSICALOFFSET and STORETIMESTAMP, calls the caller's Assigner,
//     copies the bytes into the mapping and publishes the written position.
//     Nothing inside can fail once layout has secured the segments it needs, so
//     an Assigner's effects never need undoing.
//  2. A record is readable (Read, Acquire) only once the written position, an
//     atomic, covers all of it; reading at or past it is ErrOffsetNotWritten.
//  3. flushed ≤ written. In FlushSync mode a caller waits with WaitFlushed; one
//     fdatasync serves every waiter whose end it covers (group commit). A failed
//     sync is sticky: every later append and wait returns it (ErrLogFailed).
//  4. A reader pins the segment it reads (mmap reference count); retention
//     removes a segment from the list at once, but its mapping is unmapped and
//     its file closed and unlinked only when the last pin is released. Files of
//     retired segments are unlinked oldest first, each unlink made durable
//     before the next (Log.reap), so the files on disk always form one
//     sequence: a crash or a failed unlink never leaves a gap that Open would
//     refuse. Files are never truncated while mapped. Recycling changes the
//     unlink into a rename to a pool name ("recycle-…", not a segment name),
//     which for the sequence is the same; the pool keeps the newest
//     Options.RecycleSegments files and unlinks older ones. Retention for
//     disk pressure first unlinks the pool's files and never adds to it. Only unmapped
//     files reach the pool, so no reader ever sees a file reused.
//  5. The next segment is made by a background goroutine ahead of need; the
//     writer takes it without blocking in the common case. It is a pool file
//     when there is one: its base is first recorded durably in "RECYCLED",
//     then the file is renamed into place (directory synced) and mapped, with
//     no fallocate (its blocks are allocated, its pages likely cached). It is
//     not zeroed (only when most of its pages have left the page cache are
//     its blocks zeroed, by an unsynced FALLOC_FL_ZERO_RANGE, rather than
//     read back), so past the written position it may hold an older
//     segment's bytes. Otherwise it is a new file, created, fallocated and
//     mapped. A base leaves "RECYCLED" once its segment is sealed (blank-end
//     marker) and synced, or recovery zeroed its tail; a registered base
//     whose file is gone, sealed or new is harmless. If no segment can be made (disk
//     full), appends fail with ErrDiskFull and succeed again once space
//     returns; the log is unchanged.
//  6. Open trusts no file it has not checked. After a clean shutdown it
//     still checks every segment's size and name, validates every record of
//     the newest segment (magic, size, PHYSICALOFFSET equal to its position,
//     body CRC) up to the checkpoint's end and the zeros after it
//     (Recovery.Verified). After a crash it validates from the checkpoint's
//     flushed segment. Damage is repaired from what can be proven: a damaged
//     range followed by a valid record becomes a hole (its bytes copied into
//     DamagedDir, then covered by a message.MagicHole marker that readers
//     skip); a segment whose data stops short while later ones hold data is
//     closed early with a blank-end marker; otherwise the log ends at the
//     first invalid record, the rest of that segment is zeroed (after copying
//     aside what should have been durable) and later segments are removed. A
//     short segment file is extended (never shortened) and scanned; a long
//     one, a misnamed one, a missing middle segment or a missing log is
//     ErrLayout unless Options.AcceptLoss. Open reports every lost range
//     (Recovery.Losses) and never writes over a byte it has not copied aside
//     or found zero (or an older segment's, below). In a segment registered
//     in "RECYCLED" the bytes past
//     the synced position (the checkpoint's flushed offset; its written one
//     after a clean shutdown) may be an older segment's: records there must
//     still carry their own position (checked before the CRC), but
//     blank-end and hole markers, which carry none, are not trusted there
//     (a blank-end marker is, once a later segment is found holding data:
//     the writer's roll wrote both), the search for a record after damage
//     runs to the segment's end instead of stopping at zeros, and after a
//     clean shutdown nothing past the recorded end is read. The stale tail
//     after the end is neither lost nor damaged: at most the bytes before
//     the first stale header are reported (unsynced); it is zeroed as any
//     tail. A registered later segment with nothing but stale data (the
//     prepared one at a crash) goes back to the pool without a report. An
//     unreadable "RECYCLED" makes every segment registered.
//  7. A replica's log grows by AppendReplica: another log's bytes at the
//     same offsets, under Log.mu like Append, each record validated as
//     recovery validates it (and leaving room for a blank-end marker) before
//     it is copied; a blank-end marker must close its segment exactly. The
//     bytes after a marker's header are consumed without being copied (in
//     a recycled segment they keep the older bytes: nothing reads them).
//     RestartAt starts a replica's log over, empty, at a later segment
//     boundary: offsets only move up, the old segments are moved into
//     DiscardedDir, and every state a crash can leave on disk opens.
//  8. TruncateTo keeps exactly the bytes it cuts, [off, end), in one file
//     under TruncatedDir named after the range and the time, saved
//     durably (temporary name, fsync, rename, directory fsync) before
//     anything is cut; a failure there leaves the log unchanged. A file
//     under the .cut name is always complete: Open removes the temporary
//     files a crash left and renames (.damaged) any whose header or size
//     is wrong; ReadTruncated checks the payload's CRC. RetainTruncated
//     (the store's cleanup) removes what is older than TruncatedRetention
//     and the oldest files while their total is above TruncatedMaxBytes
//     (DiscardedDir by age alone).
//
// # Files
//
// Every file operation goes through Options.FS (internal/vfs): the
// operating system in production, a fault-injecting wrapper in tests
// (faults_test.go fails each operation of a realistic workload in turn).
// The directory is synced (internal/durable) after a segment file is
// created, renamed into or out of the pool, deleted or set aside, so an
// acknowledged record
// never rests on a directory entry a power failure can lose. The
// checkpoint is a durable.Record. An empty last segment file is a creation
// a crash interrupted, not damage. A segment file under TruncateTo's or
// RestartAt's temporary name (<segment>.truncate, <segment>.restart) is one
// they were building when a crash interrupted them: never part of the log,
// Open removes it.
//
// # Lock order
//
// Log.mu (append, AppendReplica, RestartAt) → Log.allocMu (the prepared
// segment) → Log.segMu (segment list) → flusher.syncMu (a sync round, from
// reading the flushed position to the checkpoint; TruncateTo and RestartAt
// hold it while they move the positions back) → flusher.mu. Log.cutMu
// (saving a truncation's bytes, RetainTruncated) is taken last, under all
// of TruncateTo's locks or alone. The flusher and
// allocator never take Log.mu. Log.wmu (WrittenAfter's waiters), Log.poolMu
// (the pool's files) and registry.mu ("RECYCLED", taken under allocMu or
// alone) are leaves: nothing is taken under them.
package commitlog
