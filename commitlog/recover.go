package commitlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/message"
)

// DamagedDir is the directory, inside the log's, where recovery keeps the
// bytes it could not trust: the original content of every hole, of every
// dropped range that should have been durable, and whole segment files set
// aside. Nothing under it is ever read back by the log.
const DamagedDir = "damaged"

// ErrLayout: the segment files do not form one log (a missing segment between
// two present ones, a file of the wrong size or name, a checkpoint recording
// data where no segment is). Open refuses such a directory unless
// Options.AcceptLoss is set; the error names the files.
var ErrLayout = errors.New("commitlog: segment files do not form one log")

// Loss is a range of the log that recovery could not keep.
type Loss struct {
	// From and To bound the lost bytes: [From, To) in log offsets. For a
	// segment closed early To is the segment's end: where in it the lost
	// records ended cannot be told.
	From, To int64
	// Reason says what was wrong (the first failed check).
	Reason string
	// Saved is the file under DamagedDir holding the range's original
	// bytes, "" when there were none to keep (all zero, or cut off the file).
	Saved string
	// Unsynced is true when the range lay beyond the last position the
	// checkpoint recorded as synced: the loss a machine crash may cause in
	// async mode, not damage to durable data.
	Unsynced bool
}

func (l Loss) String() string {
	s := fmt.Sprintf("[%d,%d) %s", l.From, l.To, l.Reason)
	if l.Saved != "" {
		s += "; original bytes in " + l.Saved
	}
	if l.Unsynced {
		s += " (unsynced)"
	}
	return s
}

// Recovery reports what Open found and did.
type Recovery struct {
	// Clean is true when the checkpoint recorded a clean shutdown.
	Clean bool
	// Verified is true when the shutdown was clean and every check agreed
	// with the checkpoint: segment sizes, the newest segment's records (magic,
	// size, offset, CRC), the end it recorded and the zeros after it.
	Verified bool
	// Mismatch says why a clean shutdown's record was not trusted ("" when
	// Verified or after a crash).
	Mismatch string
	// ScannedFrom is where validation started; ScannedBytes and
	// ScannedRecords count what it validated.
	ScannedFrom    int64
	ScannedBytes   int64
	ScannedRecords int64
	// End is the written position after recovery.
	End int64
	// DroppedBytes is how many non-zero bytes past End were discarded.
	DroppedBytes int64
	// DroppedRecords counts the records in the discarded bytes that still had a
	// plausible header (the first of them failed validation).
	DroppedRecords int64
	// DroppedSegments counts whole segment files removed (or set aside)
	// after the truncation point.
	DroppedSegments int
	// Reason says why validation stopped when it dropped something.
	Reason string
	// Losses lists every range recovery could not keep: holes inside the
	// log, segments closed early, and the dropped tail. Losses below the
	// synced position are damage (bit rot, a cut or overwritten file); the
	// rest (Unsynced) is what a machine crash may cost.
	Losses []Loss
	// Holes counts the hole markers met that earlier recoveries left.
	Holes int
	// Extended lists the segment files that were shorter than the segment
	// size and were extended (with zeros, never over a byte) to be scanned.
	Extended []string
	// SetAside lists the segment files moved into DamagedDir whole.
	SetAside []string
}

// Lost reports whether recovery discarded anything.
func (r Recovery) Lost() bool {
	return r.DroppedBytes > 0 || r.DroppedSegments > 0 || len(r.Losses) > 0 || len(r.SetAside) > 0
}

// Damaged reports whether recovery found damage to data that was durable:
// a loss below the synced position, a cut segment, or a file set aside.
func (r Recovery) Damaged() bool {
	for _, l := range r.Losses {
		if !l.Unsynced {
			return true
		}
	}
	return len(r.Extended) > 0 || len(r.SetAside) > 0
}

