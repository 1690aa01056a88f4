package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apogeemq/apogee/internal/durable"
)

// TruncatedDir is the directory, inside the log's, where TruncateTo keeps
// the bytes it cut: one file per truncation, named after its range and
// time (see saveCut), removed by RetainTruncated after TruncatedRetention
// or to keep the total under TruncatedMaxBytes. Nothing under it is read
// back by the log. (Versions before kept the whole segment files cut,
// TruncatedDir/<unix ms>/<segment files>; RetainTruncated removes those
// too.)
const TruncatedDir = "truncated"

// truncateSuffix names the segment TruncateTo builds until it takes its
// own name (Open removes such files: see removeUnfinished).
const truncateSuffix = ".truncate"

// removeUnfinished removes the segment files a crash left under a temporary
// name: a TruncateTo (truncateSuffix) or a RestartAt (restartSuffix)
// interrupted before the rename that gives the new segment its name. Such a
// file is never part of the log (the old segment still holds the name, or
// the rename happened and the file is gone), but it is a whole segment's
// size on disk, and without this only a later truncation or restart at the
// same base would remove it. Called by Open before recovery.
func (l *Log) removeUnfinished() error {
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("commitlog: list %s: %w", l.dir, err)
	}
	removed := false
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		base, suffix, ok := strings.Cut(name, ".")
		if !ok || (suffix != truncateSuffix[1:] && suffix != restartSuffix[1:]) {
			continue
		}
		if _, ok := parseSegmentName(base); !ok {
			continue
		}
		if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("commitlog: remove an unfinished segment: %w", err)
		}
		l.opts.Logger.Warn("commitlog: removed a segment file an interrupted truncation or restart left", "file", filepath.Join(l.dir, name))
		removed = true
	}
	if removed {
		return l.syncDir(l.dir)
	}
	return nil
}

// Truncation describes what TruncateTo cut.
type Truncation struct {
	// From is the written position before, To after (the offset asked for).
	From, To int64
	// Kept is the file holding the bytes cut, [To, From) ("" when nothing
	// was cut, or the options keep nothing of this size: see
	// Options.TruncatedMaxBytes); KeptBytes is its size.
	Kept      string
	KeptBytes int64
}

