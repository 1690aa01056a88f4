package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/message"
)

// Assigner lets the caller of Append see each record inside the critical
// section, in log order. Assign is called after PHYSICALOFFSET and
// STORETIMESTAMP are patched and before the bytes are copied into the log; it
// may patch the record further (the store assigns QUEUEOFFSET here). It must
// not block and cannot fail: by the time it runs, the append will happen.
type Assigner interface {
	Assign(rec []byte, offset int64)
}

// Result describes an append. The caller owns it and may reuse it; Offsets is
// appended to, so reset it (res.Offsets = res.Offsets[:0]) to reuse its memory.
type Result struct {
	// Offsets holds each record's commit-log offset, in order.
	Offsets []int64
	// End is the written position after the append: wait for it to be flushed.
	End int64
	// StoreTimestamp is the STORETIMESTAMP written into every record of the batch (ms).
	StoreTimestamp int64
}

// Log is the commit log. All methods are safe for concurrent use.
type Log struct {
	opts Options
	dir  string
	fs   vfs.FS

	// mu serialises appends. Fields under it belong to the writer.
	mu     sync.Mutex
	active *segment // the segment holding the written position
	pos    int64    // the written position as the writer sees it
	// refuse makes Append fail with ErrAppendsRefused (RefuseAppends: a
	// replica's store); AppendReplica is not affected.
	refuse bool

	written atomic.Int64 // published written position: readers may read below it
	flushed atomic.Int64 // everything below is on stable storage
	minOff  atomic.Int64 // the first segment's base

	segMu sync.Mutex // guards changes of segs (copy on write)
	// cutMu serialises saving a truncation's bytes (saveCut) with the
	// retention of TruncatedDir (RetainTruncated). Taken last.
	cutMu sync.Mutex
	segs  atomic.Pointer[[]*segment] // ascending, contiguous; the last is active

	// allocMu guards prepared: the next segment, created ahead of need.
	allocMu  sync.Mutex
	prepared *segment
	nextBase int64 // base of the segment after the active one
	allocErr error

	fl flusher

	appended   chan struct{} // a token after each append (cap 1): wakes the dispatcher
	allocKick  chan struct{} // asks the allocator to prepare the next segment or prefault
	prefaulted atomic.Int64  // offset up to which the active segment is prefaulted

	// skipFrom and skipTo (under mu) bound the padding of the last marker
	// AppendReplica took whose bytes have not all arrived: [skipFrom,
	// skipTo), with skipTo the written position while it is valid.
	skipFrom, skipTo int64

	// WrittenAfter's waiters: wch (under wmu) is closed when the written
	// position moves; wwant tells appenders that someone waits.
	wmu   sync.Mutex
	wch   chan struct{}
	wwant atomic.Bool

	closed   atomic.Bool
	readOnly bool   // OpenReadOnly: nothing is written, nothing runs in the background
	holes    []Loss // OpenReadOnly: damaged ranges, skipped by readers as holes would be
	stop     chan struct{}
	wg       sync.WaitGroup
	ckpt     *checkpoint

	// reapMu guards doomed and reapDirty: the segments retention retired,
	// oldest first, whose files are still to be unlinked (see reap).
	reapMu    sync.Mutex
	doomed    []*segment
	reapDirty bool // an unlink whose directory sync failed

	// poolMu guards pool: the paths of the recycling pool's files, oldest
	// first (see recycle.go). A leaf lock.
	poolMu sync.Mutex
	pool   []string
	// reg is the registry of segments that may hold stale bytes (nil on a
	// read-only log). staleBases and staleAll are what recovery read from
	// it: the bases registered, or every base when it was unreadable.
	reg        *registry
	staleBases map[int64]bool
	staleAll   bool
}

// mayBeStale reports whether recovery must treat the segment at base as
// recycled: past the synced position it may hold an older segment's bytes.
func (l *Log) mayBeStale(base int64) bool { return l.staleAll || l.staleBases[base] }

