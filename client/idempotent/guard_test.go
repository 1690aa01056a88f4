package idempotent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/client/idempotent"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
)

func msg(id string) *client.MessageExt {
	return &client.MessageExt{
		Message: client.Message{Topic: "T", Body: []byte(id), Properties: map[string]string{"UNIQ_KEY": id}},
		MsgID:   id,
	}
}

func newGuard(t testing.TB, s idempotent.Store, opts ...idempotent.Option) *idempotent.Guard {
	t.Helper()
	g, err := idempotent.New(s, append([]idempotent.Option{idempotent.Logger(testlog.New(t, "guard"))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// counter is a listener that counts its calls per body.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
	fail map[string]int // body → failures left
	hold time.Duration
}

func newCounter() *counter { return &counter{runs: map[string]int{}, fail: map[string]int{}} }

func (c *counter) listen(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
	if c.hold > 0 {
		time.Sleep(c.hold)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res := client.ConsumeSuccess
	for _, m := range msgs {
		c.runs[string(m.Body)]++
		if c.fail[string(m.Body)] > 0 {
			c.fail[string(m.Body)]--
			res = client.ConsumeRetryLater
		}
	}
	return res
}

func (c *counter) get(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[body]
}

func TestDuplicatesRunOnce(t *testing.T) {
	s := idempotent.NewMemoryStore()
	g := newGuard(t, s)
	c := newCounter()
	l := g.Concurrent(c.listen)
	ctx := context.Background()
	for i := range 5 {
		if res := l(ctx, []*client.MessageExt{msg("A")}); res != client.ConsumeSuccess {
			t.Fatalf("delivery %d: %v", i, res)
		}
	}
	// A batch with A again, B twice and C: B runs once, A not at all.
	if res := l(ctx, []*client.MessageExt{msg("A"), msg("B"), msg("B"), msg("C")}); res != client.ConsumeSuccess {
		t.Fatalf("batch: %v", res)
	}
	for body, want := range map[string]int{"A": 1, "B": 1, "C": 1} {
		if got := c.get(body); got != want {
			t.Errorf("%s ran %d times, want %d", body, got, want)
		}
	}
	st := g.Stats()
	if st.Ran != 3 || st.Duplicates != 6 || st.Busy != 0 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	if s, owner, _ := s.Lookup("A"); s != idempotent.StateDone || owner != g.OwnerName() {
		t.Errorf("A is %v held by %q", s, owner)
	}
}

func TestFailureReleasesKey(t *testing.T) {
	s := idempotent.NewMemoryStore()
	g := newGuard(t, s)
	c := newCounter()
	c.fail["A"] = 2
	l := g.Concurrent(c.listen)
	ctx := context.Background()
	for i, want := range []client.ConsumeResult{client.ConsumeRetryLater, client.ConsumeRetryLater, client.ConsumeSuccess, client.ConsumeSuccess} {
		if res := l(ctx, []*client.MessageExt{msg("A")}); res != want {
			t.Fatalf("delivery %d: %v, want %v", i, res, want)
		}
		if i == 0 {
			if st, _, _ := s.Lookup("A"); st != idempotent.StateAbsent {
				t.Fatalf("after a failure the key is %v, want absent", st)
			}
		}
	}
	if got := c.get("A"); got != 3 {
		t.Fatalf("A ran %d times, want 3 (two failures, one success)", got)
	}
	if st := g.Stats(); st.Failed != 2 || st.Ran != 3 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOrderlyVerdicts(t *testing.T) {
	s := idempotent.NewMemoryStore()
	g := newGuard(t, s)
	c := newCounter()
	c.fail["B"] = 1
	l := g.Orderly(c.listen)
	ctx := context.Background()
	batch := []*client.MessageExt{msg("A"), msg("B")}
	if res := l(ctx, batch); res != client.ConsumeSuspend {
		t.Fatalf("first: %v, want suspend", res)
	}
	// The orderly listener failed the whole batch: both keys are released.
	if res := l(ctx, batch); res != client.ConsumeSuccess {
		t.Fatalf("second: %v", res)
	}
	if res := l(ctx, batch); res != client.ConsumeSuccess {
		t.Fatalf("third: %v", res)
	}
	if c.get("A") != 2 || c.get("B") != 2 {
		t.Fatalf("runs %v", c.runs)
	}
	// A key held elsewhere suspends the queue.
	if _, err := s.TryBegin(ctx, "C", "elsewhere", time.Hour); err != nil {
		t.Fatal(err)
	}
	if res := l(ctx, []*client.MessageExt{msg("C")}); res != client.ConsumeSuspend {
		t.Fatalf("busy: %v, want suspend", res)
	}
}

// TestCrashedHolderTakenOver simulates a process that died while consuming: its
// processing entry is never renewed, and the key is taken over after the lease.
func TestCrashedHolderTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := idempotent.NewMemoryStore()
		ctx := context.Background()
		const lease = 200 * time.Millisecond
		if _, err := s.TryBegin(ctx, "A", "dead-process", lease); err != nil {
			t.Fatal(err)
		}
		died := time.Now()
		g := newGuard(t, s)
		c := newCounter()
		l := g.Concurrent(c.listen)
		for {
			res := l(ctx, []*client.MessageExt{msg("A")})
			if res == client.ConsumeSuccess {
				break
			}
			if time.Since(died) > lease+2*time.Second {
				t.Fatal("the abandoned key was never taken over")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if since := time.Since(died); since < lease {
			t.Fatalf("taken over after %v, before the lease (%v) ended", since, lease)
		}
		if c.get("A") != 1 {
			t.Fatalf("A ran %d times", c.get("A"))
		}
		if st := g.Stats(); st.TakenOver != 1 || st.Busy == 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestLeaseRenewedWhileListenerRuns runs a listener for several leases: other
// owners find the key busy all along, then done.
func TestLeaseRenewedWhileListenerRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := idempotent.NewMemoryStore()
		const lease = 600 * time.Millisecond
		g1 := newGuard(t, s, idempotent.Lease(lease), idempotent.RenewEvery(100*time.Millisecond))
		g2 := newGuard(t, s, idempotent.Lease(lease))
		c := newCounter()
		c.hold = 3 * lease
		ctx := context.Background()
		var finished atomic.Bool // the holder's listener has returned
		holder := g1.Concurrent(func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			defer finished.Store(true)
			return c.listen(ctx, msgs)
		})
		done := make(chan client.ConsumeResult)
		go func() { done <- holder(ctx, []*client.MessageExt{msg("A")}) }()
		other := g2.Concurrent(newCounter().listen)
		time.Sleep(10 * time.Millisecond)
		busy := 0
		for running := true; running; {
			select {
			case res := <-done:
				if res != client.ConsumeSuccess {
					t.Fatalf("listener: %v", res)
				}
				running = false
			case <-time.After(30 * time.Millisecond):
				res := other(ctx, []*client.MessageExt{msg("A")})
				if res == client.ConsumeSuccess && finished.Load() {
					continue // the holder has just completed
				}
				if res != client.ConsumeRetryLater {
					t.Fatalf("the other owner got %v while the key was held", res)
				}
				busy++
			}
		}
		if busy < 10 {
			t.Fatalf("only %d busy probes", busy)
		}
		if res := other(ctx, []*client.MessageExt{msg("A")}); res != client.ConsumeSuccess {
			t.Fatalf("after completion: %v", res)
		}
		if st := g2.Stats(); st.Duplicates < 1 || st.Ran != 0 {
			t.Fatalf("other's stats %+v", st)
		}
		if st := g1.Stats(); st.LeaseLost != 0 || st.StoreErrors != 0 {
			t.Fatalf("holder's stats %+v", st)
		}
	})
}

// stealingStore loses every lease at its first renewal.
type stealingStore struct {
	*idempotent.MemoryStore
	renewals atomic.Int32
}

func (s *stealingStore) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	s.renewals.Add(1)
	if err := s.MemoryStore.Release(ctx, key, owner); err != nil {
		return err
	}
	if _, err := s.MemoryStore.TryBegin(ctx, key, "thief", time.Hour); err != nil {
		return err
	}
	return s.MemoryStore.Renew(ctx, key, owner, lease)
}

func TestLeaseLostCancelsListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &stealingStore{MemoryStore: idempotent.NewMemoryStore()}
		g := newGuard(t, s, idempotent.Lease(time.Second), idempotent.RenewEvery(20*time.Millisecond))
		var cause error
		l := g.Concurrent(func(ctx context.Context, _ []*client.MessageExt) client.ConsumeResult {
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
			case <-time.After(5 * time.Second):
			}
			return client.ConsumeSuccess
		})
		if res := l(context.Background(), []*client.MessageExt{msg("A")}); res != client.ConsumeSuccess {
			t.Fatalf("result %v", res)
		}
		if !errors.Is(cause, idempotent.ErrLeaseLost) {
			t.Fatalf("listener context cause %v, want ErrLeaseLost", cause)
		}
		if st := g.Stats(); st.LeaseLost != 1 || st.DoneErrors != 1 {
			t.Fatalf("stats %+v", st)
		}
		if st, owner, _ := s.Lookup("A"); st != idempotent.StateProcessing || owner != "thief" {
			t.Fatalf("A is %v held by %q, want the thief's", st, owner)
		}
	})
}

func TestDoneTTLExpiryRunsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := idempotent.NewMemoryStore()
		g := newGuard(t, s, idempotent.DoneTTL(time.Second))
		c := newCounter()
		l := g.Concurrent(c.listen)
		ctx := context.Background()
		l(ctx, []*client.MessageExt{msg("A")})
		l(ctx, []*client.MessageExt{msg("A")})
		if c.get("A") != 1 {
			t.Fatalf("A ran %d times within the TTL", c.get("A"))
		}
		time.Sleep(1200 * time.Millisecond)
		l(ctx, []*client.MessageExt{msg("A")})
		if c.get("A") != 2 {
			t.Fatalf("A ran %d times, want 2 after the TTL", c.get("A"))
		}
	})
}

// TestConcurrentDuplicates delivers one key from many goroutines at once, each
// retrying until its delivery is acknowledged, across two Guards (two processes)
// sharing a store: the listener runs once.
func TestConcurrentDuplicates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := idempotent.NewMemoryStore()
		guards := []*idempotent.Guard{newGuard(t, s), newGuard(t, s)}
		c := newCounter()
		c.hold = 20 * time.Millisecond
		ctx := context.Background()
		for _, key := range []string{"K1", "K2", "K3"} {
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 16 {
				l := guards[i%2].Concurrent(c.listen)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					// Redelivered until acknowledged (virtual time: the bubble's).
					if err := wait.Poll(wait.DefaultTimeout, func() error {
						if res := l(ctx, []*client.MessageExt{msg(key)}); res != client.ConsumeSuccess {
							return fmt.Errorf("the listener answered %v", res)
						}
						return nil
					}); err != nil {
						t.Errorf("%s never acknowledged: %v", key, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if got := c.get(key); got != 1 {
				t.Fatalf("%s ran %d times, want 1", key, got)
			}
		}
		var busy int64
		for _, g := range guards {
			busy += g.Stats().Busy
		}
		if busy == 0 {
			t.Fatal("no delivery found its key busy")
		}
	})
}

func TestPanicReleasesKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := idempotent.NewMemoryStore()
		g := newGuard(t, s, idempotent.RenewEvery(time.Millisecond), idempotent.Lease(time.Second))
		boom := g.Concurrent(func(context.Context, []*client.MessageExt) client.ConsumeResult {
			time.Sleep(5 * time.Millisecond) // let renewals tick
			panic("boom")
		})
		func() {
			defer func() {
				if v := recover(); v != "boom" {
					t.Fatalf("recovered %v, want the listener's panic", v)
				}
			}()
			boom(context.Background(), []*client.MessageExt{msg("A")})
		}()
		if st, _, _ := s.Lookup("A"); st != idempotent.StateAbsent {
			t.Fatalf("after a panic the key is %v, want absent", st)
		}
		c := newCounter()
		if res := g.Concurrent(c.listen)(context.Background(), []*client.MessageExt{msg("A")}); res != client.ConsumeSuccess || c.get("A") != 1 {
			t.Fatalf("redelivery after the panic: %v, ran %d", res, c.get("A"))
		}
	})
}

// failingStore fails every TryBegin.
type failingStore struct{ idempotent.Store }

func (failingStore) TryBegin(context.Context, string, string, time.Duration) (idempotent.State, error) {
	return 0, errors.New("store down")
}

