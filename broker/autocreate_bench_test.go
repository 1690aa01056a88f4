package broker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/store"
)

// benchEnvInt reads a positive integer from the environment, or def.
func benchEnvInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// BenchmarkAutoCreateTopics sends one message to each of
// APOGEE_BENCH_TOPICS (default 20,000) topics that do not exist yet, the way
// the official clients create topics: the producer finds no route, sends
// through TBW102's route, and the broker creates the topic. It drives a real
// broker on 127.0.0.1 over remoting with the project's client, from
// APOGEE_BENCH_SENDERS (default 4) goroutines each sending synchronously.
// Run it once (-benchtime=1x); it reports the overall rate and the rates of
// the first and last thousand topics:
//
//	go test -run '^$' -bench AutoCreateTopics -benchtime=1x ./broker/
func BenchmarkAutoCreateTopics(b *testing.B) {
	topics := benchEnvInt(b, "APOGEE_BENCH_TOPICS", 20000)
	senders := benchEnvInt(b, "APOGEE_BENCH_SENDERS", 4)
	const window = 1000
	if topics < 2*window {
		b.Fatalf("APOGEE_BENCH_TOPICS=%d: need at least %d", topics, 2*window)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		br, err := broker.New(broker.Options{
			DataDir: b.TempDir(), AdvertiseAddr: l.Addr().String(), Logger: quiet,
			Store: store.Options{SegmentSize: 256 << 20, CleanInterval: -1},
		})
		if err != nil {
			b.Fatal(err)
		}
		served := make(chan struct{})
		go func() { defer close(served); br.Serve(l) }()
		p, err := client.NewProducer(client.NameServer(l.Addr().String()), client.Logger(quiet),
			client.InstanceName(fmt.Sprintf("autocreate-%d", i)))
		if err != nil {
			b.Fatal(err)
		}

		// done[k] is when the k-th send (in completion order) was acknowledged.
		done := make([]time.Duration, topics)
		var next, completed atomic.Int64
		var failed atomic.Value
		var wg sync.WaitGroup
		b.StartTimer()
		start := time.Now()
		for s := 0; s < senders; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := []byte("hello")
				for {
					k := next.Add(1) - 1
					if k >= int64(topics) || failed.Load() != nil {
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err := p.SendSync(ctx, &client.Message{Topic: fmt.Sprintf("AutoCreate-%06d", k), Body: body})
					cancel()
					if err != nil {
						failed.CompareAndSwap(nil, fmt.Errorf("topic %d: %w", k, err))
						return
					}
					done[completed.Add(1)-1] = time.Since(start)
				}
			}()
		}
		wg.Wait()
		total := time.Since(start)
		b.StopTimer()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		first := float64(window) / done[window-1].Seconds()
		last := float64(window) / (done[topics-1] - done[topics-window-1]).Seconds()
		b.ReportMetric(float64(topics)/total.Seconds(), "topics/s")
		b.ReportMetric(first, "first1k_topics/s")
		b.ReportMetric(last, "last1k_topics/s")
		b.ReportMetric(last/first, "last/first")
		b.ReportMetric(total.Seconds(), "total_s")
		b.Logf("%d topics in %v (%d senders): first 1000 at %.0f/s, last 1000 at %.0f/s", topics, total.Round(time.Millisecond), senders, first, last)

		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		p.Close(ctx)
		if err := br.Shutdown(ctx); err != nil {
			b.Error(err)
		}
		cancel()
		<-served
		b.StartTimer()
	}
}
