package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// The bytes a truncation cuts (TruncateTo) are kept in one file of their
// own under TruncatedDir, named after the range and the time:
//
//	<start, 20 digits>-<end, 20 digits>-<unix ms>.cut
//
// It holds a 48-byte header, then the log's bytes [start, end) exactly as
// the log held them (records, and the blank-end marker and zeros of any
// segment end inside the range). The header is, big-endian: the magic
// "APGCUT01", start, end, the time (unix ms), the payload's CRC-32C, and
// the CRC-32C of the 36 bytes before it, then 8 zero bytes. The payload's
// length is end - start, so the file's size is 48 + end - start.
//
// The file is written under the name plus tmpCutSuffix, fsynced, renamed to
// its name and the directory fsynced, all before the log is cut: a crash
// leaves no file, a temporary one (Open removes it) or a complete one. Open
// checks each file's header and size and renames a file that fails the
// check to the name plus damagedCutSuffix, so that a file under the .cut
// name is always whole (ReadTruncated also checks the payload's CRC).
//
// RetainTruncated removes what the options no longer keep: files (and the
// whole-segment directories of earlier versions) older than
// TruncatedRetention, then the oldest until their total size is at most
// TruncatedMaxBytes; and RestartAt's DiscardedDir directories older than
// TruncatedRetention (by age only).

const (
	cutMagic         = "APGCUT01"
	cutHeaderSize    = 48
	cutSuffix        = ".cut"
	tmpCutSuffix     = ".tmp"
	damagedCutSuffix = ".damaged"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrTruncatedDamaged: a file under TruncatedDir whose header, size or
// payload CRC is not what its save wrote.
var ErrTruncatedDamaged = errors.New("commitlog: damaged truncation file")

// Cut describes a file holding the bytes one truncation removed.
type Cut struct {
	// Start and End are the log offsets of the bytes kept: [Start, End).
	Start, End int64
	// Time is when the truncation ran.
	Time time.Time
}

func cutName(c Cut) string {
	return fmt.Sprintf("%020d-%020d-%d%s", c.Start, c.End, c.Time.UnixMilli(), cutSuffix)
}

// parseCutName reads a name cutName made (with or without a suffix after
// .cut).
func parseCutName(name string) (Cut, bool) {
	stem, _, ok := strings.Cut(name, ".")
	if !ok {
		return Cut{}, false
	}
	parts := strings.Split(stem, "-")
	if len(parts) != 3 {
		return Cut{}, false
	}
	var v [3]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return Cut{}, false
		}
		v[i] = n
	}
	if v[1] < v[0] {
		return Cut{}, false
	}
	return Cut{Start: v[0], End: v[1], Time: time.UnixMilli(v[2])}, true
}

func cutHeader(c Cut, payloadCRC uint32) []byte {
	h := make([]byte, 0, cutHeaderSize)
	h = append(h, cutMagic...)
	h = binary.BigEndian.AppendUint64(h, uint64(c.Start))
	h = binary.BigEndian.AppendUint64(h, uint64(c.End))
	h = binary.BigEndian.AppendUint64(h, uint64(c.Time.UnixMilli()))
	h = binary.BigEndian.AppendUint32(h, payloadCRC)
	h = binary.BigEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
	return append(h, make([]byte, cutHeaderSize-len(h))...)
}

func parseCutHeader(h []byte) (c Cut, payloadCRC uint32, ok bool) {
	if len(h) < cutHeaderSize || string(h[:8]) != cutMagic ||
		crc32.Checksum(h[:36], castagnoli) != binary.BigEndian.Uint32(h[36:40]) {
		return Cut{}, 0, false
	}
	c.Start = int64(binary.BigEndian.Uint64(h[8:]))
	c.End = int64(binary.BigEndian.Uint64(h[16:]))
	c.Time = time.UnixMilli(int64(binary.BigEndian.Uint64(h[24:])))
	if c.Start < 0 || c.End < c.Start {
		return Cut{}, 0, false
	}
	return c, binary.BigEndian.Uint32(h[32:]), true
}

