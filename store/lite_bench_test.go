package store

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

// The lite-topic benchmarks (issue 30; docs/benchmarks.md, "Lite topics
// (issue 30)"). BenchmarkLiteScale is meant to run once (-benchtime=1x):
//
//	go test -run '^$' -bench 'BenchmarkLiteScale' -benchtime=1x -timeout 60m ./store/
//
// APOGEE_BENCH_LITE_N sets the number of lite topics (default 1,000,000).

// liteBenchN is the lite topic count of BenchmarkLiteScale.
func liteBenchN() int {
	n := 1_000_000
	if s := os.Getenv("APOGEE_BENCH_LITE_N"); s != "" {
		fmt.Sscan(s, &n)
	}
	return n
}

// procStatus returns a /proc/self/status field in bytes (kB there).
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v << 10
			}
		}
	}
	return -1
}

// heapAfterGC returns the live heap after two collections.
func heapAfterGC() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// mappingsUnder counts this process's mappings of files under dir.
func mappingsUnder(dir string) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return -1
	}
	return bytes.Count(b, []byte(dir+"/"))
}

// descriptorsUnder counts this process's open descriptors of files under dir.
func descriptorsUnder(dir string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if t, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(t, dir+"/") {
			n++
		}
	}
	return n
}

// diskBytes is what the files under dir take on disk (allocated blocks).
func diskBytes(dir string) int64 {
	var total int64
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
		}
		return nil
	})
	return total
}

// liteProps returns the properties of a message to lite topic i.
func liteProps(i int) []byte {
	return props(message.PropertyLiteTopic, fmt.Sprintf("session-%08d", i), message.PropUniqKey, fmt.Sprintf("U%08d", i))
}

// waitLiteDispatched waits until everything written is dispatched.
func waitLiteDispatched(tb testing.TB, s *Store) {
	wait.For(tb, "dispatch caught up", func() error {
		if d, w := s.DispatchedOffset(), s.WrittenOffset(); d < w {
			return fmt.Errorf("dispatched %d of %d", d, w)
		}
		return nil
	})
}

// BenchmarkLiteScale creates liteBenchN() lite topics under one parent, one
// 100-byte message each, and reports: lite topics created per second (Put
// and dispatch, one writer, batches of 64); heap, anonymous RSS and the
// index's table per lite topic after a GC; index bytes on disk per lite
// topic; the mappings and descriptors of the index held at the end (and
// after the first 1 %); then the time of an expiry scan that deletes none,
// of a clean close and open, of an open after a crash (abort marker, no
// TABLE: the index rebuilt from its block headers, the page cache warm),
// and of deleting every lite topic by expiry.
func BenchmarkLiteScale(b *testing.B) {
	n := liteBenchN()
	o := Options{Dir: b.TempDir(), CleanInterval: -1, ScrubRate: -1, Logger: discardLogger()}
	lqDir := filepath.Join(o.Dir, liteDirName)
	for i := 0; i < b.N; i++ {
		os.RemoveAll(o.Dir)
		s, _, err := Open(o)
		if err != nil {
			b.Fatal(err)
		}
		heap0, anon0 := heapAfterGC(), procStatus("RssAnon")
		body := make([]byte, 100)
		batch := make([]Message, 64)
		var res []PutResult
		early := [2]int{-1, -1}
		start, cpu0 := time.Now(), processCPU(b)
		for done := 0; done < n; {
			k := min(len(batch), n-done)
			for j := range k {
				batch[j] = Message{Topic: "P", QueueID: int32((done + j) % 8), BornHost: born, Body: body, Properties: liteProps(done + j)}
			}
			if res, err = s.PutBatch(batch[:k], res[:0]); err != nil {
				b.Fatal(err)
			}
			done += k
			if early[0] < 0 && done >= n/100 {
				waitLiteDispatched(b, s)
				early = [2]int{mappingsUnder(lqDir), descriptorsUnder(lqDir)}
			}
		}
		waitLiteDispatched(b, s)
		created, createdCPU := time.Since(start), processCPU(b)-cpu0
		if c := s.LiteCount(); c != n {
			b.Fatalf("%d lite topics, want %d", c, n)
		}
		heap1, anon1 := heapAfterGC(), procStatus("RssAnon")
		st := s.LiteStats()
		b.ReportMetric(float64(n)/created.Seconds(), "lite-topics/s")
		b.ReportMetric(float64(createdCPU.Nanoseconds())/float64(n), "create-cpu-ns/lite")
		b.ReportMetric(float64(heap1-heap0)/float64(n), "heap-B/lite")
		b.ReportMetric(float64(anon1-anon0)/float64(n), "rss-anon-B/lite")
		b.ReportMetric(float64(st.TableBytes)/float64(n), "table-B/lite")
		b.ReportMetric(float64(diskBytes(lqDir))/float64(n), "disk-B/lite")
		b.ReportMetric(float64(early[0]), "mappings-at-1%")
		b.ReportMetric(float64(mappingsUnder(lqDir)), "mappings")
		b.ReportMetric(float64(early[1]), "fds-at-1%")
		b.ReportMetric(float64(descriptorsUnder(lqDir)), "fds")

		t0 := time.Now()
		if k, err := s.ExpireLite("P", 0, nil); err != nil || k != 0 {
			b.Fatalf("expiry scan: %d %v", k, err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "expiry-scan-s")

		t0 = time.Now()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "close-s")
		t0, c0 := time.Now(), processCPU(b)
		if s, _, err = Open(o); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "clean-open-s")
		b.ReportMetric((processCPU(b) - c0).Seconds(), "clean-open-cpu-s")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		// A crash: the abort marker back, no TABLE.
		os.WriteFile(filepath.Join(o.Dir, abortName), nil, 0o644)
		os.Remove(filepath.Join(lqDir, "TABLE"))
		t0, c0 = time.Now(), processCPU(b)
		if s, _, err = Open(o); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "crash-open-s")
		b.ReportMetric((processCPU(b) - c0).Seconds(), "crash-open-cpu-s")
		if c := s.LiteCount(); c != n {
			b.Fatalf("after the crash open: %d lite topics, want %d", c, n)
		}

		t0, c0 = time.Now(), processCPU(b)
		if k, err := s.ExpireLite("P", math.MaxInt64, nil); err != nil || k != n {
			b.Fatalf("expire all: %d %v", k, err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "expire-all-s")
		b.ReportMetric((processCPU(b) - c0).Seconds(), "expire-all-cpu-s")
		s.Close()
	}
}

