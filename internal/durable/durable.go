package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apogeemq/apogee/internal/vfs"
)

// SyncDir fsyncs the directory dir, so that the entries created, renamed or
// removed in it survive a power failure.
func SyncDir(fsys vfs.FS, dir string) error {
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	return nil
}

// WriteOption adjusts WriteFile.
type WriteOption func(*writeOptions)

type writeOptions struct {
	backup string
	perm   os.FileMode
}

// Backup makes WriteFile keep the contents it replaces as path+suffix (see
// the package doc). Nothing is kept when path does not exist yet.
func Backup(suffix string) WriteOption { return func(o *writeOptions) { o.backup = suffix } }

// Perm sets the permissions of the file WriteFile creates (default 0644).
func Perm(perm os.FileMode) WriteOption { return func(o *writeOptions) { o.perm = perm } }

// tempInfix marks WriteFile's temporary files: "." + base + tempInfix + random.
const tempInfix = ".tmp-"

// WriteFile replaces path with data: a temporary file beside it is written
// and fsynced, then renamed over path, then the directory is fsynced. When
// it returns nil the new contents are durable; a crash at any point leaves
// path holding the old contents or the new ones. On an error the temporary
// file is removed; an error from the directory's fsync comes after the
// rename, so path then holds the new contents, not known to be durable.
func WriteFile(fsys vfs.FS, path string, data []byte, opts ...WriteOption) (err error) {
	o := writeOptions{perm: 0o644}
	for _, opt := range opts {
		opt(&o)
	}
	dir := filepath.Dir(path)
	f, tmp, err := createTemp(fsys, dir, "."+filepath.Base(path)+tempInfix, o.perm)
	if err != nil {
		return fmt.Errorf("durable: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = fsys.Remove(tmp)
		}
	}()
	if _, err = f.WriteAt(data, 0); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("durable: write %s: %w", path, err)
	}
	if o.backup != "" {
		if err = keepPrevious(fsys, path, path+o.backup); err != nil {
			return fmt.Errorf("durable: write %s: keep the previous version: %w", path, err)
		}
	}
	if err = fsys.Rename(tmp, path); err != nil {
		return fmt.Errorf("durable: write %s: %w", path, err)
	}
	if err = fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("durable: write %s: %w", path, err)
	}
	return nil
}

// createTemp creates a new file named prefix + a random number in dir, as
// os.CreateTemp does, through fsys.
func createTemp(fsys vfs.FS, dir, prefix string, perm os.FileMode) (vfs.File, string, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		return f, name, err
	}
}

// RemoveTemps removes the temporary files that interrupted WriteFiles of
// path left behind. A missing directory is not an error.
func RemoveTemps(fsys vfs.FS, path string) error {
	dir, prefix := filepath.Dir(path), "."+filepath.Base(path)+tempInfix
	ents, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			if err := fsys.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("durable: %w", err)
			}
		}
	}
	return nil
}

// keepPrevious makes path's current contents bak, without copying where it
// can: a hard link to path, renamed over bak, shares path's (already synced)
// inode, which bak keeps once path is replaced. On a file system without
// hard links it copies (and fsyncs the copy). It does nothing when path does
// not exist. The caller syncs the directory.
func keepPrevious(fsys vfs.FS, path, bak string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(bak)+".tmp")
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // a leftover of an interrupted write that cannot be removed
	}
	err := fsys.Link(path, tmp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		if err = copySynced(fsys, path, tmp); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			_ = fsys.Remove(tmp)
			return err
		}
	}
	return fsys.Rename(tmp, bak)
}

// copySynced copies src to dst (created or truncated) and fsyncs dst.
func copySynced(fsys vfs.FS, src, dst string) error {
	data, err := vfs.ReadFile(fsys, src)
	if err != nil {
		return err
	}
	f, err := fsys.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.WriteAt(data, 0); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Touch creates the file path if it does not exist (empty) and makes its
// existence durable: an fsync of the file and of its directory. An existing
// file is left as it is. It is how a marker file (the store's abort marker)
// is set.
func Touch(fsys vfs.FS, path string) error {
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("durable: create %s: %w", path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("durable: create %s: %w", path, err)
	}
	return SyncDir(fsys, filepath.Dir(path))
}
