package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

func realAdmin(t testing.TB, addr string, opts ...client.AdminOpt) *client.Admin {
	t.Helper()
	a, err := client.NewAdmin(append([]client.AdminOpt{client.NameServer(addr), uniqueInstance(t), client.Logger(testlog.New(t, "admin"))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

func TestAdminOptions(t *testing.T) {
	t.Setenv("NAMESRV_ADDR", "")
	if _, err := client.NewAdmin(); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("no name server: %v, want ErrConfig", err)
	}
	if _, err := client.NewAdmin(client.NameServer("127.0.0.1:1"), client.RequestTimeout(-1)); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("negative timeout: %v, want ErrConfig", err)
	}
	a, err := client.NewAdmin(client.NameServer("127.0.0.1:1"), uniqueInstance(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := a.QueryMessages(ctx, "T", "k", time.Time{}, time.Now(), 0); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("max 0: %v", err)
	}
	if _, err := a.ViewMessage(ctx, "not-an-id"); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("bad id: %v", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if _, err := a.QueryByUniqueKey(ctx, "T", "x"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// TestAdminQueryAndView sends messages through a real broker and finds them by
// key, by unique key and by offset message id.
func TestAdminQueryAndView(t *testing.T) {
	addr := startBroker(t)
	ctx := ctxT(t)
	p := realProducer(t, addr)
	a := realAdmin(t, addr)
	const topic, other = "ADM-Q", "ADM-Q-OTHER"
	start := time.Now().Add(-time.Second)

	var results []client.SendResult
	for i := 0; i < 12; i++ {
		keys := []string{fmt.Sprintf("k-%d", i)}
		if i%4 == 0 {
			keys = append(keys, "order-7")
		}
		r, err := p.SendSync(ctx, &client.Message{Topic: topic, Keys: keys, Body: []byte(fmt.Sprintf("body-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	// The same key in another topic is not found in this one.
	if _, err := p.SendSync(ctx, &client.Message{Topic: other, Keys: []string{"order-7"}, Body: []byte("other")}); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(time.Second)

	var got []*client.MessageExt
	wait.For(t, "the index to hold the keys", func() error {
		var err error
		got, err = a.QueryMessages(ctx, topic, "order-7", start, end, client.MaxQueryMessages)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			return fmt.Errorf("%d of 3 messages found", len(got))
		}
		return nil
	})
	want := map[string]bool{"body-0": true, "body-4": true, "body-8": true}
	for i, m := range got {
		if !want[string(m.Body)] || m.Topic != topic || m.Queue == nil || m.Queue.BrokerName == "" {
			t.Fatalf("query by key: got %v (%q)", m, m.Body)
		}
		delete(want, string(m.Body))
		if i > 0 && m.StoreTimestamp.After(got[i-1].StoreTimestamp) {
			t.Fatalf("not newest first: %v after %v", m.StoreTimestamp, got[i-1].StoreTimestamp)
		}
	}
	if got, err := a.QueryMessages(ctx, topic, "order-7", start, end, 2); err != nil || len(got) != 2 {
		t.Fatalf("max 2: %d messages, %v", len(got), err)
	}
	if got, err := a.QueryMessages(ctx, topic, "k-5", start, end, 8); err != nil || len(got) != 1 || string(got[0].Body) != "body-5" {
		t.Fatalf("k-5: %v, %v", got, err)
	}
	if got, err := a.QueryMessages(ctx, topic, "no-such-key", start, end, 8); err != nil || len(got) != 0 {
		t.Fatalf("missing key: %v, %v", got, err)
	}
	// Outside the time range.
	if got, err := a.QueryMessages(ctx, topic, "order-7", end.Add(time.Hour), end.Add(2*time.Hour), 8); err != nil || len(got) != 0 {
		t.Fatalf("later range: %v, %v", got, err)
	}
	// A producer's unique id is not a key for QueryMessages' re-check.
	if got, err := a.QueryMessages(ctx, topic, results[3].MsgID(), start, end, 8); err != nil || len(got) != 0 {
		t.Fatalf("unique id as key: %v, %v", got, err)
	}

	for _, i := range []int{3, 11} {
		r := results[i]
		m, err := a.QueryByUniqueKey(ctx, topic, r.MsgID())
		if err != nil {
			t.Fatalf("unique key %s: %v", r.MsgID(), err)
		}
		if string(m.Body) != fmt.Sprintf("body-%d", i) || m.MsgID != r.MsgID() || m.QueueOffset != r.QueueOffset || *m.Queue != r.Queue {
			t.Fatalf("unique key %d: got %v (%q), sent %v", i, m, m.Body, r)
		}

		v, err := a.ViewMessage(ctx, r.OffsetMsgID())
		if err != nil {
			t.Fatalf("view %s: %v", r.OffsetMsgID(), err)
		}
		if string(v.Body) != fmt.Sprintf("body-%d", i) || v.MsgID != r.MsgID() || v.OffsetMsgID != r.OffsetMsgID() ||
			v.Topic != topic || *v.Queue != r.Queue || v.QueueOffset != r.QueueOffset {
			t.Fatalf("view %d: got %v (%q), sent %v", i, v, v.Body, r)
		}
	}
	if _, err := a.QueryByUniqueKey(ctx, topic, "0A0000010000000000000000000000FF"); !errors.Is(err, client.ErrMessageNotFound) {
		t.Fatalf("missing unique key: %v", err)
	}
	if _, err := a.QueryByUniqueKey(ctx, other, results[0].MsgID()); !errors.Is(err, client.ErrMessageNotFound) {
		t.Fatalf("unique key of another topic: %v", err)
	}
	host, _, err := message.ParseOffsetMsgID(results[0].OffsetMsgID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ViewMessage(ctx, message.OffsetMsgID(host, 1<<40)); !errors.Is(err, client.ErrMessageNotFound) {
		t.Fatalf("view past the end: %v", err)
	}
	if _, err := a.QueryMessages(ctx, "ADM-NO-SUCH-TOPIC", "k", start, end, 8); !errors.Is(err, client.ErrTopicNotExist) {
		t.Fatalf("unknown topic: %v", err)
	}
}

// TestAdminResetOffsetByTime consumes a topic, resets the group to its start
// and then to a time between two batches, and checks the broker's committed
// offsets and that a consumer of the group started afterwards consumes exactly
// the second batch again.
func TestAdminResetOffsetByTime(t *testing.T) {
	addr := startBroker(t)
	ctx := ctxT(t)
	const topic, group = "ADM-R", "adm-r"
	p := realProducer(t, addr)
	a := realAdmin(t, addr)

	send := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			if _, err := p.SendSync(ctx, &client.Message{Topic: topic, Body: []byte(fmt.Sprintf("%s-%d", prefix, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("a", 8)
	mid := nextMillisecond(t) // after every "a", at or before every "b"
	send("b", 8)

	consume := func() (*client.PushConsumer, func() map[string]int) {
		var mu sync.Mutex
		seen := map[string]int{}
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
		return c, func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			out := make(map[string]int, len(seen))
			for k, v := range seen {
				out[k] = v
			}
			return out
		}
	}
	committed := func() (map[int32]int64, int64) {
		m := map[int32]int64{}
		var sum int64
		for q := int32(0); q < client.DefaultCreateTopicQueueNums; q++ {
			m[q] = brokerOffset(t, addr, group, topic, q)
			sum += max(m[q], 0)
		}
		return m, sum
	}

	c, seen := consume()
	wait.For(t, "16 messages consumed and committed", func() error {
		if m, sum := committed(); len(seen()) != 16 || sum != 16 {
			return fmt.Errorf("%d consumed, committed %v", len(seen()), m)
		}
		return nil
	})
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ends, _ := committed()

	check := func(table map[client.MessageQueue]int64, wantSum int64) {
		t.Helper()
		if len(table) != client.DefaultCreateTopicQueueNums {
			t.Fatalf("reset reported %d queues: %v", len(table), table)
		}
		var sum int64
		for mq, off := range table {
			if mq.Topic != topic || mq.BrokerName == "" {
				t.Fatalf("reset reported queue %v", mq)
			}
			if got := brokerOffset(t, addr, group, topic, mq.QueueID); got != off {
				t.Fatalf("queue %d: reported %d, committed %d", mq.QueueID, off, got)
			}
			if off > ends[mq.QueueID] {
				t.Fatalf("queue %d: offset %d past the end %d", mq.QueueID, off, ends[mq.QueueID])
			}
			sum += off
		}
		if sum != wantSum {
			t.Fatalf("offsets sum to %d, want %d: %v", sum, wantSum, table)
		}
	}

	// Backwards to the beginning.
	table, err := a.ResetOffsetByTime(ctx, group, topic, time.UnixMilli(0))
	if err != nil {
		t.Fatal(err)
	}
	check(table, 0)
	// Forwards to the time between the batches: every queue at its first "b".
	table, err = a.ResetOffsetByTime(ctx, group, topic, mid)
	if err != nil {
		t.Fatal(err)
	}
	check(table, 8)

	c2, seen2 := consume()
	waitCaughtUp(t, topic, client.DefaultCreateTopicQueueNums, c2)
	got := seen2()
	for i := 0; i < 8; i++ {
		if got[fmt.Sprintf("b-%d", i)] == 0 {
			t.Fatalf("b-%d not consumed again: %v", i, got)
		}
	}
	if len(got) != 8 {
		t.Fatalf("consumed %v, want only the second batch", got)
	}

	if _, err := a.ResetOffsetByTime(ctx, group, "ADM-NO-SUCH-TOPIC", mid); !errors.Is(err, client.ErrTopicNotExist) {
		t.Fatalf("unknown topic: %v", err)
	}
	if _, err := a.ResetOffsetByTime(ctx, "", topic, mid); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("no group: %v", err)
	}
}
