package store

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

// epochsUpTo are the entries after Append(i, 100*i) for i = 1..n.
func epochsUpTo(n int) []EpochEntry {
	var out []EpochEntry
	for i := 1; i <= n; i++ {
		out = append(out, EpochEntry{Epoch: int32(i), StartOffset: int64(100 * i)})
	}
	return out
}

// The epoch file under power loss: while epochs are appended (1, 2, ... as
// fast as each is written), a crash clone taken at any moment opens, and
// holds exactly the entries of the last Append that returned before it or
// of one in flight: never an empty or torn file.
func TestEpochFilePowerLoss(t *testing.T) {
	root := t.TempDir()
	fsys, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	f, err := OpenEpochFile(filepath.Join(root, EpochFileName), fsys, quiet)
	if err != nil {
		t.Fatal(err)
	}
	crashfs.CloneDuringWrites(t, fsys, 40, func(i int64) error {
		return f.Append(int32(i), 100*i)
	}, func(c crashfs.Clone) {
		g, err := OpenEpochFile(filepath.Join(c.Dir, EpochFileName), vfs.Default, quiet)
		if err != nil {
			t.Fatalf("%s: the epoch file does not open: %v", c.Where, err)
		}
		got := g.Entries()
		if n := int64(len(got)); n < c.Lo || n > c.Hi || !slices.Equal(got, epochsUpTo(int(n))) {
			t.Fatalf("%s: entries %v, want those of one Append in [%d, %d] (the last returned, the last begun)", c.Where, got, c.Lo, c.Hi)
		}
	})
}

// Every file operation of opening, appending to and truncating the epoch
// file failed in turn: a failed change returns the injected error and is
// not applied; one that returned nil is on disk; the file always opens
// and holds what some change left or tried to leave.
func TestEpochFileFaults(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	errorfs.Walk(t, vfs.Default, []errorfs.Mode{errorfs.Once, errorfs.Stop}, func(t *testing.T, fsys *errorfs.FS, dir string) {
		path := filepath.Join(dir, EpochFileName)
		f, err := OpenEpochFile(path, fsys, quiet)
		if err != nil {
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("open: %v, not the injected failure", err)
			}
			return
		}
		var want []EpochEntry
		possible := [][]EpochEntry{nil}
		change := func(what string, attempted []EpochEntry, do func() error) {
			switch err := do(); {
			case err == nil:
				want, possible = attempted, [][]EpochEntry{attempted}
			case errors.Is(err, errorfs.ErrInjected):
				possible = append(possible, attempted)
			default:
				t.Fatalf("%s: %v, not the injected failure", what, err)
			}
			if got := f.Entries(); !slices.Equal(got, want) {
				t.Fatalf("after %s the file's entries are %v, want %v", what, got, want)
			}
		}
		for i := 1; i <= 3; i++ {
			e := EpochEntry{Epoch: int32(i), StartOffset: int64(100 * i)}
			change(fmt.Sprintf("append %d", i), append(slices.Clone(want), e), func() error { return f.Append(e.Epoch, e.StartOffset) })
		}
		if len(want) > 1 {
			last := want[len(want)-1]
			change("truncate", want[:len(want)-1], func() error { return f.TruncateFrom(last.StartOffset) })
		}
		if _, err := OpenEpochFile(path, fsys, quiet); err != nil && !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("reopen: %v, not the injected failure", err)
		}
		g, err := OpenEpochFile(path, vfs.Default, quiet)
		if err != nil {
			t.Fatalf("after the faults the epoch file does not open: %v", err)
		}
		if got := g.Entries(); !slices.ContainsFunc(possible, func(p []EpochEntry) bool { return slices.Equal(got, p) }) {
			t.Fatalf("entries %v, want one of %v", got, possible)
		}
	})
}
