package namesrv

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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

	var began, returned atomic.Int64 // the number of the last key whose put began, was answered
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			began.Store(i)
			if _, err := r.changeKV("ns", fmt.Sprintf("k%03d", i), fmt.Sprint(i), false); err != nil {
				done <- err
				return
			}
			returned.Store(i)
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("put: %v", err)
		}
	}()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	lost := 0
	for i := range 40 {
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		o := crashfs.CloneOptions{Mode: crashfs.Mode(i % 2), Seed: rng.Uint64()}
		lo := returned.Load()
		clone := filepath.Join(t.TempDir(), "clone")
		st, err := fsys.CrashClone(clone, o)
		if err != nil {
			t.Fatal(err)
		}
		hi := began.Load()
		if st.UnsyncedEntries+int(st.UnsyncedBytes) > 0 {
			lost++
		}
		where := fmt.Sprintf("test seed %d, clone %d (%s, seed %d; %v)", seed, i, o.Mode, o.Seed, st)
		kv, err := loadedKV(vfs.Default, filepath.Join(clone, "namesrv", KVConfigFileName))
		if err != nil {
			t.Fatalf("%s: the KV config does not open: %v", where, err)
		}
		n := int64(len(kv))
		if n < lo || n > hi {
			t.Fatalf("%s: %d keys %v, want the keys of one change in [%d, %d] (the last answered, the last begun)", where, n, slices.Sorted(maps.Keys(kv)), lo, hi)
		}
		for j := int64(1); j <= n; j++ {
			if v := kv[fmt.Sprintf("k%03d", j)]; v != fmt.Sprint(j) {
				t.Fatalf("%s: k%03d = %q (keys %v)", where, j, v, slices.Sorted(maps.Keys(kv)))
			}
		}
	}
	if lost == 0 {
		t.Fatalf("test seed %d: no clone had anything unsynced to lose: the test did not crash a write", seed)
	}
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
