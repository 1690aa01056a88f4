// Package mmap maps file regions into memory and manages their lifetime.
//
// It is the lowest layer of Apogee's storage engine: the commitlog, the consume
// queues and the index all read and write their files through a Mapping.
//
// # Invariants
//
//   - A Mapping is created with one reference, owned by its creator. Acquire adds a
//     reference and Release drops one; the region is unmapped exactly once, when the
//     last reference is released. Acquire on a mapping whose count has reached zero
//     fails, so a reader can never resurrect an unmapped region.
//   - A slice returned by Bytes is valid only while the caller holds a reference.
//     Touching it after the last Release faults the process (SIGSEGV), which Go
//     cannot recover from: hold the reference for as long as the slice is in use.
//   - Callers preallocate (Fallocate) a file before mapping it read-write, and never
//     shrink a file while a mapping of it exists: a page past the end of a file
//     raises SIGBUS on access, and on a full disk a write to a sparse page does too.
//
// Linux uses the native calls through golang.org/x/sys/unix. Other Unix systems
// (darwin) compile and degrade: madvise hints that do not exist are ignored,
// MADV_POPULATE_WRITE falls back to reading one byte per page, and fallocate
// falls back to writing through ftruncate plus a touch of every block.
package mmap
