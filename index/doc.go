// Package index is the hash index of Apogee's store: key -> commit-log
// offsets, in RocketMQ's IndexFile format, byte for byte.
//
// # Format
//
// A directory holds files named by their creation time, yyyyMMddHHmmssSSS
// (local time), oldest first by name. Every file has the same size,
// 40 + SlotCount*4 + MaxEntries*20 bytes (420,000,040 with the defaults), and
// is big-endian throughout:
//
//	header  40 bytes: beginTimestamp int64, endTimestamp int64,
//	        beginPhyOffset int64, endPhyOffset int64,
//	        hashSlotCount int32 (slots in use), indexCount int32 (next entry, from 1)
//	slots   SlotCount x int32 at 40 + slot*4: the newest entry of the bucket, 0 = empty
//	entries MaxEntries x 20 bytes at 40 + SlotCount*4 + n*20 (entry 0 unused):
//	        keyHash int32, commit-log offset int64,
//	        time diff int32 (whole seconds since beginTimestamp, clamped to [0, MaxInt32]),
//	        prevIndex int32 (the bucket's previous entry, 0 = end)
//
// The key string is topic + "#" + key and keyHash is |Java String.hashCode|
// of it (Integer.MIN_VALUE -> 0), computed over UTF-16 code units without
// building the string; the slot is keyHash % SlotCount. A file is full when
// indexCount reaches MaxEntries; the next Put syncs it and starts a new one.
//
// # Concurrency and who holds what
//
// One goroutine writes (Put, PutBytes); Query, MaxCommitLogOffset and
// LastUpdate may run from any number of goroutines at once, and Flush,
// DeleteBefore, TruncateAfter and Close may run concurrently with both.
// Readers take no lock: they load an immutable snapshot of the file list and
// hold a reference (mmap Acquire/Release) on each file's mapping while they
// walk it, so a file can be deleted under them; it is unmapped when its last
// reference goes. The Index holds one reference per listed file.
//
// The writer writes an entry's 20 bytes, then publishes the file's end
// counters and indexCount (atomics kept beside the mapping), then stores the
// slot (an atomic 32-bit store into the mapping), then updates the mapped
// header. A reader loads the slot, then indexCount, and follows only entry
// numbers below that count, each strictly below the one before, for at most
// indexCount steps: no walk can loop or leave the mapping, whatever the file
// holds. Put makes no system call and does not allocate, except when it
// starts a new file.
//
// # Crash safety
//
// Every file but the newest was synced (msync) before its successor was
// created; its header is trusted when within bounds. A file of the wrong size
// (cut, or written with other options) or an older file whose header is out
// of bounds is damaged: Open removes it and every later file (Repaired says
// so) and the store re-indexes that range from the commit log. The newest
// file may be torn: after a process crash the
// header can lag the entries; after a power loss any subset of its dirty
// pages may have reached the disk. Open therefore trusts none of the newest
// file's counters. It rescans the entries from entry 1 and keeps the
// longest prefix the writer could have produced: entry 1 carries the
// header's beginPhyOffset, offsets never decrease, and each entry's
// prevIndex is exactly the previous entry of its slot. It then rewrites the
// slot table from those entries, zeroes the rest of the file after them
// (FALLOC_FL_ZERO_RANGE, a metadata operation: a power loss can leave
// entries past a gap of lost pages, which later puts would otherwise join
// up with), rewrites the header and syncs the file. If no entry survives, the file is
// deleted. The cost is one pass over the file's entries and a temporary
// slot table (SlotCount int32s, 20 MB by default) at every Open: about
// 0.14 s for a full default-size file whose pages are cached.
//
// Entries that did not survive are covered by the commit log, which is the
// truth: the store calls TruncateAfter with the recovered end of the log and
// dispatches again from the offset it returns. Put skips offsets below the
// highest indexed one and keys already indexed for it, so that re-dispatch
// adds no duplicates.
//
// Flush syncs the slots and entries of the file being written and then its
// header, without holding up Put; it is for the store's periodic flush and
// Close. A failed sync is sticky.
//
// # Files
//
// Every file operation goes through Options.FS (internal/vfs), and the
// directory is synced (internal/durable) after a file is created, removed
// or renamed into place; a file whose directory sync fails is removed
// again. faults_test.go fails each file operation of a realistic workload
// in turn.
//
// # A full disk
//
// A file is fully allocated (fallocate) when it is created, so writes into it
// never meet a full disk. When a new file cannot be created, Put returns
// ErrUnavailable and keeps failing fast, without trying, for a back-off delay
// (1 s, doubling per failure up to a minute); the first Put after it tries
// again. The keys of messages put meanwhile are not indexed.
package index
