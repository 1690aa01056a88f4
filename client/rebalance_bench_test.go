package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
)

// BenchmarkRebalanceAfterJoin measures how long a running consumer takes to
// give up half its queues after a second consumer of its group starts: the
// broker's NOTIFY_CONSUMER_IDS_CHANGED is the only trigger (the periodic
// rebalance is set to an hour). It reports the time from the joiner's Start
// returning until both assignments cover the 8 queues exactly once.
// Run: go test -run '^$' -bench RebalanceAfterJoin -benchtime 5x ./client/
func BenchmarkRebalanceAfterJoin(b *testing.B) {
	addr := startBroker(b)
	p := realProducer(b, addr, client.DefaultTopicQueueNums(8))
	if _, err := p.SendSync(context.Background(), &client.Message{Topic: "RBJ", Body: []byte("x")}); err != nil {
		b.Fatal(err)
	}
	var worst time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		group := fmt.Sprintf("rbj-%d", i)
		opts := []client.PushConsumerOpt{client.ConsumerGroup(group), client.Subscribe("RBJ", "*"),
			client.RebalanceInterval(time.Hour),
			client.WithConcurrentListener(func(context.Context, []*client.MessageExt) client.ConsumeResult { return client.ConsumeSuccess })}
		first := realPush(b, addr, opts...)
		if err := first.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		waitShare(b, "RBJ", 8, first)
		second := realPush(b, addr, opts...)
		b.StartTimer()
		if err := second.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		started := time.Now()
		waitShare(b, "RBJ", 8, first, second)
		d := time.Since(started)
		b.StopTimer()
		worst = max(worst, d)
		first.Close(context.Background())
		second.Close(context.Background())
		b.StartTimer()
	}
	b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
}
