package errorfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
	"golang.org/x/sys/unix"
)

// Op is a kind of file operation.
type Op uint8

// The kinds of operations counted and failed. Close, munmap and madvise are
// not failed (their failures change nothing the storage packages rely on).
const (
	OpOpen      Op = iota // FS.OpenFile without O_CREATE
	OpCreate              // FS.OpenFile with O_CREATE
	OpRemove              // FS.Remove, FS.RemoveAll
	OpRename              // FS.Rename
	OpLink                // FS.Link
	OpMkdir               // FS.MkdirAll
	OpReadDir             // FS.ReadDir
	OpStat                // FS.Stat, File.Stat
	OpRead                // File.ReadAt
	OpWrite               // File.WriteAt
	OpSeek                // File.Seek
	OpTruncate            // File.Truncate
	OpSync                // File.Sync (fsync)
	OpDatasync            // File.Datasync (fdatasync)
	OpAllocate            // File.Allocate (fallocate)
	OpZeroRange           // File.ZeroRange
	OpMap                 // File.Map (mmap)
	OpMSync               // FS.MSync (msync)
	OpSyncDir             // FS.SyncDir
	OpLock                // FS.Lock (flock)
	OpDiskUsage           // FS.DiskUsage (statfs)
	NumOps
)

var opNames = [NumOps]string{
	"open", "create", "remove", "rename", "link", "mkdir", "readdir", "stat", "read", "write", "seek",
	"truncate", "sync", "datasync", "allocate", "zerorange", "map", "msync", "syncdir", "lock", "diskusage",
}

func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", o)
}

// Mode says what fails once a Point is reached.
type Mode uint8

const (
	// Once fails the chosen operation only.
	Once Mode = iota
	// Stop fails the chosen operation and every later one, of any kind.
	Stop
)

func (m Mode) String() string {
	if m == Stop {
		return "stop"
	}
	return "once"
}

// Point chooses the operation to fail: the Nth (from 1) of kind Op.
type Point struct {
	Op   Op
	N    int64
	Mode Mode
}

func (p Point) String() string { return fmt.Sprintf("%s/%s#%d", p.Mode, p.Op, p.N) }

// ErrInjected is wrapped by every injected failure.
var ErrInjected = errors.New("errorfs: injected failure")

// Error is an injected failure: errors.Is finds ErrInjected and Errno in it.
type Error struct {
	Op    Op
	N     int64 // the operation's number among those of its kind
	Path  string
	Errno unix.Errno
}

func (e *Error) Error() string {
	return fmt.Sprintf("errorfs: injected %s #%d of %s: %v", e.Op, e.N, e.Path, e.Errno)
}

// Unwrap returns ErrInjected and the errno.
func (e *Error) Unwrap() []error { return []error{ErrInjected, e.Errno} }

// errnoFor is the errno an injected failure of op carries: a full disk for
// block allocation, an I/O error for everything else.
func errnoFor(op Op) unix.Errno {
	if op == OpAllocate {
		return unix.ENOSPC
	}
	return unix.EIO
}

// FS is a vfs.FS that counts operations and fails the one Arm chose. It is
// safe for concurrent use.
type FS struct {
	inner vfs.FS

	mu      sync.Mutex
	counts  [NumOps]int64
	point   Point
	armed   bool
	fired   *Error // the first injected failure
	stopped bool   // a Stop point fired: everything fails
	usage   func(path string) (float64, error)
	hook    func(op Op, path string) unix.Errno
	files   map[*file]struct{}
	locks   map[*lock]struct{}
	maps    []mapRec
	trace   []string
	tracing bool
}

type mapRec struct {
	m    *mmap.Mapping
	path string
}

// New wraps inner (usually vfs.Default).
func New(inner vfs.FS) *FS {
	return &FS{inner: inner, files: map[*file]struct{}{}, locks: map[*lock]struct{}{}}
}

// Arm makes the FS fail at p (counting from the operations already done).
func (f *FS) Arm(p Point) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.point, f.armed = p, true
}

// Disarm stops failing operations (a Stop point that fired is lifted too).
func (f *FS) Disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.stopped = false, false
}

// FailWhen makes every operation for which fn returns a non-zero errno fail
// with that errno (as an *Error), in addition to any armed point: for tests
// that fail operations by condition (a disk that is full until the test
// frees it). nil removes the hook. fn must not call the FS. Its failures
// are not armed points: Fired does not report them.
func (f *FS) FailWhen(fn func(op Op, path string) unix.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = fn
}

