package durable

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"golang.org/x/sys/unix"
)

// strictClone returns the directory a power loss now would leave of fsys's root.
func strictClone(t *testing.T, fsys *crashfs.FS) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "clone")
	if _, err := fsys.CrashClone(dst, crashfs.CloneOptions{Mode: crashfs.Strict}); err != nil {
		t.Fatal(err)
	}
	return dst
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// Directories made by MkdirAll survive a power loss; made by the file
// system's MkdirAll alone (what the storage packages did), they do not.
func TestMkdirAllSurvivesPowerLoss(t *testing.T) {
	fsys, err := crashfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := fsys.Root()
	if err := fsys.MkdirAll(filepath.Join(root, "plain", "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if dst := strictClone(t, fsys); isDir(filepath.Join(dst, "plain")) {
		t.Fatal("the model kept a directory no fsync of its parent made durable: this test cannot fail")
	}
	if err := MkdirAll(fsys, filepath.Join(root, "store", "commitlog", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := strictClone(t, fsys)
	if !isDir(filepath.Join(dst, "store", "commitlog", "x")) {
		t.Fatal("store/commitlog/x did not survive a power loss after MkdirAll")
	}
	// Again on an existing path: nothing to create, and no error.
	if err := MkdirAll(fsys, filepath.Join(root, "store", "commitlog"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// A creation a crash interrupted before its parent's fsync (the directory
// exists, its entry is not durable) is made durable by the next call, for
// the path itself and for a deeper one.
func TestMkdirAllRepairsAnInterruptedCreation(t *testing.T) {
	for _, sub := range []string{"", "deeper/still"} {
		fsys, err := crashfs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		root := fsys.Root()
		if err := MkdirAll(fsys, filepath.Join(root, "a"), 0o755); err != nil {
			t.Fatal(err)
		}
		// The interrupted call: a/b created, a not synced.
		if err := fsys.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
			t.Fatal(err)
		}
		if dst := strictClone(t, fsys); isDir(filepath.Join(dst, "a", "b")) {
			t.Fatal("a/b survived before any sync: the model does not bite")
		}
		want := filepath.Join(root, "a", "b", sub)
		if err := MkdirAll(fsys, want, 0o755); err != nil {
			t.Fatal(err)
		}
		dst := strictClone(t, fsys)
		if got := filepath.Join(dst, "a", "b", sub); !isDir(got) {
			t.Fatalf("MkdirAll(%s) on an interrupted creation: %s lost in a power loss", want, got)
		}
	}
}

// A file in the way and a failed fsync are errors; a permission error on the
// parent of a directory that existed is not (it was not this call's creation).
func TestMkdirAllErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(vfs.Default, filepath.Join(dir, "file", "sub"), 0o755); err == nil {
		t.Fatal("MkdirAll through a file succeeded")
	}
	if err := MkdirAll(vfs.Default, filepath.Join(dir, "file"), 0o755); err == nil {
		t.Fatal("MkdirAll over a file succeeded")
	}

	efs := errorfs.New(vfs.Default)
	efs.FailWhen(func(op errorfs.Op, path string) unix.Errno {
		if op == errorfs.OpSyncDir && path == dir {
			return unix.EIO
		}
		return 0
	})
	err := MkdirAll(efs, filepath.Join(dir, "new"), 0o755)
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("MkdirAll with a failing fsync of the parent: %v, want EIO", err)
	}

	efs.FailWhen(func(op errorfs.Op, path string) unix.Errno {
		if op == errorfs.OpSyncDir && path == dir {
			return unix.EACCES
		}
		return 0
	})
	if err := MkdirAll(efs, filepath.Join(dir, "new"), 0o755); err != nil {
		t.Fatalf("MkdirAll of an existing directory whose parent cannot be read: %v", err)
	}
	if err := MkdirAll(efs, filepath.Join(dir, "other"), 0o755); !errors.Is(err, unix.EACCES) {
		t.Fatalf("MkdirAll of a new directory whose parent cannot be synced: %v, want EACCES", err)
	}
}

// A record written and synced into a file OpenRecord created survives a
// power loss: the creation's directory entry is synced too (the store's
// checkpoint was created without, so a power loss in the strict model could
// take it away with every record synced into it).
func TestNewRecordSurvivesPowerLoss(t *testing.T) {
	fsys, err := crashfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(fsys.Root(), "checkpoint")
	r, _, ok, err := OpenRecord(fsys, path, "TESTREC1", 8)
	if err != nil || ok {
		t.Fatalf("OpenRecord on a new file: ok %v, %v", ok, err)
	}
	defer r.Close()
	if err := r.Write([]byte("12345678")); err != nil {
		t.Fatal(err)
	}
	dst := strictClone(t, fsys)
	got, ok, err := ReadRecord(vfs.Default, filepath.Join(dst, "checkpoint"), "TESTREC1", 8)
	if err != nil || !ok || string(got) != "12345678" {
		t.Fatalf("after a power loss the record reads %q, ok %v, %v; want the one written", got, ok, err)
	}
}