// String summarises the report for a log line.
func (r Recovery) String() string {
	var b strings.Builder
	switch {
	case r.Verified:
		fmt.Fprintf(&b, "clean shutdown, verified %d records (%d bytes) from %d; end %d", r.ScannedRecords, r.ScannedBytes, r.ScannedFrom, r.End)
	case r.Clean:
		fmt.Fprintf(&b, "clean shutdown NOT confirmed (%s): scanned %d records (%d bytes) from %d; end %d", r.Mismatch, r.ScannedRecords, r.ScannedBytes, r.ScannedFrom, r.End)
	default:
		fmt.Fprintf(&b, "crash recovery: scanned %d records (%d bytes) from %d; end %d", r.ScannedRecords, r.ScannedBytes, r.ScannedFrom, r.End)
	}
	if r.DroppedBytes > 0 || r.DroppedSegments > 0 {
		fmt.Fprintf(&b, "; dropped %d bytes, %d records, %d segments (%s)", r.DroppedBytes, r.DroppedRecords, r.DroppedSegments, r.Reason)
	}
	if len(r.Extended) > 0 {
		fmt.Fprintf(&b, "; short segments extended: %s", strings.Join(r.Extended, ", "))
	}
	if len(r.SetAside) > 0 {
		fmt.Fprintf(&b, "; segments set aside: %s", strings.Join(r.SetAside, ", "))
	}
	for _, l := range r.Losses {
		fmt.Fprintf(&b, "; lost %s", l)
	}
	return b.String()
}

func (r *Recovery) mismatch(format string, args ...any) {
	if !r.Clean {
		return
	}
	s := fmt.Sprintf(format, args...)
	if r.Mismatch == "" {
		r.Mismatch = s
	} else if !strings.Contains(r.Mismatch, s) {
		r.Mismatch += "; " + s
	}
}

