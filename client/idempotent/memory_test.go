package idempotent_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client/idempotent"
	"github.com/apogeemq/apogee/client/idempotent/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Config{Lease: 300 * time.Millisecond, Slack: 100 * time.Millisecond, ReportsExpired: true, Racers: 32},
		func(*testing.T) idempotent.Store { return idempotent.NewMemoryStore() })
}

// fakeClock is a settable clock for MemoryClock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestMemoryStoreStateMachine walks one key through every transition with a fake
// clock, checking what TryBegin finds and what Lookup shows at each step.
func TestMemoryStoreStateMachine(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := idempotent.NewMemoryStore(idempotent.MemoryClock(clk.now))
	ctx := context.Background()
	const k = "order-1"
	type step struct {
		name      string
		do        func() (idempotent.State, error)
		wantState idempotent.State // for TryBegin steps
		wantErr   error
		look      idempotent.State // Lookup afterwards
		lookOwner string
	}
	begin := func(owner string, lease time.Duration) func() (idempotent.State, error) {
		return func() (idempotent.State, error) { return s.TryBegin(ctx, k, owner, lease) }
	}
	noState := func(err error) (idempotent.State, error) { return 255, err }
	steps := []step{
		{name: "absent→processing", do: begin("a", 10*time.Second), wantState: idempotent.StateAbsent, look: idempotent.StateProcessing, lookOwner: "a"},
		{name: "busy for b", do: begin("b", 10*time.Second), wantState: idempotent.StateProcessing, look: idempotent.StateProcessing, lookOwner: "a"},
		{name: "9s later a renews", do: func() (idempotent.State, error) {
			clk.advance(9 * time.Second)
			return noState(s.Renew(ctx, k, "a", 10*time.Second))
		}, wantState: 255, look: idempotent.StateProcessing, lookOwner: "a"},
		{name: "9s later still a's", do: func() (idempotent.State, error) {
			clk.advance(9 * time.Second)
			return s.TryBegin(ctx, k, "b", time.Second)
		},
			wantState: idempotent.StateProcessing, look: idempotent.StateProcessing, lookOwner: "a"},
		{name: "lease expires: b takes over", do: func() (idempotent.State, error) {
			clk.advance(2 * time.Second)
			return s.TryBegin(ctx, k, "b", 10*time.Second)
		},
			wantState: idempotent.StateExpired, look: idempotent.StateProcessing, lookOwner: "b"},
		{name: "a's renewal fails", do: func() (idempotent.State, error) { return noState(s.Renew(ctx, k, "a", time.Second)) },
			wantState: 255, wantErr: idempotent.ErrNotOwner, look: idempotent.StateProcessing, lookOwner: "b"},
		{name: "a's done refused", do: func() (idempotent.State, error) { return noState(s.Done(ctx, k, "a", time.Hour)) },
			wantState: 255, wantErr: idempotent.ErrNotOwner, look: idempotent.StateProcessing, lookOwner: "b"},
		{name: "b fails and releases", do: func() (idempotent.State, error) { return noState(s.Release(ctx, k, "b")) },
			wantState: 255, look: idempotent.StateAbsent},
		{name: "c begins", do: begin("c", 10*time.Second), wantState: idempotent.StateAbsent, look: idempotent.StateProcessing, lookOwner: "c"},
		{name: "c completes", do: func() (idempotent.State, error) { return noState(s.Done(ctx, k, "c", time.Hour)) },
			wantState: 255, look: idempotent.StateDone, lookOwner: "c"},
		{name: "duplicate", do: begin("d", 10*time.Second), wantState: idempotent.StateDone, look: idempotent.StateDone, lookOwner: "c"},
		{name: "TTL ends", do: func() (idempotent.State, error) { clk.advance(time.Hour); return s.TryBegin(ctx, k, "d", time.Second) },
			wantState: idempotent.StateAbsent, look: idempotent.StateProcessing, lookOwner: "d"},
		{name: "d dies; its late Done still counts", do: func() (idempotent.State, error) {
			clk.advance(5 * time.Second)
			return noState(s.Done(ctx, k, "d", time.Hour))
		}, wantState: 255, look: idempotent.StateDone, lookOwner: "d"},
	}
	for _, st := range steps {
		got, err := st.do()
		if !errors.Is(err, st.wantErr) || (st.wantErr == nil && err != nil) {
			t.Fatalf("%s: err = %v, want %v", st.name, err, st.wantErr)
		}
		if got != st.wantState {
			t.Fatalf("%s: state = %v, want %v", st.name, got, st.wantState)
		}
		if ls, lo, _ := s.Lookup(k); ls != st.look || lo != st.lookOwner {
			t.Fatalf("%s: Lookup = %v/%q, want %v/%q", st.name, ls, lo, st.look, st.lookOwner)
		}
	}
}

// TestMemoryStoreSweeps checks that expired entries do not accumulate.
func TestMemoryStoreSweeps(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := idempotent.NewMemoryStore(idempotent.MemoryClock(clk.now))
	ctx := context.Background()
	for round := range 20 {
		for i := range 1000 {
			k := fmt.Sprintf("r%d-%d", round, i)
			if _, err := s.TryBegin(ctx, k, "a", time.Second); err != nil {
				t.Fatal(err)
			}
			if err := s.Done(ctx, k, "a", time.Second); err != nil {
				t.Fatal(err)
			}
		}
		clk.advance(2 * time.Second)
	}
	// Each round's 1000 entries expire before the next; a shard is swept when it
	// doubles, so about two rounds' worth remain at most.
	if n := s.Len(); n > 2500 {
		t.Fatalf("Len = %d after 20 rounds of 1000 expiring keys", n)
	}
}
