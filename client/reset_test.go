package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
)

// TestRunningConsumerFollowsReset resets a group's offsets to the start while
// its push consumer runs: the broker pushes RESET_CONSUMER_CLIENT_OFFSET (220)
// and the consumer receives every message a second time.
func TestRunningConsumerFollowsReset(t *testing.T) {
	addr := startBroker(t)
	ctx := ctxT(t)
	const topic, group = "RST-LIVE", "rst-live"
	p := realProducer(t, addr)
	for i := 0; i < 12; i++ {
		if _, err := p.SendSync(ctx, &client.Message{Topic: topic, Body: []byte(fmt.Sprintf("m-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	count := func() (distinct, total int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range seen {
			distinct++
			total += n
		}
		return
	}
	c := realPush(t, addr, client.ConsumerGroup(group), client.Subscribe(topic, "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				seen[string(m.Body)]++
			}
			return client.ConsumeSuccess
		}))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "12 messages consumed once", func() bool {
		d, n := count()
		return d == 12 && n == 12
	})
	// Let the consumer commit before the reset, so a stale commit would show.
	time.Sleep(300 * time.Millisecond)
	a := realAdmin(t, addr)
	if _, err := a.ResetOffsetByTime(ctx, group, topic, time.UnixMilli(0)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "every message consumed again after the reset", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < 12; i++ {
			if seen[fmt.Sprintf("m-%d", i)] < 2 {
				return false
			}
		}
		return true
	})
}
