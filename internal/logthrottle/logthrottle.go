// Package logthrottle keeps a line logged in a loop from flooding the log:
// a Throttle lets one line per cause through per interval and counts the
// ones it holds back, so the next line of that cause says how many there
// were (attribute "suppressed") and an operator sees both that the
// problem goes on and how often it happened.
//
// A cause is a string the caller chooses: what makes two lines the same
// problem (a peer's address, a file and its version, a listener). It is a
// key only; nothing is decided by an error's text.
//
// # Invariants
//
//   - The first line of a cause is always let through; after it, at most
//     one line of that cause per Interval, and each carries the count held
//     back since the previous one.
//   - Memory is bounded: at most MaxCauses causes are tracked. When a new
//     cause finds the table full, causes quiet for longer than Interval
//     with nothing held back go first; failing that, the cause logged
//     least recently goes, and what it held back is added to the next
//     line let through of any cause (attribute "suppressed_other").
//   - Safe for concurrent use; one mutex, held for a map lookup.
//   - Imports nothing of the module.
package logthrottle

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Defaults of New.
const (
	DefaultInterval  = time.Minute
	DefaultMaxCauses = 1024
)

// Throttle lets one line per cause through per interval. The zero value is
// not usable: New makes one.
type Throttle struct {
	interval time.Duration
	max      int
	now      func() time.Time

	mu     sync.Mutex
	causes map[string]*cause
	other  uint64 // held back by causes evicted since the last line let through
}

type cause struct {
	last       time.Time // when a line was last let through
	suppressed uint64    // held back since
}

// Option configures a Throttle.
type Option func(*Throttle)

// MaxCauses bounds the causes tracked at once (default DefaultMaxCauses).
func MaxCauses(n int) Option {
	return func(t *Throttle) {
		if n > 0 {
			t.max = n
		}
	}
}

// Clock sets the clock (tests). Default time.Now.
func Clock(now func() time.Time) Option { return func(t *Throttle) { t.now = now } }

// New returns a Throttle letting one line per cause through per interval
// (<= 0: DefaultInterval).
func New(interval time.Duration, opts ...Option) *Throttle {
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := &Throttle{interval: interval, max: DefaultMaxCauses, now: time.Now, causes: map[string]*cause{}}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Interval returns the throttle's interval.
func (t *Throttle) Interval() time.Duration { return t.interval }

// Allow reports whether a line of cause may be logged now. When it may,
// suppressed is how many lines of cause were held back since the last one
// let through, and other how many of evicted causes (see the package
// doc); when it may not, the line is counted.
func (t *Throttle) Allow(key string) (ok bool, suppressed, other uint64) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.causes[key]
	if c == nil {
		if len(t.causes) >= t.max {
			t.evictLocked(now)
		}
		t.causes[key] = &cause{last: now}
		other, t.other = t.other, 0
		return true, 0, other
	}
	if now.Sub(c.last) < t.interval {
		c.suppressed++
		return false, 0, 0
	}
	suppressed, c.suppressed, c.last = c.suppressed, 0, now
	other, t.other = t.other, 0
	return true, suppressed, other
}

// evictLocked makes room for one cause.
func (t *Throttle) evictLocked(now time.Time) {
	var oldest string
	var oldestAt time.Time
	for k, c := range t.causes {
		if c.suppressed == 0 && now.Sub(c.last) >= t.interval {
			delete(t.causes, k)
			continue
		}
		if oldest == "" || c.last.Before(oldestAt) {
			oldest, oldestAt = k, c.last
		}
	}
	if len(t.causes) >= t.max && oldest != "" {
		t.other += t.causes[oldest].suppressed
		delete(t.causes, oldest)
	}
}

// Clear forgets cause (the problem is over) and returns how many of its
// lines were held back since the last one let through, for the line that
// says it is over. The next line of cause is let through at once.
func (t *Throttle) Clear(key string) (suppressed uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.causes[key]; c != nil {
		suppressed = c.suppressed
		delete(t.causes, key)
	}
	return suppressed
}

// Len is how many causes are tracked (tests).
func (t *Throttle) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.causes)
}

// Log logs msg with args at level through l when Allow lets cause through,
// adding "suppressed" (and "suppressed_other" when not zero) to the
// attributes; it reports whether it logged. The message should say that
// repeats are counted: Log appends " (repeats within INTERVAL are only
// counted)" to it.
func (t *Throttle) Log(l *slog.Logger, level slog.Level, key, msg string, args ...any) bool {
	if !l.Enabled(context.Background(), level) {
		return false
	}
	ok, n, other := t.Allow(key)
	if !ok {
		return false
	}
	args = append(args, "suppressed", n)
	if other > 0 {
		args = append(args, "suppressed_other", other)
	}
	l.Log(context.Background(), level, msg+" (repeats within "+short(t.interval)+" are only counted)", args...)
	return true
}

// short writes d without its zero tails ("1m", not "1m0s").
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Warn is Log at slog.LevelWarn.
func (t *Throttle) Warn(l *slog.Logger, key, msg string, args ...any) bool {
	return t.Log(l, slog.LevelWarn, key, msg, args...)
}

// Error is Log at slog.LevelError.
func (t *Throttle) Error(l *slog.Logger, key, msg string, args ...any) bool {
	return t.Log(l, slog.LevelError, key, msg, args...)
}
