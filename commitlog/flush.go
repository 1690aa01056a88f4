package commitlog

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/mmap"
)

// flusher moves the flushed position up to the written one: on demand and
// with group commit in FlushSync mode, on a timer in FlushAsync mode. One
// goroutine does every sync, so syncs never overlap and never run under the
// append lock.
type flusher struct {
	l *Log

	kick chan struct{} // a waiter wants a sync (cap 1)

	// syncMu is held by a round from reading the flushed position to
	// publishing the new one and writing the checkpoint, and by TruncateTo
	// and RestartAt, which move both positions back. Without it a round
	// that synced the old files could publish, after a truncation, a
	// flushed position covering records appended since into new files it
	// never synced (acknowledged, and lost in a power loss), and write a
	// checkpoint that counts the cut range as durable.
	syncMu sync.Mutex

	mu     sync.Mutex
	done   chan struct{} // closed after each sync round; replaced under mu
	failed error         // sticky: the first failed sync, wrapped in ErrLogFailed
	// hasFailed is set with failed (under mu), so that the append path
	// checks for failure without taking mu, which the flush goroutine holds
	// at every round's end.
	hasFailed atomic.Bool
	lastCkp   time.Time // when the checkpoint was last written

	timers sync.Pool // *time.Timer for WaitFlushed deadlines

	rounds    atomic.Int64 // syncs done
	syncNanos atomic.Int64 // time spent in them
	maxNanos  atomic.Int64 // the slowest
}

func (f *flusher) init(l *Log) {
	f.l = l
	f.kick = make(chan struct{}, 1)
	f.done = make(chan struct{})
	f.lastCkp = l.opts.now()
}

// failure returns the sticky error, if any.
func (f *flusher) failure() error {
	if !f.hasFailed.Load() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// fail records err as the sticky failure unless one is recorded; f.mu is
// held.
func (f *flusher) fail(err error) {
	if f.failed == nil {
		f.failed = fmt.Errorf("%w: %w", ErrLogFailed, err)
		f.hasFailed.Store(true)
	}
}

// wait blocks until flushed ≥ end, the deadline passes, or the log fails.
func (f *flusher) wait(end int64, deadline time.Time) error {
	if f.l.flushed.Load() >= end {
		return nil
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
			f.timers.Put(t)
		}
	}()
	for {
		f.mu.Lock()
		if f.failed != nil {
			f.mu.Unlock()
			return f.failed
		}
		if f.l.flushed.Load() >= end {
			f.mu.Unlock()
			return nil
		}
		done := f.done
		f.mu.Unlock()
		select {
		case f.kick <- struct{}{}:
		default:
		}
		if t == nil {
			left := time.Until(deadline)
			if left <= 0 {
				return fmt.Errorf("%w: offset %d not flushed by its deadline (flushed %d)", ErrFlushTimeout, end, f.l.flushed.Load())
			}
			if v := f.timers.Get(); v != nil {
				t = v.(*time.Timer)
				t.Reset(left)
			} else {
				t = time.NewTimer(left)
			}
		}
		select {
		case <-done:
		case <-t.C:
			return fmt.Errorf("%w: offset %d not flushed by its deadline (flushed %d)", ErrFlushTimeout, end, f.l.flushed.Load())
		case <-f.l.stop:
			// Close flushes everything before it returns; wait for that round.
			<-done
		}
	}
}

