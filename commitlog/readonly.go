package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

// ErrReadOnly: Append on a log opened with OpenReadOnly.
var ErrReadOnly = errors.New("commitlog: opened read-only")

// OpenReadOnly opens the log in opts.Dir for offline verification: it writes
// nothing (no checkpoint, no repair, no new segment), maps the segments
// read-only as they are (a cut file only as far as it goes), and validates
// every record of every segment with the checks recovery makes, reporting in
// Recovery what recovery would find: damaged ranges (Losses, with nothing
// saved), short segments (Extended), layout problems, and the dropped tail.
// A gap between segments is reported as a loss and the log starts after it.
// Reads (Read, ReadRecord, NewCursor) work below the end found; Append fails
// with ErrReadOnly. No background goroutine runs. Close releases the
// mappings.
func OpenReadOnly(opts Options) (*Log, Recovery, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, Recovery{}, err
	}
	l := &Log{opts: o, dir: o.Dir, fs: o.FS, readOnly: true, stop: make(chan struct{}), appended: make(chan struct{}, 1)}
	l.closed.Store(false)
	var rep Recovery
	st, ok, err := readCheckpoint(o.FS, o.Dir)
	if err != nil {
		return nil, rep, err
	}
	rep.Clean = ok && st.clean
	regBases, regAll, err := readRegistry(o.FS, o.Dir)
	if err != nil {
		return nil, rep, err
	}
	l.setStale(regBases, regAll)
	bases, err := listSegments(o.FS, o.Dir)
	if err != nil {
		return nil, rep, err
	}
	size := o.SegmentSize
	for _, b := range bases {
		if b%size != 0 {
			return nil, rep, fmt.Errorf("%w: segment %s does not start at a multiple of the segment size %d", ErrLayout, segmentName(b), size)
		}
	}
	for i := 1; i < len(bases); i++ {
		if bases[i] != bases[i-1]+size {
			rep.Losses = append(rep.Losses, Loss{From: bases[0], To: bases[i], Reason: fmt.Sprintf("segments %s to %s missing", segmentName(bases[i-1]+size), segmentName(bases[i]-size))})
			bases = bases[i:]
			i = 0
		}
	}
	var segs []*segment
	for _, b := range bases {
		s, cut, err := openSegmentReadOnly(o.FS, o.Dir, b, size)
		if err != nil {
			releaseSegments(segs)
			return nil, rep, err
		}
		if cut {
			rep.Extended = append(rep.Extended, fmt.Sprintf("%s (%d bytes)", segmentName(b), len(s.data)))
			rep.mismatch("segment %s is %d bytes, not %d", segmentName(b), len(s.data), size)
		}
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		if ok && st.written > 0 {
			rep.Losses = append(rep.Losses, Loss{To: st.written, Reason: "no segment file left"})
		}
		l.segs.Store(&[]*segment{})
		return l, rep, nil
	}
	l.segs.Store(&segs)
	l.minOff.Store(segs[0].base)
	durable := segs[0].base
	if ok {
		durable = max(durable, st.flushed)
		if st.clean {
			durable = max(durable, st.written)
		}
	}
	end, err := l.scan(segs[0].base, durable, &rep)
	if err != nil {
		l.Close()
		return nil, rep, err
	}
	if rep.Clean && end != st.written {
		rep.mismatch("the log ends at %d, the checkpoint recorded %d", end, st.written)
	}
	if err := l.truncateAfter(end, durable, &rep); err != nil {
		l.Close()
		return nil, rep, err
	}
	rep.Verified = rep.Clean && rep.Mismatch == "" && len(rep.Losses) == 0
	rep.End = end
	for _, loss := range rep.Losses {
		if loss.From < end {
			l.holes = append(l.holes, loss)
		}
	}
	l.written.Store(end)
	l.flushed.Store(end)
	return l, rep, nil
}

// openSegmentReadOnly maps a segment file read-only, as long as it is (a cut
// file maps short: mapping past its end would fault). It reports whether
// the file is shorter than size; longer is ErrLayout.
func openSegmentReadOnly(fsys vfs.FS, dir string, base, size int64) (*segment, bool, error) {
	path := filepath.Join(dir, segmentName(base))
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, false, fmt.Errorf("commitlog: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("commitlog: %w", err)
	}
	n := st.Size()
	if n > size {
		f.Close()
		return nil, false, fmt.Errorf("%w: segment %s is %d bytes, more than the segment size %d", ErrLayout, path, n, size)
	}
	s := &segment{base: base, size: size, path: path, f: f}
	if n == 0 {
		// Nothing to map; a mapping of one page stands in (reads see zeros).
		n = 1
	}
	m, err := f.Map(0, int(n), mmap.ReadOnly)
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("commitlog: %w", err)
	}
	s.m = m
	s.data = m.Bytes()[:min(int64(len(m.Bytes())), st.Size())]
	m.AfterUnmap(func() { f.Close() })
	return s, st.Size() < size, nil
}

// holeAt reports, on a read-only log, whether off lies in a damaged range
// recovery would have covered with a hole marker, and where that range ends.
func (l *Log) holeAt(off int64) (int64, bool) {
	for _, h := range l.holes {
		if h.From <= off && off < h.To {
			return h.To, true
		}
	}
	return 0, false
}