// ReadTruncated reads and checks a file a truncation kept: its header, its
// size and its payload's CRC. It returns the range and the bytes the log
// held there, or an error wrapping ErrTruncatedDamaged.
func ReadTruncated(fsys vfs.FS, path string) (Cut, []byte, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return Cut{}, nil, fmt.Errorf("commitlog: %w", err)
	}
	defer f.Close()
	c, crc, err := checkCutFile(f)
	if err != nil {
		return Cut{}, nil, fmt.Errorf("commitlog: %s: %w", path, err)
	}
	data := make([]byte, c.End-c.Start)
	if _, err := f.ReadAt(data, cutHeaderSize); err != nil {
		return Cut{}, nil, fmt.Errorf("commitlog: read %s: %w", path, err)
	}
	if crc32.Checksum(data, castagnoli) != crc {
		return Cut{}, nil, fmt.Errorf("commitlog: %s: %w: payload CRC", path, ErrTruncatedDamaged)
	}
	return c, data, nil
}

// checkCutFile checks a file's header and size (not the payload's CRC).
func checkCutFile(f vfs.File) (Cut, uint32, error) {
	h := make([]byte, cutHeaderSize)
	if _, err := f.ReadAt(h, 0); err != nil {
		return Cut{}, 0, fmt.Errorf("%w: header: %w", ErrTruncatedDamaged, err)
	}
	c, crc, ok := parseCutHeader(h)
	if !ok {
		return Cut{}, 0, fmt.Errorf("%w: header", ErrTruncatedDamaged)
	}
	st, err := f.Stat()
	if err != nil {
		return Cut{}, 0, err
	}
	if st.Size() != cutHeaderSize+c.End-c.Start {
		return Cut{}, 0, fmt.Errorf("%w: %d bytes, the header says %d", ErrTruncatedDamaged, st.Size(), cutHeaderSize+c.End-c.Start)
	}
	return c, crc, nil
}

// saveCut writes the log's bytes [off, l.pos) into a file of their own
// under TruncatedDir (see above) and returns its path, "" when the options
// keep nothing or the range is larger than TruncatedMaxBytes (it would be
// removed at the next cleanup). segs are the log's segments, k the index of
// the one holding off. Called by TruncateTo with the locks held, before
// anything is cut: on error nothing has changed but a temporary file,
// removed here or by the next Open.
func (l *Log) saveCut(off int64, segs []*segment, k int) (string, error) {
	n := l.pos - off
	if l.opts.TruncatedMaxBytes < 0 || n+cutHeaderSize > l.opts.TruncatedMaxBytes {
		return "", nil
	}
	l.cutMu.Lock()
	defer l.cutMu.Unlock()
	// The payload: slices of the mapped segments, not copied.
	var parts [][]byte
	crc := uint32(0)
	for i := k; i < len(segs) && segs[i].base < l.pos; i++ {
		s := segs[i]
		from := max(off, s.base) - s.base
		to := min(l.pos, s.base+l.opts.SegmentSize) - s.base
		p := s.data[from:to]
		parts = append(parts, p)
		crc = crc32.Update(crc, castagnoli, p)
	}
	c := Cut{Start: off, End: l.pos, Time: l.opts.now()}
	dir := filepath.Join(l.dir, TruncatedDir)
	if err := durable.MkdirAll(l.fs, dir, 0o755); err != nil {
		return "", fmt.Errorf("commitlog: %w", err)
	}
	final := filepath.Join(dir, cutName(c))
	tmp := final + tmpCutSuffix
	f, err := l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", fmt.Errorf("commitlog: keep the bytes cut: %w", err)
	}
	err = func() error {
		if _, err := f.WriteAt(cutHeader(c, crc), 0); err != nil {
			return err
		}
		at := int64(cutHeaderSize)
		for _, p := range parts {
			if _, err := f.WriteAt(p, at); err != nil {
				return err
			}
			at += int64(len(p))
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.Rename(tmp, final)
	}
	if err != nil {
		_ = l.fs.Remove(tmp)
		return "", fmt.Errorf("commitlog: keep the bytes cut: %w", err)
	}
	if err := durable.SyncDir(l.fs, dir); err != nil {
		return "", fmt.Errorf("commitlog: keep the bytes cut: %w", err)
	}
	return final, nil
}

