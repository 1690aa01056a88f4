package idempotent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/client/idempotent"
)

// A Guard around a listener: the second delivery of a message is acknowledged
// without calling the listener.
func Example() {
	g, err := idempotent.New(idempotent.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	listener := g.Concurrent(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		for _, m := range msgs {
			fmt.Printf("charging order %s\n", m.Body)
		}
		return client.ConsumeSuccess
	})
	m := &client.MessageExt{MsgID: "C0A8000100002A9F0000000000000001", Message: client.Message{Body: []byte("42")}}
	fmt.Println(listener(context.Background(), []*client.MessageExt{m}))
	fmt.Println(listener(context.Background(), []*client.MessageExt{m})) // a duplicate
	fmt.Printf("%+v\n", g.Stats())
	// Output:
	// charging order 42
	// 0
	// 0
	// {Ran:1 Unguarded:0 Duplicates:1 Busy:0 TakenOver:0 Failed:0 StoreErrors:0 DoneErrors:0 LeaseLost:0}
}

// Keying by a business key: two different messages for one order are one
// consumption.
func ExampleByFirstKey() {
	g, _ := idempotent.New(idempotent.NewMemoryStore(), idempotent.KeyBy(idempotent.ByFirstKey()))
	listener := g.Concurrent(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		fmt.Printf("shipping %s\n", msgs[0].Keys[0])
		return client.ConsumeSuccess
	})
	first := &client.MessageExt{MsgID: "id-1", Message: client.Message{Keys: []string{"order-7"}}}
	resent := &client.MessageExt{MsgID: "id-2", Message: client.Message{Keys: []string{"order-7"}}}
	listener(context.Background(), []*client.MessageExt{first})
	listener(context.Background(), []*client.MessageExt{resent})
	// Output:
	// shipping order-7
}

// exampleBroker starts an in-process broker for the examples; a real program
// names its brokers' (or name servers') addresses instead.
func exampleBroker() (addr string, stop func()) {
	dir, _ := os.MkdirTemp("", "apogee-idempotent-example-")
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := broker.New(broker.Options{Core: core.Options{DataDir: dir, AdvertiseAddr: l.Addr().String(), Logger: quiet}})
	if err != nil {
		panic(err)
	}
	go b.Serve(l)
	return l.Addr().String(), func() {
		b.Shutdown(context.Background())
		os.RemoveAll(dir)
	}
}

// A BrokerStore shares keys between processes through the broker: here two
// "processes" race for one key and the first begin in the broker's log wins.
func ExampleNewBrokerStore() {
	addr, stop := exampleBroker()
	defer stop()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func(instance string) *idempotent.BrokerStore {
		s, err := idempotent.NewBrokerStore("orders",
			idempotent.BrokerNameServer(addr), idempotent.BrokerLogger(quiet),
			idempotent.BrokerProducerOptions(client.InstanceName(instance), client.Logger(quiet)))
		if err != nil {
			panic(err)
		}
		return s
	}
	a, b := open("process-a"), open("process-b")
	defer a.Close(context.Background())
	defer b.Close(context.Background())
	ctx := context.Background()

	st, err := a.TryBegin(ctx, "order-7", "process-a", 30*time.Second)
	fmt.Println("a:", st, err)
	st, err = b.TryBegin(ctx, "order-7", "process-b", 30*time.Second)
	fmt.Println("b:", st, err)
	fmt.Println("topic:", a.Topic())
	// Output:
	// a: absent <nil>
	// b: processing <nil>
	// topic: %IDEMPOTENT%orders
}

// A push consumer whose listener is guarded: the producer sends one message twice
// with the same UNIQ_KEY (as it does when it retries a send whose
// acknowledgement was lost), and the listener runs once.
func ExampleGuard_Concurrent() {
	addr, stop := exampleBroker()
	defer stop()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	store, err := idempotent.NewBrokerStore("billing", idempotent.BrokerNameServer(addr), idempotent.BrokerLogger(quiet),
		idempotent.BrokerProducerOptions(client.Logger(quiet)))
	if err != nil {
		panic(err)
	}
	defer store.Close(context.Background())
	g, _ := idempotent.New(store, idempotent.BusyDelayLevel(1))

	producer, _ := client.NewProducer(client.NameServer(addr), client.Logger(quiet))
	defer producer.Close(context.Background())
	msg := &client.Message{Topic: "Invoices", Body: []byte("invoice 1001"),
		Properties: map[string]string{"UNIQ_KEY": "0A0000010001000000000000000003E9"}}
	producer.SendSync(ctx, msg)

	consumer, _ := client.NewPushConsumer(client.NameServer(addr), client.Logger(quiet),
		client.ConsumerGroup("billing"), client.Subscribe("Invoices", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(g.Concurrent(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				fmt.Printf("billing %s\n", m.Body)
			}
			return client.ConsumeSuccess
		})))
	consumer.Start(ctx)
	defer consumer.Close(context.Background())
	producer.SendSync(ctx, msg) // the duplicate

	for g.Stats().Duplicates == 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("duplicates skipped:", g.Stats().Duplicates)
	// Output:
	// billing invoice 1001
	// duplicates skipped: 1
}
