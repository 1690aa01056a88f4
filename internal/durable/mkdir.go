package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/apogeemq/apogee/internal/vfs"
)

// MkdirAll creates the directory path and its missing parents, as
// os.MkdirAll does, and makes every directory it creates durable: each is
// created alone and its parent fsynced before the next one below it is
// created. So a crash at any point leaves at most one directory whose
// entry is not durable, the deepest that exists; MkdirAll also fsyncs the
// parent of that deepest existing directory (path itself when it exists),
// so that a later call repairs what an interrupted earlier one left. When
// it returns nil, path survives a power failure (provided the directories
// above the deepest existing one were durable before).
//
// A permission error syncing the parent of a directory that existed
// already is ignored (a parent the process may search but not read, as a
// home directory of mode 0711: opening it for the fsync is refused); the
// directory's creation was not this call's. Any other failure is returned.
// It is for creation time (Open, a new queue's directory), not for a path
// taken per message: an existing path costs a Stat and one directory fsync.
func MkdirAll(fsys vfs.FS, path string, perm os.FileMode) error {
	path = filepath.Clean(path)
	var missing []string // deepest first
	p := path
	for {
		st, err := fsys.Stat(p)
		if err == nil {
			if !st.IsDir() {
				// The real call reports it (ENOTDIR or EEXIST, with the path).
				if err := fsys.MkdirAll(path, perm); err != nil {
					return fmt.Errorf("durable: %w", err)
				}
				return fmt.Errorf("durable: mkdir %s: %s is not a directory", path, p)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("durable: %w", err)
		}
		missing = append(missing, p)
		up := filepath.Dir(p)
		if up == p {
			break // the root is missing: MkdirAll below reports why
		}
		p = up
	}
	if len(missing) == 0 || missing[len(missing)-1] != p {
		// p exists: make its entry durable, in case the call that created
		// it was interrupted before its parent's sync.
		if up := filepath.Dir(p); up != p {
			if err := fsys.SyncDir(up); err != nil && !errors.Is(err, fs.ErrPermission) {
				return fmt.Errorf("durable: %w", err)
			}
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := fsys.MkdirAll(d, perm); err != nil {
			return fmt.Errorf("durable: %w", err)
		}
		if up := filepath.Dir(d); up != d {
			if err := fsys.SyncDir(up); err != nil {
				return fmt.Errorf("durable: mkdir %s: %w", d, err)
			}
		}
	}
	return nil
}
