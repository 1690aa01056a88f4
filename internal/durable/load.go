package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/apogeemq/apogee/internal/vfs"
)

// Suffixes of a state file's companions.
const (
	// BakSuffix names the previous version of a file written with
	// Backup(BakSuffix) (FILE.bak).
	BakSuffix = ".bak"
	// DamagedSuffix names a file that did not parse and was set aside by
	// LoadWithBackup (FILE.damaged).
	DamagedSuffix = ".damaged"
)

// LoadWithBackup reads the state file at path (written by WriteFile with
// Backup(BakSuffix)) and parses it. parse must not keep its argument, and
// should fail for contents it cannot use, not only for malformed ones. When
// path is missing or does not parse, its previous version (path.bak) is used
// instead, with a WARN on log; a damaged path is then renamed to
// path.damaged, so that the next write does not keep it as the .bak.
// fellBack reports that path.bak was used: the caller should write its state
// again soon, to recreate path. found is false when neither file exists (a
// new data directory). It fails, naming both files, when path exists but
// neither parses, and when path exists but cannot be read. It first removes
// the temporary files interrupted writes of path left (RemoveTemps; a
// failure to is logged, not returned). log may be nil (slog.Default()).
func LoadWithBackup[T any](fsys vfs.FS, path string, log *slog.Logger, parse func([]byte) (T, error)) (v T, found, fellBack bool, err error) {
	var zero T
	if log == nil {
		log = slog.Default()
	}
	// Temporary files of writes a crash interrupted: nobody else writes
	// path while its owner loads it, so every one is a leftover.
	if err := RemoveTemps(fsys, path); err != nil {
		log.Warn("could not remove the temporary files of interrupted writes", "file", path, "err", err)
	}
	cur, rerr := vfs.ReadFile(fsys, path)
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
	old, berr := vfs.ReadFile(fsys, bak)
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
	if err := fsys.Rename(path, damaged); err != nil {
		log.Error("could not move the damaged state file aside; the next write keeps it as the .bak", "file", path, "err", err)
	}
	return v, true, true, nil
}
