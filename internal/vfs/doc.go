// Package vfs is the storage engine's file-system seam: every file operation
// of the packages that persist (commitlog, consumequeue, index, store and
// internal/durable, and the owners of state files: broker/core, broker,
// broker/ctrlmode, namesrv, acl, controller, client, each through an FS in
// its options) goes through an FS, so that tests can wrap it
// (internal/vfs/errorfs) and fail any single operation, or model a power
// loss (internal/vfs/crashfs).
//
// # What goes through it
//
// Opening, creating, removing, renaming and linking files, creating and
// listing directories, stat, pread and pwrite, truncate, fallocate, zeroing
// a range, fsync and fdatasync, a directory's fsync, mapping a file
// (File.Map) and writing a mapping's range back (FS.MSync), the data
// directory's lock and the file system's used fraction. What does not:
// loads and stores through a mapping (the hot paths), madvise hints and
// munmap (mmap.Mapping's own methods; their failures change nothing a
// reader or recovery relies on).
//
// # Invariants
//
//   - Default calls the operating system and nothing else: each method is one
//     system call (or mmap's wrapper of one) with the same errors, so the
//     seam costs one indirect call on paths that already make a system call,
//     and nothing on the paths that make none.
//   - A File's Map returns a mapping the caller owns (one reference, see
//     package mmap); the File may be closed while the mapping lives.
//   - MSync names the file the mapping belongs to only so that a wrapper can
//     tell files apart; it writes back m's pages and nothing else.
//   - Errors carry the path and the operation (as the os package's do), and
//     wrap the errno, so callers branch with errors.Is(err, unix.ENOSPC).
package vfs
