package core

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/store"
)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// testOptions are a core's options for a small store in dir.
func testOptions(dir string) Options {
	return Options{
		DataDir:       dir,
		AdvertiseAddr: "127.0.0.1:10911",
		Store: store.Options{
			SegmentSize: 8 << 20, ConsumeQueueEntries: 4096,
			IndexSlots: 1024, IndexMaxEntries: 8192, CleanInterval: -1,
		},
		MaxMessageSize: 1 << 20,
		Logger:         quietLogger,
	}
}

// newTestCore starts a core in a temporary directory (mutate changes its
// options first) and shuts it down when the test ends.
func newTestCore(tb testing.TB, mutate func(*Options)) *Core {
	tb.Helper()
	o := testOptions(tb.TempDir())
	if mutate != nil {
		mutate(&o)
	}
	c, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	c.Start()
	tb.Cleanup(func() {
		if err := c.Shutdown(); err != nil && err != ErrClosed {
			tb.Errorf("shutdown: %v", err)
		}
	})
	return c
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logCounter counts log records containing a text.
type logCounter struct {
	mu    sync.Mutex
	lines []string
}

func (l *logCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	return len(p), nil
}

func (l *logCounter) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, text) {
			n++
		}
	}
	return n
}
