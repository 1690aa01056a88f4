package crashfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

// SectorSize is the unit a disk writes whole or not at all: a torn page
// mixes old and new sectors, never bytes within one.
const SectorSize = 512

// node is a file or a directory (an inode).
type node struct {
	dir bool
	// A directory's entries: live (as the process sees them) and durable
	// (as of its last SyncDir).
	live, durable map[string]*node
	// A file's durable contents; len(data) is its durable size.
	data []byte
	// seq holds, per sector of data, the sequence number of the sync that
	// last made it durable (0: none did; what existed at New counts as
	// synced); sizeSeq that of the sync that last set len(data). A sync
	// applies only over what no later sync wrote: two syncs of one file
	// running at once end with the later one's contents, as on a disk.
	// A sector of data no sync covered (zeros up to a durable size that
	// grew) was never written durably.
	seq     []uint64
	sizeSeq uint64
}

// apply records that the sync numbered seq made snap durable at offset at
// (a whole-file sync passes at 0 and its contents; size is the durable size
// it recorded, or -1 to leave the size to others). Sectors a later sync
// made durable keep that one's bytes. f.mu held.
func (n *node) apply(seq uint64, at int64, snap []byte, size int64) {
	if size >= 0 && seq > n.sizeSeq {
		n.data = resize(n.data, size)
		n.sizeSeq = seq
	}
	if need := at + int64(len(snap)); need > int64(len(n.data)) {
		// Past the durable size: the size this sync made durable was
		// unknown (Stat failed) or a later sync recorded a smaller one.
		n.data = resize(n.data, need)
	}
	sectors := (int64(len(n.data)) + SectorSize - 1) / SectorSize
	if int64(len(n.seq)) > sectors {
		n.seq = n.seq[:sectors:sectors]
	}
	for int64(len(n.seq)) < sectors {
		n.seq = append(n.seq, 0)
	}
	end := at + int64(len(snap))
	for s := at / SectorSize; s*SectorSize < end; s++ {
		if n.seq[s] > seq {
			continue
		}
		from, to := max(s*SectorSize, at), min((s+1)*SectorSize, end)
		copy(n.data[from:to], snap[from-at:to-at])
		n.seq[s] = seq
	}
}

// wasSynced reports whether a sync covered sector s of n's durable contents.
func (n *node) wasSynced(s int) bool { return s < len(n.seq) && n.seq[s] > 0 }

func newDir() *node {
	return &node{dir: true, live: map[string]*node{}, durable: map[string]*node{}}
}

// FS is a vfs.FS that models durability under root. It is safe for
// concurrent use.
type FS struct {
	inner vfs.FS
	root  string

	mu      sync.Mutex
	seq     uint64 // numbers the syncs, in the order their contents were read
	top     *node  // the root directory: exists, durably
	maps    map[*mmap.Mapping]mapRec
	outside []string // operations on paths outside the model, for diagnostics
}

// mapRec is what a mapping covers: the file (node) and the offset in it.
type mapRec struct {
	n   *node
	off int64
}

// New models the directory root (which must exist) over vfs.Default. What
// is under root now is taken as durable.
func New(root string) (*FS, error) { return Wrap(vfs.Default, root) }

// Wrap models root over inner.
func Wrap(inner vfs.FS, root string) (*FS, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	f := &FS{inner: inner, root: filepath.Clean(root), maps: map[*mmap.Mapping]mapRec{}}
	top, err := f.adopt(f.root)
	if err != nil {
		return nil, fmt.Errorf("crashfs: %w", err)
	}
	if !top.dir {
		return nil, fmt.Errorf("crashfs: %s is not a directory", root)
	}
	f.top = top
	return f, nil
}

// Root is the directory the FS models.
func (f *FS) Root() string { return f.root }

// adopt reads what exists at path into durable nodes. Hard links found
// twice become two nodes (the model does not need their identity).
func (f *FS) adopt(path string) (*node, error) {
	st, err := f.inner.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		b, err := vfs.ReadFile(f.inner, path)
		if err != nil {
			return nil, err
		}
		n := &node{}
		f.seq++
		n.apply(f.seq, 0, b, int64(len(b)))
		return n, nil
	}
	d := newDir()
	ents, err := f.inner.ReadDir(path)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		c, err := f.adopt(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, err
		}
		d.live[e.Name()], d.durable[e.Name()] = c, c
	}
	return d, nil
}

// Outside returns the operations made on paths the model does not cover
// (outside the root, or under a directory created behind the FS's back):
// none of what they touched is in a clone.
func (f *FS) Outside() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.outside...)
}

