package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
)

func newPull(t testing.TB, addr string, opts ...client.PullConsumerOpt) *client.PullConsumer {
	t.Helper()
	all := append([]client.PullConsumerOpt{client.NameServer(addr), uniqueInstance(t),
		client.RebalanceInterval(300 * time.Millisecond), client.CommitInterval(100 * time.Millisecond),
		client.LongPollTimeout(2 * time.Second)}, opts...)
	c, err := client.NewPullConsumer(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// pollUntil polls until n distinct bodies arrived (Poll blocks until
// messages come; the bound is the wait helper's, for a loaded machine).
func pollUntil(t testing.TB, c *client.PullConsumer, n int) []*client.MessageExt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	var out []*client.MessageExt
	seen := map[string]bool{}
	for len(seen) < n {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d of %d: %v", len(seen), n, err)
		}
		for _, m := range msgs {
			seen[string(m.Body)] = true
		}
		out = append(out, msgs...)
	}
	return out
}

func testPullConsumer(t *testing.T, addr string, producer *client.Producer, offset func(group, topic string, q int32) int64) {
	ctx := ctxT(t)
	t.Run("subscribe poll commit restart", func(t *testing.T) {
		sendN(t, producer, "PS", 0, 40, nil)
		c := newPull(t, addr, client.ConsumerGroup("pull-s"), client.Subscribe("PS", "*"),
			client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.AutoCommit(false))
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		got := pollUntil(t, c, 40)
		perQueue := map[int32]int64{}
		for _, m := range got {
			if m.QueueOffset < perQueue[m.Queue.QueueID] {
				t.Fatalf("queue %d out of order", m.Queue.QueueID)
			}
			perQueue[m.Queue.QueueID] = m.QueueOffset + 1
		}
		if err := c.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var sum int64
		for q := int32(0); q < 4; q++ {
			sum += offset("pull-s", "PS", q)
		}
		if sum != 40 {
			t.Fatalf("committed offsets sum to %d, want 40", sum)
		}
		c.Close(ctx)
		sendN(t, producer, "PS", 40, 10, nil)
		c2 := newPull(t, addr, client.ConsumerGroup("pull-s"), client.Subscribe("PS", "*"), client.WithConsumeFrom(client.ConsumeFromFirstOffset))
		if err := c2.Start(ctx); err != nil {
			t.Fatal(err)
		}
		again := pollUntil(t, c2, 10)
		for _, m := range again {
			var i int
			fmt.Sscanf(string(m.Body), "PS-%d", &i)
			if i < 40 {
				t.Fatalf("committed message %s polled again after restart", m.Body)
			}
		}
	})
	t.Run("assign seek", func(t *testing.T) {
		sendN(t, producer, "PA", 0, 20, nil)
		c := newPull(t, addr, client.ConsumerGroup("pull-a"), client.WithConsumeFrom(client.ConsumeFromFirstOffset))
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		qs, err := c.Queues(ctx, "PA")
		if err != nil || len(qs) != 4 {
			t.Fatalf("queues %v %v", qs, err)
		}
		if err := c.Assign(ctx, qs[:1]); err != nil {
			t.Fatal(err)
		}
		got := pollUntil(t, c, 5) // 20 messages round robin over 4 queues
		for _, m := range got {
			if m.Queue.QueueID != qs[0].QueueID {
				t.Fatalf("message from unassigned queue %v", m.Queue)
			}
		}
		if err := c.Seek(qs[0], 2); err != nil {
			t.Fatal(err)
		}
		msgs := pollUntil(t, c, 3)
		if msgs[0].QueueOffset != 2 {
			t.Fatalf("after seek to 2, first offset %d", msgs[0].QueueOffset)
		}
		// Seek by time: everything in the queue is older than now.
		if err := c.SeekToTimestamp(ctx, qs[0], time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := c.Seek(client.MessageQueue{Topic: "PA", BrokerName: "x", QueueID: 9}, 0); !errors.Is(err, client.ErrNotAssigned) {
			t.Fatalf("seek on an unassigned queue: %v", err)
		}
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if msgs, err := c.Poll(pctx); err == nil {
			t.Fatalf("poll after seeking to the end returned %d messages", len(msgs))
		}
		if err := c.Assign(ctx, qs); err != nil {
			t.Fatal(err)
		}
		if n := len(c.Assignment()); n != 4 {
			t.Fatalf("assignment %d queues", n)
		}
	})
}

func TestPullConsumerFake(t *testing.T) {
	b := newFakeBroker(t)
	p := newProducer(t, b)
	testPullConsumer(t, b.addr, p, func(g, topic string, q int32) int64 { o, _ := b.offset(g, topic, q); return o })
}
