// Package errorfs wraps a vfs.FS to fail a chosen file operation, for the
// storage packages' fault-injection tests (in the spirit of pebble's
// vfs/errorfs). Only tests import it; the import-graph test keeps it so.
//
// An FS counts every operation by kind (Op) and, when armed with a Point,
// fails the Nth operation of that kind with an *Error. In mode Once only
// that operation fails (a transient fault: a full disk that frees up, a
// flaky device); in mode Stop it and every later operation of any kind
// fail (the disk is gone: what is on it is what a crash at that point
// leaves, for the page cache is real). FailWhen fails operations by
// condition instead (a disk that is full until the test frees it).
//
// Walk runs a workload once per operation of every kind it makes, failing
// that one, each run in a fresh directory (in /dev/shm where there is one),
// and prints the operations around the failed one when a run's checks fail.
// A run's helpers: Checker checks what each call returns (the injected
// failure or nil; after a transient fault, success when tried again),
// CheckReleased that nothing outlives a Close, CopyTree what a crash of
// the process leaves.
//
// # Invariants
//
//   - The failure is injected before the inner operation runs: a failed
//     operation changed nothing (a failed write wrote no byte, a failed
//     rename renamed nothing).
//   - An injected error is an *Error wrapping ErrInjected and an errno
//     (unix.ENOSPC for Allocate, unix.EIO for the rest), so the code under
//     test classifies it as it would the real one, and a test can tell it
//     from any other error: every error a call returns after an injection
//     must still wrap ErrInjected, or its cause was lost on the way.
//   - Counting is per FS and in the order the operations reach it (the
//     goroutines of the code under test interleave; Walk copes with counts
//     that vary from run to run).
//   - Close, munmap and madvise are never failed, so the code under test
//     can always let go of what it holds; Leaks reports files, locks and
//     mappings (references left on a mapping Map returned) not given back.
package errorfs
