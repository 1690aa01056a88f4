package client_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

// A producer and a consumer sharing an instance: the producer's stand-in route for
// an auto-created topic (built from TBW102) must not hide the topic's real route
// from the consumer.
func TestProducerAndConsumerShareInstance(t *testing.T) {
	b := newFakeBroker(t, func(b *fakeBroker) { b.autoCreate = false })
	inst := client.InstanceName("shared-" + t.Name())
	p, err := client.NewProducer(client.NameServer(b.addr), inst)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := p.SendSync(ctxT(t), &client.Message{Topic: "AUTO", Body: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	c, err := client.NewPushConsumer(client.NameServer(b.addr), inst, client.ConsumerGroup("share"),
		client.Subscribe("AUTO", "*"), client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(col.listener("x")))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.Equal(t, "message through the shared instance", 1, col.distinct)
	if n := b.srv.Len(); n != 1 {
		t.Fatalf("%d connections for one instance", n)
	}
	c.Close(ctxT(t))
	wait.Until(t, "group left", func() bool { return len(b.members("share")) == 0 })
}

// Routes are fetched again every RouteRefreshInterval: new queues are used.
func TestRouteRefresh(t *testing.T) {
	b := newFakeBroker(t, func(b *fakeBroker) { b.queueNums = 2 })
	p := newProducer(t, b, client.RouteRefreshInterval(50*time.Millisecond))
	if _, err := p.SendSync(ctxT(t), &client.Message{Topic: "GROW", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.topics["GROW"] = 6
	b.mu.Unlock()
	wait.Until(t, "a send to a new queue", func() bool {
		r, err := p.SendSync(ctxT(t), &client.Message{Topic: "GROW", Body: []byte("x")})
		return err == nil && r.Queue.QueueID >= 2
	})
}

// Delay level, delivery time, sharding key and user flag travel as RocketMQ's
// properties.
func TestMessageProperties(t *testing.T) {
	b := newFakeBroker(t)
	p := newProducer(t, b)
	at := time.Now().Add(time.Hour)
	r, err := p.SendSync(ctxT(t), &client.Message{Topic: "P", Body: []byte("x"), DelayLevel: 3, DeliverAt: at,
		ShardingKey: "sk", Properties: map[string]string{"TAGS": "ignored", "a": "b"}, Tags: "t"})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := message.Decode(b.records("P", r.Queue.QueueID)[0], true)
	props := message.ParseProperties(v.Properties())
	want := map[string]string{"DELAY": "3", "TIMER_DELIVER_MS": strconv.FormatInt(at.UnixMilli(), 10), "SHARDING_KEY": "sk", "TAGS": "t", "a": "b"}
	for k, w := range want {
		if props[k] != w {
			t.Errorf("%s = %q, want %q", k, props[k], w)
		}
	}
	if _, err := p.SendSync(ctxT(t), &client.Message{Topic: "P", Properties: map[string]string{"bad\x01key": "v"}}); err == nil {
		t.Fatal("a property key with a separator was accepted")
	}
	// The limit applies after compression: 5 MiB of zeros fits, uncompressed it does not.
	if _, err := p.SendSync(ctxT(t), &client.Message{Topic: "P", Body: make([]byte, 5<<20)}); err != nil {
		t.Fatalf("compressible 5 MiB body: %v", err)
	}
	raw := newProducer(t, b, client.CompressOver(-1))
	if _, err := raw.SendSync(ctxT(t), &client.Message{Topic: "P", Body: make([]byte, 5<<20)}); !errors.Is(err, client.ErrMessageTooLarge) {
		t.Fatalf("uncompressed 5 MiB body: %v", err)
	}
}
