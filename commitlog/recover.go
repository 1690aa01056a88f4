package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/mmap"
)

// Recovery reports what Open found and did.
type Recovery struct {
	// Clean is true when the last shutdown was clean (normal path, no scan).
	Clean bool
	// ScannedFrom is where the abnormal path started validating records.
	ScannedFrom int64
	// ScannedBytes and ScannedRecords count what the abnormal path validated.
	ScannedBytes   int64
	ScannedRecords int64
	// End is the written position after recovery.
	End int64
	// DroppedBytes is how many non-zero bytes past End were discarded.
	DroppedBytes int64
	// DroppedRecords counts the records in the discarded bytes that still had a
	// plausible header (the first of them failed validation).
	DroppedRecords int64
	// DroppedSegments counts whole segment files removed after the truncation point.
	DroppedSegments int
	// Reason says why the scan stopped when it dropped something.
	Reason string
}

// Lost reports whether recovery discarded anything.
func (r Recovery) Lost() bool { return r.DroppedBytes > 0 || r.DroppedSegments > 0 }

// String summarises the report for a log line.
func (r Recovery) String() string {
	if r.Clean {
		return fmt.Sprintf("clean shutdown; end %d", r.End)
	}
	s := fmt.Sprintf("crash recovery: scanned %d records (%d bytes) from %d; end %d", r.ScannedRecords, r.ScannedBytes, r.ScannedFrom, r.End)
	if r.Lost() {
		s += fmt.Sprintf("; dropped %d bytes, %d records, %d segments (%s)", r.DroppedBytes, r.DroppedRecords, r.DroppedSegments, r.Reason)
	}
	return s
}

// recover opens the segments and finds the written position.
func (l *Log) recover() (Recovery, error) {
	ckpt, st, ok, err := openCheckpoint(l.dir)
	if err != nil {
		return Recovery{}, err
	}
	l.ckpt = ckpt
	bases, err := listSegments(l.dir)
	if err != nil {
		return Recovery{}, err
	}
	var segs []*segment
	var rep Recovery
	for i, b := range bases {
		if b%l.opts.SegmentSize != 0 || (i > 0 && b != bases[i-1]+l.opts.SegmentSize) {
			releaseSegments(segs)
			return Recovery{}, fmt.Errorf("commitlog: segment %s does not follow its predecessor (segment size %d): the directory is not one log", segmentName(b), l.opts.SegmentSize)
		}
		s, err := openSegment(l.dir, b, l.opts.SegmentSize)
		if err != nil {
			if errors.Is(err, errShortSegment) && i == len(bases)-1 {
				// A crash while creating the last segment: it never held data
				// (records go into a segment only after it is fully allocated).
				os.Remove(filepath.Join(l.dir, segmentName(b)))
				rep.DroppedSegments++
				continue
			}
			releaseSegments(segs)
			return Recovery{}, err
		}
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		s, err := createSegment(l.dir, 0, l.opts.SegmentSize, l.opts.fallocate, l.opts.now())
		if err != nil {
			return Recovery{}, err
		}
		segs = []*segment{s}
		ok, st = true, checkpointState{clean: true}
	}
	l.segs.Store(&segs)
	l.minOff.Store(segs[0].base)

	var end int64
	if ok && st.clean && st.written >= segs[0].base && st.written < segs[len(segs)-1].end() {
		end = st.written
		rep.Clean = true
	} else {
		from := segs[0].base
		if ok && st.flushed > from && st.flushed < segs[len(segs)-1].end() {
			// Everything below the checkpoint was synced; start at its segment.
			from = st.flushed - (st.flushed-segs[0].base)%l.opts.SegmentSize
		}
		end, err = l.scan(from, &rep)
		if err != nil {
			return rep, err
		}
	}
	if err := l.truncateAfter(end, &rep); err != nil {
		return rep, err
	}
	rep.End = end
	segs = *l.segs.Load()
	l.active = segs[len(segs)-1]
	l.nextBase = l.active.end()
	l.pos = end
	l.written.Store(end)
	l.flushed.Store(end)
	l.prefaulted.Store(end)
	// From now on a crash must take the abnormal path.
	if err := l.ckpt.write(checkpointState{flushed: end, written: end, time: l.opts.now().UnixMilli()}); err != nil {
		return rep, err
	}
	return rep, nil
}