// TruncateTo cuts the log back to off, a record boundary (or a segment's
// base) at or above MinOffset and at or below the written position: what a
// replica does when its log went further than the master's in an epoch the
// master does not share (the last common offset of their epoch files).
// Everything from off on is gone from the log when it returns: readers see
// the log end at off and appends continue there.
//
// The bytes cut are first saved, durably, in a file of their own under
// TruncatedDir (saveCut: written under a temporary name, synced, renamed),
// unless the options keep nothing of that size; a failure there leaves the
// log unchanged. Views taken before stay valid and unchanged: the segment
// holding off is not modified in place but replaced by a new file holding
// its bytes below off (renamed over the old name, so that name always holds
// a whole segment), and every later segment's file is unlinked (its
// mappings stay valid). A crash at any step leaves a directory Open
// accepts, holding the old log, the new one, or the old one without some of
// its segments after off's (later segments are removed newest first, so
// what remains is always one contiguous log); the checkpoint is reset
// first, so that recovery scans what remains and counts nothing past off as
// durable. A failure after files were removed makes the log fail
// (ErrLogFailed): a restart opens what the directory holds. It runs under
// the append lock (with Append, AppendReplica and RestartAt) and fails with
// ErrReadOnly, ErrClosed or the sticky ErrLogFailed.
func (l *Log) TruncateTo(off int64) (Truncation, error) {
	if l.readOnly {
		return Truncation{}, ErrReadOnly
	}
	if err := l.fl.failure(); err != nil {
		return Truncation{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return Truncation{}, ErrClosed
	}
	tr := Truncation{From: l.pos, To: off}
	if off == l.pos {
		return tr, nil
	}
	if off < l.minOff.Load() || off > l.pos {
		return tr, fmt.Errorf("commitlog: truncate to %d: outside the log [%d, %d)", off, l.minOff.Load(), l.pos)
	}
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	l.segMu.Lock()
	defer l.segMu.Unlock()
	// No sync round may run meanwhile (see flusher.syncMu).
	l.fl.syncMu.Lock()
	defer l.fl.syncMu.Unlock()

	old := *l.segs.Load()
	k := int((off - old[0].base) / l.opts.SegmentSize)
	cut := old[k]
	kept, err := l.saveCut(off, old, k)
	if err != nil {
		return tr, err
	}
	if kept != "" {
		tr.Kept, tr.KeptBytes = kept, cutHeaderSize+l.pos-off
	}
	newFlushed := l.flushed.Load()
	if newFlushed >= cut.base {
		newFlushed = off // the new file's bytes below off are synced below
	}
	// From here on a crash must take the scanning path, and must not
	// count what lies past off as durable.
	if err := l.ckpt.write(checkpointState{flushed: min(newFlushed, off), written: off, time: l.opts.now().UnixMilli()}); err != nil {
		return tr, err
	}
	final := filepath.Join(l.dir, segmentName(cut.base))
	tmp := final + truncateSuffix
	_ = l.fs.Remove(tmp) // left by a crash during an earlier truncation
	seg, err := l.createSegmentAt(tmp, cut.base)
	if err != nil {
		return tr, err
	}
	if n := off - cut.base; n > 0 {
		copy(seg.data[:n], cut.data[:n])
		if err := l.fs.MSync(tmp, seg.m, 0, int(n)); err != nil {
			seg.release(true)
			return tr, fmt.Errorf("commitlog: truncate: sync %s: %w", tmp, err)
		}
	}
	// The segment prepared ahead of need is the newest file: it goes
	// first, or a crash would leave it beyond a gap.
	if p := l.prepared; p != nil {
		l.prepared = nil
		p.release(false)
		if err := l.fs.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			seg.release(true)
			return tr, fmt.Errorf("commitlog: truncate: remove the prepared segment: %w", err)
		}
		if err := durable.SyncDir(l.fs, l.dir); err != nil {
			seg.release(true)
			return tr, err
		}
	}
	// Newest first: what remains at every step is one contiguous log.
	for i := len(old) - 1; i > k; i-- {
		if err := l.fs.Remove(old[i].path); err != nil && !errors.Is(err, os.ErrNotExist) {
			seg.release(true)
			return tr, l.truncateFailed(fmt.Errorf("commitlog: truncate: remove a segment past the cut: %w", err))
		}
	}
	// The new file of the cut segment takes its name in one rename (the
	// old file goes with it).
	if err := l.fs.Rename(tmp, final); err != nil {
		seg.release(true)
		return tr, l.truncateFailed(fmt.Errorf("commitlog: truncate: name the new segment: %w", err))
	}
	seg.path = final
	syncErr := durable.SyncDir(l.fs, l.dir)

	// In memory: the segments before the cut one, then the new one.
	segs := make([]*segment, k+1)
	copy(segs, old[:k])
	segs[k] = seg
	l.segs.Store(&segs)
	for _, o := range old[k:] {
		o.release(false) // unlinked above, or replaced: never unlinked here
	}
	l.active = seg
	l.pos = off
	l.nextBase = seg.end()
	l.skipFrom, l.skipTo = 0, 0
	l.prefaulted.Store(off)
	l.fl.mu.Lock()
	l.written.Store(off)
	l.flushed.Store(min(newFlushed, off))
	l.fl.mu.Unlock()
	l.published()
	l.kickAlloc()
	if syncErr != nil {
		return tr, syncErr
	}
	if err := l.ckpt.write(checkpointState{flushed: l.flushed.Load(), written: off, time: l.opts.now().UnixMilli()}); err != nil {
		return tr, err
	}
	return tr, nil
}

// truncateFailed is a truncation that stopped after removing some files: the log in memory is still whole, but its files on disk are the
// prefix left. The log fails from now on (the sticky error), so that
// nothing is appended to segments whose files are gone; a restart opens
// what the directory holds.
func (l *Log) truncateFailed(err error) error {
	l.fl.mu.Lock()
	l.fl.fail(err)
	l.fl.mu.Unlock()
	return errors.Join(err, ErrLogFailed)
}
