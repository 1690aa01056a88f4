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
// Beside the segments, the file "checkpoint" holds the last flushed offset and
// the clean-shutdown flag.
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
//     its file closed and unlinked only when the last pin is released. Files are
//     never truncated while mapped.
//  5. The next segment is created, fallocated and mapped by a background
//     goroutine ahead of need; the writer takes it without blocking in the
//     common case. If it cannot be created (disk full), appends fail with
//     ErrDiskFull and succeed again once space returns; the log is unchanged.
//  6. Recovery after a crash scans from the checkpoint's segment, validates each
//     record (magic, size bounds, PHYSICALOFFSET equal to its position, body
//     CRC), and truncates at the first invalid one: the rest of that segment is
//     zeroed and later segments are removed. Open reports what was dropped.
//
// # Lock order
//
// Log.mu (append) → Log.segMu (segment list). The flusher and allocator never
// take Log.mu.
package commitlog