func releaseSegments(segs []*segment) {
	for _, s := range segs {
		s.release(false)
	}
}

// scan validates records from offset from (a segment base) and returns the
// offset of the first invalid one, or of the end of the valid data.
func (l *Log) scan(from int64, rep *Recovery) (int64, error) {
	rep.ScannedFrom = from
	segs := *l.segs.Load()
	i := int((from - segs[0].base) / l.opts.SegmentSize)
	pos := from
	for ; i < len(segs); i++ {
		seg := segs[i]
		pos = seg.base
		for pos < seg.end() {
			buf := seg.data[pos-seg.base:]
			if size, ok := message.IsBlank(buf); ok && int64(size) == seg.end()-pos {
				if i+1 == len(segs) {
					// Closed, but its successor is gone: the log ends at the
					// marker, which the writer will overwrite.
					return pos, nil
				}
				pos = seg.end()
				break
			}
			v, err := message.Decode(buf, true)
			if err != nil {
				rep.Reason = fmt.Sprintf("offset %d: %v", pos, err)
				return pos, nil
			}
			if v.PhysicalOffset() != pos {
				rep.Reason = fmt.Sprintf("offset %d: record claims offset %d (stale data)", pos, v.PhysicalOffset())
				return pos, nil
			}
			pos += int64(v.TotalSize())
			rep.ScannedRecords++
			rep.ScannedBytes += int64(v.TotalSize())
		}
	}
	return pos, nil
}

// truncateAfter discards everything at and after end: it counts what is
// dropped, zeroes the rest of end's segment and removes later segments.
func (l *Log) truncateAfter(end int64, rep *Recovery) error {
	segs := *l.segs.Load()
	i := int((end - segs[0].base) / l.opts.SegmentSize)
	if i >= len(segs) {
		// end is exactly the end of the last segment: impossible, since every
		// segment ends with a blank marker; treat the last segment as active.
		i = len(segs) - 1
	}
	seg := segs[i]
	if !rep.Clean {
		countDropped(seg, end, rep)
		if err := mmap.ZeroRange(seg.f, end-seg.base, seg.end()-end); err != nil {
			return fmt.Errorf("commitlog: zero tail of %s: %w", seg.path, err)
		}
		if err := seg.m.Sync(int(end-seg.base), int(seg.end()-end)); err != nil {
			return err
		}
	}
	for _, later := range segs[i+1:] {
		// An unused preallocated segment (all zeros) is not a loss.
		if n := nonZeroExtent(later.data, 0); n > 0 {
			rep.DroppedBytes += n
			rep.DroppedSegments++
		}
		later.release(true)
	}
	kept := segs[: i+1 : i+1]
	l.segs.Store(&kept)
	return nil
}

// countDropped walks plausible record headers after end to report the loss.
func countDropped(seg *segment, end int64, rep *Recovery) {
	off := end - seg.base
	data := seg.data
	for off+8 <= int64(len(data)) {
		size := int64(message.ReadTotalSize(data[off:]))
		magic := uint32(data[off+4])<<24 | uint32(data[off+5])<<16 | uint32(data[off+6])<<8 | uint32(data[off+7])
		if size < message.MinRecordSize || off+size > int64(len(data)) || (magic != message.MagicV1 && magic != message.MagicV2) {
			break
		}
		rep.DroppedRecords++
		off += size
	}
	rep.DroppedBytes += max(off-(end-seg.base), nonZeroExtent(data, end-seg.base))
}

// nonZeroExtent returns how many bytes from start up to the last non-zero
// byte of the contiguous data that follows it. It reads in 64 KiB chunks and
// stops at the first chunk that is entirely zero (data is written front to
// back, so that is where the written part ended).
func nonZeroExtent(data []byte, start int64) int64 {
	const chunk = 64 << 10
	last := start
	for off := start; off < int64(len(data)); off += chunk {
		c := data[off:min(off+chunk, int64(len(data)))]
		nz := lastNonZero(c)
		if nz < 0 {
			break
		}
		last = off + int64(nz) + 1
	}
	return last - start
}

func lastNonZero(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}
