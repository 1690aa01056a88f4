package namesrv

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

// loadedKV opens the KV config at path and returns namespace "ns".
func loadedKV(fsys vfs.FS, path string) (map[string]string, error) {
	r, err := OpenRegistry(Options{KVConfigPath: path, FS: fsys, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.kv["ns"]), nil
}

// kvOf returns the registry's namespace "ns" as it serves it.
func kvOf(r *Registry) map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.kv["ns"])
}

// The name server's kvConfig.json under power loss: while keys are put one
// after another (k001, k002, ... as fast as each change is written and
// answered), a crash clone taken at any moment opens, and holds exactly
// the keys of the last change answered before it or of one in flight:
// never an empty or torn file, never a missing one (its directory, created
// at open, included).
func TestKVConfigPowerLoss(t *testing.T) {
	root := t.TempDir()
	fsys, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "namesrv", KVConfigFileName)
	r, err := OpenRegistry(Options{KVConfigPath: path, FS: fsys, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	crashfs.CloneDuringWrites(t, fsys, 40, func(i int64) error {
		_, err := r.changeKV("ns", fmt.Sprintf("k%03d", i), fmt.Sprint(i), false)
		return err
	}, func(c crashfs.Clone) {
		kv, err := loadedKV(vfs.Default, filepath.Join(c.Dir, "namesrv", KVConfigFileName))
		if err != nil {
			t.Fatalf("%s: the KV config does not open: %v", c.Where, err)
		}
		n := int64(len(kv))
		if n < c.Lo || n > c.Hi {
			t.Fatalf("%s: %d keys %v, want the keys of one change in [%d, %d] (the last answered, the last begun)", c.Where, n, slices.Sorted(maps.Keys(kv)), c.Lo, c.Hi)
		}
		for j := int64(1); j <= n; j++ {
			if v := kv[fmt.Sprintf("k%03d", j)]; v != fmt.Sprint(j) {
				t.Fatalf("%s: k%03d = %q (keys %v)", c.Where, j, v, slices.Sorted(maps.Keys(kv)))
			}
		}
	})
}

// Every file operation of opening the KV config and changing it failed in
// turn: a change that fails returns the injected error (errKVNotPersisted)
// and is not applied; one that returns nil is on disk; the file on disk
// always opens and holds a state some change left or tried to leave.
func TestKVConfigFaults(t *testing.T) {
	errorfs.Walk(t, vfs.Default, []errorfs.Mode{errorfs.Once, errorfs.Stop}, func(t *testing.T, fsys *errorfs.FS, root string) {
		path := filepath.Join(root, "namesrv", KVConfigFileName)
		quiet := slog.New(slog.DiscardHandler)
		r, err := OpenRegistry(Options{KVConfigPath: path, FS: fsys, Logger: quiet})
		if err != nil {
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("open: %v, not the injected failure", err)
			}
			return
		}
		defer r.Close()
		// want is what the registry serves; possible, every state the disk
		// may hold (a write that fails at the directory's fsync has
		// replaced the file).
		want := map[string]string{}
		possible := []map[string]string{want}
		change := func(key, value string, del bool) {
			attempted := maps.Clone(want)
			if del {
				delete(attempted, key)
			} else {
				attempted[key] = value
			}
			changed, err := r.changeKV("ns", key, value, del)
			switch {
			case err == nil && !changed: // nothing to write (a delete of a key a failed put did not add)
			case err == nil:
				want, possible = attempted, []map[string]string{attempted}
			case errors.Is(err, errKVNotPersisted) && errors.Is(err, errorfs.ErrInjected):
				possible = append(possible, attempted)
			default:
				t.Fatalf("change %s: %v, not the injected failure", key, err)
			}
			if got := kvOf(r); !maps.Equal(got, want) {
				t.Fatalf("after change %s (%v) the registry serves %v, want %v", key, err, got, want)
			}
		}
		change("a", "1", false)
		change("b", "2", false)
		change("a", "", true)
		if _, err := loadedKV(fsys, path); err != nil && !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("reopen: %v, not the injected failure", err)
		}
		got, err := loadedKV(vfs.Default, path)
		if err != nil {
			t.Fatalf("after the faults the KV config does not open: %v", err)
		}
		if !slices.ContainsFunc(possible, func(m map[string]string) bool { return maps.Equal(got, m) }) {
			t.Fatalf("stored %v, want one of %v", got, possible)
		}
	})
}
