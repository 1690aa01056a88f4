package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/message"
)

// Replication: a replica's log receives another log's bytes (its master's)
// and appends them at the same offsets with AppendReplica; when the master no
// longer holds what the replica would need next, RestartAt discards the
// replica's log and starts it again at the master's oldest segment. The
// master side needs nothing new: Read returns raw views of any written range
// (records, blank-end and hole markers alike), and WrittenAfter wakes a
// sender when the log grows.

var (
	// ErrReplicaOffset: AppendReplica was given bytes that do not start at
	// the log's end (nor inside the padding of the marker it took last).
	ErrReplicaOffset = errors.New("commitlog: replicated bytes do not start at the log's end")
	// ErrReplicaData: replicated bytes that are not a valid continuation of
	// the log: a record that fails validation (magic, size, CRC) or claims
	// another offset, a record too close to its segment's end, a marker of
	// the wrong size.
	ErrReplicaData = errors.New("commitlog: invalid replicated data")
)

// DiscardedDir is the directory, inside the log's, where RestartAt moves the
// segments of a log it discards: DiscardedDir/<unix ms>/<segment files>.
// Nothing under it is read back by the log; an operator deletes it.
const DiscardedDir = "discarded"

// AppendReplica appends data, which are another log's bytes from offset off
// on, at the same offsets, and returns how many of them it consumed. off
// must be the log's end (WrittenOffset), or lie inside the padding of the
// last marker it took (see below); otherwise nothing is written and the
// error is ErrReplicaOffset.
//
// Every record is validated before it is copied: its magic code, its size
// (at least message.MinRecordSize, and leaving the 8 bytes a blank-end
// marker needs before its segment's end), its structure, its body CRC, and
// that its PHYSICALOFFSET is the offset it lands at. A record cut off at the
// end of data is not consumed: the caller passes its bytes again, followed by
// more, in the next call (the returned count tells where it starts). The
// first invalid record stops the append with ErrReplicaData: the records
// before it are appended (and counted), nothing after.
//
// A blank-end marker must announce exactly the rest of its segment: it is
// written, the segment is closed, and the log moves to the next segment. A
// hole marker (damage the other log's recovery covered) must fit in its
// segment: it is written, and the log moves past the range it covers. The
// bytes a marker covers after its 8-byte header (zeros after a blank-end
// marker, the damaged bytes of a hole) are consumed without being copied:
// they are not part of any record, and this log keeps zeros there. When data
// ends inside them, the next call may start where it ended, inside the
// padding, even though the log's end has moved past it.
//
// The append is one critical section (with Append and RestartAt). Appends
// made this way are published, flushed, dispatched and retained exactly as
// Append's: the caller waits for durability with WaitFlushed as usual. It
// fails with ErrDiskFull (nothing of the failed segment roll written; the
// records before it are), ErrClosed, ErrReadOnly or the sticky ErrLogFailed.
func (l *Log) AppendReplica(off int64, data []byte) (int, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	if l.readOnly {
		return 0, ErrReadOnly
	}
	if err := l.fl.failure(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	n, err := l.appendReplicaLocked(off, data)
	moved := l.pos != l.written.Load()
	if moved {
		l.written.Store(l.pos)
	}
	pos := l.pos
	l.mu.Unlock()
	if moved {
		l.published()
		if ahead := l.opts.PrefaultAhead; ahead > 0 && pos+ahead/2 > l.prefaulted.Load() {
			l.kickAlloc()
		}
	}
	return n, err
}

// appendReplicaLocked is AppendReplica's critical section. It advances
// l.pos (and l.active) as it goes; the caller publishes the written position.
func (l *Log) appendReplicaLocked(off int64, data []byte) (int, error) {
	consumed := 0
	if off != l.pos {
		if l.skipTo != l.pos || off < l.skipFrom || off >= l.skipTo {
			return 0, fmt.Errorf("%w: bytes for offset %d, the log ends at %d", ErrReplicaOffset, off, l.pos)
		}
		// Padding of the last marker: consumed, not copied.
		k := int(min(int64(len(data)), l.skipTo-off))
		consumed += k
		data = data[k:]
		l.skipFrom = off + int64(k)
	}
	seg, pos := l.active, l.pos
	run := 0 // data[:run] are validated records not yet copied, from pos-run on
	flush := func() {
		if run > 0 {
			copy(seg.data[pos-int64(run)-seg.base:], data[:run])
			data = data[run:]
			consumed += run
			run = 0
		}
	}
	defer func() { l.pos = pos }()
	for {
		if pos == seg.end() {
			next, err := l.takeNext(seg.end())
			if err != nil {
				return consumed, err
			}
			l.addSegment(next)
			seg, pos = next, next.base
			l.active = next
			l.prefaulted.Store(next.base)
		}
		rest := data[run:]
		if len(rest) < message.BlankHeaderSize {
			flush()
			return consumed, nil
		}
		size := int64(int32(binary.BigEndian.Uint32(rest)))
		magic := binary.BigEndian.Uint32(rest[message.OffMagic:])
		left := seg.end() - pos
		switch magic {
		case message.MagicBlank, message.MagicHole:
			flush()
			if magic == message.MagicBlank && size != left {
				return consumed, fmt.Errorf("%w: blank-end marker at %d announces %d bytes, the segment has %d left", ErrReplicaData, pos, size, left)
			}
			if size < message.BlankHeaderSize || size > left {
				return consumed, fmt.Errorf("%w: hole marker at %d covers %d bytes, the segment has %d left", ErrReplicaData, pos, size, left)
			}
			copy(seg.data[pos-seg.base:], data[:message.BlankHeaderSize])
			k := int(min(int64(len(data)), size))
			data = data[k:]
			consumed += k
			if int64(k) < size {
				l.skipFrom, l.skipTo = pos+int64(k), pos+size
			}
			pos += size
			if pos == seg.end() {
				seg.lastWrite.Store(l.opts.now().UnixNano())
			}
		case message.MagicV1, message.MagicV2:
			if size < message.MinRecordSize || size+message.BlankHeaderSize > left {
				flush()
				return consumed, fmt.Errorf("%w: record at %d claims %d bytes, the segment has %d left (a record leaves room for a blank-end marker)", ErrReplicaData, pos, size, left)
			}
			if int64(len(rest)) < size {
				flush()
				return consumed, nil
			}
			v, err := decodeStored(rest[:size])
			if err != nil {
				flush()
				return consumed, fmt.Errorf("%w: record at %d: %w", ErrReplicaData, pos, err)
			}
			if v.PhysicalOffset() != pos {
				flush()
				return consumed, fmt.Errorf("%w: record at %d claims offset %d", ErrReplicaData, pos, v.PhysicalOffset())
			}
			run += int(size)
			pos += size
		default:
			flush()
			return consumed, fmt.Errorf("%w: no record or marker at %d (magic %#08x)", ErrReplicaData, pos, magic)
		}
	}
}

// RestartAt discards the whole log and starts it again, empty, at base: a
// segment boundary above the written position. It is what a replica does
// when its master no longer holds the bytes it would need next (retention
// removed them): it starts over from the master's oldest segment. Offsets
// only move up, so whatever referred to the old log (consume queues, the
// index) now points below MinOffset, as after retention.
//
// The old segment files are moved into DiscardedDir/<unix ms>/ (the files of
// a log that holds no data are deleted instead); the returned path names that
// directory ("" when nothing was kept). Views of the old segments stay valid
// until released. On error the log is unchanged, or (a failed rename) still
// whole in memory with a prefix of its files moved.
//
// A crash at any step leaves a directory Open accepts. The checkpoint is
// reset first, so a log partly moved recovers as what remains of it (a
// contiguous suffix, scanned from its first segment); the new segment is
// created under a temporary name (which Open ignores) and takes its own name
// only once every old segment has gone, so the directory never holds the new
// segment beside old ones with a gap between.
func (l *Log) RestartAt(base int64) (string, error) {
	if l.readOnly {
		return "", ErrReadOnly
	}
	if err := l.fl.failure(); err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return "", ErrClosed
	}
	if base%l.opts.SegmentSize != 0 || base <= l.pos {
		return "", fmt.Errorf("commitlog: restart at %d: not a segment boundary above the end %d", base, l.pos)
	}
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	// Retention must not take a segment out of the list meanwhile: it would
	// release the owner's reference this function releases too.
	l.segMu.Lock()
	defer l.segMu.Unlock()
	// No sync round may run meanwhile (see flusher.syncMu).
	l.fl.syncMu.Lock()
	defer l.fl.syncMu.Unlock()

	old := *l.segs.Load()
	empty := l.pos == old[0].base
	// From here until the new checkpoint, a crash must take the scanning
	// path and must not be refused for lack of segments.
	if err := l.ckpt.write(checkpointState{time: l.opts.now().UnixMilli()}); err != nil {
		return "", err
	}
	// The prepared segment follows the active one: dropping it keeps the
	// files contiguous. If it is the one wanted, it is kept instead.
	var s *segment
	if p := l.prepared; p != nil {
		if p.base == base {
			s = p
		} else {
			p.release(true) // never written: unlinked at once
		}
		l.prepared = nil
	}
	final := filepath.Join(l.dir, segmentName(base))
	if s == nil {
		tmp := final + restartSuffix
		_ = l.fs.Remove(tmp) // left by a crash during an earlier restart
		var err error
		if s, err = l.createSegmentAt(tmp, base); err != nil {
			return "", err
		}
	}
	var aside string
	if !empty {
		aside = filepath.Join(l.dir, DiscardedDir, strconv.FormatInt(l.opts.now().UnixMilli(), 10))
		if err := durable.MkdirAll(l.fs, aside, 0o755); err != nil {
			l.dropRestartSegment(s)
			return "", fmt.Errorf("commitlog: %w", err)
		}
		// Oldest first: what remains at every step is a contiguous log.
		for _, o := range old {
			if err := l.fs.Rename(o.path, filepath.Join(aside, filepath.Base(o.path))); err != nil {
				l.dropRestartSegment(s)
				return aside, fmt.Errorf("commitlog: set segment aside: %w", err)
			}
		}
		if err := durable.SyncDir(l.fs, aside); err != nil {
			l.dropRestartSegment(s)
			return aside, err
		}
		if err := durable.SyncDir(l.fs, filepath.Dir(aside)); err != nil {
			l.dropRestartSegment(s)
			return aside, err
		}
	}
	// The old segments leave the list (an empty log's files are unlinked
	// once no reader holds them), then the new one takes its name.
	l.segs.Store(&[]*segment{})
	for _, o := range old {
		o.release(empty)
	}
	if s.path != final {
		if err := l.fs.Rename(s.path, final); err != nil {
			// No segment is left: Open would start the log empty at 0.
			// Keep the new one in memory under its temporary name.
			err = fmt.Errorf("commitlog: name restarted segment: %w", err)
			l.installRestart(s, base)
			return aside, err
		}
		s.path = final
	}
	if err := durable.SyncDir(l.fs, l.dir); err != nil {
		l.installRestart(s, base)
		return aside, err
	}
	l.installRestart(s, base)
	if err := l.ckpt.write(checkpointState{flushed: base, written: base, time: l.opts.now().UnixMilli()}); err != nil {
		return aside, err
	}
	return aside, nil
}

