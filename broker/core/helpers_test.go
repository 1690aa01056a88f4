package core

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/store"
)

// testOptions are a core's options for a small store in dir, logging to
// tb's log (printed if tb fails).
func testOptions(tb testing.TB, dir string) Options {
	return Options{
		DataDir:       dir,
		AdvertiseAddr: "127.0.0.1:10911",
		Store: store.Options{
			SegmentSize: 8 << 20, ConsumeQueueEntries: 4096,
			IndexSlots: 1024, IndexMaxEntries: 8192, CleanInterval: -1,
		},
		MaxMessageSize: 1 << 20,
		Logger:         testlog.New(tb, "core"),
	}
}

// newTestCore starts a core in a temporary directory (mutate changes its
// options first) and shuts it down when the test ends.
func newTestCore(tb testing.TB, mutate func(*Options)) *Core {
	tb.Helper()
	o := testOptions(tb, tb.TempDir())
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

// waitDispatched waits until topic's queue q holds n messages visible to
// pulls: a send returns once its message is stored, and dispatch makes it
// visible after that.
func waitDispatched(tb testing.TB, c *Core, topic string, q int32, n int64) {
	tb.Helper()
	wait.Equal(tb, fmt.Sprintf("%d messages of %s/%d dispatched", n, topic, q), n, func() int64 { return c.MaxOffset(topic, q) })
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