// checkTruncated runs at Open: it removes the temporary files of saves a
// crash interrupted and renames every file whose header or size is wrong
// (damagedCutSuffix), each with a WARN, so that no incomplete file is left
// under a .cut name.
func (l *Log) checkTruncated() error {
	dir := filepath.Join(l.dir, TruncatedDir)
	entries, err := l.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("commitlog: list %s: %w", dir, err)
	}
	changed := false
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if e.IsDir() {
			continue
		}
		if _, ok := parseCutName(name); !ok {
			continue
		}
		switch {
		case strings.HasSuffix(name, cutSuffix+tmpCutSuffix):
			if err := l.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("commitlog: remove an unfinished truncation file: %w", err)
			}
			l.opts.Logger.Warn("commitlog: removed the temporary file of a truncation's save a crash interrupted (the truncation did not happen, or happens again)", "file", path)
			changed = true
		case strings.HasSuffix(name, cutSuffix):
			f, err := l.fs.OpenFile(path, os.O_RDONLY, 0)
			if err != nil {
				return fmt.Errorf("commitlog: %w", err)
			}
			_, _, cerr := checkCutFile(f)
			f.Close()
			if cerr == nil {
				continue
			}
			if !errors.Is(cerr, ErrTruncatedDamaged) {
				return fmt.Errorf("commitlog: check %s: %w", path, cerr)
			}
			if err := l.fs.Rename(path, path+damagedCutSuffix); err != nil {
				return fmt.Errorf("commitlog: set a damaged truncation file aside: %w", err)
			}
			l.opts.Logger.Warn("commitlog: a truncation file is damaged; renamed, it is removed by the truncation retention or by hand",
				"file", path+damagedCutSuffix, "err", cerr)
			changed = true
		}
	}
	if changed {
		return durable.SyncDir(l.fs, dir)
	}
	return nil
}

// Kept is one thing RetainTruncated removed: a truncation file, or a
// directory of whole segments (DiscardedDir's, or TruncatedDir's from
// earlier versions).
type Kept struct {
	// Path is the file or directory removed.
	Path string
	// Bytes is its size; Time when it was written.
	Bytes int64
	Time  time.Time
	// Expired: older than TruncatedRetention (otherwise removed for
	// TruncatedMaxBytes).
	Expired bool
}

// RetainTruncated applies the retention of what truncations and restarts
// kept (TruncatedDir and DiscardedDir): everything older than
// TruncatedRetention goes, then the oldest of TruncatedDir until its total
// is at most TruncatedMaxBytes. Entries it does not recognise are left
// alone. It
// returns what it removed; on error, what it removed before the error.
// The store's cleanup task calls it.
func (l *Log) RetainTruncated() ([]Kept, error) {
	if l.readOnly {
		return nil, ErrReadOnly
	}
	l.cutMu.Lock()
	defer l.cutMu.Unlock()
	var all []Kept
	for _, sub := range []string{TruncatedDir, DiscardedDir} {
		dir := filepath.Join(l.dir, sub)
		entries, err := l.fs.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("commitlog: list %s: %w", dir, err)
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			if e.IsDir() {
				ms, err := strconv.ParseInt(e.Name(), 10, 64)
				if err != nil || ms < 0 {
					continue
				}
				size, err := l.dirSize(path)
				if err != nil {
					return nil, err
				}
				all = append(all, Kept{Path: path, Bytes: size, Time: time.UnixMilli(ms)})
				continue
			}
			c, ok := parseCutName(e.Name())
			if !ok || sub != TruncatedDir {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("commitlog: %w", err)
			}
			all = append(all, Kept{Path: path, Bytes: info.Size(), Time: c.Time})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	// The size limit counts TruncatedDir only: a restart discards whole
	// segments (as large as the limit by default), which it would remove
	// at once; they go by age alone.
	discarded := filepath.Join(l.dir, DiscardedDir)
	var total int64
	for _, k := range all {
		if filepath.Dir(k.Path) != discarded {
			total += k.Bytes
		}
	}
	limit := max(l.opts.TruncatedMaxBytes, 0)
	oldest := l.opts.now().Add(-l.opts.TruncatedRetention)
	var removed []Kept
	dirs := map[string]bool{}
	for _, k := range all {
		k.Expired = k.Time.Before(oldest)
		if !k.Expired && (total <= limit || filepath.Dir(k.Path) == discarded) {
			continue
		}
		if err := l.fs.RemoveAll(k.Path); err != nil {
			return removed, fmt.Errorf("commitlog: remove %s: %w", k.Path, err)
		}
		dirs[filepath.Dir(k.Path)] = true
		if filepath.Dir(k.Path) != discarded {
			total -= k.Bytes
		}
		removed = append(removed, k)
	}
	for d := range dirs {
		if err := durable.SyncDir(l.fs, d); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// dirSize is the total size of the files directly in dir.
func (l *Log) dirSize(dir string) (int64, error) {
	entries, err := l.fs.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("commitlog: list %s: %w", dir, err)
	}
	var n int64
	for _, e := range entries {
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("commitlog: %w", err)
		}
		n += info.Size()
	}
	return n, nil
}
