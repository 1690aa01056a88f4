package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
)

// quiet is the examples' logger: an example has no test to print a log on
// failure, and its output is compared.
var quiet = slog.New(slog.DiscardHandler)

// exampleBroker starts an Apogee broker on a loopback port for the examples and
// returns its address (it is also the name server) and a stop function.
func exampleBroker() (string, func()) {
	dir, _ := os.MkdirTemp("", "apogee-client-example-")
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	b, err := broker.New(broker.Options{Core: core.Options{DataDir: dir, AdvertiseAddr: l.Addr().String(), Logger: quiet}})
	if err != nil {
		panic(err)
	}
	go b.Serve(l)
	return l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Shutdown(ctx)
		os.RemoveAll(dir)
	}
}

// A producer sends synchronously, asynchronously and in a batch.
func Example_producer() {
	addr, stop := exampleBroker()
	defer stop()
	ctx := context.Background()

	p, err := client.NewProducer(client.NameServer(addr), client.ProducerGroup("example-producers"), client.Logger(quiet))
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)

	res, err := p.SendSync(ctx, &client.Message{Topic: "Orders", Tags: "created", Keys: []string{"order-1"}, Body: []byte("hello")})
	if err != nil {
		panic(err)
	}
	fmt.Println("sync:", res.Status, "offset", res.QueueOffset, "id length", len(res.MsgID()))

	done := make(chan error, 1)
	err = p.SendAsync(ctx, &client.Message{Topic: "Orders", Body: []byte("async")}, func(r client.SendResult, err error) {
		done <- err // runs on a connection goroutine: do not block here
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("async:", <-done)

	batch := []*client.Message{{Topic: "Orders", Body: []byte("a")}, {Topic: "Orders", Body: []byte("b")}}
	results, err := p.SendBatch(ctx, batch)
	if err != nil {
		panic(err)
	}
	fmt.Println("batch:", len(results), "request(s),", results[0].Messages, "messages")
	// Output:
	// sync: SEND_OK offset 0 id length 32
	// async: <nil>
	// batch: 1 request(s), 2 messages
}

// A push consumer in a group receives what is sent to the topics it subscribes.
func Example_pushConsumer() {
	addr, stop := exampleBroker()
	defer stop()
	ctx := context.Background()

	p, _ := client.NewProducer(client.NameServer(addr), client.Logger(quiet))
	defer p.Close(ctx)
	p.SendSync(ctx, &client.Message{Topic: "Events", Tags: "keep", Body: []byte("first")})

	var mu sync.Mutex
	var bodies []string
	got := make(chan struct{}, 10)
	c, err := client.NewPushConsumer(
		client.NameServer(addr),
		client.ConsumerGroup("example-consumers"),
		client.Subscribe("Events", "keep || also"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.Logger(quiet),
		client.WithConcurrentListener(func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				bodies = append(bodies, string(m.Body))
				got <- struct{}{}
			}
			return client.ConsumeSuccess
		}),
	)
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	p.SendSync(ctx, &client.Message{Topic: "Events", Tags: "skip", Body: []byte("filtered out")})
	p.SendSync(ctx, &client.Message{Topic: "Events", Tags: "also", Body: []byte("second")})
	<-got
	<-got
	mu.Lock()
	sort.Strings(bodies)
	fmt.Println(bodies)
	mu.Unlock()
	// Output: [first second]
}

// A pull consumer assigned one queue polls it and commits what it consumed.
func Example_pullConsumer() {
	addr, stop := exampleBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, _ := client.NewProducer(client.NameServer(addr), client.Selector(client.ManualSelector()), client.Logger(quiet))
	defer p.Close(ctx)
	q := client.MessageQueue{Topic: "Logs", BrokerName: core.DefaultBrokerName, QueueID: 0}
	for i := 0; i < 3; i++ {
		p.SendSync(ctx, &client.Message{Topic: "Logs", Queue: &q, Body: []byte(fmt.Sprint("line ", i))})
	}

	c, err := client.NewPullConsumer(client.NameServer(addr), client.ConsumerGroup("example-pull"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.AutoCommit(false), client.Logger(quiet))
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	if err := c.Assign(ctx, []client.MessageQueue{q}); err != nil {
		panic(err)
	}
	n := 0
	for n < 3 {
		msgs, err := c.Poll(ctx)
		if err != nil {
			panic(err)
		}
		for _, m := range msgs {
			fmt.Println(m.QueueOffset, string(m.Body))
			n++
		}
	}
	fmt.Println("commit:", c.Commit(ctx))
	// Output:
	// 0 line 0
	// 1 line 1
	// 2 line 2
	// commit: <nil>
}

type orderService struct{}

func (orderService) ExecuteLocalTransaction(ctx context.Context, m *client.Message) client.TransactionState {
	// Write the order to the local database here; commit the message if that worked.
	return client.TxCommit
}

func (orderService) CheckLocalTransaction(m *client.MessageExt) client.TransactionState {
	// The broker asks about a half message whose outcome it did not learn.
	return client.TxCommit
}

// A transactional producer: the message is delivered only if the local transaction
// commits.
func Example_transaction() {
	addr, stop := exampleBroker()
	defer stop()
	ctx := context.Background()
	p, err := client.NewProducer(client.NameServer(addr), client.ProducerGroup("orders-tx"),
		client.WithTransactionListener(orderService{}), client.Logger(quiet))
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)
	res, err := p.SendInTransaction(ctx, &client.Message{Topic: "Payments", Body: []byte("order 42 paid")})
	fmt.Println(res.State, err == nil)
	// Output: COMMIT true
}
