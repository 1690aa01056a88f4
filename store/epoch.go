package store

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// EpochFileName is the epoch file's name in a store's directory
// (RocketMQ's epochFileCheckpoint).
const EpochFileName = "epochFileCheckpoint"

// EpochEntry says that the master of epoch Epoch wrote the commit log from
// StartOffset on (until the next entry's start, or the log's end).
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// ErrEpochOrder: Append of an epoch below the last one, or of an offset
// below the last entry's start.
var ErrEpochOrder = errors.New("store: epoch entries must grow")

// EpochFile is a broker's record of where each master epoch began in its
// commit log (RocketMQ's EpochFileCache and its epochFileCheckpoint): a
// master appends an entry when it takes office; a replica compares its
// entries with its master's to find the last offset their logs share
// (LastCommonOffset) and truncates its log there (Store.TruncateReplica,
// then TruncateFrom).
//
// Invariants: epochs strictly increase, and so do start offsets. Every
// change is written durably before the method returns (temporary file,
// fsync, rename, directory fsync; the previous version kept as .bak and
// used when the file is damaged). The file is RocketMQ's CheckpointFile
// text: the number of entries, the CRC32 of the entry lines (as Java's
// UtilAll.crc32: the low 31 bits), then one "epoch-startOffset" line per
// entry.
//
// Its methods are safe for concurrent use.
type EpochFile struct {
	fs   vfs.FS
	path string

	mu      sync.Mutex
	entries []EpochEntry
}

// OpenEpochFile loads the epoch file at path (none yet: no entries). fsys
// nil is the operating system; log nil is slog.Default().
func OpenEpochFile(path string, fsys vfs.FS, log *slog.Logger) (*EpochFile, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	entries, _, fellBack, err := durable.LoadWithBackup(fsys, path, log, parseEpochs)
	if err != nil {
		return nil, fmt.Errorf("store: epoch file: %w", err)
	}
	f := &EpochFile{fs: fsys, path: path, entries: entries}
	if fellBack {
		f.mu.Lock()
		err = f.writeLocked()
		f.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

func parseEpochs(b []byte) ([]EpochEntry, error) {
	lines := bytes.Split(bytes.TrimRight(b, "\r\n"), []byte("\n"))
	if len(lines) < 2 {
		return nil, errors.New("want a count and a CRC line")
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(lines[0])))
	if err != nil || n < 0 {
		return nil, fmt.Errorf("entry count %q", lines[0])
	}
	crc, err := strconv.ParseInt(string(bytes.TrimSpace(lines[1])), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("CRC %q", lines[1])
	}
	var body []byte
	var out []EpochEntry
	for _, l := range lines[2:] {
		l = bytes.TrimRight(l, "\r")
		if len(l) == 0 {
			continue
		}
		body = append(append(body, l...), '\n')
		e, s, ok := bytes.Cut(l, []byte("-"))
		epoch, err1 := strconv.ParseInt(string(e), 10, 32)
		start, err2 := strconv.ParseInt(string(s), 10, 64)
		if !ok || err1 != nil || err2 != nil || start < 0 {
			return nil, fmt.Errorf("entry %q", l)
		}
		out = append(out, EpochEntry{Epoch: int32(epoch), StartOffset: start})
	}
	if len(out) != n {
		return nil, fmt.Errorf("%d entries, the file says %d", len(out), n)
	}
	if crc != 0 && crc != int64(javaCRC(body)) {
		return nil, fmt.Errorf("CRC %d does not match the entries (%d)", crc, javaCRC(body))
	}
	for i := 1; i < len(out); i++ {
		if out[i].Epoch <= out[i-1].Epoch || out[i].StartOffset < out[i-1].StartOffset {
			return nil, fmt.Errorf("entries out of order: %v then %v", out[i-1], out[i])
		}
	}
	return out, nil
}

// javaCRC is RocketMQ's UtilAll.crc32: CRC32 (IEEE) & 0x7FFFFFFF.
func javaCRC(b []byte) int32 { return int32(crc32.ChecksumIEEE(b) & 0x7FFFFFFF) }

func (f *EpochFile) writeLocked() error {
	var body []byte
	for _, e := range f.entries {
		body = strconv.AppendInt(body, int64(e.Epoch), 10)
		body = append(body, '-')
		body = strconv.AppendInt(body, e.StartOffset, 10)
		body = append(body, '\n')
	}
	var b []byte
	b = strconv.AppendInt(b, int64(len(f.entries)), 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, int64(javaCRC(body)), 10)
	b = append(b, '\n')
	b = append(b, body...)
	if err := durable.WriteFile(f.fs, f.path, b, durable.Backup(durable.BakSuffix)); err != nil {
		return fmt.Errorf("store: epoch file: %w", err)
	}
	return nil
}

// Entries returns a copy of the entries, by epoch.
func (f *EpochFile) Entries() []EpochEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

// LastEpoch is the last entry's epoch, -1 without entries.
func (f *EpochFile) LastEpoch() int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.entries) == 0 {
		return -1
	}
	return f.entries[len(f.entries)-1].Epoch
}

