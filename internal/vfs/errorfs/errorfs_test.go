package errorfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
	"golang.org/x/sys/unix"
)

func TestArmFailsTheNthOperationOnce(t *testing.T) {
	dir := t.TempDir()
	fsys := New(vfs.Default)
	fsys.Arm(Point{Op: OpCreate, N: 2, Mode: Once})
	create := func(name string) error {
		f, err := fsys.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
		if err == nil {
			f.Close()
		}
		return err
	}
	if err := create("a"); err != nil {
		t.Fatal(err)
	}
	err := create("b")
	var e *Error
	if !errors.Is(err, ErrInjected) || !errors.Is(err, unix.EIO) || !errors.As(err, &e) || e.Op != OpCreate || e.N != 2 {
		t.Fatalf("second create = %v, want the injected EIO", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "b")); !errors.Is(serr, os.ErrNotExist) {
		t.Fatal("a failed create created the file")
	}
	if err := create("c"); err != nil {
		t.Fatalf("third create after a Once failure: %v", err)
	}
	if f := fsys.Fired(); f == nil || f.N != 2 {
		t.Fatalf("Fired = %v", f)
	}
	if c := fsys.Counts(); c[OpCreate] != 3 {
		t.Fatalf("%d creates counted", c[OpCreate])
	}
}

func TestStopFailsEverythingAfter(t *testing.T) {
	dir := t.TempDir()
	fsys := New(vfs.Default)
	fsys.Arm(Point{Op: OpMkdir, N: 1, Mode: Stop})
	if err := fsys.MkdirAll(filepath.Join(dir, "d"), 0o755); !errors.Is(err, ErrInjected) {
		t.Fatalf("mkdir = %v", err)
	}
	if _, err := fsys.Stat(dir); !errors.Is(err, ErrInjected) {
		t.Fatalf("stat after the disk stopped = %v", err)
	}
	if err := fsys.SyncDir(dir); !errors.Is(err, ErrInjected) {
		t.Fatalf("syncdir after the disk stopped = %v", err)
	}
	fsys.Disarm()
	if _, err := fsys.Stat(dir); err != nil {
		t.Fatalf("stat after Disarm: %v", err)
	}
}

func TestAllocateFailsWithENOSPCAndFailWhen(t *testing.T) {
	fsys := New(vfs.Default)
	f, err := fsys.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fsys.Arm(Point{Op: OpAllocate, N: 1})
	if err := f.Allocate(0, 4096); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("allocate = %v, want ENOSPC", err)
	}
	fsys.FailWhen(func(op Op, _ string) unix.Errno {
		if op == OpDatasync {
			return unix.EROFS
		}
		return 0
	})
	if err := f.Datasync(); !errors.Is(err, unix.EROFS) || !errors.Is(err, ErrInjected) {
		t.Fatalf("datasync = %v, want the hook's EROFS", err)
	}
	if err := f.Allocate(0, 4096); err != nil {
		t.Fatalf("allocate after the Once point: %v", err)
	}
}

func TestLeaks(t *testing.T) {
	dir := t.TempDir()
	fsys := New(vfs.Default)
	f, err := fsys.OpenFile(filepath.Join(dir, "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Allocate(0, int64(mmap.PageSize())); err != nil {
		t.Fatal(err)
	}
	m, err := f.Map(0, mmap.PageSize(), mmap.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := fsys.Lock(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.Leaks(); err == nil {
		t.Fatal("an open file, a lock and a mapping reported as no leak")
	}
	f.Close()
	lk.Close()
	if fsys.LiveMappings() != 1 {
		t.Fatalf("%d live mappings, want 1", fsys.LiveMappings())
	}
	m.Release()
	if err := fsys.Leaks(); err != nil {
		t.Fatal(err)
	}
}

func TestLockConflict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	l, err := vfs.Default.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := vfs.Default.Lock(path); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second lock = %v, want vfs.ErrLocked", err)
	}
}

func TestDefaultReadFileAndDiskUsage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	os.WriteFile(path, []byte("hello"), 0o644)
	if b, err := vfs.ReadFile(vfs.Default, path); err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if u, err := vfs.Default.DiskUsage(dir); err != nil || u < 0 || u > 1 {
		t.Fatalf("DiskUsage = %v, %v", u, err)
	}
	if err := vfs.Default.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}