// rel splits path into its components under the root; ok is false for a
// path outside it.
func (f *FS) rel(path string) ([]string, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, false
	}
	r, err := filepath.Rel(f.root, abs)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return nil, false
	}
	if r == "." {
		return nil, true
	}
	return strings.Split(r, string(filepath.Separator)), true
}

// lookup returns the live node at path (nil if the model has none). f.mu held.
func (f *FS) lookup(path string) *node {
	parts, ok := f.rel(path)
	if !ok {
		return nil
	}
	n := f.top
	for _, p := range parts {
		if n == nil || !n.dir {
			return nil
		}
		n = n.live[p]
	}
	return n
}

// parent returns the live directory holding path and path's last name, or
// nil when the model has no such directory (the operation is then noted as
// outside). f.mu held.
func (f *FS) parent(op, path string) (*node, string) {
	parts, ok := f.rel(path)
	if ok && len(parts) > 0 {
		if d := f.lookup(filepath.Join(append([]string{f.root}, parts[:len(parts)-1]...)...)); d != nil && d.dir {
			return d, parts[len(parts)-1]
		}
	}
	f.outside = append(f.outside, op+" "+path)
	return nil, ""
}

func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	inner, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	n := f.lookup(name)
	if n == nil && flag&os.O_CREATE != 0 {
		if d, base := f.parent("create", name); d != nil {
			n = &node{}
			d.live[base] = n
		}
	}
	return &file{fs: f, inner: inner, n: n}, nil
}

func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inner.Remove(name); err != nil {
		return err
	}
	if d, base := f.parent("remove", name); d != nil {
		delete(d.live, base)
	}
	return nil
}

func (f *FS) RemoveAll(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inner.RemoveAll(path); err != nil {
		return err
	}
	if parts, ok := f.rel(path); ok && len(parts) == 0 {
		f.top.live = map[string]*node{} // the root's contents; the root stays
		return nil
	}
	if d, base := f.parent("removeall", path); d != nil {
		delete(d.live, base)
	}
	return nil
}

func (f *FS) Rename(oldpath, newpath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inner.Rename(oldpath, newpath); err != nil {
		return err
	}
	od, obase := f.parent("rename", oldpath)
	nd, nbase := f.parent("rename", newpath)
	var n *node
	if od != nil {
		n = od.live[obase]
		delete(od.live, obase)
	}
	if nd != nil {
		if n != nil {
			nd.live[nbase] = n
		} else {
			delete(nd.live, nbase) // replaced by something the model does not know
		}
	}
	return nil
}

func (f *FS) Link(oldname, newname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inner.Link(oldname, newname); err != nil {
		return err
	}
	if n := f.lookup(oldname); n != nil {
		if d, base := f.parent("link", newname); d != nil {
			d.live[base] = n
		}
	}
	return nil
}

func (f *FS) MkdirAll(path string, perm os.FileMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inner.MkdirAll(path, perm); err != nil {
		return err
	}
	parts, ok := f.rel(path)
	if !ok {
		f.outside = append(f.outside, "mkdir "+path)
		return nil
	}
	d := f.top
	for _, p := range parts {
		c := d.live[p]
		if c == nil {
			c = newDir()
			d.live[p] = c
		}
		if !c.dir {
			return nil // the real call would have failed; nothing to model
		}
		d = c
	}
	return nil
}

func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) { return f.inner.ReadDir(name) }
func (f *FS) Stat(name string) (fs.FileInfo, error)      { return f.inner.Stat(name) }
func (f *FS) Lock(name string) (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.inner.Lock(name)
	if err != nil {
		return nil, err
	}
	// The lock file is created if missing: an entry like any other.
	if f.lookup(name) == nil {
		if d, base := f.parent("lock", name); d != nil {
			d.live[base] = &node{}
		}
	}
	return c, nil
}
func (f *FS) DiskUsage(path string) (float64, error) { return f.inner.DiskUsage(path) }

func (f *FS) SyncDir(dir string) error {
	if err := f.inner.SyncDir(dir); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.lookup(dir)
	if d == nil || !d.dir {
		f.outside = append(f.outside, "syncdir "+dir)
		return nil
	}
	d.durable = make(map[string]*node, len(d.live))
	for k, v := range d.live {
		d.durable[k] = v
	}
	return nil
}

