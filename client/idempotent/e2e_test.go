package idempotent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/client/idempotent"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
)

// TestPushConsumerDuplicates runs the Guard in the client's push consumer against
// an in-process broker. Every message is sent twice with the same UNIQ_KEY (what
// a producer does when it retries a send whose acknowledgement was lost); one
// message fails once and is redelivered through the retry topic. Each runs once
// (the failing one twice), with the memory store and with the broker store, one
// message per listener call and eight.
func TestPushConsumerDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	addr := startBroker(t)
	for _, tc := range []struct {
		name  string
		store func(t *testing.T, group string) idempotent.Store
		batch int
	}{
		{"memory/batch1", func(*testing.T, string) idempotent.Store { return idempotent.NewMemoryStore() }, 1},
		{"broker/batch1", func(t *testing.T, g string) idempotent.Store { return newBrokerStore(t, addr, g) }, 1},
		{"broker/batch8", func(t *testing.T, g string) idempotent.Store { return newBrokerStore(t, addr, g) }, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := fmt.Sprintf("e2e-%d", instances.Add(1))
			topic := "IdemE2E" + group[4:]
			runPushDuplicates(t, addr, topic, group, tc.store(t, group), tc.batch)
		})
	}
}

func runPushDuplicates(t *testing.T, addr, topic, group string, store idempotent.Store, batch int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 40
	const failing = "m-7"

	g := newGuard(t, store, idempotent.BusyDelayLevel(1), idempotent.Lease(5*time.Second))
	var mu sync.Mutex
	runs := map[string]int{}
	succeeded := map[string]bool{}
	allDone := make(chan struct{})
	handler := func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		mu.Lock()
		defer mu.Unlock()
		cc := client.ConsumeContextFrom(ctx)
		for i, m := range msgs {
			id := string(m.Body)
			if id == "warmup" {
				// In a batch with others (batch > 1): not one of the n.
				continue
			}
			runs[id]++
			if id == failing && runs[id] == 1 {
				// Fail this one: the ones before it are consumed, it and the rest
				// are retried (after 1 s).
				cc.AckIndex, cc.DelayLevel = i-1, 1
				return client.ConsumeRetryLater
			}
			succeeded[id] = true
		}
		if len(succeeded) == n {
			select {
			case <-allDone:
			default:
				close(allDone)
			}
		}
		return client.ConsumeSuccess
	}

	p, err := client.NewProducer(client.NameServer(addr), client.InstanceName(group+"-p"), client.Logger(testlog.New(t, "producer")))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	send := func(id string) {
		m := &client.Message{Topic: topic, Body: []byte(id), Properties: map[string]string{"UNIQ_KEY": "UNIQ-" + group + "-" + id}}
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
	}
	send("warmup") // creates the topic
	c, err := client.NewPushConsumer(
		client.NameServer(addr), client.InstanceName(group+"-c"), client.Logger(testlog.New(t, "consumer")),
		client.ConsumerGroup(group), client.Subscribe(topic, "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.ConsumeBatchSize(batch), client.PullBatchSize(32),
		client.WithConcurrentListener(g.Concurrent(func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			if len(msgs) == 1 && string(msgs[0].Body) == "warmup" {
				return client.ConsumeSuccess
			}
			return handler(ctx, msgs)
		})),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())

	// Each message twice, the copies far apart for half of them and back to back
	// for the other half (so that some duplicates share a pull, or a batch).
	for i := range n / 2 {
		send(fmt.Sprintf("m-%d", i))
	}
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		if i >= n/2 {
			send(id)
		}
		send(id)
	}
	select {
	case <-allDone:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("not every message was consumed: %d of %d; runs %v; stats %+v", len(succeeded), n, runs, g.Stats())
		mu.Unlock()
	}
	// The duplicates still in flight (those found busy come back after 1 s)
	// arrive, and the consumer reads everything the broker holds for it: the
	// topic's and the retry topic's queues all consumed.
	wait.For(t, "every second copy skipped as a duplicate", func() error {
		if st := g.Stats(); st.Duplicates < n {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	wait.For(t, "the consumer caught up", func() error {
		lags, err := c.Lag(ctx)
		if err != nil {
			return err
		}
		for _, l := range lags {
			if l.Lag != 0 || l.Cached != 0 {
				return fmt.Errorf("%v: %+v", l.Queue, l)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		want := 1
		if id == failing {
			want = 2
		}
		if runs[id] != want {
			t.Errorf("%s ran %d times, want %d", id, runs[id], want)
		}
	}
	st := g.Stats()
	if st.Duplicates < n {
		t.Errorf("%d duplicates skipped, want at least %d; stats %+v", st.Duplicates, n, st)
	}
	t.Logf("stats %+v; consumer %+v", st, c.Stats())
}
