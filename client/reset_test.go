package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
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
	wait.For(t, "12 messages consumed once", func() error {
		if d, n := count(); d != 12 || n != 12 {
			return fmt.Errorf("%d distinct, %d deliveries", d, n)
		}
		return nil
	})
	// The consumer's commits reach the broker before the reset, so a stale
	// commit after it would show.
	wait.For(t, "the consumer's offsets committed", func() error {
		var sum int64
		for q := range int32(client.DefaultCreateTopicQueueNums) {
			sum += max(brokerOffset(t, addr, group, topic, q), 0)
		}
		if sum != 12 {
			return fmt.Errorf("committed offsets sum to %d of 12", sum)
		}
		return nil
	})
	a := realAdmin(t, addr)
	if _, err := a.ResetOffsetByTime(ctx, group, topic, time.UnixMilli(0)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "every message consumed again after the reset", func() error {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < 12; i++ {
			if n := seen[fmt.Sprintf("m-%d", i)]; n < 2 {
				return fmt.Errorf("m-%d consumed %d times", i, n)
			}
		}
		return nil
	})
}