// Point returns the point Arm set, and whether one is set.
func (f *FS) Point() (Point, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.point, f.armed
}

// Fired returns the first injected failure, or nil.
func (f *FS) Fired() *Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// Counts returns how many operations of each kind were made.
func (f *FS) Counts() [NumOps]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

// SetDiskUsage replaces DiskUsage's answer (the operation is still counted
// and may fail). nil restores the inner FS's.
func (f *FS) SetDiskUsage(fn func(path string) (float64, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.usage = fn
}

// Trace starts recording every operation ("op#n path"); Traced returns them.
func (f *FS) Trace() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tracing = true
}

// Traced returns the operations recorded since Trace.
func (f *FS) Traced() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.trace...)
}

// check counts an operation of kind op on path and returns the failure to
// inject, if any.
func (f *FS) check(op Op, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[op]++
	n := f.counts[op]
	if f.tracing {
		f.trace = append(f.trace, fmt.Sprintf("%s#%d %s", op, n, path))
	}
	if f.hook != nil {
		if errno := f.hook(op, path); errno != 0 {
			return &Error{Op: op, N: n, Path: path, Errno: errno}
		}
	}
	fail := f.stopped || f.armed && f.point.Op == op && f.point.N == n
	if !fail {
		return nil
	}
	e := &Error{Op: op, N: n, Path: path, Errno: errnoFor(op)}
	if f.fired == nil {
		f.fired = e
		if f.point.Mode == Stop {
			f.stopped = true
		}
	}
	return e
}

// Leaks describes what was handed out and not given back: files not
// closed, locks not released, mappings still referenced. nil when none.
func (f *FS) Leaks() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var l []string
	for fl := range f.files {
		l = append(l, "open file "+fl.name)
	}
	for lk := range f.locks {
		l = append(l, "held lock "+lk.name)
	}
	for _, r := range f.maps {
		if n := r.m.Refs(); n > 0 {
			l = append(l, fmt.Sprintf("mapping of %s with %d references", r.path, n))
		}
	}
	if len(l) == 0 {
		return nil
	}
	sort.Strings(l)
	return fmt.Errorf("errorfs: leaked: %s", strings.Join(l, "; "))
}

// LiveMappings returns how many mappings handed out still have references.
func (f *FS) LiveMappings() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.maps {
		if r.m.Refs() > 0 {
			n++
		}
	}
	return n
}

func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	op := OpOpen
	if flag&os.O_CREATE != 0 {
		op = OpCreate
	}
	if err := f.check(op, name); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	inner, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	fl := &file{fs: f, inner: inner, name: name}
	f.mu.Lock()
	f.files[fl] = struct{}{}
	f.mu.Unlock()
	return fl, nil
}

func (f *FS) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return f.inner.Remove(name)
}

func (f *FS) RemoveAll(path string) error {
	if err := f.check(OpRemove, path); err != nil {
		return &fs.PathError{Op: "removeall", Path: path, Err: err}
	}
	return f.inner.RemoveAll(path)
}

func (f *FS) Rename(oldpath, newpath string) error {
	if err := f.check(OpRename, oldpath); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return f.inner.Rename(oldpath, newpath)
}

func (f *FS) Link(oldname, newname string) error {
	if err := f.check(OpLink, oldname); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	return f.inner.Link(oldname, newname)
}

func (f *FS) MkdirAll(path string, perm os.FileMode) error {
	if err := f.check(OpMkdir, path); err != nil {
		return &fs.PathError{Op: "mkdir", Path: path, Err: err}
	}
	return f.inner.MkdirAll(path, perm)
}

func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := f.check(OpReadDir, name); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return f.inner.ReadDir(name)
}

func (f *FS) Stat(name string) (fs.FileInfo, error) {
	if err := f.check(OpStat, name); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return f.inner.Stat(name)
}