// Append records that epoch starts at start (a new master's log end). The
// last epoch again changes nothing (a master restarting in its epoch); an
// epoch that starts where the last one did replaces it (the last master
// wrote nothing); an older epoch, or an offset below the last start, is
// ErrEpochOrder.
func (f *EpochFile) Append(epoch int32, start int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.entries); n > 0 {
		last := f.entries[n-1]
		switch {
		case epoch == last.Epoch:
			return nil
		case epoch < last.Epoch || start < last.StartOffset:
			return fmt.Errorf("%w: epoch %d at %d after epoch %d at %d", ErrEpochOrder, epoch, start, last.Epoch, last.StartOffset)
		case start == last.StartOffset:
			old := f.entries
			f.entries = append(slices.Clone(f.entries[:n-1]), EpochEntry{epoch, start})
			if err := f.writeLocked(); err != nil {
				f.entries = old
				return err
			}
			return nil
		}
	}
	old := f.entries
	f.entries = append(slices.Clone(f.entries), EpochEntry{epoch, start})
	if err := f.writeLocked(); err != nil {
		f.entries = old
		return err
	}
	return nil
}

// TruncateFrom removes the entries that start at or after off (the log
// was cut there: those epochs have no byte left; RocketMQ's
// truncateSuffixByOffset).
func (f *EpochFile) TruncateFrom(off int64) error {
	return f.keep(func(e EpochEntry, _ int64) bool { return e.StartOffset < off })
}

// TruncateBefore removes the entries that end at or before off (retention
// removed the log below off; RocketMQ's truncatePrefixByOffset). The last
// entry is kept whatever off (its end is the log's).
func (f *EpochFile) TruncateBefore(off int64) error {
	return f.keep(func(_ EpochEntry, end int64) bool { return end < 0 || end > off })
}

// keep keeps the entries for which ok (given each entry and its end, -1 for
// the last) and writes the file if that changed anything.
func (f *EpochFile) keep(ok func(EpochEntry, int64) bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []EpochEntry
	for i, e := range f.entries {
		end := int64(-1)
		if i+1 < len(f.entries) {
			end = f.entries[i+1].StartOffset
		}
		if ok(e, end) {
			out = append(out, e)
		}
	}
	if len(out) == len(f.entries) {
		return nil
	}
	old := f.entries
	f.entries = out
	if err := f.writeLocked(); err != nil {
		f.entries = old
		return err
	}
	return nil
}

// EpochAt returns the entry whose range holds off in a log ending at end
// (ok false when none does).
func EpochAt(entries []EpochEntry, end, off int64) (EpochEntry, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].StartOffset <= off && off < epochEnd(entries, i, end) {
			return entries[i], true
		}
	}
	return EpochEntry{}, false
}

func epochEnd(entries []EpochEntry, i int, end int64) int64 {
	if i+1 < len(entries) {
		return entries[i+1].StartOffset
	}
	return end
}

// LastCommonOffset is where a replica's log (entries local, ending at
// localEnd) stops agreeing with its master's (remote, ending at remoteEnd):
// for the latest epoch both have, starting at the same offset, the smaller
// of its two ends (RocketMQ's EpochFileCache.findConsistentPoint). The
// replica truncates there and fetches the rest. ok is false when they share
// no epoch (or the replica has none): nothing of the replica's log can be
// trusted to match, and it must start over (from an empty log, or the
// master's oldest segment).
func LastCommonOffset(local []EpochEntry, localEnd int64, remote []EpochEntry, remoteEnd int64) (off int64, ok bool) {
	for i := len(local) - 1; i >= 0; i-- {
		j := slices.IndexFunc(remote, func(e EpochEntry) bool { return e.Epoch == local[i].Epoch })
		if j < 0 || remote[j].StartOffset != local[i].StartOffset {
			continue
		}
		return min(epochEnd(local, i, localEnd), epochEnd(remote, j, remoteEnd)), true
	}
	return -1, false
}
