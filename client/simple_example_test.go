package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apogeemq/apogee/client"
)

// A simple consumer receives messages one by one, each invisible to the rest of
// its group until it is acked or its invisible duration passes.
func Example_simpleConsumer() {
	addr, stop := exampleBroker()
	defer stop()
	ctx := context.Background()

	p, _ := client.NewProducer(client.NameServer(addr), client.Logger(quiet))
	defer p.Close(ctx)
	for _, body := range []string{"first", "second"} {
		if _, err := p.SendSync(ctx, &client.Message{Topic: "Jobs", Body: []byte(body)}); err != nil {
			panic(err)
		}
	}

	s, err := client.NewSimpleConsumer(client.NameServer(addr), client.ConsumerGroup("workers"),
		client.Subscribe("Jobs", "*"), client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.AwaitDuration(time.Second), client.Logger(quiet))
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)

	var got []*client.MessageExt
	for len(got) < 2 {
		msgs, err := s.Receive(ctx, 16, 200*time.Millisecond)
		if err != nil {
			panic(err)
		}
		got = append(got, msgs...)
	}
	first, second := got[0], got[1]
	if string(first.Body) != "first" {
		first, second = second, first
	}
	// "first" is done; "second" is not acked: it comes back after 200 ms.
	if err := s.Ack(ctx, first); err != nil {
		panic(err)
	}
	fmt.Println("acked:", string(first.Body))
	for {
		msgs, err := s.Receive(ctx, 16, time.Minute)
		if err != nil {
			panic(err)
		}
		if len(msgs) > 0 {
			fmt.Println("again:", string(msgs[0].Body), "reconsumeTimes", msgs[0].ReconsumeTimes)
			_ = s.Ack(ctx, msgs[0])
			break
		}
	}
	_ = second
	// Output:
	// acked: first
	// again: second reconsumeTimes 1
}
