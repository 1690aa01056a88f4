package logthrottle

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a manual clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestOnePerCausePerInterval(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	th := New(time.Minute, Clock(c.now))
	steps := []struct {
		advance    time.Duration
		cause      string
		ok         bool
		suppressed uint64
	}{
		{0, "a", true, 0},
		{time.Second, "a", false, 0},
		{time.Second, "a", false, 0},
		{0, "b", true, 0}, // another cause is its own
		{time.Second, "b", false, 0},
		{57 * time.Second, "a", true, 2}, // a minute after a's first: let through with the count
		{time.Second, "b", false, 0},     // b's minute is not over yet
		{time.Second, "b", true, 2},
		{30 * time.Second, "a", false, 0},
	}
	for i, s := range steps {
		c.add(s.advance)
		ok, n, _ := th.Allow(s.cause)
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d (%s): ok %v suppressed %d, want %v %d", i, s.cause, ok, n, s.ok, s.suppressed)
		}
	}
	if n := th.Clear("a"); n != 1 {
		t.Errorf("Clear(a) = %d, want 1 (the line held back at the last step)", n)
	}
	if ok, n, _ := th.Allow("a"); !ok || n != 0 {
		t.Errorf("after Clear the next line goes through at once with no count: %v %d", ok, n)
	}
}

func TestBoundedMemory(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	th := New(time.Minute, Clock(c.now), MaxCauses(8))
	// 8 causes, each with a line held back.
	for i := range 8 {
		th.Allow(fmt.Sprint(i))
		th.Allow(fmt.Sprint(i))
	}
	var other uint64
	for i := range 1000 {
		c.add(time.Millisecond)
		ok, _, o := th.Allow(fmt.Sprint("new", i))
		other += o
		if !ok {
			t.Fatalf("a new cause %d held back", i)
		}
		if th.Len() > 8 {
			t.Fatalf("%d causes tracked, want at most 8", th.Len())
		}
	}
	// The eight first causes each held one line back: evicted, their
	// counts were reported with later lines, not lost.
	if other != 8 {
		t.Errorf("suppressed_other reported %d, want 8", other)
	}
}

func TestLogLine(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	th := New(time.Minute, Clock(c.now))
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	for range 5 {
		th.Warn(l, "peer 1", "peer unreachable", "peer", "1")
	}
	c.add(time.Minute)
	th.Warn(l, "peer 1", "peer unreachable", "peer", "1")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"suppressed=0", "suppressed=4"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "level=WARN") ||
			!strings.Contains(lines[i], "repeats within 1m are only counted") {
			t.Errorf("line %d %q, want WARN with %s", i, lines[i], want)
		}
	}
	// A disabled level logs nothing and counts nothing.
	buf.Reset()
	quiet := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
	if th.Warn(quiet, "x", "m") || buf.Len() != 0 {
		t.Errorf("a WARN below the handler's level was logged")
	}
}

// TestConcurrent: many goroutines on a few causes; every call is either
// let through or counted (run with -race).
func TestConcurrent(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	th := New(time.Minute, Clock(c.now), MaxCauses(4))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var passed, counted uint64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				if i%100 == 0 {
					c.add(20 * time.Second)
				}
				ok, n, o := th.Allow(fmt.Sprint(g % 3))
				if ok {
					mu.Lock()
					passed++
					counted += n + o
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for i := range 3 {
		counted += th.Clear(fmt.Sprint(i))
	}
	if passed+counted != 8000 {
		t.Errorf("let through %d + counted %d != 8000 calls", passed, counted)
	}
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Minute: "1m", 10 * time.Second: "10s", 24 * time.Hour: "24h", 90 * time.Second: "1m30s"} {
		if got := short(d); got != want {
			t.Errorf("short(%v) = %q, want %q", d, got, want)
		}
	}
}