func (f *FS) SyncDir(dir string) error {
	if err := f.check(OpSyncDir, dir); err != nil {
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return f.inner.SyncDir(dir)
}

func (f *FS) MSync(name string, m *mmap.Mapping, off, n int) error {
	if err := f.check(OpMSync, name); err != nil {
		return &fs.PathError{Op: "msync", Path: name, Err: err}
	}
	return f.inner.MSync(name, m, off, n)
}

func (f *FS) Lock(name string) (io.Closer, error) {
	if err := f.check(OpLock, name); err != nil {
		return nil, &fs.PathError{Op: "flock", Path: name, Err: err}
	}
	c, err := f.inner.Lock(name)
	if err != nil {
		return nil, err
	}
	lk := &lock{fs: f, inner: c, name: name}
	f.mu.Lock()
	f.locks[lk] = struct{}{}
	f.mu.Unlock()
	return lk, nil
}

func (f *FS) DiskUsage(path string) (float64, error) {
	if err := f.check(OpDiskUsage, path); err != nil {
		return 0, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	f.mu.Lock()
	fn := f.usage
	f.mu.Unlock()
	if fn != nil {
		return fn(path)
	}
	return f.inner.DiskUsage(path)
}

type lock struct {
	fs    *FS
	inner io.Closer
	name  string
	once  sync.Once
}

func (l *lock) Close() error {
	var err error
	l.once.Do(func() {
		err = l.inner.Close()
		l.fs.mu.Lock()
		delete(l.fs.locks, l)
		l.fs.mu.Unlock()
	})
	return err
}

// file wraps a vfs.File of the inner FS.
type file struct {
	fs    *FS
	inner vfs.File
	name  string
	once  sync.Once
}

func (fl *file) Name() string { return fl.inner.Name() }

func (fl *file) ReadAt(p []byte, off int64) (int, error) {
	if err := fl.fs.check(OpRead, fl.name); err != nil {
		return 0, &fs.PathError{Op: "read", Path: fl.name, Err: err}
	}
	return fl.inner.ReadAt(p, off)
}

func (fl *file) WriteAt(p []byte, off int64) (int, error) {
	if err := fl.fs.check(OpWrite, fl.name); err != nil {
		return 0, &fs.PathError{Op: "write", Path: fl.name, Err: err}
	}
	return fl.inner.WriteAt(p, off)
}

func (fl *file) Seek(off int64, whence int) (int64, error) {
	if err := fl.fs.check(OpSeek, fl.name); err != nil {
		return 0, &fs.PathError{Op: "seek", Path: fl.name, Err: err}
	}
	return fl.inner.Seek(off, whence)
}

func (fl *file) Stat() (fs.FileInfo, error) {
	if err := fl.fs.check(OpStat, fl.name); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: fl.name, Err: err}
	}
	return fl.inner.Stat()
}

func (fl *file) Truncate(size int64) error {
	if err := fl.fs.check(OpTruncate, fl.name); err != nil {
		return &fs.PathError{Op: "truncate", Path: fl.name, Err: err}
	}
	return fl.inner.Truncate(size)
}

func (fl *file) Sync() error {
	if err := fl.fs.check(OpSync, fl.name); err != nil {
		return &fs.PathError{Op: "fsync", Path: fl.name, Err: err}
	}
	return fl.inner.Sync()
}

func (fl *file) Datasync() error {
	if err := fl.fs.check(OpDatasync, fl.name); err != nil {
		return &fs.PathError{Op: "fdatasync", Path: fl.name, Err: err}
	}
	return fl.inner.Datasync()
}

func (fl *file) Allocate(off, n int64) error {
	if err := fl.fs.check(OpAllocate, fl.name); err != nil {
		return &fs.PathError{Op: "fallocate", Path: fl.name, Err: err}
	}
	return fl.inner.Allocate(off, n)
}

func (fl *file) ZeroRange(off, n int64) error {
	if err := fl.fs.check(OpZeroRange, fl.name); err != nil {
		return &fs.PathError{Op: "fallocate zero range", Path: fl.name, Err: err}
	}
	return fl.inner.ZeroRange(off, n)
}

func (fl *file) Map(off int64, n int, mode mmap.Mode) (*mmap.Mapping, error) {
	if err := fl.fs.check(OpMap, fl.name); err != nil {
		return nil, &fs.PathError{Op: "mmap", Path: fl.name, Err: err}
	}
	m, err := fl.inner.Map(off, n, mode)
	if err != nil {
		return nil, err
	}
	fl.fs.mu.Lock()
	fl.fs.maps = append(fl.fs.maps, mapRec{m: m, path: fl.name})
	fl.fs.mu.Unlock()
	return m, nil
}

func (fl *file) Close() error {
	err := os.ErrClosed
	fl.once.Do(func() {
		err = fl.inner.Close()
		fl.fs.mu.Lock()
		delete(fl.fs.files, fl)
		fl.fs.mu.Unlock()
	})
	return err
}
