// Package storetest checks that an idempotent.Store behaves as the interface
// documents: the state machine absent → processing (lease) → done (TTL), owners,
// expiry and takeover, and one winner among concurrent TryBegins. Every Store
// shipped with Apogee runs it; run it on your own:
//
//	func TestMyStore(t *testing.T) {
//		storetest.Run(t, storetest.Config{Lease: 300 * time.Millisecond}, func(t *testing.T) idempotent.Store {
//			return newMyStore(t)
//		})
//	}
//
// It uses real time: leases and TTLs of Config.Lease, waits of Lease plus
// Config.Slack. On a machine so loaded that a check comes after the lease it
// looks at has ended (a TryBegin more than a lease after the begin it
// follows), the check cannot tell a store that expired the key early from
// one that expired it on time: the subtest logs that and ends, it does not
// fail.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client/idempotent"
)

// Config describes the store under test.
type Config struct {
	// Lease is the lease and TTL the tests use; expiry tests wait Lease + Slack.
	// Default 300 ms.
	Lease time.Duration
	// Slack is added to waits for expiry, for clocks and slow stores. Default 200 ms.
	Slack time.Duration
	// ReportsExpired: the store reports a takeover as StateExpired (false: it may
	// report StateAbsent, as a store whose entries vanish with their lease does).
	ReportsExpired bool
	// BlindWrites: Done and Release do not report ErrNotOwner (the store cannot
	// tell); they must still leave another owner's key unchanged.
	BlindWrites bool
	// Racers is the number of goroutines racing on one key. Default 8.
	Racers int
	// Settle is how long a Done or Release may take to become visible to
	// TryBegin and Renew (0: at once). Meanwhile the key must read as processing
	// (so that a duplicate is retried, never run).
	Settle time.Duration
}

var seq atomic.Int64

// key returns a key unique to the test run.
func key(t *testing.T, suffix string) string {
	return fmt.Sprintf("%s-%d-%d%s", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), seq.Add(1), suffix)
}

