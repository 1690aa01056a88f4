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

	// Each message received stays invisible to the rest of the group for a
	// minute (RocketMQ's default for POP consumers): the time a worker has to
	// process it and ack it before the group receives it again.
	const invisible = time.Minute
	var got []*client.MessageExt
	for len(got) < 2 {
		msgs, err := s.Receive(ctx, 16, invisible)
		if err != nil {
			panic(err)
		}
		got = append(got, msgs...)
	}
	first, second := got[0], got[1]
	if string(first.Body) != "first" {
		first, second = second, first
	}
	// "first" is done.
	if err := s.Ack(ctx, first); err != nil {
		panic(err)
	}
	fmt.Println("acked:", string(first.Body))
	// "second" cannot be processed now: hand it back to the group at once
	// rather than let its minute run out.
	if err := s.ChangeInvisibleDuration(ctx, second, time.Millisecond); err != nil {
		panic(err)
	}
	for {
		msgs, err := s.Receive(ctx, 16, invisible)
		if err != nil {
			panic(err)
		}
		if len(msgs) > 0 {
			fmt.Println("again:", string(msgs[0].Body), "reconsumeTimes", msgs[0].ReconsumeTimes)
			if err := s.Ack(ctx, msgs[0]); err != nil {
				panic(err)
			}
			break
		}
	}
	// Output:
	// acked: first
	// again: second reconsumeTimes 1
}
