// Package testlog gives a test the logger of the brokers, stores and
// clients it runs in its own process: everything at debug level goes to a
// file in the test's temporary directory, and when the test fails the file
// is printed with the test's output, so a failure seen once (on a loaded
// machine, in CI) comes with the log of the run that failed.
//
// # Invariants
//
//   - Nothing is printed for a test that passes: the log costs one file
//     write per line, not the test's output.
//   - The file is printed before the test's temporary directory is removed
//     (the cleanup is registered after the directory is made, and cleanups
//     run last-registered first), and closed after the last line is
//     written: a logger used after the test ended writes nowhere and fails
//     nothing.
//   - Each logger of a test has a name; the lines of several loggers of one
//     test (two brokers of a group, say) go to one file, each tagged with its
//     logger's name, in the order they were written.
package testlog

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// sink is one test's log file.
type sink struct {
	mu     sync.Mutex
	f      *os.File
	closed bool
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return len(p), nil
	}
	return s.f.Write(p)
}

var (
	sinksMu sync.Mutex
	sinks   = map[testing.TB]*sink{}
)

// sinkFor returns t's log file, creating it (and its cleanup) on first use.
func sinkFor(t testing.TB) *sink {
	t.Helper()
	sinksMu.Lock()
	defer sinksMu.Unlock()
	if s := sinks[t]; s != nil {
		return s
	}
	path := filepath.Join(t.TempDir(), "test.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("testlog: %v", err)
	}
	s := &sink{f: f}
	sinks[t] = s
	t.Cleanup(func() {
		s.mu.Lock()
		s.closed = true
		s.f.Close()
		s.mu.Unlock()
		sinksMu.Lock()
		delete(sinks, t)
		sinksMu.Unlock()
		if t.Failed() {
			Print(t, path)
		}
	})
	return s
}

// New returns a debug-level logger for t tagged with name ("broker-a",
// "slave"); its lines are printed if t fails.
func New(t testing.TB, name string) *slog.Logger {
	t.Helper()
	h := slog.NewTextHandler(sinkFor(t), &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(h).With("logger", name)
}

// Print logs the file at path (a process's log, say) as part of t's output,
// or says why it cannot.
func Print(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	switch {
	case err != nil:
		t.Logf("log %s: %v", path, err)
	case len(b) == 0:
		t.Logf("log %s is empty", path)
	default:
		t.Logf("log %s:\n%s", filepath.Base(path), b)
	}
}

// Path is where t's loggers write (for a test that hands the path to a
// child process, or reads the log itself).
func Path(t testing.TB) string {
	t.Helper()
	s := sinkFor(t)
	return s.f.Name()
}

// Lines is the log written so far, for a test that checks what was logged.
func Lines(t testing.TB) string {
	t.Helper()
	s := sinkFor(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(s.f.Name())
	if err != nil {
		return fmt.Sprintf("(testlog: %v)", err)
	}
	return string(b)
}
