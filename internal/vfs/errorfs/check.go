package errorfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Checker checks the errors a workload's calls return in a run of Walk's:
// each is nil or the injected failure with its cause (an error that lost
// ErrInjected on the way hides what went wrong), and after a transient
// fault (mode Once) a call tried again succeeds.
type Checker struct {
	t    testing.TB
	once bool
}

// NewChecker returns the checker of a run over fsys (armed or not).
func NewChecker(t testing.TB, fsys *FS) *Checker {
	p, _ := fsys.Point()
	return &Checker{t: t, once: p.Mode == Once}
}

// OK reports whether err, what call what returned, is nil; an error other
// than the injected failure fails the test.
func (c *Checker) OK(what string, err error) bool {
	c.t.Helper()
	if err == nil {
		return true
	}
	if !errors.Is(err, ErrInjected) {
		c.t.Fatalf("%s: %v: not the injected failure, or its cause was lost", what, err)
	}
	return false
}

// Retry runs op, and once more after an injected failure: after a
// transient fault the second try must succeed. It reports whether op
// succeeded.
func (c *Checker) Retry(what string, op func() error) bool {
	c.t.Helper()
	if c.OK(what, op()) {
		return true
	}
	err := op()
	if c.once && err != nil {
		c.t.Fatalf("%s after a transient fault: %v", what, err)
	}
	return c.OK(what, err)
}

// CheckReleased fails t unless the code under test gave back every file,
// lock and mapping it took from f (Leaks) and its goroutines ended (no
// more than goroutines are left, CheckGoroutines): what must hold after a
// Close, or an Open that failed.
func (f *FS) CheckReleased(t testing.TB, goroutines int) {
	t.Helper()
	if err := f.Leaks(); err != nil {
		t.Fatal(err)
	}
	CheckGoroutines(t, goroutines)
}

// CopyTree copies the directory from to to, as the page cache holds it:
// what a crash of the process at this moment leaves (a file removed while
// it copies is left out, as if removed before). It reads through the real
// file system: the code under test must be idle or only removing files.
func CopyTree(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