func (f *FS) MSync(name string, m *mmap.Mapping, off, n int) error {
	f.mu.Lock()
	rec, known := f.maps[m]
	f.mu.Unlock()
	if n == 0 {
		return f.inner.MSync(name, m, off, n)
	}
	if !known || rec.n == nil {
		f.mu.Lock()
		f.outside = append(f.outside, "msync "+name)
		f.mu.Unlock()
		return f.inner.MSync(name, m, off, n)
	}
	// msync writes back whole pages: the durable range widens to them.
	ps := mmap.PageSize()
	if off < 0 || n < 0 || off+n > m.Len() {
		return f.inner.MSync(name, m, off, n) // the real call reports the bad range
	}
	start, end := off&^(ps-1), min((off+n+ps-1)&^(ps-1), m.Len())
	// The contents are read, and the sync numbered, under the lock: of two
	// syncs of one file, the later-numbered read the newer contents.
	f.mu.Lock()
	f.seq++
	seq := f.seq
	snap := append([]byte(nil), m.Bytes()[start:end]...)
	size, serr := fileSize(f.inner, name)
	f.mu.Unlock()
	if err := f.inner.MSync(name, m, off, n); err != nil {
		return err
	}
	if serr != nil {
		size = -1
	}
	f.mu.Lock()
	rec.n.apply(seq, rec.off+int64(start), snap, size)
	f.mu.Unlock()
	return nil
}

