// Package statefile writes and reads small state files (JSON configuration
// kept across restarts) so that a crash at any moment leaves a usable file,
// and keeps each file's previous version as FILE.bak, as RocketMQ does.
//
// The conventions are the broker's (broker/persist.go, docs/operations.md
// "State files and their .bak"); this package holds them for the commands
// and packages that do not import broker (the standalone name server first):
//
//   - Write replaces FILE whole: a temporary file in the same directory is
//     written and fsynced, the current FILE becomes FILE.bak (a hard link, or
//     a synced copy where links are not supported), the temporary file is
//     renamed over FILE, and the directory is fsynced. At every moment FILE
//     is complete (the old or the new contents) and FILE.bak holds the
//     version before FILE (or the one before that).
//   - Load reads FILE; when FILE is missing or does not parse while FILE.bak
//     parses, it uses FILE.bak with one WARN line naming both, and renames a
//     damaged FILE to FILE.damaged (so that the next Write does not keep it
//     as the .bak). When FILE exists but neither parses, it fails naming both.
//
// Writers of one file must be serialised by the caller. Nothing here is
// safe against two processes writing the same file.
package statefile

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// Suffixes of the files kept next to a state file.
const (
	// BakSuffix names the previous version of a state file (FILE.bak).
	BakSuffix = ".bak"
	// DamagedSuffix names a state file that did not parse and was set aside.
	DamagedSuffix = ".damaged"
)

// Write replaces path with data so that a crash leaves either the old or the
// new contents, and keeps the old contents as path.bak (see the package
// documentation). The directory must exist.
func Write(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = keepPrevious(path); err != nil {
		return fmt.Errorf("write %s: keep the previous version: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}

// keepPrevious makes path's current contents path.bak without copying where
// it can: a hard link to path, renamed over path.bak, shares path's (already
// synced) inode, which path.bak keeps once path is replaced. Without hard
// links it copies and fsyncs the copy. It does nothing when path does not
// exist. The caller syncs the directory.
func keepPrevious(path string) error {
	bak := path + BakSuffix
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(bak)+".tmp")
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // a leftover of an interrupted write that cannot be removed
	}
	err := os.Link(path, tmp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		if err = copySynced(path, tmp); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			_ = os.Remove(tmp)
			return err
		}
	}
	return os.Rename(tmp, bak)
}

// copySynced copies src to dst (created or truncated) and fsyncs dst.
func copySynced(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SyncDir fsyncs a directory, making the renames and creations in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Load reads the state file at path and parses it. parse must not keep its
// argument, and should fail for contents it cannot use, not only for
// malformed ones. When path is missing or does not parse, its previous
// version (path.bak) is used instead, with a WARN on log; a damaged path is
// then renamed to path.damaged. fellBack reports that path.bak was used: the
// caller should write its state again soon, to recreate path. found is false
// when neither file exists (a new data directory). Load fails, naming both
// files, when path exists but neither parses, and when path exists but cannot
// be read. log may be nil (slog.Default()).
func Load[T any](path string, log *slog.Logger, parse func([]byte) (T, error)) (v T, found, fellBack bool, err error) {
	var zero T
	if log == nil {
		log = slog.Default()
	}
	cur, rerr := os.ReadFile(path)
	var perr error
	switch {
	case rerr == nil:
		if v, perr = parse(cur); perr == nil {
			return v, true, false, nil
		}
	case errors.Is(rerr, fs.ErrNotExist):
	default:
		return zero, false, false, fmt.Errorf("read %s: %w", path, rerr)
	}
	bak := path + BakSuffix
	old, berr := os.ReadFile(bak)
	switch {
	case berr == nil:
		if v, berr = parse(old); berr == nil {
			break
		}
		if rerr != nil {
			return zero, false, false, fmt.Errorf("%s is missing and its previous version %s does not parse either: %w", path, bak, berr)
		}
		return zero, false, false, fmt.Errorf("%s does not parse (%w) and neither does its previous version %s (%w); restore one of them or remove both to start without this state", path, perr, bak, berr)
	case errors.Is(berr, fs.ErrNotExist):
		if rerr != nil {
			return zero, false, false, nil // a new data directory
		}
		return zero, false, false, fmt.Errorf("%s does not parse and there is no previous version %s: %w", path, bak, perr)
	default:
		if rerr != nil {
			return zero, false, false, fmt.Errorf("%s is missing and its previous version cannot be read: %w", path, berr)
		}
		return zero, false, false, fmt.Errorf("%s does not parse (%w) and its previous version cannot be read (%w)", path, perr, berr)
	}
	if rerr != nil {
		log.Warn("state file missing; using its previous version", "file", path, "using", bak)
		return v, true, true, nil
	}
	damaged := path + DamagedSuffix
	log.Warn("state file damaged; using its previous version (changes made after that version was replaced are lost)",
		"file", path, "err", perr, "using", bak, "damagedCopy", damaged)
	if err := os.Rename(path, damaged); err != nil {
		log.Error("could not move the damaged state file aside; the next write keeps it as the .bak", "file", path, "err", err)
	}
	return v, true, true, nil
}
