package idempotent_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/client/idempotent"
	"github.com/apogeemq/apogee/client/idempotent/storetest"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
)

// startBroker runs an Apogee broker in this process on a loopback port and
// returns its address (which also answers name-server requests).
func startBroker(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{Core: core.Options{DataDir: t.TempDir(), AdvertiseAddr: l.Addr().String(), Logger: testlog.New(t, "broker")}})
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("broker shutdown: %v", err)
		}
	})
	return l.Addr().String()
}

var instances atomic.Int64

// newBrokerStore opens a BrokerStore of group on the broker at addr, as a process
// of its own would (its own client instance).
func newBrokerStore(t testing.TB, addr, group string, opts ...idempotent.BrokerOption) *idempotent.BrokerStore {
	t.Helper()
	opts = append([]idempotent.BrokerOption{
		idempotent.BrokerNameServer(addr), idempotent.BrokerLogger(testlog.New(t, "broker-store")),
		idempotent.BrokerProducerOptions(client.InstanceName(fmt.Sprintf("idem-%d", instances.Add(1))), client.Logger(testlog.New(t, "broker-store-producer"))),
	}, opts...)
	s, err := idempotent.NewBrokerStore(group, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

func TestBrokerStoreConformance(t *testing.T) {
	addr := startBroker(t)
	var n atomic.Int64
	storetest.Run(t, storetest.Config{Lease: 500 * time.Millisecond, Slack: 300 * time.Millisecond, ReportsExpired: true, BlindWrites: true, Settle: 2 * time.Second},
		func(t *testing.T) idempotent.Store {
			return newBrokerStore(t, addr, fmt.Sprintf("conformance-%d", n.Add(1)))
		})
}

// TestBrokerStoreProcessesRace has several stores, each with its own producer
// and connections like separate processes, race on keys: exactly one wins each,
// and all of them read the same state afterwards.
func TestBrokerStoreProcessesRace(t *testing.T) {
	addr := startBroker(t)
	const procs = 4
	stores := make([]*idempotent.BrokerStore, procs)
	for i := range stores {
		stores[i] = newBrokerStore(t, addr, "race")
	}
	ctx := context.Background()
	for round := range 10 {
		key := fmt.Sprintf("order-%d", round)
		var won atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				owner := fmt.Sprintf("proc-%d", i)
				st, err := s.TryBegin(ctx, key, owner, time.Minute)
				if err != nil {
					t.Errorf("%s: %v", owner, err)
					return
				}
				if st.Acquired() {
					won.Add(1)
					winner.Store(owner)
				}
			}()
		}
		close(start)
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("round %d: %d winners", round, won.Load())
		}
		for i, s := range stores {
			st, owner, _, err := s.Lookup(ctx, key)
			if err != nil || st != idempotent.StateProcessing || owner != winner.Load() {
				t.Fatalf("round %d: store %d reads %v/%q (%v), want processing by %v", round, i, st, owner, err, winner.Load())
			}
		}
	}
}

// deliver delivers m to l until it is acknowledged, as the consumer would
// redeliver a message its listener asked to retry.
func deliver(t *testing.T, l client.ConcurrentListener, m *client.MessageExt) {
	t.Helper()
	wait.For(t, "an acknowledged delivery of "+string(m.Body), func() error {
		if res := l(context.Background(), []*client.MessageExt{m}); res != client.ConsumeSuccess {
			return fmt.Errorf("the listener answered %v", res)
		}
		return nil
	})
}

// TestBrokerStoreGuard runs the Guard over a BrokerStore: duplicates across two
// "processes" run once, a failure releases, and a crashed holder is taken over.
func TestBrokerStoreGuard(t *testing.T) {
	addr := startBroker(t)
	s1, s2 := newBrokerStore(t, addr, "guard"), newBrokerStore(t, addr, "guard")
	g1 := newGuard(t, s1, idempotent.Lease(time.Second), idempotent.RenewEvery(200*time.Millisecond))
	g2 := newGuard(t, s2, idempotent.Lease(time.Second), idempotent.RenewEvery(200*time.Millisecond))
	c := newCounter()
	c.fail["F"] = 1
	l1, l2 := g1.Concurrent(c.listen), g2.Concurrent(c.listen)
	ctx := context.Background()

	// The done record becomes visible a moment after the first delivery: a
	// duplicate arriving meanwhile is retried, as the consumer would.
	for _, l := range []client.ConcurrentListener{l1, l2, l1, l2} {
		deliver(t, l, msg("A"))
	}
	if c.get("A") != 1 {
		t.Fatalf("A ran %d times", c.get("A"))
	}

	if res := l1(ctx, []*client.MessageExt{msg("F")}); res != client.ConsumeRetryLater {
		t.Fatalf("failing F: %v", res)
	}
	deliver(t, l2, msg("F"))
	if c.get("F") != 2 {
		t.Fatalf("F after release ran %d times", c.get("F"))
	}

	// A process that died holding C: its lease ends, and C is taken over.
	const lease = time.Second
	held := time.Now() // the lease ends no sooner than a lease after this
	if _, err := s1.TryBegin(ctx, "C", "dead", lease); err != nil {
		t.Fatal(err)
	}
	if res := l2(ctx, []*client.MessageExt{msg("C")}); res != client.ConsumeRetryLater {
		t.Fatalf("C while held: %v", res)
	}
	deliver(t, l2, msg("C"))
	if since := time.Since(held); since < lease {
		t.Fatalf("C taken over %v after it was taken, before its lease (%v) ended", since, lease)
	}
	if c.get("C") != 1 {
		t.Fatalf("C after the lease ran %d times", c.get("C"))
	}
	if st := g2.Stats(); st.TakenOver != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBrokerStoreConfig(t *testing.T) {
	t.Setenv("NAMESRV_ADDR", "")
	_, err := idempotent.NewBrokerStore("", idempotent.BrokerRequestTimeout(0))
	if err == nil {
		t.Fatal("no error")
	}
	for _, bad := range []string{"has space", "ü", string(make([]byte, 200))} {
		if _, err := idempotent.NewBrokerStore("g", idempotent.BrokerNameServer("127.0.0.1:1"), idempotent.BrokerTopic(bad)); err == nil {
			t.Errorf("topic %q accepted", bad)
		}
	}
	s, err := idempotent.NewBrokerStore("g", idempotent.BrokerNameServer("127.0.0.1:1"), idempotent.BrokerProducerOptions(client.InstanceName("cfg"), client.Logger(testlog.New(t, "producer"))))
	if err != nil {
		t.Fatal(err)
	}
	if s.Topic() != "%IDEMPOTENT%g" {
		t.Fatalf("topic %q", s.Topic())
	}
	s.Close(context.Background())
	if _, err := s.TryBegin(context.Background(), "k", "o", time.Second); err != idempotent.ErrClosed {
		t.Fatalf("after Close: %v", err)
	}
}