func TestStoreErrorRetriesWithoutRunning(t *testing.T) {
	g := newGuard(t, failingStore{idempotent.NewMemoryStore()})
	c := newCounter()
	if res := g.Concurrent(c.listen)(context.Background(), []*client.MessageExt{msg("A")}); res != client.ConsumeRetryLater {
		t.Fatalf("result %v", res)
	}
	if c.get("A") != 0 || g.Stats().StoreErrors != 1 {
		t.Fatalf("ran %d, stats %+v", c.get("A"), g.Stats())
	}
}

func TestKeyFuncs(t *testing.T) {
	m := msg("ID1")
	m.Keys = []string{"order-7", "customer-3"}
	m.Properties["biz"] = "B9"
	noUniq := &client.MessageExt{MsgID: "OFFSETID", Message: client.Message{Properties: map[string]string{}}}
	for _, tc := range []struct {
		name string
		fn   idempotent.KeyFunc
		m    *client.MessageExt
		want string
	}{
		{"ByMsgID", idempotent.ByMsgID(), m, "ID1"},
		{"ByMsgID/offset id", idempotent.ByMsgID(), noUniq, "OFFSETID"},
		{"ByFirstKey", idempotent.ByFirstKey(), m, "order-7"},
		{"ByFirstKey/none", idempotent.ByFirstKey(), noUniq, ""},
		{"ByProperty", idempotent.ByProperty("biz"), m, "B9"},
		{"ByProperty/none", idempotent.ByProperty("biz"), noUniq, ""},
	} {
		if got := tc.fn(tc.m); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestUnguardedAndBusinessKeys(t *testing.T) {
	s := idempotent.NewMemoryStore()
	g := newGuard(t, s, idempotent.KeyBy(idempotent.ByFirstKey()))
	c := newCounter()
	l := g.Concurrent(c.listen)
	ctx := context.Background()
	// Two sends of one order (different message ids, same key) run once; a message
	// without keys runs every time.
	a, b := msg("order-1/send-1"), msg("order-1/send-2")
	a.Keys, b.Keys = []string{"order-1"}, []string{"order-1"}
	l(ctx, []*client.MessageExt{a})
	l(ctx, []*client.MessageExt{b})
	l(ctx, []*client.MessageExt{msg("nokey")})
	l(ctx, []*client.MessageExt{msg("nokey")})
	if c.get("order-1/send-1")+c.get("order-1/send-2") != 1 || c.get("nokey") != 2 {
		t.Fatalf("runs %v", c.runs)
	}
	if st := g.Stats(); st.Unguarded != 2 || st.Ran != 1 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := idempotent.New(nil, idempotent.Lease(-1), idempotent.DoneTTL(0), idempotent.StoreTimeout(-1))
	if !errors.Is(err, idempotent.ErrConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"store is nil", "Lease", "RenewEvery", "DoneTTL", "StoreTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := idempotent.New(idempotent.NewMemoryStore(), idempotent.Lease(time.Second), idempotent.RenewEvery(time.Second)); !errors.Is(err, idempotent.ErrConfig) {
		t.Fatalf("RenewEvery = lease accepted: %v", err)
	}
	g, err := idempotent.New(idempotent.NewMemoryStore(), idempotent.Owner("me"))
	if err != nil || g.OwnerName() != "me" {
		t.Fatalf("New: %v, owner %q", err, g.OwnerName())
	}
	g, _ = idempotent.New(idempotent.NewMemoryStore())
	g2, _ := idempotent.New(idempotent.NewMemoryStore())
	if g.OwnerName() == g2.OwnerName() || g.OwnerName() == "" {
		t.Fatalf("default owners %q and %q", g.OwnerName(), g2.OwnerName())
	}
}

func TestStateStrings(t *testing.T) {
	for s, want := range map[idempotent.State]string{
		idempotent.StateAbsent: "absent", idempotent.StateExpired: "expired",
		idempotent.StateProcessing: "processing", idempotent.StateDone: "done", 9: "State(9)",
	} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
	if !idempotent.StateAbsent.Acquired() || !idempotent.StateExpired.Acquired() || idempotent.StateDone.Acquired() || idempotent.StateProcessing.Acquired() {
		t.Error("Acquired")
	}
}