// fileSize is the size of the file name, or an error.
func fileSize(fsys vfs.FS, name string) (int64, error) {
	st, err := fsys.Stat(name)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// resize returns b grown with zeros or cut to n bytes.
func resize(b []byte, n int64) []byte {
	if int64(len(b)) >= n {
		return b[:n:n]
	}
	return append(b, make([]byte, n-int64(len(b)))...)
}

// file is an open file of the FS.
type file struct {
	fs    *FS
	inner vfs.File
	n     *node // nil: not modelled
}

func (fl *file) Name() string                              { return fl.inner.Name() }
func (fl *file) ReadAt(p []byte, off int64) (int, error)   { return fl.inner.ReadAt(p, off) }
func (fl *file) WriteAt(p []byte, off int64) (int, error)  { return fl.inner.WriteAt(p, off) }
func (fl *file) Seek(off int64, whence int) (int64, error) { return fl.inner.Seek(off, whence) }
func (fl *file) Stat() (fs.FileInfo, error)                { return fl.inner.Stat() }
func (fl *file) Truncate(size int64) error                 { return fl.inner.Truncate(size) }
func (fl *file) Allocate(off, n int64) error               { return fl.inner.Allocate(off, n) }
func (fl *file) ZeroRange(off, n int64) error              { return fl.inner.ZeroRange(off, n) }
func (fl *file) Close() error                              { return fl.inner.Close() }
func (fl *file) Sync() error                               { return fl.sync(fl.inner.Sync) }
func (fl *file) Datasync() error                           { return fl.sync(fl.inner.Datasync) }
func (fl *file) Map(off int64, n int, mode mmap.Mode) (*mmap.Mapping, error) {
	m, err := fl.inner.Map(off, n, mode)
	if err != nil {
		return nil, err
	}
	fl.fs.mu.Lock()
	fl.fs.maps[m] = mapRec{n: fl.n, off: off}
	fl.fs.mu.Unlock()
	return m, nil
}

// sync makes the file's contents as of the call durable once do succeeds.
func (fl *file) sync(do func() error) error {
	if fl.n == nil {
		return do()
	}
	fl.fs.mu.Lock()
	fl.fs.seq++
	seq := fl.fs.seq
	snap, err := readAll(fl.inner)
	fl.fs.mu.Unlock()
	if err != nil {
		return fmt.Errorf("crashfs: read %s before its sync: %w", fl.inner.Name(), err)
	}
	if err := do(); err != nil {
		return err
	}
	fl.fs.mu.Lock()
	fl.n.apply(seq, 0, snap, int64(len(snap)))
	fl.fs.mu.Unlock()
	return nil
}

// readAll reads the whole of f.
func readAll(f vfs.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}

// Mode is how a clone treats what was not made durable.
type Mode uint8

const (
	// Strict drops everything unsynced: durable entries, durable contents.
	Strict Mode = iota
	// Torn lets any part of the unsynced reach the disk (see the package doc).
	Torn
)

func (m Mode) String() string {
	if m == Torn {
		return "torn"
	}
	return "strict"
}

// CloneOptions choose how a clone treats the unsynced.
type CloneOptions struct {
	Mode Mode
	// Seed makes a Torn clone reproducible: log it with the test's failure.
	Seed uint64
}

// CloneStats says what a clone lost, so a test can tell that its crash
// dropped something (a model that never bites tests nothing).
type CloneStats struct {
	Files int // files written
	// UnsyncedEntries counts live entries (created, renamed, removed) that
	// differ from a cloned directory's durable entries.
	UnsyncedEntries int
	// UnsyncedBytes counts bytes (by sector) whose current contents differ
	// from the durable contents, in files the clone wrote.
	UnsyncedBytes int64
	// LostBytes counts the unsynced bytes the clone did not keep as current.
	LostBytes int64
}

func (s CloneStats) String() string {
	return fmt.Sprintf("%d files, %d unsynced entries, %d unsynced bytes (%d lost)", s.Files, s.UnsyncedEntries, s.UnsyncedBytes, s.LostBytes)
}

// CrashClone writes into dst (created if missing; it must be empty) the
// root as a power loss at this moment would leave it, and says what was
// lost.
func (f *FS) CrashClone(dst string, o CloneOptions) (CloneStats, error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return CloneStats{}, err
	}
	if ents, err := os.ReadDir(dst); err != nil || len(ents) > 0 {
		return CloneStats{}, fmt.Errorf("crashfs: clone into %s: not an empty directory (%v)", dst, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &cloner{fs: f, o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		livePath: map[*node]string{}, written: map[*node]string{}}
	c.mapLive(f.top, f.root)
	if err := c.dir(f.top, dst); err != nil {
		return c.stats, fmt.Errorf("crashfs: clone: %w", err)
	}
	return c.stats, nil
}

type cloner struct {
	fs       *FS
	o        CloneOptions
	rng      *rand.Rand
	livePath map[*node]string // a live path of each file, to read its current contents
	written  map[*node]string // files already written (hard links)
	stats    CloneStats
}

func (c *cloner) mapLive(d *node, path string) {
	for name, n := range d.live {
		p := filepath.Join(path, name)
		if n.dir {
			c.mapLive(n, p)
		} else if _, ok := c.livePath[n]; !ok {
			c.livePath[n] = p
		}
	}
}

func (c *cloner) dir(d *node, dst string) error {
	entries := d.durable
	if c.o.Mode == Torn && c.rng.IntN(2) == 0 {
		entries = d.live
	}
	c.stats.UnsyncedEntries += diffEntries(d.durable, d.live)
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names) // reproducible: the seed's draws in a fixed order
	for _, name := range names {
		n, p := entries[name], filepath.Join(dst, name)
		if n.dir {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			if err := c.dir(n, p); err != nil {
				return err
			}
			continue
		}
		if first, ok := c.written[n]; ok {
			if err := os.Link(first, p); err != nil {
				return err
			}
			continue
		}
		if err := c.file(n, p); err != nil {
			return err
		}
		c.written[n] = p
	}
	return nil
}

// diffEntries counts the names whose node differs between a and b.
func diffEntries(a, b map[string]*node) int {
	n := 0
	for k, v := range a {
		if b[k] != v {
			n++
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			n++
		}
	}
	return n
}

// file writes the clone of n to path.
func (c *cloner) file(n *node, path string) error {
	c.stats.Files++
	old := n.data
	var cur []byte
	if lp, ok := c.livePath[n]; ok {
		b, err := os.ReadFile(lp)
		if err != nil {
			return err
		}
		cur = b
	} else {
		cur = old // unlinked: its unsynced bytes are gone with it
	}
	c.countUnsynced(old, cur)
	if c.o.Mode == Strict {
		c.stats.LostBytes = c.stats.UnsyncedBytes
		return os.WriteFile(path, old, 0o644)
	}
	size := len(old)
	if len(cur) != len(old) && c.rng.IntN(2) == 0 {
		size = len(cur)
	}
	out := make([]byte, size)
	for s := 0; s < size; s += SectorSize {
		e := min(s+SectorSize, size)
		o, w := sector(old, s, e), sector(cur, s, e)
		if bytes.Equal(o, w) {
			copy(out[s:e], o)
			continue
		}
		switch {
		case n.wasSynced(s/SectorSize) || !allZero(o):
			// Durable bytes are never lost: the sector is old or new.
			if c.rng.IntN(2) == 0 {
				copy(out[s:e], w)
				continue
			}
			copy(out[s:e], o)
		default:
			switch c.rng.IntN(3) {
			case 0:
				copy(out[s:e], w)
				continue
			case 1: // zeros: out is zero already
			case 2:
				for i := s; i < e; i++ {
					out[i] = byte(c.rng.Uint32())
				}
			}
		}
		c.stats.LostBytes += int64(e - s)
	}
	return os.WriteFile(path, out, 0o644)
}

// countUnsynced adds to the stats the bytes, by sector, in which cur differs
// from old.
func (c *cloner) countUnsynced(old, cur []byte) {
	size := max(len(old), len(cur))
	for s := 0; s < size; s += SectorSize {
		e := min(s+SectorSize, size)
		if !bytes.Equal(sector(old, s, e), sector(cur, s, e)) {
			c.stats.UnsyncedBytes += int64(e - s)
		}
	}
}

// sector returns b[s:e], zero-padded where b is shorter.
func sector(b []byte, s, e int) []byte {
	out := make([]byte, e-s)
	if s < len(b) {
		copy(out, b[s:min(e, len(b))])
	}
	return out
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