// Open opens the log in opts.Dir, creating it if needed, and recovers it: the
// normal path after a clean Close, the abnormal path (scan, validate, truncate)
// otherwise. The Recovery report says which, and what was dropped.
func Open(opts Options) (*Log, Recovery, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, Recovery{}, err
	}
	// The directory's own entry must survive a power loss: a log whose
	// directory vanished would start empty over nothing.
	if err := durable.MkdirAll(o.FS, o.Dir, 0o755); err != nil {
		return nil, Recovery{}, fmt.Errorf("commitlog: create %s: %w", o.Dir, err)
	}
	l := &Log{
		opts:      o,
		dir:       o.Dir,
		fs:        o.FS,
		appended:  make(chan struct{}, 1),
		allocKick: make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	l.reg = newRegistry(o.FS, o.Dir)
	if err := l.removeUnfinished(); err != nil {
		return nil, Recovery{}, err
	}
	if err := l.checkTruncated(); err != nil {
		return nil, Recovery{}, err
	}
	if err := l.openPool(); err != nil {
		return nil, Recovery{}, err
	}
	rec, err := l.recover()
	if err != nil {
		l.releaseAll()
		return nil, rec, err
	}
	l.fl.init(l)
	l.wg.Add(2)
	go l.allocLoop()
	go l.fl.loop()

	if o.RetentionInterval > 0 {
		l.wg.Add(1)
		go l.retentionLoop()
	}
	l.kickAlloc()
	return l, rec, nil
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// SegmentSize returns the size of every segment.
func (l *Log) SegmentSize() int64 { return l.opts.SegmentSize }

// FlushMode returns the configured flush mode.
func (l *Log) FlushMode() FlushMode { return l.opts.FlushMode }

// WrittenOffset is the end of the last record readers may see.
func (l *Log) WrittenOffset() int64 { return l.written.Load() }

// FlushedOffset is the end of what has reached stable storage.
func (l *Log) FlushedOffset() int64 { return l.flushed.Load() }

// MinOffset is the first offset still in the log (retention moves it up).
func (l *Log) MinOffset() int64 { return l.minOff.Load() }

// Appended returns a channel that receives a token after appends. Tokens
// coalesce (capacity 1): after a receive, read WrittenOffset and process up
// to it. It is meant for one consumer, the store's dispatcher.
func (l *Log) Appended() <-chan struct{} { return l.appended }

// Append writes one or more encoded records (message.AppendRecord output,
// back to back) as one unit: the whole batch goes into one segment, in one
// critical section. recs is patched in place (PHYSICALOFFSET, STORETIMESTAMP,
// and whatever a does). a may be nil. On error nothing was written.
func (l *Log) Append(recs []byte, a Assigner, res *Result) error {
	n, err := checkBatch(recs)
	if err != nil {
		return err
	}
	if int64(len(recs))+message.BlankHeaderSize > l.opts.SegmentSize {
		return fmt.Errorf("%w: %d bytes in a %d-byte segment", ErrRecordTooLarge, len(recs), l.opts.SegmentSize)
	}
	if l.closed.Load() {
		return ErrClosed
	}
	if l.readOnly {
		return ErrReadOnly
	}
	if err := l.fl.failure(); err != nil {
		return err
	}
	now := l.opts.now().UnixMilli()

	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.refuse {
		l.mu.Unlock()
		return ErrAppendsRefused
	}
	seg, pos := l.active, l.pos
	remaining := seg.end() - pos
	if int64(len(recs))+message.BlankHeaderSize > remaining {
		next, err := l.takeNext(seg.end())
		if err != nil {
			l.mu.Unlock()
			return err
		}
		if remaining > 0 { // none when a replicated marker closed it
			message.PutBlank(seg.data[pos-seg.base:], int32(remaining))
		}
		seg.lastWrite.Store(l.opts.now().UnixNano())
		l.addSegment(next)
		seg, pos = next, next.base
		l.active = next
		l.prefaulted.Store(next.base)
	}
	off := pos
	for i := 0; i < n; i++ {
		size := int(binary.BigEndian.Uint32(recs[off-pos:]))
		rec := recs[off-pos : off-pos+int64(size)]
		message.SetPhysicalOffset(rec, off)
		message.SetStoreTimestamp(rec, now)
		if a != nil {
			a.Assign(rec, off)
		}
		res.Offsets = append(res.Offsets, off)
		off += int64(size)
	}
	copy(seg.data[pos-seg.base:], recs)
	l.pos = off
	l.written.Store(off)
	l.mu.Unlock()

	res.End = off
	res.StoreTimestamp = now
	l.published()
	// Ask the allocator to prefault more once the writer is half way through
	// the prefaulted window.
	if ahead := l.opts.PrefaultAhead; ahead > 0 && off+ahead/2 > l.prefaulted.Load() {
		l.kickAlloc()
	}
	return nil
}

// ErrAppendsRefused: Append on a log whose appends are refused
// (RefuseAppends).
var ErrAppendsRefused = errors.New("commitlog: appends refused")

// RefuseAppends makes Append fail with ErrAppendsRefused (refuse) or work
// again. It takes the append lock: once it returns, no Append is inside its
// critical section under the old setting, so with refuse nothing more is
// appended by Append, and everything appended before is published.
// AppendReplica is not affected (a replica's store refuses its own puts and
// appends its master's bytes).
func (l *Log) RefuseAppends(refuse bool) {
	l.mu.Lock()
	l.refuse = refuse
	l.mu.Unlock()
}

// checkBatch verifies that recs is a sequence of whole records, each one
// recovery would keep (its lengths consistent, a topic and properties free
// of zero bytes; the body CRC is the encoder's), and counts them.
func checkBatch(recs []byte) (int, error) {
	if len(recs) == 0 {
		return 0, fmt.Errorf("%w: empty", ErrBadBatch)
	}
	n := 0
	for off := 0; off < len(recs); n++ {
		if len(recs)-off < message.MinRecordSize {
			return 0, fmt.Errorf("%w: %d trailing bytes at %d", ErrBadBatch, len(recs)-off, off)
		}
		size := int(int32(binary.BigEndian.Uint32(recs[off:])))
		if size < message.MinRecordSize || size > len(recs)-off {
			return 0, fmt.Errorf("%w: record at %d claims %d bytes", ErrBadBatch, off, size)
		}
		// Recovery takes a record with a zero byte in its topic or
		// properties for a torn one (see torn.go): none is written.
		v, err := message.Decode(recs[off:off+size], false)
		if err == nil {
			err = checkFields(v)
		}
		if err != nil {
			return 0, fmt.Errorf("%w: record at %d: %w", ErrBadBatch, off, err)
		}
		off += size
	}
	return n, nil
}

// WaitFlushed blocks until everything below end is on stable storage,
// triggering a sync if none is under way. Concurrent waiters share syncs. It
// returns ErrFlushTimeout after Options.SyncFlushTimeout, and the sticky
// ErrLogFailed error after a failed sync.
func (l *Log) WaitFlushed(end int64) error {
	return l.WaitFlushedUntil(end, time.Now().Add(l.opts.SyncFlushTimeout))
}

// WaitFlushedUntil is WaitFlushed bounded by deadline rather than by
// Options.SyncFlushTimeout from now: a caller that queued a wait earlier
// (the store's durability notifier) gives each waiter its own bound. A
// deadline already past still returns nil when end is flushed.
func (l *Log) WaitFlushedUntil(end int64, deadline time.Time) error {
	if l.readOnly {
		return ErrReadOnly
	}
	return l.fl.wait(end, deadline)
}

// Flush syncs everything written so far and waits for it.
func (l *Log) Flush() error { return l.WaitFlushed(l.written.Load()) }

// View is a zero-copy view of bytes in the log. The bytes stay valid until
// Release; a View must be released exactly once.
type View struct {
	b   []byte
	seg *segment
}

// Bytes returns the viewed bytes. Do not modify them, and do not use them after Release.
func (v View) Bytes() []byte { return v.b }

// Release unpins the segment the view points into.
func (v View) Release() {
	if v.seg != nil {
		v.seg.m.Release()
	}
}

// Read returns a view of size bytes at offset. The range must lie below the
// written position and inside one segment.
func (l *Log) Read(offset int64, size int) (View, error) {
	if _, bad := l.holeAt(offset); bad {
		return View{}, fmt.Errorf("%w: offset %d is in a damaged range", ErrNoRecord, offset)
	}
	seg, err := l.pin(offset)
	if err != nil {
		return View{}, err
	}
	end := offset + int64(size)
	if size < 0 || end > l.written.Load() || end > seg.end() {
		seg.m.Release()
		return View{}, fmt.Errorf("%w: [%d,+%d) written %d", ErrOffsetNotWritten, offset, size, l.written.Load())
	}
	return View{b: seg.data[offset-seg.base : end-seg.base], seg: seg}, nil
}

// ReadRecord returns a view of the whole record at offset (its size taken
// from its TOTALSIZE field), after checking that it is a record (its magic
// code and size) and not a blank or hole marker or garbage: otherwise
// ErrNoRecord. It does not check the CRC.
func (l *Log) ReadRecord(offset int64) (View, error) {
	if _, bad := l.holeAt(offset); bad {
		return View{}, fmt.Errorf("%w: offset %d is in a damaged range", ErrNoRecord, offset)
	}
	seg, err := l.pin(offset)
	if err != nil {
		return View{}, err
	}
	w := l.written.Load()
	if offset+message.MinRecordSize > w {
		seg.m.Release()
		return View{}, fmt.Errorf("%w: record at %d, written %d", ErrOffsetNotWritten, offset, w)
	}
	buf := seg.data[offset-seg.base:]
	size := int64(message.ReadTotalSize(buf))
	magic := binary.BigEndian.Uint32(buf[message.OffMagic:])
	if size < message.MinRecordSize || offset+size > w || offset+size > seg.end() ||
		(magic != message.MagicV1 && magic != message.MagicV2) {
		seg.m.Release()
		return View{}, fmt.Errorf("%w: offset %d", ErrNoRecord, offset)
	}
	return View{b: buf[:size], seg: seg}, nil
}

// pin finds the segment holding offset and takes a reference on it.
func (l *Log) pin(offset int64) (*segment, error) {
	for {
		segs := *l.segs.Load()
		if len(segs) == 0 {
			return nil, ErrClosed
		}
		first := segs[0]
		if offset < first.base {
			return nil, fmt.Errorf("%w: %d < %d", ErrOffsetDeleted, offset, first.base)
		}
		i := (offset - first.base) / l.opts.SegmentSize
		if i >= int64(len(segs)) {
			return nil, fmt.Errorf("%w: %d", ErrOffsetNotWritten, offset)
		}
		seg := segs[i]
		if seg.m.Acquire() {
			return seg, nil
		}
		// Retention removed it between the load and the acquire: look again.
	}
}

// Segments returns the bases of the current segments, ascending.
func (l *Log) Segments() []int64 {
	segs := *l.segs.Load()
	out := make([]int64, len(segs))
	for i, s := range segs {
		out[i] = s.base
	}
	return out
}

// addSegment appends s to the segment list. Called with l.mu held.
func (l *Log) addSegment(s *segment) {
	l.segMu.Lock()
	old := *l.segs.Load()
	segs := make([]*segment, len(old)+1)
	copy(segs, old)
	segs[len(old)] = s
	l.segs.Store(&segs)
	l.segMu.Unlock()
}

// takeNext returns the segment starting at base: the prepared one, or one
// created now (slow path: the allocator fell behind, or the disk was full).
func (l *Log) takeNext(base int64) (*segment, error) {
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	if s := l.prepared; s != nil && s.base == base {
		l.prepared = nil
		l.nextBase = base + l.opts.SegmentSize
		l.kickAlloc()
		return s, nil
	}
	if l.prepared != nil {
		l.prepared.release(true)
		l.prepared = nil
	}
	s, err := l.createSegment(base)
	if err != nil {
		l.allocErr = err
		return nil, err
	}
	l.allocErr = nil
	l.nextBase = base + l.opts.SegmentSize
	l.kickAlloc()
	return s, nil
}

func (l *Log) kickAlloc() {
	select {
	case l.allocKick <- struct{}{}:
	default:
	}
}

// allocLoop prepares the next segment ahead of need and prefaults the active
// segment ahead of the written position, off the write path; it also drops
// sealed and synced segments from the recycled-segment registry.
func (l *Log) allocLoop() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case <-l.allocKick:
		}
		l.prefaultActive()
		l.prepareNext()
		l.pruneRegistry(l.flushed.Load())
	}
}

