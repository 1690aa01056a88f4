package litequeue

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// cpuNow is the process's user plus system CPU time.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIndexScale creates APOGEE_BENCH_LITE_N (default 1,000,000) lite
// topics of one entry each in the index alone, then reports the appends'
// rate, the clean Close (TABLE) and Open, and the Open after a crash (no
// TABLE: every block header read, the page cache warm). Run it once:
//
//	go test -run '^$' -bench BenchmarkIndexScale -benchtime=1x ./litequeue/
func BenchmarkIndexScale(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("APOGEE_BENCH_LITE_N"); s != "" {
		fmt.Sscan(s, &n)
	}
	for range b.N {
		dir := b.TempDir()
		x, _, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		names := make([][]byte, n)
		for i := range names {
			names[i] = fmt.Appendf(nil, "session-%08d", i)
		}
		t0, c0 := time.Now(), cpuNow()
		for i, name := range names {
			if _, err := x.Append([]byte("P"), name, Entry{CommitLogOffset: int64(i+1) * 200, Size: 180}, 1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "appends/s")
		b.ReportMetric(float64((cpuNow()-c0).Nanoseconds())/float64(n), "cpu-ns/append")
		t0 = time.Now()
		if err := x.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "close-s")
		t0, c0 = time.Now(), cpuNow()
		x, rep, err := Open(dir, Options{})
		if err != nil || !rep.Clean || rep.Topics != n {
			b.Fatalf("clean open: %+v %v", rep, err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "clean-open-s")
		b.ReportMetric((cpuNow() - c0).Seconds(), "clean-open-cpu-s")
		x.Close()
		os.Remove(filepath.Join(dir, tableName))
		t0, c0 = time.Now(), cpuNow()
		x, rep, err = Open(dir, Options{})
		if err != nil || rep.Clean || rep.Topics != n {
			b.Fatalf("crash open: %+v %v", rep, err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "crash-open-s")
		b.ReportMetric((cpuNow() - c0).Seconds(), "crash-open-cpu-s")
		x.Close()
	}
}
