package crashfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// replace writes v to root/state the way a state file is replaced: a
// temporary file, its sync (unless skipped), a rename, the directory's sync.
func replace(f *FS, v int64, syncData bool) error {
	tmp := filepath.Join(f.Root(), "state.tmp")
	fl, err := f.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := fl.WriteAt([]byte(strconv.FormatInt(v, 10)), 0); err != nil {
		fl.Close()
		return err
	}
	if syncData {
		if err := fl.Datasync(); err != nil {
			fl.Close()
			return err
		}
	}
	if err := fl.Close(); err != nil {
		return err
	}
	if err := f.Rename(tmp, filepath.Join(f.Root(), "state")); err != nil {
		return err
	}
	return f.SyncDir(f.Root())
}

// stateIn checks that the clone's state holds a version in [Lo, Hi].
func stateIn(c Clone) error {
	b, err := os.ReadFile(filepath.Join(c.Dir, "state"))
	if err != nil {
		if os.IsNotExist(err) && c.Lo == 0 {
			return nil
		}
		return err
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || v < c.Lo || v > c.Hi {
		return fmt.Errorf("state %q, want a version in [%d, %d]", b, c.Lo, c.Hi)
	}
	return nil
}

func TestCloneDuringWritesOfADurableReplacement(t *testing.T) {
	f := newFS(t)
	CloneDuringWrites(t, f, 20, func(i int64) error { return replace(f, i, true) }, func(c Clone) {
		if err := stateIn(c); err != nil {
			t.Fatalf("%s: %v", c.Where, err)
		}
	})
}

// The same replacement without the temporary file's sync: some clone holds
// the renamed, empty file, and the check sees it.
func TestCloneDuringWritesSeesAMissingSync(t *testing.T) {
	f := newFS(t)
	bad := 0
	CloneDuringWrites(t, f, 20, func(i int64) error { return replace(f, i, false) }, func(c Clone) {
		if stateIn(c) != nil {
			bad++
		}
	})
	if bad == 0 {
		t.Fatal("no clone of a replacement whose data was never synced was caught")
	}
}
