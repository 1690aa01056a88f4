package client_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/store"
)

func newSimple(t testing.TB, addr string, opts ...client.SimpleConsumerOpt) *client.SimpleConsumer {
	t.Helper()
	all := append([]client.SimpleConsumerOpt{client.NameServer(addr), uniqueInstance(t), client.Logger(testlog.New(t, "simple-consumer")),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.AwaitDuration(200 * time.Millisecond)}, opts...)
	s, err := client.NewSimpleConsumer(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// sendBodies sends the bodies to topic (created with one queue on first send),
// each with the sharding key of the same index, if any.
func sendBodies(t testing.TB, p *client.Producer, topic string, bodies []string, keys ...string) {
	t.Helper()
	for i, b := range bodies {
		m := &client.Message{Topic: topic, Body: []byte(b)}
		if i < len(keys) {
			m.ShardingKey = keys[i]
		}
		if _, err := p.SendSync(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
	}
}

func bodiesOf(ms []*client.MessageExt) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}

// receiveAll receives until n messages arrived.
func receiveAll(t testing.TB, s *client.SimpleConsumer, n int, invisible time.Duration) []*client.MessageExt {
	t.Helper()
	var out []*client.MessageExt
	wait.For(t, fmt.Sprintf("%d messages received", n), func() error {
		ms, err := s.Receive(ctxT(t), 32, invisible)
		if err != nil {
			t.Fatal(err)
		}
		if out = append(out, ms...); len(out) < n {
			return fmt.Errorf("received %v", bodiesOf(out))
		}
		return nil
	})
	return out
}

func TestSimpleReceiveAckRedeliver(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr, client.DefaultTopicQueueNums(1))
	sendBodies(t, p, "S1", []string{"a", "b", "c"})
	s := newSimple(t, addr, client.ConsumerGroup("sg"), client.Subscribe("S1", "*"))
	ctx := ctxT(t)

	// Invisible for a minute (RocketMQ's default), so that the ack of a
	// comes in time however loaded the machine; b and c are then made
	// invisible for a second only, and come back when it passes.
	got := receiveAll(t, s, 3, time.Minute)
	if fmt.Sprint(bodiesOf(got)) != "[a b c]" {
		t.Fatalf("received %v", bodiesOf(got))
	}
	if got[0].Properties[client.PropPopCK] == "" {
		t.Fatal("no receipt handle")
	}
	if err := s.Ack(ctx, got[0]); err != nil {
		t.Fatal(err)
	}
	stale := *got[1] // b with the handle of its first delivery
	stale.Properties = maps.Clone(got[1].Properties)
	for _, m := range got[1:] {
		if err := s.ChangeInvisibleDuration(ctx, m, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// b and c come back once their invisible time has passed.
	again := receiveAll(t, s, 2, 10*time.Second)
	if fmt.Sprint(bodiesOf(again)) != "[b c]" || again[0].ReconsumeTimes != 1 {
		t.Fatalf("redelivered %v", bodiesOf(again))
	}
	if err := s.Ack(ctx, &stale); !errors.Is(err, client.ErrInvalidReceipt) {
		t.Fatalf("ack with the first delivery's handle: %v", err)
	}
	for _, m := range again {
		if err := s.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if ms, err := s.Receive(ctx, 32, time.Second); err != nil || len(ms) != 0 {
		t.Fatalf("after acks: %v %v", bodiesOf(ms), err)
	}
	if off := brokerOffset(t, addr, "sg", "S1", 0); off != 3 {
		t.Fatalf("group offset %d, want 3", off)
	}
}

func TestSimpleChangeInvisibleDuration(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr, client.DefaultTopicQueueNums(1))
	sendBodies(t, p, "S2", []string{"x"})
	s := newSimple(t, addr, client.ConsumerGroup("sg"), client.Subscribe("S2", "*"))
	ctx := ctxT(t)
	const first = 2 * time.Second
	popped := time.Now() // the broker pops it no sooner
	got := receiveAll(t, s, 1, first)
	if len(got) != 1 {
		t.Fatalf("received %d", len(got))
	}
	old := got[0].Properties[client.PropPopCK]
	if err := s.ChangeInvisibleDuration(ctx, got[0], time.Minute); err != nil {
		t.Fatal(err)
	}
	if got[0].Properties[client.PropPopCK] == old {
		t.Fatal("receipt handle not renewed")
	}
	if took := time.Since(popped); took >= first {
		t.Logf("the change came %v after the pop, after the first invisible time: its effect not observed", took)
	} else {
		// What is tested is a time: once the first invisible time has
		// passed, the message would be visible again without the change.
		time.Sleep(time.Until(popped.Add(first)))
		if ms, _ := s.Receive(ctx, 1, time.Second); len(ms) != 0 {
			t.Fatal("visible again despite ChangeInvisibleDuration")
		}
	}
	// Make it visible again soon instead.
	if err := s.ChangeInvisibleDuration(ctx, got[0], 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	again := receiveAll(t, s, 1, 10*time.Second)
	if len(again) != 1 || string(again[0].Body) != "x" {
		t.Fatalf("not redelivered after a short invisible time: %v", bodiesOf(again))
	}
	if err := s.ChangeInvisibleDuration(ctx, got[0], time.Second); !errors.Is(err, client.ErrInvalidReceipt) {
		t.Fatalf("change with a stale handle: %v", err)
	}
	if err := s.Ack(ctx, again[0]); err != nil {
		t.Fatal(err)
	}
}

func TestSimpleConsumersShareOneQueue(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr, client.DefaultTopicQueueNums(1))
	const n = 40
	var bs []string
	for i := range n {
		bs = append(bs, fmt.Sprint("m", i))
	}
	sendBodies(t, p, "S3", bs)
	a := newSimple(t, addr, client.ConsumerGroup("share"), client.Subscribe("S3", "*"))
	b := newSimple(t, addr, client.ConsumerGroup("share"), client.Subscribe("S3", "*"))
	ctx := ctxT(t)
	// While a holds its messages, b gets the next ones of the same queue.
	ma, err := a.Receive(ctx, 4, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := b.Receive(ctx, 4, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	count := map[string]int{}
	for _, m := range append(ma, mb...) {
		count[string(m.Body)]++
		if count[string(m.Body)] > 1 {
			t.Fatalf("a got %v, b got %v: one message to both", bodiesOf(ma), bodiesOf(mb))
		}
	}
	if len(ma) == 0 || len(mb) == 0 {
		t.Fatalf("a got %v, b got %v", bodiesOf(ma), bodiesOf(mb))
	}
	for _, pair := range []struct {
		s  *client.SimpleConsumer
		ms []*client.MessageExt
	}{{a, ma}, {b, mb}} {
		for _, m := range pair.ms {
			if err := pair.s.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	for _, s := range []*client.SimpleConsumer{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var failed error // a failure that ends the wait at once
			err := wait.Poll(wait.DefaultTimeout, func() error {
				mu.Lock()
				got := len(count)
				mu.Unlock()
				if got == n {
					return nil
				}
				ms, err := s.Receive(ctx, 3, 10*time.Second)
				if err != nil {
					failed = err
					return nil
				}
				for _, m := range ms {
					mu.Lock()
					count[string(m.Body)]++
					mu.Unlock()
					if err := s.Ack(ctx, m); err != nil {
						failed = err
						return nil
					}
				}
				return fmt.Errorf("%d of %d distinct messages received", got, n)
			})
			if err = cmp.Or(failed, err); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(count) != n {
		t.Fatalf("received %d distinct messages, want %d", len(count), n)
	}
	for body, k := range count {
		if k != 1 {
			t.Fatalf("%s delivered %d times while invisible", body, k)
		}
	}
}

func TestSimpleFIFOGroups(t *testing.T) {
	addr := startBroker(t)
	p := realProducer(t, addr, client.DefaultTopicQueueNums(1))
	sendBodies(t, p, "S4", []string{"A1", "B1", "A2", "B2", "A3"}, "A", "B", "A", "B", "A")
	s := newSimple(t, addr, client.ConsumerGroup("fifo"), client.Subscribe("S4", "*"), client.ReceiveOrderly(true))
	ctx := ctxT(t)
	var order []string
	for len(order) < 5 {
		// Two receives per round, then ack: a group's consecutive messages
		// may come together (a batch), but nothing of a group in flight from
		// an earlier receive may come.
		inflight := map[string]bool{}
		var round []*client.MessageExt
		for range 2 {
			ms, err := s.Receive(ctx, 32, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				if inflight[m.ShardingKey] {
					t.Fatalf("%s received while a message of its group is in flight (%v)", m.Body, bodiesOf(round))
				}
				order = append(order, string(m.Body))
			}
			for _, m := range ms {
				inflight[m.ShardingKey] = true
				round = append(round, m)
			}
		}
		for _, m := range round {
			if err := s.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	var a, b []string
	for _, x := range order {
		if x[0] == 'A' {
			a = append(a, x)
		} else {
			b = append(b, x)
		}
	}
	if fmt.Sprint(a, b) != "[A1 A2 A3] [B1 B2]" {
		t.Fatalf("order per group: %v %v", a, b)
	}
}

// TestSimpleAcrossBrokerRestart: in-flight messages stay invisible across a
// broker restart and come back after their time; acked ones do not.
func TestSimpleAcrossBrokerRestart(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	start := func(l net.Listener) (*broker.Broker, chan struct{}) {
		b, err := broker.New(broker.Options{Core: core.Options{DataDir: dir, AdvertiseAddr: addr, Logger: testlog.New(t, "broker"), Store: store.Options{SegmentSize: 8 << 20, ConsumeQueueEntries: 4096, IndexSlots: 1024, IndexMaxEntries: 8192, CleanInterval: -1}}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); b.Serve(l) }()
		return b, done
	}
	stop := func(b *broker.Broker, done chan struct{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Shutdown(ctx)
		<-done
	}
	b1, done1 := start(l)
	p := realProducer(t, addr, client.DefaultTopicQueueNums(1))
	sendBodies(t, p, "S5", []string{"a", "b", "c"})
	s := newSimple(t, addr, client.ConsumerGroup("rs"), client.Subscribe("S5", "*"), client.RequestTimeout(time.Second))
	// Received invisible for a minute (the ack of a comes in time however
	// loaded the machine), then b and c made invisible for 1.5 s from the
	// change: none may be received again before beforePop plus that (the
	// time an answer arrives, not the time a request was made: a long poll
	// made while they are invisible is answered when they come back).
	got := receiveAll(t, s, 3, time.Minute)
	if len(got) != 3 {
		t.Fatalf("received %d", len(got))
	}
	if err := s.Ack(ctxT(t), got[0]); err != nil {
		t.Fatal(err)
	}
	beforePop := time.Now()
	const invisible = 1500 * time.Millisecond
	for _, m := range got[1:] {
		if err := s.ChangeInvisibleDuration(ctxT(t), m, invisible); err != nil {
			t.Fatal(err)
		}
	}
	stop(b1, done1)

	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	b2, done2 := start(l2)
	defer stop(b2, done2)
	if time.Since(beforePop) >= invisible {
		t.Logf("the restart took until %v after the pop: invisibility across it not observed", time.Since(beforePop))
	}
	var ms []*client.MessageExt
	wait.For(t, "b and c again after the restart", func() error {
		r, err := s.Receive(ctxT(t), 32, 10*time.Second)
		if err != nil {
			return err // the client's route to the restarted broker may lag
		}
		if at := time.Since(beforePop); len(r) > 0 && at < invisible {
			t.Fatalf("received %v %v after the pop, while they were invisible", bodiesOf(r), at)
		}
		if ms = append(ms, r...); len(ms) < 2 {
			return fmt.Errorf("received %v", bodiesOf(ms))
		}
		return nil
	})
	got2 := bodiesOf(ms)
	sort.Strings(got2)
	if fmt.Sprint(got2) != "[b c]" {
		t.Fatalf("after restart: %v", got2)
	}
}

func TestSimpleOptions(t *testing.T) {
	if _, err := client.NewSimpleConsumer(client.NameServer("127.0.0.1:9876"), client.Subscribe("T", "*")); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("no group: %v", err)
	}
	if _, err := client.NewSimpleConsumer(client.NameServer("127.0.0.1:9876"), client.ConsumerGroup("g"),
		client.Subscribe("T", "*"), client.AutoCommit(false)); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("pull option accepted: %v", err)
	}
	if _, err := client.NewPullConsumer(client.NameServer("127.0.0.1:9876"), client.ConsumerGroup("g"),
		client.AwaitDuration(time.Second)); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("simple option accepted by NewPullConsumer: %v", err)
	}
	s, err := client.NewSimpleConsumer(client.NameServer("127.0.0.1:9876"), client.ConsumerGroup("g"), client.Subscribe("T", "*"), uniqueInstance(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := s.Receive(ctx, 0, time.Second); !errors.Is(err, client.ErrConfig) {
		t.Fatalf("max 0: %v", err)
	}
	if err := s.Ack(ctx, &client.MessageExt{}); !errors.Is(err, client.ErrInvalidReceipt) {
		t.Fatalf("ack without handle: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if _, err := s.Receive(ctx, 1, time.Second); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("receive after close: %v", err)
	}
}
