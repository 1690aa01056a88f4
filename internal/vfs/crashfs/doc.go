// Package crashfs is the storage engine's power-loss model: a vfs.FS over a
// directory of the real file system that records what each sync made
// durable, and a crash clone that writes out what a power loss at that
// moment would leave (in the spirit of pebble's vfs.MemFS.CrashClone, but
// reaching the mmap path: the stores of a shared mapping land in the page
// cache of the real file, so only msync and fdatasync say what of them
// survives). Only tests import it; the import-graph test keeps it so.
//
// Process-kill tests keep the page cache, so a missing msync, fdatasync or
// directory fsync is invisible to them. This model is not: whatever no sync
// covered is gone from, or torn in, a clone.
//
// # The model
//
// Files and directories are nodes (inodes); a directory's live entries map
// names to nodes, and so do its durable entries. Every node also has durable
// contents (a file's bytes and size).
//
//   - Creating, removing, renaming and linking change only live entries.
//     FS.SyncDir(dir) makes dir's live entries its durable entries (POSIX: a
//     directory entry survives a power loss only through an fsync of its
//     directory). A directory made by MkdirAll is itself an entry of its
//     parent, durable only once the parent is synced.
//   - File.Sync and File.Datasync make the file's whole current contents and
//     size durable. FS.MSync(name, m, off, n) makes durable the pages of m
//     covering [off, off+n) (msync writes back whole pages) and the file's
//     size (Linux's msync(MS_SYNC) is a data sync of the range, which
//     writes the metadata needed to read it back).
//   - The durable contents recorded by a sync are those the file had when
//     the sync was called (read before the real system call), so a store
//     that raced with the sync is never taken as durable; a failed sync
//     records nothing. Syncs are numbered in the order they read the
//     contents, and a sync's bytes never replace those of a later-numbered
//     sync of the same sectors: of two syncs of one file running at once,
//     the later one's contents survive, whichever returns last (as on a
//     disk, where the later sync writes the page again). The model first
//     applied each sync's bytes as it returned, so an index file's
//     periodic flush, finishing after the sync that sealed the full file,
//     took back its last entry: too strict.
//   - Writes, truncation, fallocate, zeroing and stores through mappings
//     change only the real file (the "current" contents).
//   - What exists under the root when New is called is taken as durable
//     (a clone, or a directory the test prepared).
//   - Operations on paths outside the root are passed through and not
//     modelled; nothing outside the root is cloned.
//
// # A crash clone
//
// CrashClone writes, into an empty directory, the root as a power loss
// would leave it. In Strict mode every directory holds its durable entries
// and every file its durable contents and size: the unsynced is simply gone
// (older contents where the file had been synced before, nothing where it
// had not). In Torn mode (seeded, reproducible) the unsynced may also have
// reached the disk, in part: each directory independently holds either its
// durable or its live entries; each file has either its durable or its
// current size; and each 512-byte sector that differs holds, when no sync
// ever covered it (never written durably, or past the durable size),
// zeros, the current bytes or garbage, and otherwise either the durable or
// the current bytes (a sector is written whole or not at all, so bytes that
// a sync made durable are never lost, but a page may be torn between old
// and new sectors). A file unlinked from every live directory keeps only its
// durable contents.
//
// Which sectors a sync covered is recorded, not inferred from their
// contents: a sector synced as zeros is durable too. (The model first took
// every all-zero durable sector for one never written, and so let garbage
// replace synced bytes: a commit-log record ends in a zero properties
// length, and when its last two bytes open a sector that nothing else had
// reached when it was synced, a torn clone corrupted an acknowledged
// record. No disk does that; the model was too strict.)
//
// # Invariants
//
//   - The clone is a consistent cut: FS holds its lock while cloning, so no
//     sync completes and no entry changes during it. Stores through mappings
//     go on, and land (or not) as unsynced bytes do.
//   - A clone never contains a byte that was not in the file at some moment
//     (but garbage, in Torn mode, in sectors no sync ever made non-zero).
//   - Hard links stay links in the clone.
package crashfs