// BenchmarkLitePutVsNormal measures Put + dispatch of a 100-byte message to
// a lite topic, with lite=N distinct lite topics (created beforehand) in
// rotation, against the same message to a normal topic (no lite property,
// the same UNIQ_KEY), from one writer, alternating the two stores in ten
// chunks of b.N/10 (the order swapped every round, so the machine's drift
// falls on both). Each chunk ends when everything is dispatched. It reports
// ns and CPU ns per message of each, and their ratios.
func BenchmarkLitePutVsNormal(b *testing.B) {
	for _, lites := range []int{1, 10_000, 1_000_000} {
		b.Run(fmt.Sprintf("lite=%d", lites), func(b *testing.B) {
			normal := openBenchStore(b)
			lite := openBenchStore(b)
			defer normal.Close()
			defer lite.Close()
			body := make([]byte, 100)
			liteP := make([][]byte, lites)
			for i := range liteP {
				liteP[i] = liteProps(i)
			}
			// Create the lite topics first.
			batch := make([]Message, 64)
			var res []PutResult
			for done := 0; done < lites; {
				k := min(len(batch), lites-done)
				for j := range k {
					batch[j] = Message{Topic: "P", QueueID: int32((done + j) % 8), BornHost: born, Body: body, Properties: liteP[done+j]}
				}
				if _, err := lite.PutBatch(batch[:k], res[:0]); err != nil {
					b.Fatal(err)
				}
				done += k
			}
			waitLiteDispatched(b, lite)
			normalP := props(message.PropUniqKey, "U00000000")
			b.ReportAllocs()
			b.ResetTimer()
			const rounds = 10
			chunk := max(b.N/rounds, 1)
			var tNormal, tLite time.Duration
			var cNormal, cLite time.Duration
			next := 0
			run := func(s *Store, isLite bool) {
				t0, c0 := time.Now(), processCPU(b)
				m := Message{Topic: "P", BornHost: born, Body: body, Properties: normalP}
				for i := 0; i < chunk; i++ {
					m.QueueID = int32(i % 8)
					if isLite {
						m.Properties = liteP[next%lites]
						next++
					}
					if _, err := s.Put(&m); err != nil {
						b.Fatal(err)
					}
				}
				for s.DispatchedOffset() < s.WrittenOffset() {
					runtime.Gosched() // a poll's interval would land on one side
				}
				d, c := time.Since(t0), processCPU(b)-c0
				if isLite {
					tLite += d
					cLite += c
				} else {
					tNormal += d
					cNormal += c
				}
			}
			for r := range rounds {
				if r%2 == 0 {
					run(normal, false)
					run(lite, true)
				} else {
					run(lite, true)
					run(normal, false)
				}
			}
			b.StopTimer()
			msgs := float64(chunk * rounds)
			b.ReportMetric(float64(tNormal.Nanoseconds())/msgs, "ns/msg-normal")
			b.ReportMetric(float64(tLite.Nanoseconds())/msgs, "ns/msg-lite")
			b.ReportMetric(float64(cNormal.Nanoseconds())/msgs, "cpu-ns/msg-normal")
			b.ReportMetric(float64(cLite.Nanoseconds())/msgs, "cpu-ns/msg-lite")
			b.ReportMetric(tLite.Seconds()/tNormal.Seconds(), "time-ratio")
			b.ReportMetric(cLite.Seconds()/cNormal.Seconds(), "cpu-ratio")
		})
	}
}

func openBenchStore(b *testing.B) *Store {
	s, _, err := Open(Options{Dir: b.TempDir(), CleanInterval: -1, ScrubRate: -1, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
