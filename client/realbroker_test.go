package client_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// startBroker runs an Apogee broker in-process on 127.0.0.1:0 (it answers
// name-server requests on the same address) and returns its address.
func startBroker(t testing.TB, mutate ...func(*broker.Options)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := broker.Options{Core: core.Options{DataDir: t.TempDir(), AdvertiseAddr: l.Addr().String(), Store: store.Options{SegmentSize: 64 << 20, ConsumeQueueEntries: 1 << 16,
		IndexSlots: 1 << 14, IndexMaxEntries: 1 << 16, CleanInterval: -1}, Logger: testlog.New(t, "broker")}}
	for _, fn := range mutate {
		fn(&opts)
	}
	b, err := broker.New(opts)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Serve(l)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Shutdown(ctx)
		<-done
	})
	return l.Addr().String()
}

// brokerOffset asks the broker for a group's committed offset (-1 when none).
func brokerOffset(t testing.TB, addr, group, topic string, q int32) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqQueryConsumerOffset, 0)
	(&protocol.QueryConsumerOffsetRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: q}).Encode(&req.Ext)
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Code != protocol.RespSuccess {
		return -1
	}
	var o protocol.OffsetResponse
	o.Decode(&resp.Ext)
	return o.Offset
}

func realProducer(t testing.TB, addr string, opts ...client.ProducerOpt) *client.Producer {
	t.Helper()
	p, err := client.NewProducer(append([]client.ProducerOpt{client.NameServer(addr), uniqueInstance(t), client.Logger(testlog.New(t, "producer"))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func realPush(t testing.TB, addr string, opts ...client.PushConsumerOpt) *client.PushConsumer {
	t.Helper()
	all := append([]client.PushConsumerOpt{client.NameServer(addr), uniqueInstance(t), client.Logger(testlog.New(t, "consumer")),
		client.RebalanceInterval(300 * time.Millisecond), client.CommitInterval(100 * time.Millisecond),
		client.LongPollTimeout(2 * time.Second), client.HeartbeatInterval(time.Second)}, opts...)
	c, err := client.NewPushConsumer(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestBrokerSendVariantsRoundTrip sends with every send variant, both header
// encodings and both codecs, and checks that a push consumer receives exactly the
// messages its tag expression selects, intact.
func TestBrokerSendVariantsRoundTrip(t *testing.T) {
	addr := startBroker(t)
	for _, enc := range []protocol.SerializeType{protocol.SerializeRocketMQ, protocol.SerializeJSON} {
		t.Run(enc.String(), func(t *testing.T) {
			topic := "RT-" + enc.String()
			ctx := ctxT(t)
			zl := realProducer(t, addr, client.HeaderEncoding(enc), client.CompressOver(256))
			zs := realProducer(t, addr, client.HeaderEncoding(enc), client.CompressOver(256), client.WithCompression(client.CompressionZstd))
			var mu sync.Mutex
			got := map[string]*client.MessageExt{}
			c := realPush(t, addr, client.HeaderEncoding(enc), client.ConsumerGroup("rt-"+enc.String()), client.Subscribe(topic, "keep || also"),
				client.WithConsumeFrom(client.ConsumeFromFirstOffset),
				client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
					mu.Lock()
					defer mu.Unlock()
					for _, m := range msgs {
						got[m.Keys[0]] = m
					}
					return client.ConsumeSuccess
				}))
			big := bytes.Repeat([]byte("compressible "), 200)
			want := map[string][]byte{}
			mk := func(key, tag string, body []byte) *client.Message {
				if tag != "drop" {
					want[key] = body
				}
				return &client.Message{Topic: topic, Tags: tag, Keys: []string{key}, Body: body, Properties: map[string]string{"k": key}}
			}
			// The topic exists once a message is sent (a consumer needs its route).
			if _, err := zl.SendSync(ctx, mk("dropped", "drop", []byte("d"))); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := zl.SendSync(ctx, mk("sync", "keep", []byte("s"))); err != nil {
				t.Fatal(err)
			}
			if _, err := zl.SendSync(ctx, mk("zlib", "keep", big)); err != nil {
				t.Fatal(err)
			}
			if _, err := zs.SendSync(ctx, mk("zstd", "also", big)); err != nil {
				t.Fatal(err)
			}
			f, err := zl.SendAsyncFuture(ctx, mk("async", "keep", []byte("a")))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Result(ctx); err != nil {
				t.Fatal(err)
			}
			if err := zl.SendOneway(ctx, mk("oneway", "keep", []byte("o"))); err != nil {
				t.Fatal(err)
			}
			var batch []*client.Message
			for i := 0; i < 10; i++ {
				batch = append(batch, mk(fmt.Sprintf("batch-%d", i), "keep", []byte(fmt.Sprint(i))))
			}
			if _, err := zl.SendBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			wait.For(t, "every kept message", func() error {
				mu.Lock()
				defer mu.Unlock()
				if len(got) != len(want) {
					return fmt.Errorf("%d of %d received", len(got), len(want))
				}
				return nil
			})
			waitCaughtUp(t, topic, client.DefaultCreateTopicQueueNums, c) // nothing more is coming: the dropped one was read and filtered out
			mu.Lock()
			defer mu.Unlock()
			for k, body := range want {
				m := got[k]
				if m == nil || !bytes.Equal(m.Body, body) || m.Property("k") != k || m.Topic != topic {
					t.Fatalf("%s: got %v", k, m)
				}
			}
			if got["dropped"] != nil || len(got) != len(want) {
				t.Fatalf("received %d, want %d (tag filter)", len(got), len(want))
			}
		})
	}
}

func TestBrokerRebalanceJoinLeave(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr, client.DefaultTopicQueueNums(8))
	col := newCollector()
	var stats []client.ConsumerStats
	start := func(name string) *client.PushConsumer {
		c := realPush(t, addr, client.ConsumerGroup("rb"), client.Subscribe("RB", "*"),
			client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.WithConcurrentListener(col.listener(name)))
		if err := c.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	sent := 0
	send := func(n int) { sendN(t, p, "RB", sent, n, nil); sent += n }
	send(50) // creates the topic with 8 queues
	c1 := start("c1")
	send(100)
	c2 := start("c2")
	send(100)
	c3 := start("c3")
	send(100)
	waitShare(t, "RB", 8, c1, c2, c3)
	c1.Close(ctxT(t))
	stats = append(stats, c1.Stats())
	send(100)
	waitShare(t, "RB", 8, c2, c3)
	wait.Equal(t, "every message", sent, col.distinct)
	for _, c := range []*client.PushConsumer{c2, c3} {
		c.Close(ctxT(t))
		stats = append(stats, c.Stats())
	}
	var counted int64
	for _, s := range stats {
		counted += s.RebalanceDuplicates
	}
	dups := col.duplicates()
	t.Logf("sent %d, duplicates seen %d, counted (upper bound) %d", sent, dups, counted)
	if int64(dups) > counted {
		t.Fatalf("%d duplicates delivered but only %d counted", dups, counted)
	}
}

// waitShare waits until the consumers' assignments of topic cover its n queues
// exactly once.
func waitShare(t testing.TB, topic string, n int, cs ...*client.PushConsumer) {
	t.Helper()
	wait.For(t, "queues shared out", func() error {
		seen := map[client.MessageQueue]int{}
		for _, c := range cs {
			for _, q := range c.Assignment() {
				if q.Topic == topic {
					seen[q]++
				}
			}
		}
		if len(seen) != n {
			return fmt.Errorf("%d of %d queues assigned", len(seen), n)
		}
		for q, k := range seen {
			if k != 1 {
				return fmt.Errorf("%v assigned %d times", q, k)
			}
		}
		return nil
	})
}

// waitCaughtUp waits until the consumers have consumed everything the broker
// holds in topic's n queues: each queue assigned to one of them, nothing
// cached, and its consume offset at the broker's max offset. A queue's offset
// moves past a message only once the listener returned for it (or the filter
// dropped it), so after this, what the listeners saw is all they will see of
// what was sent before: a test can count it exactly.
func waitCaughtUp(t testing.TB, topic string, n int, cs ...*client.PushConsumer) {
	t.Helper()
	wait.For(t, "the consumers caught up with "+topic, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		seen := 0
		for _, c := range cs {
			lags, err := c.Lag(ctx)
			if err != nil {
				return err
			}
			for _, l := range lags {
				if l.Queue.Topic != topic {
					continue
				}
				seen++
				if l.Lag != 0 || l.Cached != 0 {
					return fmt.Errorf("%v: %+v", l.Queue, l)
				}
			}
		}
		if seen != n {
			return fmt.Errorf("%d of %d queues assigned", seen, n)
		}
		return nil
	})
}

func TestBrokerOrderlyAcrossRebalance(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr, client.Selector(client.HashSelector()))
	o := newOrderTracker()
	mk := func() *client.PushConsumer {
		c := realPush(t, addr, client.ConsumerGroup("og"), client.Subscribe("O", "*"), client.LockInterval(200*time.Millisecond),
			client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.WithOrderlyListener(o.listener))
		if err := c.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	o.send(t, p, "O", 100)
	c1 := mk()
	o.send(t, p, "O", 100)
	mk()
	o.send(t, p, "O", 100)
	c1.Close(ctxT(t))
	o.send(t, p, "O", 100)
	o.check(t, 30*time.Second)
}

func TestBrokerOffsetsAfterRestart(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr)
	col := newCollector()
	opts := []client.PushConsumerOpt{client.ConsumerGroup("rs"), client.Subscribe("RS", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.WithConcurrentListener(col.listener("x"))}
	sendN(t, p, "RS", 0, 40, nil)
	c := realPush(t, addr, opts...)
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.Equal(t, "first part", 40, col.distinct)
	if err := c.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for q := int32(0); q < 4; q++ {
		sum += brokerOffset(t, addr, "rs", "RS", q)
	}
	if sum != 40 {
		t.Fatalf("committed offsets sum to %d, want 40", sum)
	}
	sendN(t, p, "RS", 40, 40, nil)
	c2 := realPush(t, addr, opts...)
	if err := c2.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.Equal(t, "second part", 80, col.distinct)
	waitCaughtUp(t, "RS", 4, c2)
	if d := col.duplicates(); d != 0 {
		t.Fatalf("%d messages consumed twice across a clean restart", d)
	}
}

func TestBrokerBroadcasting(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr)
	sendN(t, p, "BC", 0, 1, nil) // create the topic
	dir := t.TempDir()
	cols := []*collector{newCollector(), newCollector()}
	for i := range cols {
		// From the first offset: the broker dispatches to consume queues
		// asynchronously, so a max offset read right after the first send may not
		// count it yet.
		c := realPush(t, addr, client.ConsumerGroup("bc"), client.Subscribe("BC", "*"), client.WithMessageModel(client.Broadcasting),
			client.OffsetDir(dir), client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.WithConcurrentListener(cols[i].listener("x")))
		if err := c.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		wait.Until(t, "assignment", func() bool { return len(c.Assignment()) == 4 })
	}
	sendN(t, p, "BC", 1, 30, nil)
	for _, col := range cols {
		wait.Equal(t, "every consumer gets every message", 31, col.distinct)
	}
}

func TestBrokerPullConsumer(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr)
	testPullConsumer(t, addr, p, func(g, topic string, q int32) int64 { return brokerOffset(t, addr, g, topic, q) })
}

// fastDelays are 18 short delay levels, so that redeliveries come quickly.
const fastDelays = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"

func TestBrokerRetryThenDLQ(t *testing.T) {
	addr := startBroker(t, func(o *broker.Options) { o.Core.DelayLevels = fastDelays })
	p := realProducer(t, addr)
	sendN(t, p, "RTY", 0, 1, nil) // the topic exists
	var mu sync.Mutex
	seen := map[string][]*client.MessageExt{}
	c := realPush(t, addr, client.ConsumerGroup("rty"), client.Subscribe("RTY", "*"), client.MaxReconsumeTimes(1),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				seen[string(m.Body)] = append(seen[string(m.Body)], m)
			}
			return client.ConsumeRetryLater // always: once retried, then dead
		}))
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "a redelivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["RTY-0"]) >= 2
	})
	mu.Lock()
	first, second := seen["RTY-0"][0], seen["RTY-0"][1]
	mu.Unlock()
	if second.Topic != "RTY" || second.ReconsumeTimes != 1 || second.Queue.Topic != "%RETRY%rty" || second.MsgID != first.MsgID {
		t.Fatalf("redelivered as %v (topic %q, reconsume %d, id %s vs %s)", second.Queue, second.Topic, second.ReconsumeTimes, second.MsgID, first.MsgID)
	}
	// After MaxReconsumeTimes the message goes to the dead-letter queue, which a
	// consumer of that topic reads.
	dead := newCollector()
	d := realPush(t, addr, client.ConsumerGroup("rty-dlq-reader"), client.Subscribe("%DLQ%rty", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.WithConcurrentListener(dead.listener("d")))
	wait.Until(t, "dead-letter topic", func() bool { return d.Start(ctxT(t)) == nil })
	wait.Equal(t, "dead letter", 1, dead.distinct)
	// The consumer counts a send-back once its answer arrives, which may be
	// after the dead-letter reader got the message.
	wait.Until(t, "two send-backs counted", func() bool { return c.Stats().SentBack >= 2 })
}