// Run runs the conformance tests as subtests of t, each with a store from newStore.
func Run(t *testing.T, cfg Config, newStore func(t *testing.T) idempotent.Store) {
	if cfg.Lease <= 0 {
		cfg.Lease = 300 * time.Millisecond
	}
	if cfg.Slack <= 0 {
		cfg.Slack = 200 * time.Millisecond
	}
	if cfg.Racers <= 0 {
		cfg.Racers = 8
	}
	L := cfg.Lease
	long := time.Hour
	ctx := context.Background()

	begin := func(t *testing.T, s idempotent.Store, k, owner string, lease time.Duration, want ...idempotent.State) {
		t.Helper()
		st, err := s.TryBegin(ctx, k, owner, lease)
		if err != nil {
			t.Fatalf("TryBegin(%q, %q): %v", k, owner, err)
		}
		for _, w := range want {
			if st == w {
				return
			}
		}
		t.Fatalf("TryBegin(%q, %q) = %v, want one of %v", k, owner, st, want)
	}
	// settled is begin after a Done or Release: within cfg.Settle the key may
	// still read as processing.
	settled := func(t *testing.T, s idempotent.Store, k, owner string, lease time.Duration, want idempotent.State) {
		t.Helper()
		deadline := time.Now().Add(cfg.Settle)
		for {
			st, err := s.TryBegin(ctx, k, owner, lease)
			if err != nil {
				t.Fatalf("TryBegin(%q, %q): %v", k, owner, err)
			}
			if st == want {
				return
			}
			if st != idempotent.StateProcessing || time.Now().After(deadline) {
				t.Fatalf("TryBegin(%q, %q) = %v, want %v", k, owner, st, want)
			}
			time.Sleep(5 * time.Millisecond) // a poll: this package is not a test's, so it cannot use internal/wait
		}
	}
	// late reports whether more than a lease has passed since from (a check
	// made now cannot see whether the lease held), and logs it if so.
	late := func(t *testing.T, from time.Time, what string) bool {
		t.Helper()
		if d := time.Since(from); d >= L {
			t.Logf("%s came %v after the lease began, past its end (%v): not observed on this machine", what, d.Round(time.Millisecond), L)
			return true
		}
		return false
	}
	notOwner := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, idempotent.ErrNotOwner) {
			t.Fatalf("%s: err = %v, want ErrNotOwner", what, err)
		}
	}
	must := func(t *testing.T, what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	t.Run("BeginThenBusy", func(t *testing.T) {
		s := newStore(t)
		k := key(t, "")
		begin(t, s, k, "a", long, idempotent.StateAbsent)
		begin(t, s, k, "b", long, idempotent.StateProcessing)
		begin(t, s, k, "a", long, idempotent.StateProcessing) // even its own holder
	})
	t.Run("DoneThenDuplicate", func(t *testing.T) {
		s := newStore(t)
		k := key(t, "")
		begin(t, s, k, "a", long, idempotent.StateAbsent)
		must(t, "Done", s.Done(ctx, k, "a", long))
		settled(t, s, k, "b", long, idempotent.StateDone)
		begin(t, s, k, "a", long, idempotent.StateDone)
		must(t, "Done again by its owner", s.Done(ctx, k, "a", long))
		settled(t, s, k, "c", long, idempotent.StateDone)
	})
	t.Run("ReleaseThenBeginAgain", func(t *testing.T) {
		s := newStore(t)
		k := key(t, "")
		begin(t, s, k, "a", long, idempotent.StateAbsent)
		must(t, "Release", s.Release(ctx, k, "a"))
		settled(t, s, k, "b", long, idempotent.StateAbsent)
		must(t, "Done", s.Done(ctx, k, "b", long))
		settled(t, s, k, "a", long, idempotent.StateDone)
	})
	t.Run("ReleaseAbsent", func(t *testing.T) {
		s := newStore(t)
		must(t, "Release of an absent key", s.Release(ctx, key(t, ""), "a"))
	})
	t.Run("OthersCannotRenewCompleteOrRelease", func(t *testing.T) {
		s := newStore(t)
		k := key(t, "")
		begin(t, s, k, "a", long, idempotent.StateAbsent)
		notOwner(t, "Renew by another owner", s.Renew(ctx, k, "b", long))
		if err := s.Done(ctx, k, "b", long); !cfg.BlindWrites {
			notOwner(t, "Done by another owner", err)
		} else {
			must(t, "blind Done", err)
		}
		if err := s.Release(ctx, k, "b"); !cfg.BlindWrites {
			notOwner(t, "Release by another owner", err)
		} else {
			must(t, "blind Release", err)
		}
		begin(t, s, k, "c", long, idempotent.StateProcessing) // still a's
		must(t, "Renew by the owner", s.Renew(ctx, k, "a", long))
		must(t, "Done by the owner", s.Done(ctx, k, "a", long))
		settled(t, s, k, "c", long, idempotent.StateDone)
		notOwner(t, "Renew after Done", s.Renew(ctx, k, "a", long))
		if err := s.Release(ctx, k, "b"); !cfg.BlindWrites {
			notOwner(t, "Release of a done key", err)
		}
		begin(t, s, k, "c", long, idempotent.StateDone)
	})
	t.Run("RenewKeepsTheLease", func(t *testing.T) {
		s := newStore(t)
		k := key(t, "")
		leased := time.Now() // each lease runs at least until a lease after this
		begin(t, s, k, "a", L, idempotent.StateAbsent)
		for end := time.Now().Add(2*L + cfg.Slack); time.Now().Before(end); {
			time.Sleep(L / 4) // the holder renews every quarter of a lease
			if late(t, leased, "a renewal") {
				return
			}
			renewing := time.Now()
			must(t, "Renew", s.Renew(ctx, k, "a", L))
			leased = renewing
			st, err := s.TryBegin(ctx, k, "b", L)
			if err != nil {
				t.Fatalf("TryBegin(%q, %q): %v", k, "b", err)
			}
			if st != idempotent.StateProcessing {
				if late(t, leased, "the check after a renewal") {
					return
				}
				t.Fatalf("TryBegin(%q, %q) = %v within the renewed lease, want processing", k, "b", st)
			}
		}
	})
	t.Run("ExpiredLeaseIsTakenOver", func(t *testing.T) {
		s := newStore(t)
		k := key(t, "")
		leased := time.Now()
		begin(t, s, k, "dead", L, idempotent.StateAbsent)
		ended := time.Now().Add(L) // the lease ends before this
		st, err := s.TryBegin(ctx, k, "b", long)
		if err != nil {
			t.Fatalf("TryBegin(%q, %q): %v", k, "b", err)
		}
		if st != idempotent.StateProcessing {
			if late(t, leased, "the check within the lease") {
				return
			}
			t.Fatalf("TryBegin(%q, %q) = %v within the lease, want processing", k, "b", st)
		}
		// What is tested is a time: the lease has ended (Slack for clocks
		// and the store's own latency).
		time.Sleep(time.Until(ended.Add(cfg.Slack)))
		if cfg.ReportsExpired {
			begin(t, s, k, "b", long, idempotent.StateExpired)
		} else {
			begin(t, s, k, "b", long, idempotent.StateExpired, idempotent.StateAbsent)
		}
		notOwner(t, "Renew by the old owner", s.Renew(ctx, k, "dead", long))
		if err := s.Done(ctx, k, "dead", long); !cfg.BlindWrites {
			notOwner(t, "Done by the old owner", err)
		}
		if err := s.Release(ctx, k, "dead"); !cfg.BlindWrites {
			notOwner(t, "Release by the old owner", err)
		}
		begin(t, s, k, "c", long, idempotent.StateProcessing)
		must(t, "Done by the new owner", s.Done(ctx, k, "b", long))
		settled(t, s, k, "c", long, idempotent.StateDone)
	})
	t.Run("DoneTTLExpires", func(t *testing.T) {
		s := newStore(t)
		k := key(t, "")
		begin(t, s, k, "a", long, idempotent.StateAbsent)
		kept := time.Now() // the done entry lives at least until a TTL after this
		must(t, "Done", s.Done(ctx, k, "a", L))
		ended := time.Now().Add(L) // and ends before this
		// As settled, but a done entry read after its TTL is gone.
		for settle := time.Now().Add(cfg.Settle); ; time.Sleep(5 * time.Millisecond) {
			st, err := s.TryBegin(ctx, k, "b", long)
			if err != nil {
				t.Fatalf("TryBegin(%q, %q): %v", k, "b", err)
			}
			if st == idempotent.StateDone {
				break
			}
			if late(t, kept, "the check within the TTL") {
				return
			}
			if st != idempotent.StateProcessing || time.Now().After(settle) {
				t.Fatalf("TryBegin(%q, %q) = %v within the TTL, want done", k, "b", st)
			}
		}
		// What is tested is a time: the TTL has ended (Slack for clocks and
		// the store's own latency).
		time.Sleep(time.Until(ended.Add(cfg.Slack)))
		begin(t, s, k, "b", long, idempotent.StateAbsent)
	})
	t.Run("RacersOneWinner", func(t *testing.T) {
		s := newStore(t)
		for round := range 3 {
			k := key(t, fmt.Sprintf("-r%d", round))
			var won atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make(chan error, cfg.Racers)
			for i := range cfg.Racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					st, err := s.TryBegin(ctx, k, fmt.Sprintf("racer-%d", i), long)
					if err != nil {
						errs <- err
						return
					}
					if st.Acquired() {
						won.Add(1)
					} else if st != idempotent.StateProcessing {
						errs <- fmt.Errorf("racer %d: %v", i, st)
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n := won.Load(); n != 1 {
				t.Fatalf("round %d: %d racers acquired the key, want 1", round, n)
			}
		}
	})
	t.Run("AwkwardKeys", func(t *testing.T) {
		s := newStore(t)
		for _, suffix := range []string{" with spaces", "\x01\x02ctl", "ü-ñ-😀", "-" + strings.Repeat("k", 600)} {
			k := key(t, suffix)
			begin(t, s, k, "a", long, idempotent.StateAbsent)
			must(t, "Done", s.Done(ctx, k, "a", long))
			settled(t, s, k, "b", long, idempotent.StateDone)
			begin(t, s, k+"x", "b", long, idempotent.StateAbsent)
		}
	})
}
