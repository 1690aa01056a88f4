package broker

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/metrics"
	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/store"
)

// metricsBroker is benchBroker with the metrics listener's request hook
// on (observed into a rocketmq_rpc_latency histogram), or off; timed
// makes it time requests for the slow-request log as apogee-broker does
// by default (--slow-request 500ms), so that on and off differ by the
// observation alone, as they do in the binary.
func metricsBroker(tb testing.TB, dir string, on, timed bool) *Broker {
	tb.Helper()
	opts := testOptions(tb, dir)
	if _, ok := tb.(*testing.B); ok {
		opts.Core.Logger = slog.New(slog.DiscardHandler) // benchmarks stay quiet
		opts.Remoting = nil
	}
	if timed {
		opts.SlowRequest = 500 * time.Millisecond
	}
	opts.Core.AdvertiseAddr = "127.0.0.1:10911"
	opts.Core.Store = store.Options{SegmentSize: 256 << 20, CleanInterval: -1, IndexSlots: 1 << 16, IndexMaxEntries: 1 << 20}
	if os.Getenv("APOGEE_BENCH_FLUSH") == "sync" {
		opts.Core.Store.FlushMode = commitlog.FlushSync
	}
	if on {
		opts.ObserveRequest = metrics.NewRPCLatency("remoting", nil).Observe
	}
	b, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Shutdown(ctx)
	})
	if on {
		// The exporter reads the core at scrape time; build it as the
		// binary does, so that a scrape during the benchmark is possible.
		if _, err := metrics.New(metrics.Options{Core: b.Core(), Remoting: b.RemotingStats}); err != nil {
			tb.Fatal(err)
		}
	}
	return b
}

// TestObservedSendDoesNotAllocate: with the request hook on, a send still
// allocates nothing (the hook's histogram observation included).
func TestObservedSendDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	b := metricsBroker(t, t.TempDir(), true, true)
	req := goSendRequest("ObservedAllocs", 0)
	d := &handlerDriver{b: b}
	d.serve(req) // auto-create the topic, create the histogram's series
	if allocs := testing.AllocsPerRun(2000, func() {
		if r := d.serve(req); r.Cmd.Code != 0 {
			t.Fatalf("send: %d %s", r.Cmd.Code, r.Cmd.Remark)
		}
	}); allocs != 0 {
		t.Fatalf("observed send handler: %v allocations per request", allocs)
	}
}

// BenchmarkSendHandlerMetrics is BenchmarkSendHandler with the metrics
// hook off and on, both timing requests for the slow-request log as the
// binary does by default; bare times nothing (the handler benchmarks'
// usual setting). Run them alternately to compare (scripts/bench-metrics.sh,
// docs/benchmarks.md).
func BenchmarkSendHandlerMetrics(b *testing.B) {
	for _, c := range []struct {
		name      string
		on, timed bool
	}{{"bare", false, false}, {"off", false, true}, {"on", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			br := metricsBroker(b, b.TempDir(), c.on, c.timed)
			req := goSendRequest("BenchSendMetrics", 0)
			d := &handlerDriver{b: br}
			d.serve(req)
			b.ReportAllocs()
			b.SetBytes(1024)
			b.ResetTimer()
			for range b.N {
				if r := d.serve(req); r.Cmd.Code != 0 {
					b.Fatal(r.Cmd.Code)
				}
			}
		})
	}
}
