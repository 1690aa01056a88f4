// Command quickstart sends one message to an Apogee broker with the official
// RocketMQ Go client and receives it with a push consumer. It is the snippet
// shown in docs/operations.md, and TestQuickstart runs it against a broker.
//
//	go run ./examples/quickstart -namesrv 127.0.0.1:9876
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func main() {
	namesrv := flag.String("namesrv", "127.0.0.1:9876", "name server address (an IP literal)")
	topic := flag.String("topic", "QuickstartTopic", "topic")
	flag.Parse()
	rlog.SetLogLevel("error")
	if err := run(*namesrv, *topic); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(namesrv, topic string) error {
	// The Go client needs IP literals; a resolver avoids its HTTP look-up.
	ns := primitive.NewPassthroughResolver([]string{namesrv})

	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(ns),
		producer.WithGroupName("QuickstartProducer"),
		producer.WithRetry(2),
	)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()

	// The first send creates the topic (auto-create from TBW102 is on by
	// default), so the consumer below finds its route.
	msg := primitive.NewMessage(topic, []byte("hello, apogee"))
	msg.WithTag("TagA")
	res, err := p.SendSync(context.Background(), msg)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	fmt.Printf("sent %s to queue %d at offset %d\n", res.MsgID, res.MessageQueue.QueueId, res.QueueOffset)

	got := make(chan *primitive.MessageExt, 1)
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNsResolver(ns),
		consumer.WithGroupName("QuickstartConsumer"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		return err
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "TagA || TagB"},
		func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				select {
				case got <- m:
				default:
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	defer c.Shutdown()

	select {
	case m := <-got:
		fmt.Printf("received %q with tag %s from queue %d\n", m.Body, m.GetTags(), m.Queue.QueueId)
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("no message in 30 s")
	}
}
