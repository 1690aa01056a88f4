package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// benchBroker opens a broker without a listener (handlers are called
// directly). APOGEE_BENCH_FLUSH=sync selects sync flushing.
func benchBroker(tb testing.TB, dir string) *Broker {
	tb.Helper()
	opts := testOptions(tb, dir)
	if _, ok := tb.(*testing.B); ok {
		opts.Core.Logger = slog.New(slog.DiscardHandler) // benchmarks stay quiet
		opts.Remoting = nil
	}
	opts.Core.AdvertiseAddr = "127.0.0.1:10911"
	opts.Core.Store = store.Options{SegmentSize: 256 << 20, CleanInterval: -1, IndexSlots: 1 << 16, IndexMaxEntries: 1 << 20}
	if os.Getenv("APOGEE_BENCH_FLUSH") == "sync" {
		opts.Core.Store.FlushMode = commitlog.FlushSync
	}
	opts.Core.MaxMessageSize = 4 << 20
	b, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Shutdown(ctx)
	})
	return b
}

// goSendRequest is a 1 KiB send shaped as rocketmq-client-go sends it
// (UNIQ_KEY and TAGS properties, long keys).
func goSendRequest(topic string, q int32) *protocol.Command {
	return sendRequest(topic, q, make([]byte, 1024), props("UNIQ_KEY", "C0A80001000000000000000000000001", "TAGS", "TagA", "KEYS", "k"))
}

// handlerDriver runs the handler the way a connection does, with a reused
// response (the connection owns it, so the test does too).
type handlerDriver struct {
	b    *Broker
	cmd  protocol.Command
	resp remoting.Response
}

func (d *handlerDriver) serve(req *protocol.Command) *remoting.Response {
	d.cmd.InitResponse(req, protocol.RespSuccess)
	d.resp = remoting.Response{Cmd: &d.cmd}
	d.b.ServeRemoting(nil, req, &d.resp)
	return &d.resp
}

func TestSendHandlerDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	b := benchBroker(t, t.TempDir())
	req := goSendRequest("Allocs", 0)
	d := &handlerDriver{b: b}
	d.serve(req) // auto-create the topic
	allocs := testing.AllocsPerRun(2000, func() {
		if r := d.serve(req); r.Cmd.Code != 0 {
			t.Fatalf("send: %d %s", r.Cmd.Code, r.Cmd.Remark)
		}
	})
	if allocs != 0 {
		t.Fatalf("send handler: %v allocations per request (store included)", allocs)
	}
	batch := sendV2Request(protocol.ReqSendBatchMessage, "Allocs", 1,
		batchBody(batchEntry{"a", props("TAGS", "x")}, batchEntry{"b", ""}, batchEntry{"c", props("KEYS", "k")}), "")
	allocs = testing.AllocsPerRun(1000, func() {
		if r := d.serve(batch); r.Cmd.Code != 0 {
			t.Fatalf("batch: %d %s", r.Cmd.Code, r.Cmd.Remark)
		}
	})
	if allocs != 0 {
		t.Fatalf("batch send handler: %v allocations per request", allocs)
	}
}

// fillQueue sends n 1 KiB messages to (topic, 0) and waits until they are visible.
func fillQueue(tb testing.TB, b *Broker, topic string, n int) {
	tb.Helper()
	req := goSendRequest(topic, 0)
	d := &handlerDriver{b: b}
	for range n {
		if r := d.serve(req); r.Cmd.Code != 0 {
			tb.Fatalf("send: %d %s", r.Cmd.Code, r.Cmd.Remark)
		}
	}
	wait.For(tb, fmt.Sprintf("%d messages of %s dispatched", n, topic), func() error {
		if got := b.Store().MaxOffset(topic, 0); got < int64(n) {
			return fmt.Errorf("%d dispatched", got)
		}
		return nil
	})
}

func TestPullHandlerDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	b := benchBroker(t, t.TempDir())
	fillQueue(t, b, "Pull", 256)
	req := pullRequest(pullArgs{group: "g", topic: "Pull", sysFlag: 4 | protocol.PullFlagCommitOffset, sub: "TagA"})
	d := &handlerDriver{b: b}
	off := int64(0)
	run := func() {
		req.Ext.SetInt("queueOffset", off)
		r := d.serve(req)
		if r.Cmd.Code != 0 || len(r.Body) != 32 {
			t.Fatalf("pull: %d %s, %d records", r.Cmd.Code, r.Cmd.Remark, len(r.Body))
		}
		r.Release.Release() // what the connection does once the body is written
		off = (off + 32) % 224
	}
	run()
	if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
		t.Fatalf("pull handler: %v allocations per request", allocs)
	}
}

// BenchmarkSendHandler measures the broker's send path alone (handler plus
// store, no network): one 1 KiB message per request.
func BenchmarkSendHandler(b *testing.B) {
	br := benchBroker(b, b.TempDir())
	req := goSendRequest("BenchSendHandler", 0)
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
}

