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
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
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
// the official clients create topics: the producer asks the name server
// (here the broker's embedded one) for the topic's route, gets
// TOPIC_NOT_EXIST, sends through TBW102's route with defaultTopic=TBW102,
// and the broker creates the topic. It drives a real broker on 127.0.0.1
// over remoting from APOGEE_BENCH_SENDERS (default 4) goroutines, each
// sending synchronously, with two drivers:
//
//   - driver=remoting: the official Go client's requests written with
//     remoting and protocol (GET_ROUTEINFO_BY_TOPIC, then SEND_MESSAGE_V2),
//     one connection per sender: the broker's cost alone.
//   - driver=client: the project's client.Producer (its own route table
//     included).
//
// Run it once (-benchtime=1x); it reports the overall rate and the rates of
// the first and last thousand topics:
//
//	go test -run '^$' -bench AutoCreateTopics -benchtime=1x ./broker/
func BenchmarkAutoCreateTopics(b *testing.B) {
	topics := benchEnvInt(b, "APOGEE_BENCH_TOPICS", 20000)
	senders := benchEnvInt(b, "APOGEE_BENCH_SENDERS", 4)
	if topics < 2*autoCreateWindow {
		b.Fatalf("APOGEE_BENCH_TOPICS=%d: need at least %d", topics, 2*autoCreateWindow)
	}
	b.Run("driver=remoting", func(b *testing.B) { benchAutoCreate(b, topics, senders, remotingSender) })
	b.Run("driver=client", func(b *testing.B) { benchAutoCreate(b, topics, senders, clientSender) })
}

const autoCreateWindow = 1000

// A sender factory returns, for a broker address, one sender's send
// function and its cleanup.
type autoCreateSender func(tb testing.TB, addr string, id int) (send func(ctx context.Context, topic string) error, closeFn func())

// clientSender sends with one client.Producer per sender.
func clientSender(tb testing.TB, addr string, id int) (func(context.Context, string) error, func()) {
	p, err := client.NewProducer(client.NameServer(addr), client.Logger(benchQuiet),
		client.InstanceName(fmt.Sprintf("autocreate-%d-%d", time.Now().UnixNano(), id)))
	if err != nil {
		tb.Fatal(err)
	}
	body := []byte("hello")
	return func(ctx context.Context, topic string) error {
			_, err := p.SendSync(ctx, &client.Message{Topic: topic, Body: body})
			return err
		}, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p.Close(ctx)
		}
}

// remotingSender writes what rocketmq-client-go sends for a new topic on a
// connection of its own: the topic's route (TOPIC_NOT_EXIST expected), then
// SEND_MESSAGE_V2 with defaultTopic TBW102 to queue id%4 of this broker.
// (The client reads TBW102's route once and caches it.)
func remotingSender(tb testing.TB, addr string, id int) (func(context.Context, string) error, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	return func(ctx context.Context, topic string) error {
		n++
		var route protocol.Command
		route.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
		(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&route.Ext)
		resp, err := cl.Invoke(ctx, &route)
		if err != nil {
			return err
		}
		if resp.Code != protocol.RespTopicNotExist {
			return fmt.Errorf("route of new topic %s: code %d %s", topic, resp.Code, resp.Remark)
		}
		var send protocol.Command
		send.InitRequest(protocol.ReqSendMessageV2, 0)
		h := protocol.SendMessageRequest{
			ProducerGroup: []byte("autocreate"), Topic: []byte(topic), DefaultTopic: []byte("TBW102"),
			DefaultTopicQueueNums: 4, QueueID: int32(n % 4), BornTimestamp: time.Now().UnixMilli(),
			Properties: message.AppendProperty(nil, "UNIQ_KEY", fmt.Sprintf("%08X%016X", id, n)),
		}
		h.EncodeV2(&send.Ext)
		send.Body = []byte("hello")
		resp, err = cl.Invoke(ctx, &send)
		if err != nil {
			return err
		}
		if resp.Code != protocol.RespSuccess {
			return fmt.Errorf("send to %s: code %d %s", topic, resp.Code, resp.Remark)
		}
		return nil
	}, func() { cl.Close() }
}

var benchQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func benchAutoCreate(b *testing.B, topics, senders int, newSender autoCreateSender) {
	const window = autoCreateWindow
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := l.Addr().String()
		br, err := broker.New(broker.Options{Core: core.Options{DataDir: b.TempDir(), AdvertiseAddr: addr, Logger: benchQuiet, Store: store.Options{SegmentSize: 256 << 20, CleanInterval: -1}}})
		if err != nil {
			b.Fatal(err)
		}
		served := make(chan struct{})
		go func() { defer close(served); br.Serve(l) }()
		sends := make([]func(context.Context, string) error, senders)
		closers := make([]func(), senders)
		for s := range sends {
			sends[s], closers[s] = newSender(b, addr, s)
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
				for {
					k := next.Add(1) - 1
					if k >= int64(topics) || failed.Load() != nil {
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := sends[s](ctx, fmt.Sprintf("AutoCreate-%06d", k))
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

		for _, c := range closers {
			c()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := br.Shutdown(ctx); err != nil {
			b.Error(err)
		}
		cancel()
		<-served
		b.StartTimer()
	}
}
