// Package durable holds Apogee's durable-file primitives, written once for
// every package that persists (commitlog, consumequeue, index, store, broker,
// client): a directory's fsync, the durable creation of directories, the
// atomic replacement of a file, a durable marker file, and a fixed-size
// CRC'd record rewritten in place (the checkpoints). Every operation goes through a vfs.FS, so the fault-injection
// tests reach these paths too.
//
// # Invariants
//
//   - SyncDir after every creation, rename or removal whose survival a
//     promise rests on: POSIX makes a directory entry durable only through
//     an fsync of its directory (ext4's journal happens to order it, other
//     file systems do not).
//   - MkdirAll fsyncs the parent of every directory it creates before it
//     creates the next one below it, and the parent of the deepest
//     directory that already existed: a directory made by the file system's
//     MkdirAll alone is an entry nothing made durable, and a power loss
//     takes it, with every file under it, however well those were synced.
//   - WriteFile never exposes a partial file under the final name: the data
//     is written to a temporary file in the same directory, fsynced, renamed
//     over the name, and the directory fsynced. After it returns nil the new
//     contents survive a power failure; after a crash at any point the name
//     holds the old contents or the new ones. With Backup, the previous
//     contents are kept as name+suffix first (a hard link renamed into
//     place, or a synced copy), so name+suffix is always a complete earlier
//     version. On an error before the rename the temporary file is removed
//     and the name is untouched (the backup may already have moved on by
//     one version); when the directory's fsync after the rename fails, the
//     name holds the new contents, not known to be durable. Temporary files
//     that a crash left behind are removed by the next LoadWithBackup of
//     the name (RemoveTemps).
//   - A Record is magic (8 bytes) | payload | CRC32-IEEE (big-endian) of
//     magic and payload, at offset 0 of its file, rewritten in place by one
//     pwrite and an fdatasync. Its size never changes, so the file's
//     metadata needs no sync; a torn write fails the CRC and the record
//     reads as absent, which every user treats as "no checkpoint" (recover
//     from further back: slower, same result). The format is exactly that of
//     commitlog/CHECKPOINT (40 bytes) and the store's checkpoint (28 bytes)
//     before this package existed, so existing data directories open.
package durable
