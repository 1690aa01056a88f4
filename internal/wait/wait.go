// Package wait is how tests wait: poll a condition until it holds, or fail
// the test with what the condition last saw. It is the one helper for it in
// the repository (every package's tests and the interop modules use it), in
// the spirit of nats-server's checkFor.
//
// A test never sleeps to synchronise: it waits for the state it needs (a
// count made visible by dispatch, a route served, a process listening), and
// the bound on the wait is there only to end a test that would hang. So the
// bounds are generous (DefaultTimeout is a minute): a machine shared with
// another job runs a test several times slower than a quiet one, and a
// tight bound turns that into a failure that means nothing. Timing targets
// belong in benchmarks, not in these bounds.
//
// # Invariants
//
//   - The condition runs on the caller's goroutine, first at once, then
//     after pauses that grow from 1 ms to 50 ms, so a condition that holds
//     soon is seen soon and a long wait costs little CPU.
//   - A failure names what was awaited, how long it was awaited, and the
//     last error the condition returned (what it last saw).
//   - For, Until and Equal call t.Fatal, so they run on the test's
//     goroutine; Poll returns the error instead, for other goroutines.
//   - Inside a testing/synctest bubble the pauses are virtual: the same
//     helpers wait there without taking wall-clock time.
package wait

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// DefaultTimeout bounds For, Until and Equal. It is long on purpose: see the
// package doc.
const DefaultTimeout = time.Minute

const (
	firstPause = time.Millisecond
	maxPause   = 50 * time.Millisecond
)

// errFalse is what Until reports when its condition never held.
var errFalse = errors.New("the condition was false")

// Poll calls cond until it returns nil or d has passed, and returns nil or
// the last error cond returned (wrapped with how long it waited). It does
// not touch a testing.T, so any goroutine may call it.
func Poll(d time.Duration, cond func() error) error {
	start := time.Now()
	pause := firstPause
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Since(start) >= d {
			return fmt.Errorf("after %v: %w", time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(pause)
		if pause *= 2; pause > maxPause {
			pause = maxPause
		}
	}
}

// For waits up to DefaultTimeout for cond to return nil. cond returns an
// error that says what it saw instead ("3 of 12 messages dispatched"); the
// test fails with the last one.
func For(t testing.TB, what string, cond func() error) {
	t.Helper()
	Within(t, DefaultTimeout, what, cond)
}

// Within is For with a bound of its own: for a test that must give up
// sooner (a wait inside a loop of many) or later (a failover under load).
func Within(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(d, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Until waits up to DefaultTimeout for cond to hold. Prefer For when the
// condition can say what it saw.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	For(t, what, func() error {
		if cond() {
			return nil
		}
		return errFalse
	})
}

// Equal waits up to DefaultTimeout for get to return want, and fails with
// the last value it returned.
func Equal[T comparable](t testing.TB, what string, want T, get func() T) {
	t.Helper()
	For(t, what, func() error {
		if got := get(); got != want {
			return fmt.Errorf("got %v, want %v", got, want)
		}
		return nil
	})
}

// Value waits up to DefaultTimeout for get to return a value ok accepts,
// returns it, and fails with the last value seen otherwise.
func Value[T any](t testing.TB, what string, get func() T, ok func(T) bool) T {
	t.Helper()
	var v T
	For(t, what, func() error {
		if v = get(); ok(v) {
			return nil
		}
		return fmt.Errorf("last saw %v", v)
	})
	return v
}
