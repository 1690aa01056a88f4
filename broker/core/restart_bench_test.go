package core

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

func restartEnvInt(tb testing.TB, name string, def int) int {
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

// BenchmarkRestart measures New on a data directory holding
// APOGEE_BENCH_TOPICS (default 20,000) topics of 8 queues (160,000 queues in
// topics.json), one message in each of the first APOGEE_BENCH_FILLED
// (default 8) queues of every topic (so 160,000 consume-queue directories by
// default), after a clean stop. It reports each
// phase of New: load_ms (reading topics.json and the other state files),
// store_ms (store.Open: the commit log and every consume queue), tables_ms
// (system topics, the start-time writes), and total_ms (the remoting front
// end adds the embedded registry's first full registration to New). Building the directory takes minutes, so it
// is built in APOGEE_BENCH_DIR (required; the benchmark is skipped without
// it) once and reused by later runs; remove it afterwards. Consume-queue
// files hold APOGEE_BENCH_CQ_ENTRIES (default 1,024) entries, to spare the
// disk 128 KiB of reservation per queue.
//
//	APOGEE_BENCH_DIR=/tmp/restart20k go test -run '^$' -bench Restart -benchtime=5x ./broker/core/
func BenchmarkRestart(b *testing.B) {
	topics := restartEnvInt(b, "APOGEE_BENCH_TOPICS", 20000)
	entries := restartEnvInt(b, "APOGEE_BENCH_CQ_ENTRIES", 1024)
	const queues = 8
	filled := min(restartEnvInt(b, "APOGEE_BENCH_FILLED", queues), queues)
	dir := os.Getenv("APOGEE_BENCH_DIR")
	if dir == "" {
		b.Skip("set APOGEE_BENCH_DIR to a directory for the data (built once, reused)")
	}
	opts := testOptions(b, dir)
	opts.Logger = slog.New(slog.DiscardHandler) // benchmarks stay quiet
	opts.Store = store.Options{SegmentSize: 256 << 20, ConsumeQueueEntries: entries, CleanInterval: -1,
		IndexSlots: 1 << 16, IndexMaxEntries: 1 << 20}
	marker := filepath.Join(dir, fmt.Sprintf("bench-restart-%d-%d-%d", topics, filled, entries))
	if _, err := os.Stat(marker); err != nil {
		buildRestartDir(b, opts, topics, queues, filled)
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var load, st, tables, total time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		br, err := New(opts)
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		load += br.startup.load
		st += br.startup.store
		tables += br.startup.tables
		b.StopTimer()
		if n := br.topics.count(); n < topics {
			b.Fatalf("%d topics loaded", n)
		}
		if err := br.Shutdown(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(load), "load_ms")
	b.ReportMetric(ms(st), "store_ms")
	b.ReportMetric(ms(tables), "tables_ms")
	b.ReportMetric(ms(total), "total_ms")
}

// buildRestartDir creates the topics and sends one message to each of
// their first filled queues.
func buildRestartDir(b *testing.B, opts Options, topics, queues, filled int) {
	b.Helper()
	start := time.Now()
	br, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < topics; i++ {
		br.topics.put(newTopicConfig(fmt.Sprintf("Restart-%06d", i), int32(queues), protocol.PermRead|protocol.PermWrite))
	}
	if err := br.topics.persist(false); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 100)
	var res SendResult
	for q := 0; q < filled; q++ {
		for i := 0; i < topics; i++ {
			if err := br.Send(&SendRequest{Topic: []byte(fmt.Sprintf("Restart-%06d", i)), QueueID: int32(q), Body: body}, &res); err != nil {
				b.Fatalf("send: %v", err)
			}
		}
		b.Logf("queue %d of %d filled after %v", q+1, filled, time.Since(start).Round(time.Second))
	}
	if err := br.Shutdown(); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d topics x %d queues (%d with a message) in %v", topics, queues, filled, time.Since(start).Round(time.Second))
}
