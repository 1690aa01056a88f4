package commitlog

import (
	"fmt"
	"time"
)

// Removed describes a segment Retain deleted.
type Removed struct {
	// Base and End bound the segment's offsets: [Base, End).
	Base, End int64
	// Pressure is true when the segment went because the file system was
	// fuller than Options.DiskUsageRatio (Usage), before its retention time.
	Pressure bool
	Usage    float64
}

// Retain deletes whole segments from the front of the log: those whose last
// write is older than Options.RetentionTime, and, while the file system is
// fuller than Options.DiskUsageRatio, the oldest ones whatever their age
// (after unlinking the files kept for recycling, which are not kept then). The
// segment being written is never deleted, nor one that is not synced to its
// end (see RetainBelow). A deleted segment leaves the list
// at once (MinOffset moves up) but its mapping and file go only when the last
// View of it is released. It returns the segments deleted, oldest first.
func (l *Log) Retain() ([]Removed, error) { return l.RetainBelow(l.written.Load()) }

// RetainBelow is Retain restricted to segments that end at or below limit:
// the store passes its dispatched offset, so that no record is deleted
// before its consume-queue entry exists (a message deleted before it was
// ever visible would vanish without a trace).
//
// The flushed offset bounds limit too: a segment is deleted only once it is
// synced. An unlink is not durable until the directory is synced, so after a
// power loss a deleted segment may come back, holding what had reached the
// disk; unsynced, that may be nothing, in the middle of the log, below
// records synced after it (the flusher skips what retention removed and
// moves past it). Retention times are hours, so in practice only a disk
// under pressure waits for the flusher here.
func (l *Log) RetainBelow(limit int64) ([]Removed, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if l.readOnly {
		return nil, ErrReadOnly
	}
	l.reap() // what an earlier run could not unlink
	now := l.opts.now()
	var removed []Removed
	for {
		l.segMu.Lock()
		segs := *l.segs.Load()
		if len(segs) < 2 {
			l.segMu.Unlock()
			return removed, nil
		}
		oldest := segs[0]
		if oldest.end() > min(limit, l.flushed.Load()) {
			l.segMu.Unlock()
			return removed, nil
		}
		expired := now.Sub(time.Unix(0, oldest.lastWrite.Load())) > l.opts.RetentionTime
		full, usage := false, 0.0
		if !expired {
			var err error
			usage, err = l.fs.DiskUsage(l.dir)
			if err != nil {
				l.segMu.Unlock()
				return removed, fmt.Errorf("commitlog: %w", err)
			}
			full = usage > l.opts.DiskUsageRatio
			if full && l.dropPool() {
				// Space the recycling pool held is free now: look again
				// before deleting data.
				l.segMu.Unlock()
				continue
			}
		}
		if !expired && !full {
			l.segMu.Unlock()
			return removed, nil
		}
		rest := segs[1:len(segs):len(segs)]
		l.segs.Store(&rest)
		l.minOff.Store(rest[0].base)
		l.segMu.Unlock()
		// A segment deleted to free space is not kept for reuse: its file
		// must go.
		oldest.noRecycle.Store(full)
		l.retire(oldest)
		removed = append(removed, Removed{Base: oldest.base, End: oldest.end(), Pressure: full, Usage: usage})
	}
}

func (l *Log) retentionLoop() {
	defer l.wg.Done()
	t := time.NewTicker(l.opts.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if _, err := l.Retain(); err != nil {
				// Not fatal to the log; the next tick retries.
				l.opts.Logger.Warn("commitlog: retention failed", "dir", l.opts.Dir, "err", err)
			}
		}
	}
}