// BenchmarkPull32 measures a pull of 32 x 1 KiB messages from page cache,
// handler alone: the body is handed to the connection as views of the commit
// log, so bytes/op stays far below the 32 KiB pulled.
func BenchmarkPull32(b *testing.B) {
	br := benchBroker(b, b.TempDir())
	const n = 4096
	fillQueue(b, br, "BenchPull", n)
	req := pullRequest(pullArgs{group: "g", topic: "BenchPull", sysFlag: 4, sub: "*"})
	d := &handlerDriver{b: br}
	b.ReportAllocs()
	b.SetBytes(32 * 1024)
	b.ResetTimer()
	off := int64(0)
	for range b.N {
		req.Ext.SetInt("queueOffset", off)
		r := d.serve(req)
		if r.Cmd.Code != 0 || len(r.Body) != 32 {
			b.Fatalf("pull: %d, %d records", r.Cmd.Code, len(r.Body))
		}
		r.Release.Release()
		off = (off + 32) % n
	}
}

// BenchmarkSend drives a broker over loopback with 64 sends of 1 KiB in
// flight on one connection (the way a Go client's async producer pipelines
// them), and reports sends per second. APOGEE_BENCH_CONNS spreads the 64
// over more connections; APOGEE_BENCH_FLUSH=sync flushes synchronously;
// APOGEE_BENCH_DIR puts the data elsewhere than the temporary directory.
func BenchmarkSend(b *testing.B) {
	dir := b.TempDir()
	if d := os.Getenv("APOGEE_BENCH_DIR"); d != "" {
		dir = d
	}
	br := benchBroker(b, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go br.Serve(l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conns := 1
	if v, err := strconv.Atoi(os.Getenv("APOGEE_BENCH_CONNS")); err == nil && v > 0 {
		conns = v
	}
	cls := make([]*remoting.Client, conns)
	for i := range cls {
		cl, err := remoting.Dial(ctx, l.Addr().String(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		cls[i] = cl
	}
	const inflight = 64
	warm := goSendRequest("BenchSend", 0)
	if _, err := cls[0].Invoke(ctx, warm); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	var failed atomic.Int64
	b.ReportAllocs()
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := cls[w%len(cls)]
			req := goSendRequest("BenchSend", int32(w%4))
			var resp protocol.Command
			ctx := context.Background()
			for next.Add(1) <= int64(b.N) {
				if err := cl.InvokeInto(ctx, req, &resp); err != nil || resp.Code != 0 {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d sends failed", f)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "sends/s")
	if ls := br.Store().Log().Stats(); ls.SyncRounds > 0 && br.Store().Log().FlushMode() == commitlog.FlushSync {
		b.ReportMetric(float64(ls.SyncTime.Microseconds())/float64(ls.SyncRounds), "µs/sync")
		b.ReportMetric(float64(b.N)/float64(ls.SyncRounds), "sends/sync")
	}
	var frames, writes uint64
	br.srv.Range(func(c *remoting.Conn) bool {
		st := c.Stats()
		frames, writes = frames+st.FramesOut, writes+st.Writes
		return true
	})
	if writes > 0 {
		b.ReportMetric(float64(frames)/float64(writes), "srv-frames/write")
	}
	var cf, cw uint64
	for _, cl := range cls {
		st := cl.Stats()
		cf, cw = cf+st.FramesOut, cw+st.Writes
	}
	if cw > 0 {
		b.ReportMetric(float64(cf)/float64(cw), "cli-frames/write")
	}
}

// TestRoutedSendsDoNotAllocate: delayed, timer and transactional (half)
// sends are rerouted on the same zero-allocation path as ordinary ones.
func TestRoutedSendsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	b := benchBroker(t, t.TempDir())
	d := &handlerDriver{b: b}
	for name, p := range map[string]string{
		"delay": props("UNIQ_KEY", "C0A80001000000000000000000000001", "DELAY", "3", "TAGS", "a"),
		"timer": props("UNIQ_KEY", "C0A80001000000000000000000000002", "TIMER_DELAY_MS", "3600000"),
		"half":  props("UNIQ_KEY", "C0A80001000000000000000000000003", "TRAN_MSG", "true", "PGROUP", "pg"),
	} {
		req := sendRequest("Routed", 0, make([]byte, 512), p)
		d.serve(req) // auto-create the topic
		allocs := testing.AllocsPerRun(2000, func() {
			if r := d.serve(req); r.Cmd.Code != 0 {
				t.Fatalf("%s send: %d %s", name, r.Cmd.Code, r.Cmd.Remark)
			}
		})
		if allocs != 0 {
			t.Errorf("%s send: %v allocations per request", name, allocs)
		}
	}
}

// BenchmarkDelaySendHandler is BenchmarkSendHandler for a DELAY=3 message
// (rerouted to SCHEDULE_TOPIC_XXXX).
func BenchmarkDelaySendHandler(b *testing.B) {
	br := benchBroker(b, b.TempDir())
	req := sendRequest("BenchDelay", 0, make([]byte, 1024), props("UNIQ_KEY", "C0A80001000000000000000000000001", "DELAY", "3"))
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
}
