package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/apogeemq/apogee/mmap"
)

// FS is a file system: the operations of the os package that the storage
// packages use, plus the ones the os package lacks (a directory's fsync,
// msync of a mapping, an advisory lock, the used fraction of the disk).
// Implementations are safe for concurrent use.
type FS interface {
	// OpenFile opens name as os.OpenFile does (flag: os.O_*).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes path and everything below it; a missing path is not an error.
	RemoveAll(path string) error
	// Rename renames oldpath to newpath, replacing newpath if it exists.
	Rename(oldpath, newpath string) error
	// Link makes newname a hard link to oldname.
	Link(oldname, newname string) error
	// MkdirAll creates a directory and its missing parents.
	MkdirAll(path string, perm os.FileMode) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// Stat describes a file.
	Stat(name string) (fs.FileInfo, error)
	// SyncDir fsyncs the directory dir, so that the creation, removal and
	// renaming of its entries survive a power failure.
	SyncDir(dir string) error
	// MSync writes back the pages covering [off, off+n) of m, a mapping of
	// the file name, and waits for the write (msync MS_SYNC).
	MSync(name string, m *mmap.Mapping, off, n int) error
	// Lock takes an exclusive, non-blocking advisory lock (flock) on the file
	// name, creating it if needed. The lock is held until the returned
	// Closer is closed. When another process holds it, the error wraps
	// ErrLocked.
	Lock(name string) (io.Closer, error)
	// DiskUsage returns the used fraction (0..1) of the file system holding path.
	DiskUsage(path string) (float64, error)
}

// File is an open file of an FS. Its methods are those of *os.File that the
// storage packages use, plus fdatasync, fallocate, zeroing a range and
// mapping. A File is safe for concurrent use as *os.File is (ReadAt and
// WriteAt at distinct offsets).
type File interface {
	// Name is the name the file was opened with.
	Name() string
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Seek moves the offset the next Seek is relative to (whence io.SeekStart,
	// ... and on Linux SEEK_DATA and SEEK_HOLE). Reads and writes take
	// offsets of their own, so it serves only to find data and holes.
	Seek(offset int64, whence int) (int64, error)
	Stat() (fs.FileInfo, error)
	// Truncate changes the file's size (a larger size makes a sparse tail).
	Truncate(size int64) error
	// Sync is fsync: data and metadata.
	Sync() error
	// Datasync is fdatasync: data, and the metadata needed to read it back
	// (on Linux also pages dirtied through shared mappings of the file).
	Datasync() error
	// Allocate reserves disk blocks for [off, off+n) and extends the file
	// to cover them (fallocate; see mmap.Fallocate). A full disk is an
	// error wrapping unix.ENOSPC.
	Allocate(off, n int64) error
	// ZeroRange makes [off, off+n) read as zeros, keeping the blocks
	// reserved (see mmap.ZeroRange).
	ZeroRange(off, n int64) error
	// Map maps length bytes of the file from offset (see mmap.Map). The
	// mapping outlives Close.
	Map(offset int64, length int, mode mmap.Mode) (*mmap.Mapping, error)
	Close() error
}

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) RemoveAll(path string) error                  { return os.RemoveAll(path) }
func (osFS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }
func (osFS) Link(oldname, newname string) error           { return os.Link(oldname, newname) }
func (osFS) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

func (osFS) MSync(name string, m *mmap.Mapping, off, n int) error {
	if err := m.Sync(off, n); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// ErrLocked: Lock found the file locked by another process (or another
// open of it in this one).
var ErrLocked = errors.New("locked by another process")

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "flock", Path: name, Err: err}
	}
	return f, nil
}

func (osFS) DiskUsage(path string) (float64, error) { return diskUsage(path) }

// osFile is an *os.File with the operations the os package lacks.
type osFile struct{ f *os.File }

func (f *osFile) Name() string                              { return f.f.Name() }
func (f *osFile) ReadAt(p []byte, off int64) (int, error)   { return f.f.ReadAt(p, off) }
func (f *osFile) WriteAt(p []byte, off int64) (int, error)  { return f.f.WriteAt(p, off) }
func (f *osFile) Seek(off int64, whence int) (int64, error) { return f.f.Seek(off, whence) }
func (f *osFile) Stat() (fs.FileInfo, error)                { return f.f.Stat() }
func (f *osFile) Truncate(size int64) error                 { return f.f.Truncate(size) }
func (f *osFile) Sync() error                               { return f.f.Sync() }
func (f *osFile) Datasync() error                           { return mmap.Fdatasync(f.f) }
func (f *osFile) Allocate(off, n int64) error               { return mmap.Fallocate(f.f, off, n) }
func (f *osFile) ZeroRange(off, n int64) error              { return mmap.ZeroRange(f.f, off, n) }
func (f *osFile) Close() error                              { return f.f.Close() }
func (f *osFile) Map(off int64, n int, mode mmap.Mode) (*mmap.Mapping, error) {
	return mmap.Map(f.f, off, n, mode)
}

// ReadFile reads the whole file name from fsys, as os.ReadFile does.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	// io.EOF before len(b): the file shrank since Stat; what was read is it.
	return b[:n], nil
}