type brokerTx struct{ checks chan string }

func (brokerTx) ExecuteLocalTransaction(_ context.Context, m *client.Message) client.TransactionState {
	switch string(m.Body) {
	case "commit":
		return client.TxCommit
	case "rollback":
		return client.TxRollback
	}
	return client.TxUnknown
}

func (l brokerTx) CheckLocalTransaction(m *client.MessageExt) client.TransactionState {
	l.checks <- string(m.Body)
	return client.TxCommit
}

func TestBrokerTransactions(t *testing.T) {
	addr := startBroker(t, func(o *broker.Options) {
		o.Core.TransactionTimeout = 100 * time.Millisecond
		o.Core.TransactionCheckInterval = 200 * time.Millisecond
	})
	l := brokerTx{checks: make(chan string, 4)}
	p := realProducer(t, addr, client.ProducerGroup("tx-broker"), client.WithTransactionListener(l))
	plain := realProducer(t, addr)
	sendN(t, plain, "TXB", 0, 1, nil) // the topic exists
	col := newCollector()
	c := realPush(t, addr, client.ConsumerGroup("tx-reader"), client.Subscribe("TXB", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.WithConcurrentListener(col.listener("x")))
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"commit", "rollback", "unknown"} {
		r, err := p.SendInTransaction(ctxT(t), &client.Message{Topic: "TXB", Body: []byte(body)})
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if r.State.String() != map[string]string{"commit": "COMMIT", "rollback": "ROLLBACK", "unknown": "UNKNOWN"}[body] {
			t.Fatalf("%s: state %v", body, r.State)
		}
	}
	select {
	case b := <-l.checks:
		if b != "unknown" {
			t.Fatalf("the broker checked %q", b)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("no transaction check from the broker")
	}
	wait.Equal(t, "committed messages", 3, col.distinct)
	// The rollback's END_TRANSACTION came before the check that committed
	// "unknown": were it committed, it would be in the topic by now.
	waitCaughtUp(t, "TXB", client.DefaultCreateTopicQueueNums, c)
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.count["rollback"] != 0 || col.count["commit"] != 1 || col.count["unknown"] != 1 {
		t.Fatalf("delivered %v", col.count)
	}
}

// TestBrokerKeptMessagesStayIntact keeps every received message while later
// pulls arrive, then checks each one: a message's Body aliases its pull
// response, so a response array reused for the next pull would show here as
// bodies, ids or properties of other messages. It also appends to every kept
// Body and checks that no other message changed (the capacity ends at the body).
func TestBrokerKeptMessagesStayIntact(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr)
	const n = 400
	body := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("[%04d]", i)), 50) }
	sendN(t, p, "KEEP", 0, n, func(i int, m *client.Message) {
		m.Body = body(i)
		m.Keys = []string{fmt.Sprintf("key-%d", i)}
		m.Tags = "t"
	})
	var mu sync.Mutex
	var kept []*client.MessageExt
	c := realPush(t, addr, client.ConsumerGroup("keep"), client.Subscribe("KEEP", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.PullBatchSize(32),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			mu.Lock()
			kept = append(kept, msgs...)
			mu.Unlock()
			return client.ConsumeSuccess
		}))
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "every message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(kept) >= n
	})
	mu.Lock()
	defer mu.Unlock()
	check := func(when string) {
		seen := map[int]bool{}
		for _, m := range kept {
			var i int
			if _, err := fmt.Sscanf(string(m.Body), "[%04d]", &i); err != nil {
				t.Fatalf("%s: body %q: %v", when, m.Body[:min(len(m.Body), 20)], err)
			}
			if !bytes.Equal(m.Body, body(i)) {
				t.Fatalf("%s: message %d: body changed", when, i)
			}
			if want := fmt.Sprintf("key-%d", i); len(m.Keys) != 1 || m.Keys[0] != want || m.Property("KEYS") != want || m.Tags != "t" {
				t.Fatalf("%s: message %d: keys %q, KEYS %q, tags %q", when, i, m.Keys, m.Property("KEYS"), m.Tags)
			}
			if len(m.OffsetMsgID) != 32 || m.MsgID == "" {
				t.Fatalf("%s: message %d: ids %q %q", when, i, m.OffsetMsgID, m.MsgID)
			}
			if cap(m.Body) != len(m.Body) {
				t.Fatalf("%s: message %d: Body capacity %d beyond its length %d", when, i, cap(m.Body), len(m.Body))
			}
			seen[i] = true
		}
		if len(seen) != n {
			t.Fatalf("%s: %d distinct messages, want %d", when, len(seen), n)
		}
	}
	check("after the last pull")
	for _, m := range kept {
		_ = append(m.Body, "overwrite?"...)
	}
	check("after appending to every body")
}