// recover opens the segments, verifies them and finds the written position.
//
// Whatever the checkpoint says, the files are checked before they are
// trusted: every segment's size and name (a short one is extended, never
// shortened, and scanned), and the records of the newest segment (magic,
// size, PHYSICALOFFSET, CRC) up to the recorded end, with zeros after it.
// After a crash, validation starts at the checkpoint's flushed segment as
// before. Damage inside the log becomes a hole (the bytes saved aside and
// covered by a hole marker) and the records after it are kept; only when no
// valid record follows does the log end there.
func (l *Log) recover() (Recovery, error) {
	ckpt, st, ok, err := openCheckpoint(l.fs, l.dir)
	if err != nil {
		return Recovery{}, err
	}
	l.ckpt = ckpt
	rep := Recovery{Clean: ok && st.clean}
	regBases, regAll, err := readRegistry(l.fs, l.dir)
	if err != nil {
		return rep, err
	}
	l.setStale(regBases, regAll)
	bases, err := listSegments(l.fs, l.dir)
	if err != nil {
		return rep, err
	}
	if bases, err = l.checkLayout(bases, &rep); err != nil {
		return rep, err
	}
	segs, cut, err := l.openSegments(bases, &rep)
	if err != nil {
		return rep, err
	}
	if len(segs) == 0 {
		base := int64(0)
		if ok && st.written > 0 {
			if !l.opts.AcceptLoss {
				return rep, fmt.Errorf("%w: %s holds no segment file but its checkpoint records data up to offset %d; "+
					"restore the segments, or accept the loss (Options.AcceptLoss, --recover-accept-loss) to start an empty log after it",
					ErrLayout, l.dir, st.written)
			}
			// Never reuse offsets that messages may still refer to.
			base = (st.written + l.opts.SegmentSize - 1) / l.opts.SegmentSize * l.opts.SegmentSize
			rep.Losses = append(rep.Losses, Loss{To: st.written, Reason: "no segment file left"})
		} else if !ok {
			rep.Clean = true // a new log
		}
		// A new file, not a recycled one: nothing registered it.
		s, err := l.createSegmentAt(filepath.Join(l.dir, segmentName(base)), base)
		if err != nil {
			return rep, err
		}
		segs = []*segment{s}
		ok, st = true, checkpointState{clean: rep.Clean, flushed: base, written: base}
	}
	l.segs.Store(&segs)
	l.minOff.Store(segs[0].base)
	first, last := segs[0], segs[len(segs)-1]

	// durable: below it the log was synced (or, after a clean shutdown,
	// written in full); a loss there is damage, not the price of a crash.
	durable := first.base
	if ok {
		durable = max(first.base, st.flushed)
		if st.clean {
			durable = max(first.base, st.written)
		}
	}
	from := first.base
	switch {
	case rep.Clean && (st.written < first.base || st.written >= last.end()):
		rep.mismatch("the checkpoint's end %d lies outside the segments [%d, %d)", st.written, first.base, last.end())
		from = last.base
	case rep.Clean:
		// The newest segment holding data.
		from = l.segmentBase(max(st.written-1, first.base))
	case ok && st.flushed > first.base:
		from = l.segmentBase(min(st.flushed, last.base))
	}
	for _, c := range cut {
		rep.mismatch("segment %s was %d bytes, not %d", segmentName(c.base), c.size, l.opts.SegmentSize)
		from = min(from, c.base)
	}
	end, err := l.scan(from, durable, &rep)
	if err != nil {
		return rep, err
	}
	if rep.Clean && end != st.written {
		rep.mismatch("the log ends at %d, the checkpoint recorded %d", end, st.written)
	}
	if err := l.truncateAfter(end, durable, &rep); err != nil {
		return rep, err
	}
	// Every registered segment is ordinary now: those before the end are
	// closed, the end's tail is zeroed and synced, and those after it are
	// gone (the directory synced).
	if err := l.reg.reset(l.opts.SegmentSize, len(regBases) > 0 || regAll); err != nil {
		return rep, err
	}
	l.setStale(nil, false)
	rep.Verified = rep.Clean && rep.Mismatch == "" && len(rep.Losses) == 0
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

// setStale records which segments recovery treats as recycled.
func (l *Log) setStale(bases []int64, all bool) {
	l.staleAll = all
	l.staleBases = nil
	for _, b := range bases {
		if l.staleBases == nil {
			l.staleBases = make(map[int64]bool, len(bases))
		}
		l.staleBases[b] = true
	}
}

// segmentBase returns the base of the segment holding off.
func (l *Log) segmentBase(off int64) int64 { return off - off%l.opts.SegmentSize }

// checkLayout checks the segment names: aligned to the segment size and
// contiguous. A gap (a segment missing between two present ones) is refused
// unless Options.AcceptLoss, which sets the segments before the last gap
// aside so that the log starts after it.
func (l *Log) checkLayout(bases []int64, rep *Recovery) ([]int64, error) {
	size := l.opts.SegmentSize
	for _, b := range bases {
		if b%size != 0 {
			return nil, fmt.Errorf("%w: segment %s does not start at a multiple of the segment size %d (was the segment size changed?)",
				ErrLayout, filepath.Join(l.dir, segmentName(b)), size)
		}
	}
	gap := -1
	for i := 1; i < len(bases); i++ {
		if bases[i] != bases[i-1]+size {
			gap = i
		}
	}
	if gap < 0 {
		return bases, nil
	}
	missing := fmt.Sprintf("%s to %s", segmentName(bases[gap-1]+size), segmentName(bases[gap]-size))
	if !l.opts.AcceptLoss {
		return nil, fmt.Errorf("%w: in %s the segments %s are missing between %s and %s; restore them, or accept the loss "+
			"(Options.AcceptLoss, --recover-accept-loss) to set the %d segments before the gap aside in %s and start the log at %s",
			ErrLayout, l.dir, missing, segmentName(bases[gap-1]), segmentName(bases[gap]), gap, filepath.Join(l.dir, DamagedDir), segmentName(bases[gap]))
	}
	for _, b := range bases[:gap] {
		saved, err := l.setAside(b)
		if err != nil {
			return nil, err
		}
		rep.SetAside = append(rep.SetAside, saved)
	}
	rep.Losses = append(rep.Losses, Loss{From: bases[0], To: bases[gap], Reason: "segments " + missing + " missing; the segments before them were set aside"})
	return bases[gap:], nil
}

// cutSegment is a segment file found shorter than the segment size.
type cutSegment struct{ base, size int64 }

// openSegments maps every segment. One shorter than the segment size (cut
// by an operator or a broken copy) is extended with zeros to full size, so
// that its valid records can be kept; the caller scans it. One longer is
// refused. An empty last file is a segment whose creation was interrupted
// (created, not yet preallocated): it holds no byte to lose, and is
// extended without being reported (were data missing from it, the
// checkpoint's end would say so).
func (l *Log) openSegments(bases []int64, rep *Recovery) (segs []*segment, cut []cutSegment, err error) {
	size := l.opts.SegmentSize
	for i, b := range bases {
		path := filepath.Join(l.dir, segmentName(b))
		st, err := l.fs.Stat(path)
		if err == nil && st.Size() > size {
			err = fmt.Errorf("%w: segment %s is %d bytes, more than the segment size %d (was the segment size changed?)", ErrLayout, path, st.Size(), size)
		}
		if err == nil && st.Size() == 0 && i == len(bases)-1 {
			err = extendFile(l.fs, path, size)
		} else if err == nil && st.Size() < size {
			if err = extendFile(l.fs, path, size); err == nil {
				cut = append(cut, cutSegment{b, st.Size()})
				rep.Extended = append(rep.Extended, fmt.Sprintf("%s (%d bytes)", segmentName(b), st.Size()))
			}
		}
		var s *segment
		if err == nil {
			s, err = l.openSegment(b)
		}
		if err != nil {
			releaseSegments(segs)
			return nil, nil, fmt.Errorf("commitlog: %w", err)
		}
		segs = append(segs, s)
	}
	return segs, cut, nil
}

// extendFile grows a short file to size with zeros, allocating the blocks
// (a later write through the mapping must not meet a full disk) and syncing
// the new size. Existing bytes are not touched.
func extendFile(fsys vfs.FS, path string, size int64) error {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("commitlog: extend %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Allocate(0, size); err != nil {
		return fmt.Errorf("commitlog: extend short segment %s to %d bytes: %w", path, size, classifySpace(err))
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("commitlog: sync extended %s: %w", path, err)
	}
	return nil
}

func releaseSegments(segs []*segment) {
	for _, s := range segs {
		s.release(false)
	}
}

// scan validates the log from from (a segment base) on and returns the end
// of the valid data. Damage inside a segment becomes a hole when a valid
// record follows it; a segment whose data stops short is closed with a
// blank-end marker when a later segment holds data; the first segment that
// stops short with nothing valid after it ends the log.
func (l *Log) scan(from, durable int64, rep *Recovery) (int64, error) {
	rep.ScannedFrom = from
	segs := *l.segs.Load()
	i := int((from - segs[0].base) / l.opts.SegmentSize)
	end := from
	type short struct {
		seg    *segment
		pos    int64
		reason string
	}
	var pending []short // segments whose data stopped short, awaiting a later segment with data
	for ; i < len(segs); i++ {
		seg := segs[i]
		stop, closed, reason, err := l.scanSegment(seg, durable, rep)
		if err != nil {
			return 0, err
		}
		if stop > seg.base || closed {
			for _, p := range pending {
				if err := l.closeShort(p.seg, p.pos, durable, p.reason, rep); err != nil {
					return 0, err
				}
			}
			pending = pending[:0]
		}
		if closed {
			end = seg.end()
			continue
		}
		pending = append(pending, short{seg, stop, reason})
	}
	if len(pending) > 0 {
		rep.Reason = pending[0].reason
		return pending[0].pos, nil
	}
	return end, nil
}

// scanSegment validates seg's records from its base. It returns where the
// valid data stops and whether the segment is closed (a valid blank-end
// marker, or holes up to its end). Damage followed by a valid record is
// turned into a hole on the way.
//
// In a segment that may be recycled (registered, see recycle.go), blank-end
// and hole markers are trusted only below durable: past it one may be an
// older segment's, at the same place. After a clean shutdown nothing past
// durable (the recorded end) is looked at: it can only be older data.
func (l *Log) scanSegment(seg *segment, durable int64, rep *Recovery) (stop int64, closed bool, reason string, err error) {
	pos := seg.base
	recycled := l.mayBeStale(seg.base)
	// A read-only log maps a cut file as it is: its data may end early.
	for limit := seg.base + int64(len(seg.data)); pos < limit; {
		buf := seg.data[pos-seg.base:]
		if recycled && pos >= durable && rep.Clean {
			return pos, false, fmt.Sprintf("offset %d: the recorded end; the rest of the recycled segment is an older segment's data", pos), nil
		}
		markers := !recycled || pos < durable
		if size, ok := message.IsBlank(buf); markers && ok && int64(size) == seg.end()-pos {
			return pos, true, "", nil
		}
		if size, ok := message.IsHole(buf); markers && ok && pos+int64(size) <= seg.end() {
			rep.Holes++
			pos += int64(size)
			continue
		}
		v, err := decodeStored(buf)
		if err == nil && v.PhysicalOffset() == pos {
			pos += int64(v.TotalSize())
			rep.ScannedRecords++
			rep.ScannedBytes += int64(v.TotalSize())
			continue
		}
		if err != nil {
			reason = fmt.Sprintf("offset %d: %v", pos, err)
		} else {
			reason = fmt.Sprintf("offset %d: record claims offset %d (stale data)", pos, v.PhysicalOffset())
		}
		next, found := resync(seg, pos, durable, recycled)
		if !found {
			return pos, false, reason, nil
		}
		if err := l.makeHole(seg, pos, next, durable, reason, rep); err != nil {
			return 0, false, "", err
		}
		pos = next
	}
	if pos < seg.end() {
		return pos, false, fmt.Sprintf("segment file ends at %d", pos), nil
	}
	return pos, true, "", nil
}

// zeroChunk is the granularity at which resync and the loss accounting look
// for the end of written data: a whole chunk of zeros.
const zeroChunk = 64 << 10

var (
	recordMagicPrefix = []byte{0xDA, 0xA3, 0x20} // MagicV1 and MagicV2 share it
	blankMagicBytes   = []byte{0xCB, 0xD4, 0x31, 0x94}
)

// resync looks for the first trustworthy boundary after damage at pos in seg:
// a record whose magic, PHYSICALOFFSET (equal to its position) and CRC are
// all right, or a valid blank-end marker. Below durable it searches the whole
// segment; past it (the unsynced tail a crash may have torn) it stops at the
// first all-zero 64 KiB chunk, where written data ended. The boundary must
// leave room for a hole marker.
//
// In a recycled segment (recycled set) the bytes past durable are not zeros
// after the written data but an older segment's: there resync searches to
// the segment's end, accepts records only (their PHYSICALOFFSET is checked
// before the CRC, so the older records cost one comparison each) and no
// blank-end marker, which carries no offset to tell a stale one from this
// log's.
func resync(seg *segment, pos, durable int64, recycled bool) (int64, bool) {
	rel := pos - seg.base
	limit := int64(len(seg.data))
	if !recycled {
		for c := max(rel, durable-seg.base); c < limit; c += zeroChunk {
			if lastNonZero(seg.data[c:min(c+zeroChunk, limit)]) < 0 {
				limit = c
				break
			}
		}
	}
	start := rel + message.BlankHeaderSize
	if start >= limit {
		return 0, false
	}
	area := seg.data[:limit]
	nextRec, nextBlank := int64(-2), int64(-2) // -2: not searched yet; -1: none
	for p := start; p < limit; {
		if nextRec != -1 && nextRec < p {
			nextRec = indexFrom(area, recordMagicPrefix, p+message.OffMagic) - message.OffMagic
			if nextRec < 0 {
				nextRec = -1
			}
		}
		if nextBlank != -1 && nextBlank < p {
			nextBlank = indexFrom(area, blankMagicBytes, p+message.OffMagic) - message.OffMagic
			if nextBlank < 0 || (recycled && seg.base+nextBlank >= durable) {
				nextBlank = -1
			}
		}
		var cand int64
		switch {
		case nextRec < 0 && nextBlank < 0:
			return 0, false
		case nextRec < 0:
			cand = nextBlank
		case nextBlank < 0:
			cand = nextRec
		default:
			cand = min(nextRec, nextBlank)
		}
		buf := seg.data[cand:]
		if size, ok := message.IsBlank(buf); ok && int64(size) == seg.size-cand {
			return seg.base + cand, true
		}
		if recycled && (len(buf) < message.OffPhysicalOffset+8 ||
			int64(binary.BigEndian.Uint64(buf[message.OffPhysicalOffset:])) != seg.base+cand) {
			p = cand + 1
			continue
		}
		if v, err := decodeStored(buf); err == nil && v.PhysicalOffset() == seg.base+cand {
			return seg.base + cand, true
		}
		p = cand + 1
	}
	return 0, false
}

// indexFrom returns the index of sep in b at or after from, or -1.
func indexFrom(b, sep []byte, from int64) int64 {
	if from >= int64(len(b)) {
		return -1
	}
	i := bytes.Index(b[from:], sep)
	if i < 0 {
		return -1
	}
	return from + int64(i)
}

// makeHole saves the damaged bytes [from, to) of seg aside and covers them
// with a hole marker, which readers and later recoveries skip.
func (l *Log) makeHole(seg *segment, from, to, durable int64, reason string, rep *Recovery) error {
	var saved string
	if !l.readOnly {
		var err error
		if saved, err = l.saveAside(seg, from, to); err != nil {
			return err
		}
		message.PutHole(seg.data[from-seg.base:], int32(to-from))
		if err := l.fs.MSync(seg.path, seg.m, int(from-seg.base), message.BlankHeaderSize); err != nil {
			return fmt.Errorf("commitlog: sync hole marker at %d: %w", from, err)
		}
	}
	rep.Losses = append(rep.Losses, Loss{From: from, To: to, Reason: reason, Saved: saved, Unsynced: from >= durable})
	rep.mismatch("damaged bytes [%d, %d)", from, to)
	return nil
}

// closeShort ends seg at pos with a blank-end marker, after saving what
// follows aside: its valid data stopped there but later segments hold data.
// The loss it reports runs to the segment's end.
//
// In a recycled segment a blank-end marker at pos past durable was not
// trusted by the scan (it may be an older segment's); now that a later
// segment holds data, it is this log's: the writer's roll put it there
// right before the later segment's first record. It is synced and nothing
// is lost. Otherwise only the bytes up to the older segment's data
// (staleExtent) are reported and saved.
func (l *Log) closeShort(seg *segment, pos, durable int64, reason string, rep *Recovery) error {
	var n int64
	if l.mayBeStale(seg.base) {
		if size, ok := message.IsBlank(seg.data[pos-seg.base:]); ok && int64(size) == seg.end()-pos {
			if !l.readOnly {
				if err := l.fs.MSync(seg.path, seg.m, int(pos-seg.base), message.BlankHeaderSize); err != nil {
					return fmt.Errorf("commitlog: sync blank marker at %d: %w", pos, err)
				}
			}
			return nil
		}
		n = staleExtent(seg, pos)
		if pos < durable {
			n = max(n, min(durable, seg.end())-pos)
		}
	} else {
		n = nonZeroExtent(seg.data, pos-seg.base)
	}
	var saved string
	if !l.readOnly {
		var err error
		if saved, err = l.saveAside(seg, pos, pos+n); err != nil {
			return err
		}
		message.PutBlank(seg.data[pos-seg.base:], int32(seg.end()-pos))
		if err := l.fs.MSync(seg.path, seg.m, int(pos-seg.base), message.BlankHeaderSize); err != nil {
			return fmt.Errorf("commitlog: sync blank marker at %d: %w", pos, err)
		}
	}
	// Nothing after pos in the segment is kept: the records lost lie
	// somewhere below its end (zeros are no proof that none was there: a
	// power loss leaves unsynced pages zero), so the loss runs to it.
	rep.Losses = append(rep.Losses, Loss{From: pos, To: seg.end(), Reason: reason + "; segment closed early", Saved: saved, Unsynced: pos >= durable})
	rep.mismatch("segment %s closed early at %d", segmentName(seg.base), pos)
	return nil
}

// saveAside copies seg's bytes [from, to) into a file under DamagedDir, synced,
// and returns its path; nothing when they are all zero.
func (l *Log) saveAside(seg *segment, from, to int64) (string, error) {
	b := seg.data[from-seg.base : to-seg.base]
	if lastNonZero(b) < 0 {
		return "", nil
	}
	dir := filepath.Join(l.dir, DamagedDir)
	if err := durable.MkdirAll(l.fs, dir, 0o755); err != nil {
		return "", fmt.Errorf("commitlog: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.%d", segmentName(from), to-from, l.opts.now().UnixMilli()))
	if err := durable.WriteFile(l.fs, path, b); err != nil {
		return "", fmt.Errorf("commitlog: save damaged bytes: %w", err)
	}
	return path, nil
}

// setAside moves the segment file at base into DamagedDir.
func (l *Log) setAside(base int64) (string, error) {
	dir := filepath.Join(l.dir, DamagedDir)
	if err := durable.MkdirAll(l.fs, dir, 0o755); err != nil {
		return "", fmt.Errorf("commitlog: %w", err)
	}
	to := filepath.Join(dir, fmt.Sprintf("%s.%d", segmentName(base), l.opts.now().UnixMilli()))
	if err := l.fs.Rename(filepath.Join(l.dir, segmentName(base)), to); err != nil {
		return "", fmt.Errorf("commitlog: set segment aside: %w", err)
	}
	if err := l.syncDir(dir); err != nil {
		return "", err
	}
	if err := l.syncDir(l.dir); err != nil {
		return "", err
	}
	return to, nil
}

// syncDir fsyncs a directory of the log (see durable.SyncDir).
func (l *Log) syncDir(dir string) error {
	if err := durable.SyncDir(l.fs, dir); err != nil {
		return fmt.Errorf("commitlog: %w", err)
	}
	return nil
}

// truncateAfter discards everything at and after end: it counts what is
// dropped, zeroes the rest of end's segment and removes later segments.
// Bytes that should have been durable (below durable) or that should not
// exist at all (after a clean shutdown) are saved aside first, and later
// segments holding such bytes are set aside whole instead of deleted.
func (l *Log) truncateAfter(end, durable int64, rep *Recovery) error {
	segs := *l.segs.Load()
	i := int((end - segs[0].base) / l.opts.SegmentSize)
	if i >= len(segs) {
		// end is exactly the end of the last segment: impossible, since every
		// segment ends with a blank marker; treat the last segment as active.
		i = len(segs) - 1
	}
	seg := segs[i]
	// In a recycled segment the bytes after the end are an older segment's
	// from staleExtent on: neither lost nor damaged. After a clean shutdown
	// none of them is new.
	recycled := l.mayBeStale(seg.base)
	var n int64
	switch {
	case !recycled:
		countDropped(seg, end, int64(len(seg.data)), rep)
		n = nonZeroExtent(seg.data, end-seg.base)
	case end < durable:
		n = max(staleExtent(seg, end), min(durable, seg.end())-end)
		countDropped(seg, end, end-seg.base+n, rep)
	case !rep.Clean:
		n = staleExtent(seg, end)
		countDropped(seg, end, end-seg.base+n, rep)
	}
	var saved string
	if n > 0 {
		rep.mismatch("%d non-zero bytes after the end %d", n, end)
		if (end < durable || rep.Clean) && !l.readOnly {
			var err error
			if saved, err = l.saveAside(seg, end, end+n); err != nil {
				return err
			}
		}
	}
	switch {
	case end < durable:
		reason := rep.Reason
		if reason == "" {
			reason = "the log ends before the synced position"
		}
		rep.Losses = append(rep.Losses, Loss{From: end, To: max(durable, end+n), Reason: reason, Saved: saved})
	case n > 0:
		reason := rep.Reason
		if reason == "" {
			reason = "non-zero bytes after the recorded end"
		}
		if recycled {
			reason += "; the rest of the segment is an older segment's data (a recycled file)"
		}
		rep.Losses = append(rep.Losses, Loss{From: end, To: end + n, Reason: reason, Saved: saved, Unsynced: true})
	}
	if !l.readOnly {
		if err := seg.f.ZeroRange(end-seg.base, seg.end()-end); err != nil {
			return fmt.Errorf("commitlog: zero tail of %s: %w", seg.path, err)
		}
		if err := l.fs.MSync(seg.path, seg.m, int(end-seg.base), int(seg.end()-end)); err != nil {
			return fmt.Errorf("commitlog: sync zeroed tail: %w", err)
		}
	}
	for _, later := range segs[i+1:] {
		// An unused preallocated segment (all zeros) is not a loss, nor is
		// an unused recycled one (an older segment's data from its start).
		var n int64
		if l.mayBeStale(later.base) {
			n = staleExtent(later, later.base)
			later.recycled = true
		} else {
			n = nonZeroExtent(later.data, 0)
		}
		if l.readOnly {
			if n > 0 {
				rep.DroppedBytes += n
				rep.DroppedSegments++
			}
			later.release(false)
			continue
		}
		if n == 0 {
			l.releaseUnused(later)
			continue
		}
		rep.DroppedBytes += n
		rep.DroppedSegments++
		if later.base < durable || rep.Clean {
			saved, err := l.setAside(later.base)
			if err != nil {
				return err
			}
			rep.SetAside = append(rep.SetAside, saved)
			later.release(false)
			continue
		}
		later.release(true)
	}
	if len(segs) > i+1 && !l.readOnly {
		if err := l.syncDir(l.dir); err != nil {
			return err
		}
	}
	kept := segs[: i+1 : i+1]
	l.segs.Store(&kept)
	return nil
}

// countDropped walks plausible record headers after end, up to limit (an
// index into seg.data), to report the loss.
func countDropped(seg *segment, end, limit int64, rep *Recovery) {
	off := end - seg.base
	data := seg.data[:min(limit, int64(len(seg.data)))]
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
	last := start
	for off := start; off < int64(len(data)); off += zeroChunk {
		c := data[off:min(off+zeroChunk, int64(len(data)))]
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

// Quarantine turns the damaged bytes starting at off, a record boundary
// below the written position that fails validation (the scrubber found it),
// into a hole while the log runs: the range up to the next trustworthy
// boundary (a valid record, a blank-end marker, or the written position) is
// saved into DamagedDir and covered with a hole marker, so that no reader is
// served it again and recovery skips it. A reader holding a view of the
// range keeps the mapping but may see the marker's 8 bytes. It returns the
// range, or an error if off holds a valid record or a marker already.
func (l *Log) Quarantine(off int64) (Loss, error) {
	if l.readOnly {
		return Loss{}, ErrReadOnly
	}
	seg, err := l.pin(off)
	if err != nil {
		return Loss{}, err
	}
	defer seg.m.Release()
	w := l.written.Load()
	if off >= w {
		return Loss{}, fmt.Errorf("%w: %d", ErrOffsetNotWritten, off)
	}
	buf := seg.data[off-seg.base:]
	if _, ok := message.IsHole(buf); ok {
		return Loss{}, fmt.Errorf("commitlog: offset %d is a hole already", off)
	}
	if size, ok := message.IsBlank(buf); ok && int64(size) == seg.end()-off {
		return Loss{}, fmt.Errorf("commitlog: offset %d is a blank-end marker", off)
	}
	v, derr := decodeStored(buf)
	if derr == nil && v.PhysicalOffset() == off {
		return Loss{}, fmt.Errorf("commitlog: the record at %d is valid", off)
	}
	var reason string
	if derr != nil {
		reason = fmt.Sprintf("offset %d: %v", off, derr)
	} else {
		reason = fmt.Sprintf("offset %d: record claims offset %d (stale data)", off, v.PhysicalOffset())
	}
	// The written position is a boundary too; search no further than it.
	limit := min(w, seg.end())
	to, found := resync(&segment{base: seg.base, size: seg.size, data: seg.data[:limit-seg.base]}, off, limit, false)
	if !found {
		to = limit
	}
	if to-off < message.BlankHeaderSize {
		return Loss{}, fmt.Errorf("commitlog: damaged range at %d is %d bytes, too short for a hole marker", off, to-off)
	}
	var rep Recovery
	if err := l.makeHole(seg, off, to, limit, reason, &rep); err != nil {
		return Loss{}, err
	}
	return rep.Losses[0], nil
}
