package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apogeemq/apogee/client"
)

// Request-reply (RocketMQ 4.6+): a service consumes requests and answers each with
// Producer.Reply; a caller sends a request with Producer.Request and waits for the
// answer, at most until its context's deadline.
func Example_requestReply() {
	addr, stop := exampleBroker()
	defer stop()
	ctx := context.Background()

	// The service: a producer for the replies and a consumer of the requests.
	replies, err := client.NewProducer(client.NameServer(addr), client.ProducerGroup("upper-service"), client.Logger(quiet))
	if err != nil {
		panic(err)
	}
	defer replies.Close(ctx)
	// The request topic exists before its consumer starts (here a first send
	// creates it from TBW102; in production an administrator does).
	if _, err := replies.SendSync(ctx, &client.Message{Topic: "Upper", Body: []byte("not a request")}); err != nil {
		panic(err)
	}
	service, err := client.NewPushConsumer(
		client.NameServer(addr),
		client.ConsumerGroup("upper-service"),
		client.Subscribe("Upper", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.Logger(quiet),
		client.WithConcurrentListener(func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				// Reply sends to the request's cluster reply topic; the broker
				// pushes the answer to the requesting client.
				_, err := replies.Reply(ctx, m, []byte(strings.ToUpper(string(m.Body))))
				if errors.Is(err, client.ErrNotRequest) {
					continue // a plain message: nobody waits for an answer
				}
				if err != nil {
					return client.ConsumeRetryLater
				}
			}
			return client.ConsumeSuccess
		}),
	)
	if err != nil {
		panic(err)
	}
	if err := service.Start(ctx); err != nil {
		panic(err)
	}
	defer service.Close(ctx)

	// The caller.
	caller, err := client.NewProducer(client.NameServer(addr), client.InstanceName("caller"), client.Logger(quiet))
	if err != nil {
		panic(err)
	}
	defer caller.Close(ctx)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	reply, err := caller.Request(rctx, &client.Message{Topic: "Upper", Body: []byte("hello")})
	if err != nil {
		panic(err) // client.ErrReplyTimeout when no reply came in time
	}
	fmt.Println(string(reply.Body), "from", reply.Topic)
	// Output: HELLO from DefaultCluster_REPLY_TOPIC
}