// restartSuffix names the segment RestartAt creates until it takes its own
// name; Open removes such files (removeUnfinished).
const restartSuffix = ".restart"

// dropRestartSegment removes the segment RestartAt created after a failure
// (a reused prepared segment goes back to the allocator).
func (l *Log) dropRestartSegment(s *segment) {
	if s.path == filepath.Join(l.dir, segmentName(s.base)) {
		l.prepared = s
		return
	}
	s.release(true)
}

// installRestart makes s, empty at base, the whole log. Called with l.mu,
// l.allocMu and l.segMu held.
func (l *Log) installRestart(s *segment, base int64) {
	segs := []*segment{s}
	l.segs.Store(&segs)
	l.minOff.Store(base)
	l.active = s
	l.pos = base
	l.nextBase = base + l.opts.SegmentSize
	l.skipFrom, l.skipTo = 0, 0
	l.prefaulted.Store(base)
	l.fl.mu.Lock()
	l.written.Store(base)
	l.flushed.Store(base)
	l.fl.mu.Unlock()
	l.published()
	l.kickAlloc()
}

// WrittenAfter returns a channel that is closed once the written position is
// beyond off (at once when it is already). Any number of goroutines may wait;
// each wait costs the appender a lock and a close once, when it wakes them.
func (l *Log) WrittenAfter(off int64) <-chan struct{} {
	if l.written.Load() > off {
		return closedChan
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.wch == nil {
		l.wch = make(chan struct{})
	}
	ch := l.wch
	// Announce the waiter, then look again: the appender publishes the
	// written position and then looks for waiters, so one of the two sees
	// the other (sequentially consistent atomics).
	l.wwant.Store(true)
	if l.written.Load() > off || l.closed.Load() {
		close(ch)
		l.wch = nil
		l.wwant.Store(false)
	}
	return ch
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// published is called after the written position moved: it wakes the
// dispatcher (Appended) and every WrittenAfter waiter.
func (l *Log) published() {
	select {
	case l.appended <- struct{}{}:
	default:
	}
	if l.wwant.Load() {
		l.wakeWritten()
	}
}

func (l *Log) wakeWritten() {
	l.wmu.Lock()
	if l.wch != nil {
		close(l.wch)
		l.wch = nil
	}
	l.wwant.Store(false)
	l.wmu.Unlock()
}