// loop is the flusher goroutine.
func (f *flusher) loop() {
	defer f.l.wg.Done()
	l := f.l
	var tick <-chan time.Time
	if l.opts.FlushMode == FlushAsync {
		t := time.NewTicker(l.opts.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	lastFull := l.opts.now()
	for {
		select {
		case <-l.stop:
			return
		case <-f.kick:
			f.round(f.settle())
		case <-tick:
			now := l.opts.now()
			dirty := l.written.Load() - l.flushed.Load()
			if now.Sub(lastFull) >= l.opts.FlushThoroughInterval {
				lastFull = now
				f.round(-1)
			} else if dirty >= int64(l.opts.FlushLeastPages)*4096 {
				f.round(-1)
			}
			f.syncMu.Lock()
			f.maybeCheckpoint()
			f.syncMu.Unlock()
		}
	}
}

// settleYields bounds settle.
var settleYields = 8

// settle lets the writers that the last round woke append before the next
// sync starts, so that sync carries their records instead of leaving them for
// the one after (which would make every writer wait two rounds). It yields
// while the written position keeps moving, at most a few times: no sleep,
// and with nothing else runnable each yield returns at once.
func (f *flusher) settle() int64 {
	w := f.l.written.Load()
	still := 0
	for i := 0; i < settleYields && still < 2; i++ {
		runtime.Gosched()
		next := f.l.written.Load()
		if next == w {
			still++
		} else {
			still = 0
		}
		w = next
	}
	return w
}

// round syncs everything below target (the written position when target
// is negative or beyond it) and wakes every waiter.
func (f *flusher) round(target int64) {
	l := f.l
	if f.failure() != nil {
		return
	}
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	// A target read before the lock may be from before a truncation: what
	// lies below it now may not be written yet.
	if w := l.written.Load(); target < 0 || target > w {
		target = w
	}
	from := l.flushed.Load()
	var err error
	if target > from {
		start := time.Now()
		err = l.syncRange(from, target)
		d := int64(time.Since(start))
		f.rounds.Add(1)
		f.syncNanos.Add(d)
		if d > f.maxNanos.Load() {
			f.maxNanos.Store(d)
		}
	}
	f.mu.Lock()
	if err != nil {
		f.fail(err)
	} else if target > l.flushed.Load() {
		// flushed never passes written. (TruncateTo and RestartAt, which
		// move written back, wait for the round: syncMu.)
		l.flushed.Store(min(target, l.written.Load()))
	}
	close(f.done)
	f.done = make(chan struct{})
	f.mu.Unlock()
	if err == nil && l.reg != nil && l.flushed.Load() >= l.reg.low.Load() {
		// A recycled segment is now sealed and synced: the allocator drops
		// it from the registry (a file replacement, kept off this loop).
		l.kickAlloc()
	}
	if err == nil && l.opts.FlushMode == FlushSync {
		f.maybeCheckpoint()
	}
}

// maybeCheckpoint records the flushed offset if the interval has passed.
// f.syncMu is held.
func (f *flusher) maybeCheckpoint() {
	l := f.l
	now := l.opts.now()
	if now.Sub(f.lastCkp) < l.opts.CheckpointInterval || f.failure() != nil {
		return
	}
	f.lastCkp = now
	// A failed checkpoint only means recovery scans more; it is not a data error.
	_ = l.ckpt.write(checkpointState{flushed: l.flushed.Load(), written: l.written.Load(), time: now.UnixMilli()})
}

// final is the last round, run by Close after the goroutine stopped.
func (f *flusher) final() error {
	f.round(-1)
	return f.failure()
}

// syncRange makes [from, to) durable: an msync of the dirty range of each
// segment it touches (on Linux, msync MS_SYNC of a shared mapping is an
// fdatasync of that file range).
func (l *Log) syncRange(from, to int64) error {
	for off := from; off < to; {
		seg, err := l.pin(off)
		if err != nil {
			// Retention removed it: nothing left to sync there.
			off = (off/l.opts.SegmentSize + 1) * l.opts.SegmentSize
			continue
		}
		end := min(to, seg.end())
		l.dropWrittenPTEs(seg, off, end)
		err = l.fs.MSync(seg.path, seg.m, int(off-seg.base), int(end-off))
		seg.m.Release()
		if err != nil {
			return fmt.Errorf("commitlog: sync: %w", err)
		}
		off = end
	}
	return nil
}

// dropWrittenPTEs removes this process's page-table entries for the pages of
// [from, to) that no writer will store into again (those wholly below to's
// page, or up to the segment's end), just before they are written back.
//
// Writeback write-protects every page it cleans that is mapped writable, one
// TLB flush per page, and with threads on several CPUs each flush is an
// inter-processor interrupt; profiles of sustained appends showed it at a
// fifth of all CPU time. One MADV_DONTNEED over the range costs one flush for
// all of it. Nothing is lost: for a shared file mapping the pages stay in the
// page cache, their dirty state moves from the entries to the pages, and
// readers that come later map them again read-only (clean, so the next
// writeback has nothing to write-protect).
func (l *Log) dropWrittenPTEs(seg *segment, from, to int64) {
	if runtime.GOOS != "linux" {
		return // elsewhere MADV_DONTNEED's effect on shared mappings is not this
	}
	page := int64(mmap.PageSize())
	lo := from &^ (page - 1)
	hi := to &^ (page - 1)
	if to == seg.end() {
		hi = to
	}
	if hi <= lo {
		return
	}
	// An error leaves the entries in place: writeback then does it the slow way.
	_ = seg.m.Advise(int(lo-seg.base), int(hi-lo), mmap.DontNeed)
}
