package consumequeue

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// scan finds every <topic>/<queueId> directory under the root and recovers
// it, strictly when strict (the clean-shutdown record was found). Queues are
// recovered by GOMAXPROCS workers: a broker with 100,000s of queues spends
// its restart here, in a few system calls per queue.
func (s *Set) scan(strict bool) error {
	topics, err := s.fs.ReadDir(s.root)
	if err != nil {
		return fmt.Errorf("consumequeue: %w", err)
	}
	work := make(chan string)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, s.opts.RecoveryWindow*EntrySize)
			for topic := range work {
				if err := s.scanTopic(topic, buf, strict); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, t := range topics {
		if t.IsDir() && checkName(t.Name()) == nil {
			work <- t.Name()
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// scanTopic recovers the queues of one topic directory.
func (s *Set) scanTopic(topic string, buf []byte, strict bool) error {
	qdirs, err := s.fs.ReadDir(filepath.Join(s.root, topic))
	if err != nil {
		return fmt.Errorf("consumequeue: %w", err)
	}
	for _, qd := range qdirs {
		id, err := strconv.ParseInt(qd.Name(), 10, 32)
		if !qd.IsDir() || err != nil || id < 0 || strconv.FormatInt(id, 10) != qd.Name() {
			continue
		}
		k := queueKey{topic, int32(id)}
		q, err := s.recoverQueue(k.topic, k.id, buf, strict)
		if err != nil && !errors.Is(err, ErrDamaged) {
			return err
		}
		s.mu.Lock()
		switch {
		case err != nil:
			s.damaged[k] = err
		case q != nil:
			s.queues[k] = q
		}
		s.mu.Unlock()
	}
	return nil
}

// headEntries is how many entries of a queue's last file a strict recovery
// reads first (a page's worth).
const headEntries = 4096 / EntrySize

type fileInfo struct {
	byteStart int64
	path      string
	size      int64
}

// isFileName reports whether name looks like a queue file: 20 decimal digits.
func isFileName(name string) bool {
	if len(name) != 20 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return false
		}
	}
	return true
}

// recoverQueue rebuilds a queue's state from its directory: nil, nil when it
// holds no files; an error wrapping ErrDamaged when it is unusable; another
// error when its files could not be read (or a repair written).
//
// The end of the data is found in the last file by a binary search for the
// first all-zero entry (entries are written densely, so written entries are a
// prefix), then the RecoveryWindow entries before it are validated in order:
// the queue ends before the first torn or corrupt entry, a blank entry after a
// message, or an entry whose commitlog offset goes backwards. If the very first
// entry of the window is bad, the search landed past a hole and is repeated
// below the window. What lies between the end and the search's boundary is
// zeroed, as are non-zero bytes in a window after it (in the whole rest of the
// file if the tail was damaged), so later appends form a clean prefix again.
//
// strict is recovery after a clean shutdown, when the files must be exactly
// as Close left them: every entry of the last file before the end is
// validated, and any defect (an invalid entry, non-zero bytes after the end,
// a file of the wrong size) makes the queue damaged instead of being cut or
// zeroed: the store rebuilds it from the commitlog.
func (s *Set) recoverQueue(topic string, id int32, buf []byte, strict bool) (*Queue, error) {
	q := newQueue(s, topic, id)
	damaged := func(format string, args ...any) error {
		return fmt.Errorf("consumequeue: %s/%d: %w: %s", topic, id, ErrDamaged, fmt.Sprintf(format, args...))
	}
	// failed: a file could not be listed, read or written. That proves
	// nothing about the files, so the queue is not damaged (dropping and
	// rebuilding it would lose its offsets if the commitlog no longer holds
	// its records): OpenSet fails with the cause instead.
	failed := func(err error) error {
		return fmt.Errorf("consumequeue: recover %s/%d: %w", topic, id, err)
	}
	ents, err := s.fs.ReadDir(q.dir)
	if err != nil {
		return nil, failed(err)
	}
	var files []fileInfo
	for _, e := range ents {
		if !isFileName(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		start, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil {
			return nil, damaged("file name %s: %v", e.Name(), err)
		}
		info, err := e.Info()
		if err != nil {
			return nil, failed(err)
		}
		files = append(files, fileInfo{byteStart: start, path: filepath.Join(q.dir, e.Name()), size: info.Size()})
	}
	if len(files) == 0 {
		return nil, nil
	}
	slices.SortFunc(files, func(a, b fileInfo) int { return cmp.Compare(a.byteStart, b.byteStart) })
	fs := s.fileSize
	for i, f := range files {
		switch {
		case f.byteStart%fs != 0:
			return nil, damaged("file %s does not start at a multiple of the file size %d", f.path, fs)
		case i > 0 && f.byteStart != files[i-1].byteStart+fs:
			return nil, damaged("file missing before %s", f.path)
		case f.size > fs || (i < len(files)-1 && f.size != fs):
			return nil, damaged("file %s is %d bytes, want %d", f.path, f.size, fs)
		case f.size != fs && (f.size != 0 || strict):
			// Files are created at full size in one ftruncate: a crash
			// can leave an empty file, never a short one with data.
			return nil, damaged("file %s is %d bytes, want %d (cut?)", f.path, f.size, fs)
		}
	}

	// After a crash, a file followed by others that ends with an unwritten
	// or torn entry is where the torn tail begins: a flush syncs a queue's
	// files in order, so nothing in the files after it was synced (a power
	// loss can make a new file's name durable before the last entries of
	// the file before it). Those files go, and recovery cuts the tail as
	// in any last file. After a clean shutdown it is damage (below).
	cut := false
	for !strict && len(files) > 1 {
		e, err := readEntry(s.fs, files[len(files)-2].path, fs/EntrySize-1)
		if err != nil {
			return nil, failed(err)
		}
		if k := classify(e); k == kindMessage || k == kindBlank {
			break
		}
		if err := s.fs.Remove(files[len(files)-1].path); err != nil {
			return nil, failed(err)
		}
		files, cut = files[:len(files)-1], true
	}
	if cut {
		if err := durable.SyncDir(s.fs, q.dir); err != nil {
			return nil, failed(err)
		}
	}

	last := files[len(files)-1]
	flag := os.O_RDWR
	if s.opts.ReadOnly {
		flag = os.O_RDONLY
	}
	lf, err := s.fs.OpenFile(last.path, flag, 0)
	if err != nil {
		return nil, failed(err)
	}
	defer lf.Close()
	n := last.size / EntrySize
	// After a clean shutdown, one read of the last file's head finds the end
	// of the many short queues a broker with thousands of topics has, and
	// serves their validation, floor and tail too (no more I/O for them).
	var end int64
	var head []byte // the last file's first len(head) bytes; nil when not read
	if strict && n > 0 {
		// One page: reading more of a mostly sparse file costs a copy of
		// zeros per queue.
		hn := min(n, headEntries, int64(len(buf)/EntrySize))
		head = buf[:hn*EntrySize]
		if _, err := lf.ReadAt(head, 0); err != nil {
			return nil, failed(fmt.Errorf("read %s: %w", last.path, err))
		}
		for end = 0; end < hn && !allZero(head[end*EntrySize:(end+1)*EntrySize]); end++ {
		}
		if end == hn && hn < n {
			head = nil // the queue goes on; buf is reused below
		}
	}
	if head == nil {
		var err error
		if end, err = searchFile(lf, n, isZero); err != nil {
			return nil, failed(err)
		}
	}
	// The previous file's last entry: a full file ends with a written one,
	// and it seeds the order check of the last file's first entries.
	var prevEnd int64 = -1 // -1: no message before the last file
	if len(files) > 1 {
		prev := files[len(files)-2]
		e, err := readEntry(s.fs, prev.path, fs/EntrySize-1)
		if err != nil {
			return nil, failed(err)
		}
		switch classify(e) {
		case kindMessage:
			prevEnd = e.End()
		case kindBlank:
		default:
			return nil, damaged("file %s ends with an unwritten or corrupt entry though %s follows", prev.path, last.path)
		}
	}
	var valid, lastEnd int64
	window := int64(len(buf) / EntrySize)
	if strict {
		nz := false
		if head != nil {
			valid, lastEnd = validPrefix(head[:end*EntrySize], 0, len(files) == 1, prevEnd)
			nz = !allZero(head[end*EntrySize:])
		} else {
			if valid, lastEnd, err = validateAll(lf, end, len(files) == 1, prevEnd, buf); err != nil {
				return nil, failed(err)
			}
			if valid == end {
				if nz, err = scrub(lf, end*EntrySize, min(last.size, (end+window)*EntrySize), buf, false); err != nil {
					return nil, failed(err)
				}
			}
		}
		if valid < end {
			return nil, damaged("entry %d of %s is not valid, though entries follow up to %d", last.byteStart/EntrySize+valid, last.path, last.byteStart/EntrySize+end)
		}
		if nz {
			return nil, damaged("non-zero bytes after the last entry %d of %s", last.byteStart/EntrySize+end, last.path)
		}
		if valid == 0 && prevEnd >= 0 {
			lastEnd = prevEnd
		}
		return s.openedQueue(q, files, valid, lastEnd, head, failed)
	}
	for hi := end; ; {
		w0 := max(0, hi-window)
		win := buf[:(hi-w0)*EntrySize]
		if _, err := lf.ReadAt(win, w0*EntrySize); err != nil {
			return nil, failed(fmt.Errorf("read %s: %w", last.path, err))
		}
		before := int64(-1)
		if w0 == 0 {
			before = prevEnd
		}
		valid, lastEnd = validPrefix(win, w0, len(files) == 1, before)
		if valid > w0 || w0 == 0 {
			break
		}
		// The window's first entry is already unwritten or bad: the
		// binary search landed past a hole (say, pages lost in a power
		// failure), so the data ends before the window. Search again there.
		if hi, err = searchFile(lf, w0, isZero); err != nil {
			return nil, failed(err)
		}
	}
	// Non-zero bytes after the valid entries (a torn entry, stale entries
	// after a hole) are zeroed, so that later appends form a clean prefix and
	// cannot join up with stale entries: up to a window past the search's
	// boundary normally (a clean or killed process leaves a clean prefix), the
	// whole rest of the file when the tail was found damaged.
	if valid == 0 && prevEnd >= 0 {
		lastEnd = prevEnd
	}
	scrubTo := min(last.size, (end+window)*EntrySize)
	if valid < end {
		scrubTo = last.size
	}
	scrubbed, err := scrub(lf, valid*EntrySize, scrubTo, buf, true)
	if err != nil {
		return nil, failed(err)
	}
	if last.size < fs {
		if err := lf.Truncate(fs); err != nil {
			return nil, failed(err)
		}
	}
	if scrubbed || last.size < fs {
		if err := lf.Datasync(); err != nil {
			return nil, failed(err)
		}
	}

	return s.openedQueue(q, files, valid, lastEnd, nil, failed)
}

// openedQueue sets q's state from its recovered files: valid entries in the
// last one, the last message's end lastEnd. head, when not nil, is the last
// file's head as read, holding all its valid entries: the floor and the
// hints are then taken from it.
func (s *Set) openedQueue(q *Queue, files []fileInfo, valid, lastEnd int64, head []byte, failed func(error) error) (*Queue, error) {
	fs := s.fileSize
	last := files[len(files)-1]
	per := fs / EntrySize
	first := files[0]
	floor := first.byteStart / EntrySize
	limit := per
	if len(files) == 1 {
		limit = valid
	}
	if head != nil && valid > 0 {
		tail := getEntry(head[(valid-1)*EntrySize:])
		q.recTail, q.recTailAt = tail, last.byteStart/EntrySize+valid-1
	}
	if len(files) == 1 && head != nil {
		idx := int64(0)
		for idx < limit && getEntry(head[idx*EntrySize:]) == blankEntry {
			idx++
		}
		floor += idx
		if idx < valid {
			q.minCommit.Store(getEntry(head[idx*EntrySize:]).CommitLogOffset)
		}
	} else if limit > 0 {
		ff, err := s.fs.OpenFile(first.path, os.O_RDONLY, 0)
		if err != nil {
			return nil, failed(err)
		}
		idx, err := searchFile(ff, limit, func(e Entry) bool { return e != blankEntry })
		ff.Close()
		if err != nil {
			return nil, failed(err)
		}
		floor += idx
	}

	segs := make([]*segment, len(files))
	for i, f := range files {
		segs[i] = &segment{start: f.byteStart / EntrySize, path: f.path}
	}
	q.segs.Store(&segList{base: segs[0].start, segs: segs})
	if !s.opts.ReadOnly {
		// Read-only, there is no tail: Append takes the slow path and fails.
		q.tail = segs[len(segs)-1]
		q.tail.writable.Store(true)
	}
	maxOff := last.byteStart/EntrySize + valid
	q.min.Store(floor)
	q.max.Store(maxOff)
	q.lastEnd.Store(lastEnd)
	q.floor = floor
	q.flushed = maxOff
	q.dirMade = true
	return q, nil
}

// validPrefix scans the entries in win (entry w0 of its file onwards) and
// returns the file index just past the last valid one and the End() of the
// last message among them (0 if none). Blank entries are valid only in the
// queue's first file and before any message. prevEnd >= 0 is the End() of the
// message just before win, for the order check of its first entry.
func validPrefix(win []byte, w0 int64, blanksAllowed bool, prevEnd int64) (valid, lastEnd int64) {
	valid = w0
	sawMsg := prevEnd >= 0
	lastEnd = max(prevEnd, 0)
	for off := 0; off+EntrySize <= len(win); off += EntrySize {
		e := getEntry(win[off:])
		switch classify(e) {
		case kindBlank:
			if !blanksAllowed || sawMsg {
				return valid, lastEnd
			}
		case kindMessage:
			if sawMsg && e.CommitLogOffset < lastEnd {
				return valid, lastEnd
			}
			sawMsg = true
			lastEnd = e.End()
		default:
			return valid, lastEnd
		}
		valid++
	}
	return valid, lastEnd
}

// validateAll validates entries [0, end) of f (the queue's last file), a
// window of buf at a time, and returns the index just past the last valid one
// and the End() of the last message (see validPrefix).
func validateAll(f vfs.File, end int64, blanksAllowed bool, prevEnd int64, buf []byte) (valid, lastEnd int64, err error) {
	window := int64(len(buf) / EntrySize)
	lastEnd = max(prevEnd, 0)
	for w0 := int64(0); w0 < end; w0 += window {
		n := min(window, end-w0)
		win := buf[:n*EntrySize]
		if _, err := f.ReadAt(win, w0*EntrySize); err != nil {
			return w0, lastEnd, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		v, le := validPrefix(win, w0, blanksAllowed, prevEnd)
		if v > w0 {
			lastEnd = le
		}
		if v < w0+n {
			return v, lastEnd, nil
		}
		if le > 0 || prevEnd >= 0 {
			prevEnd = le
		}
	}
	return end, lastEnd, nil
}

func isZero(e Entry) bool { return e == Entry{} }

// searchFile returns the first entry index in [0, n) of f for which pred is
// true, assuming pred is false then true along the file; n if none.
func searchFile(f vfs.File, n int64, pred func(Entry) bool) (int64, error) {
	var b [EntrySize]byte
	lo, hi := int64(0), n
	for lo < hi {
		mid := lo + (hi-lo)/2
		if _, err := f.ReadAt(b[:], mid*EntrySize); err != nil {
			return 0, fmt.Errorf("read %s at entry %d: %w", f.Name(), mid, err)
		}
		if pred(getEntry(b[:])) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

func readEntry(fsys vfs.FS, path string, idx int64) (Entry, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	var b [EntrySize]byte
	if _, err := f.ReadAt(b[:], idx*EntrySize); err != nil {
		return Entry{}, fmt.Errorf("read %s at entry %d: %w", path, idx, err)
	}
	return getEntry(b[:]), nil
}

// scrub zeroes every non-zero byte of f in [from, size), reading only the
// regions SEEK_DATA reports (preallocated, never written blocks are holes to
// it, though ext4 reports a file written through a mapping as data through
// and through) or, without it, the whole range. It reports whether it found
// (and, with write, zeroed) any; without write it stops at the first.
func scrub(f vfs.File, from, size int64, buf []byte, write bool) (bool, error) {
	buf = buf[:len(buf)-len(buf)%EntrySize]
	var zeros []byte
	wrote := false
	for pos := from; pos < size; {
		start, end := pos, size
		if seekDataHole {
			d, err := f.Seek(pos, seekData)
			if errors.Is(err, syscall.ENXIO) {
				break // no data after pos
			}
			if err == nil {
				h, err := f.Seek(d, seekHole)
				if err != nil {
					h = size
				}
				start, end = max(pos, d), min(size, h)
			}
		}
		for start < end {
			n := min(int64(len(buf)), end-start)
			chunk := buf[:n]
			if _, err := f.ReadAt(chunk, start); err != nil {
				return wrote, fmt.Errorf("read %s at %d: %w", f.Name(), start, err)
			}
			if !allZero(chunk) {
				if !write {
					return true, nil
				}
				if zeros == nil {
					zeros = make([]byte, len(buf))
				}
				if _, err := f.WriteAt(zeros[:n], start); err != nil {
					return wrote, fmt.Errorf("zero %s at %d: %w", f.Name(), start, err)
				}
				wrote = true
			}
			start += n
		}
		pos = end
	}
	return wrote, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