func (l *Log) prepareNext() {
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	if l.prepared != nil || l.closed.Load() {
		return
	}
	base := l.nextBase
	s, err := l.createSegment(base)
	if err != nil {
		// The writer retries synchronously when it needs the segment and
		// reports the error then.
		l.allocErr = err
		return
	}
	l.allocErr = nil
	if l.opts.PrefaultAhead > 0 {
		s.prefault(0, int(min(l.opts.PrefaultAhead, s.size)))
	}
	l.prepared = s
}

func (l *Log) prefaultActive() {
	ahead := l.opts.PrefaultAhead
	if ahead <= 0 {
		return
	}
	seg, err := l.pin(l.written.Load())
	if err != nil {
		return
	}
	defer seg.m.Release()
	from := max(l.prefaulted.Load(), l.written.Load())
	if from < seg.base || from >= seg.end() {
		return
	}
	to := min(l.written.Load()+ahead, seg.end())
	if to <= from {
		return
	}
	seg.prefault(int(from-seg.base), int(to-from))
	l.prefaulted.Store(to)
}

// Close stops the background goroutines, flushes everything written, records
// a clean shutdown in the checkpoint and drops the log's references to its
// segments (a segment still pinned by a View is unmapped when that is
// released).
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed.Swap(true) {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.Unlock()
	close(l.stop)
	l.wakeWritten()
	if l.readOnly {
		l.releaseAll()
		return nil
	}
	l.wg.Wait()
	err := l.fl.final()
	if err == nil {
		err = l.ckpt.write(checkpointState{clean: true, flushed: l.flushed.Load(), written: l.written.Load(), time: l.opts.now().UnixMilli()})
	}
	l.allocMu.Lock()
	if l.prepared != nil {
		// Never written: back to the pool (or unlinked), so that the next
		// run recycles it.
		l.releaseUnused(l.prepared)
		l.prepared = nil
		if serr := durable.SyncDir(l.fs, l.dir); serr != nil && err == nil {
			err = serr
		}
	}
	l.allocMu.Unlock()
	l.releaseAll()
	return err
}

func (l *Log) releaseAll() {
	if p := l.segs.Load(); p != nil {
		for _, s := range *p {
			s.release(false)
		}
		l.segs.Store(&[]*segment{})
	}
	if l.ckpt != nil {
		l.ckpt.close()
	}
}

// Stats is a snapshot of the log's counters.
type Stats struct {
	MinOffset, WrittenOffset, FlushedOffset int64
	Segments                                int
	// SyncRounds counts syncs; SyncTime is their total duration and
	// MaxSyncTime the slowest. SyncTime/SyncRounds is the flush latency.
	SyncRounds            int64
	SyncTime, MaxSyncTime time.Duration
}

// Stats returns a snapshot of the counters.
func (l *Log) Stats() Stats {
	return Stats{
		MinOffset:     l.MinOffset(),
		WrittenOffset: l.WrittenOffset(),
		FlushedOffset: l.FlushedOffset(),
		Segments:      len(*l.segs.Load()),
		SyncRounds:    l.fl.rounds.Load(),
		SyncTime:      time.Duration(l.fl.syncNanos.Load()),
		MaxSyncTime:   time.Duration(l.fl.maxNanos.Load()),
	}
}
