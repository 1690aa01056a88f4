package commitlog

import (
	"time"
)

// Retain deletes whole segments from the front of the log: those whose last
// write is older than Options.RetentionTime, and, while the file system is
// fuller than Options.DiskUsageRatio, the oldest ones whatever their age. The
// segment being written is never deleted. A deleted segment leaves the list
// at once (MinOffset moves up) but its mapping and file go only when the last
// View of it is released. It returns the number of segments deleted.
func (l *Log) Retain() (int, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	now := l.opts.now()
	deleted := 0
	for {
		l.segMu.Lock()
		segs := *l.segs.Load()
		if len(segs) < 2 {
			l.segMu.Unlock()
			return deleted, nil
		}
		oldest := segs[0]
		expired := now.Sub(time.Unix(0, oldest.lastWrite.Load())) > l.opts.RetentionTime
		full := false
		if !expired {
			usage, err := l.usageFn(l.dir)
			if err != nil {
				l.segMu.Unlock()
				return deleted, err
			}
			full = usage > l.opts.DiskUsageRatio
		}
		if !expired && !full {
			l.segMu.Unlock()
			return deleted, nil
		}
		rest := segs[1:len(segs):len(segs)]
		l.segs.Store(&rest)
		l.minOff.Store(rest[0].base)
		l.segMu.Unlock()
		oldest.release(true)
		deleted++
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
