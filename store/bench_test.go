package store

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"golang.org/x/sys/unix"
)

func benchOptions(b *testing.B, mode commitlog.FlushMode) Options {
	o := Options{Dir: b.TempDir(), FlushMode: mode, CleanInterval: -1}
	if os.Getenv("APOGEE_BENCH_NOCKPT") != "" {
		o.CheckpointInterval = time.Hour
	}
	if s := os.Getenv("APOGEE_BENCH_SEGMENT"); s != "" {
		fmt.Sscan(s, &o.SegmentSize)
	}
	if s := os.Getenv("APOGEE_BENCH_MAXLAG"); s != "" {
		fmt.Sscan(s, &o.MaxDispatchLag)
	}
	return o
}

// BenchmarkPutDispatch measures Put of 1 KiB messages (async flush) from 4
// goroutines, and waits at the end until everything is dispatched (visible to
// Get and indexed), over 1 topic × 8 queues and 1,000 topics × 8 queues.
//
// keys=fixed gives every message KEYS "order-1" (one index slot per topic);
// keys=unique gives each a UNIQ_KEY, as every RocketMQ client sets, and KEYS
// "order-<n>": two index entries per message in random slots.
func BenchmarkPutDispatch(b *testing.B) {
	for _, keys := range []string{"fixed", "unique"} {
		for _, topics := range []int{1, 1000} {
			b.Run(fmt.Sprintf("keys=%s/topics=%d/queues=8", keys, topics), func(b *testing.B) {
				benchPutDispatch(b, topics, keys == "unique")
			})
		}
	}
}

func benchPutDispatch(b *testing.B, topics int, uniqueKeys bool) {
	if topics > 1 && probeRun(b) {
		return
	}
	l := newPutLoad(b, topics, uniqueKeys)
	b.SetBytes(int64(len(l.body)))
	b.ReportAllocs()
	warmHostMemory(l.s.opts.Dir)
	b.ResetTimer()
	stopProfile := startTimedProfile(b)
	cpu0 := processCPU(b)
	l.put(b, int64(b.N))
	b.StopTimer()
	stopProfile()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(l.s.Stats().LagWaits), "lag-waits")
	// CPUs busy during the timed part (2 = both cores of the bench machine):
	// below the machine's count, something other than CPU sets the pace.
	b.ReportMetric((processCPU(b)-cpu0).Seconds()/b.Elapsed().Seconds(), "cpus")
}

// BenchmarkPutDispatchRatio measures what BenchmarkPutDispatch does for 1
// topic and for 1,000 topics in one process, alternating between the two
// stores in ten chunks of b.N/10 messages each (the order swapped every
// round), and reports each rate and the ratio of the two. On a machine whose
// speed drifts from minute to minute, separate runs make the ratio swing by
// more than the effects being measured; alternating chunks share the drift.
func BenchmarkPutDispatchRatio(b *testing.B) {
	for _, keys := range []string{"fixed", "unique"} {
		b.Run("keys="+keys, func(b *testing.B) {
			if probeRun(b) {
				return
			}
			one := newPutLoad(b, 1, keys == "unique")
			many := newPutLoad(b, 1000, keys == "unique")
			warmHostMemory(one.s.opts.Dir)
			b.ResetTimer()
			const rounds = 10
			chunk := max(int64(b.N)/rounds, 1)
			var tOne, tMany time.Duration
			timed := func(l *putLoad, t *time.Duration) {
				start := time.Now()
				l.put(b, chunk)
				*t += time.Since(start)
			}
			for r := range rounds {
				if r%2 == 0 {
					timed(one, &tOne)
					timed(many, &tMany)
				} else {
					timed(many, &tMany)
					timed(one, &tOne)
				}
			}
			b.StopTimer()
			n := float64(chunk * rounds)
			b.ReportMetric(n/tOne.Seconds(), "msgs/s-1-topic")
			b.ReportMetric(n/tMany.Seconds(), "msgs/s-1000-topics")
			b.ReportMetric(tOne.Seconds()/tMany.Seconds(), "ratio")
		})
	}
}

// BenchmarkPutDispatchVsAppend measures issue 3's first target in one
// process: Put + dispatch of 1 KiB messages into 1 topic × 8 queues against
// the commit log's own async append of the same records (encoded with their
// CRC, as commitlog's BenchmarkAppend does), both from benchWriters()
// goroutines. It alternates the two in ten chunks of b.N/10 records (the
// order swapped every round), so that the machine's drift from minute to
// minute falls on both, and reports each rate, their ratio, and the CPU
// time each spends per message.
func BenchmarkPutDispatchVsAppend(b *testing.B) {
	if probeRun(b) {
		return
	}
	store := newPutLoad(b, 1, false)
	dir := b.TempDir()
	log, _, err := commitlog.Open(commitlog.Options{Dir: dir, SegmentSize: store.s.opts.SegmentSize,
		FlushMode: commitlog.FlushAsync, RetentionInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { log.Close() })
	warmHostMemory(dir)
	b.SetBytes(int64(len(store.body)))
	b.ResetTimer()
	stopProfile := startTimedProfile(b)
	const rounds = 10
	chunk := max(int64(b.N)/rounds, 1)
	var tPut, tAppend, cpuPut, cpuAppend time.Duration
	put := func() {
		start, cpu := time.Now(), processCPU(b)
		store.put(b, chunk)
		tPut += time.Since(start)
		cpuPut += processCPU(b) - cpu
	}
	appendOnly := func() {
		start, cpu := time.Now(), processCPU(b)
		appendRecords(b, log, store, chunk)
		tAppend += time.Since(start)
		cpuAppend += processCPU(b) - cpu
	}
	for r := range rounds {
		if r%2 == 0 {
			put()
			appendOnly()
		} else {
			appendOnly()
			put()
		}
	}
	b.StopTimer()
	stopProfile()
	n := float64(chunk * rounds)
	b.ReportMetric(n/tPut.Seconds(), "msgs/s-put-dispatch")
	b.ReportMetric(n/tAppend.Seconds(), "msgs/s-log-append")
	b.ReportMetric(tAppend.Seconds()/tPut.Seconds(), "ratio")
	// CPU time per message, both cores together: on two cores the two rates
	// follow these when both runs keep the cores busy.
	b.ReportMetric(float64(cpuPut.Nanoseconds())/n, "cpu-ns/msg-put-dispatch")
	b.ReportMetric(float64(cpuAppend.Nanoseconds())/n, "cpu-ns/msg-log-append")
}

// appendRecords appends n records to log from benchWriters() goroutines, each
// encoding its record (with its CRC) before every append: the messages of l,
// with the store's stamps left out.
func appendRecords(b *testing.B, log *commitlog.Log, l *putLoad, n int64) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchWriters() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := message.Record{Topic: l.names[0], BornHost: born, StoreHost: born, Body: l.body, Properties: l.pr}
			var buf []byte
			res := commitlog.Result{Offsets: make([]int64, 0, 1)}
			for i := next.Add(1); i <= n; i = next.Add(1) {
				r.QueueID = int32(i % 8)
				var err error
				if buf, err = message.AppendRecord(buf[:0], &r); err != nil {
					b.Error(err)
					return
				}
				res.Offsets = res.Offsets[:0]
				if err := log.Append(buf, nil, &res); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// probeRun reports whether this is the b.N = 1 run that go test makes of
// every benchmark before the measured one (and of a benchmark a -bench
// pattern matches only in part, to look for sub-benchmarks): its result is
// discarded unless -benchtime 1x asked for exactly that run. A benchmark with
// a costly set-up returns at once then: creating 8,000 queue files takes a
// minute or more, and a set-up that warms host memory or writes a CPU profile
// would overwrite the measured run's.
func probeRun(b *testing.B) bool {
	if b.N != 1 {
		return false
	}
	f := flag.Lookup("test.benchtime")
	return f == nil || f.Value.String() != "1x"
}

// putLoad is a store with its topics' queues created (and dispatched), for
// timed puts of 1 KiB messages.
type putLoad struct {
	s      *Store
	names  []string
	unique bool
	body   []byte
	pr     []byte
	ids    *message.UniqIDGenerator
	next   atomic.Int64 // messages put so far; the writers share the sequence
}

// newPutLoad opens a store (closed when the benchmark ends) and creates every
// queue of its topics before timing: the figure is the steady state, not the
// one-off cost of creating 8,000 queue files.
func newPutLoad(b *testing.B, topics int, uniqueKeys bool) *putLoad {
	s, _, err := Open(benchOptions(b, commitlog.FlushAsync))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	l := &putLoad{s: s, names: make([]string, topics), unique: uniqueKeys,
		body: make([]byte, 1024), pr: props("KEYS", "order-1", "TAGS", "TagA"),
		ids: message.NewUniqIDGenerator(born.Addr(), os.Getpid())}
	for i := range l.names {
		l.names[i] = fmt.Sprintf("bench-topic-%d", i)
	}
	for _, name := range l.names {
		for q := int32(0); q < 8; q++ {
			if _, err := s.Put(&Message{Topic: name, QueueID: q, BornHost: born, Body: l.body, Properties: l.pr}); err != nil {
				b.Fatal(err)
			}
		}
	}
	l.waitDispatched(time.Millisecond)
	return l
}

// put puts n more messages from benchWriters() goroutines, round robin over
// the topics and their 8 queues, and returns once all are dispatched.
func (l *putLoad) put(b *testing.B, n int64) {
	end := l.next.Load() + n
	topics := int64(len(l.names))
	var wg sync.WaitGroup
	for range benchWriters() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := Message{BornHost: born, Body: l.body, Properties: l.pr}
			var buf, id, order []byte
			for {
				i := l.next.Add(1)
				if i > end {
					return
				}
				if l.unique {
					id = l.ids.AppendNext(id[:0])
					order = strconv.AppendInt(append(order[:0], "order-"...), i, 10)
					buf = message.AppendProperty(buf[:0], message.PropUniqKey, string(id))
					buf = message.AppendProperty(buf, message.PropKeys, string(order))
					buf = message.AppendProperty(buf, message.PropTags, "TagA")
					m.Properties = buf
				}
				m.Topic = l.names[i%topics]
				m.QueueID = int32(i/topics) % 8
				if _, err := l.s.Put(&m); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	l.next.Store(end) // the writers overshot it by one each
	l.waitDispatched(50 * time.Microsecond)
}

// waitDispatched polls every poll until dispatch reaches the log's end: in
// the measured part of a benchmark, so its pause is the measurement's
// resolution (the wait helper's growing pauses would blur it).
func (l *putLoad) waitDispatched(poll time.Duration) {
	for l.s.DispatchedOffset() < l.s.Log().WrittenOffset() {
		time.Sleep(poll)
	}
}

// startTimedProfile marks the timed part for profilers (go test's
// -cpuprofile also covers the set-up, which for 8,000 queues dwarfs the
// steady state): APOGEE_BENCH_CPUPROFILE=f writes a CPU profile of it alone
// to f, APOGEE_BENCH_TRACE=f an execution trace (go tool trace) of it alone,
// and APOGEE_BENCH_MONO=1 logs its CLOCK_MONOTONIC bounds for
// perf report --time (with perf record -k CLOCK_MONOTONIC). It returns the
// function that ends the timed part.
func startTimedProfile(b *testing.B) func() {
	mono := os.Getenv("APOGEE_BENCH_MONO") != ""
	if mono {
		b.Logf("timed part starts at monotonic %s", monotonicNow())
	}
	f := startToFile(b, "APOGEE_BENCH_CPUPROFILE", pprof.StartCPUProfile)
	tf := startToFile(b, "APOGEE_BENCH_TRACE", trace.Start)
	return func() {
		if f != nil {
			pprof.StopCPUProfile()
			f.Close()
		}
		if tf != nil {
			trace.Stop()
			tf.Close()
		}
		if mono {
			b.Logf("timed part ends at monotonic %s", monotonicNow())
		}
	}
}

// startToFile, when the environment variable env names a file, creates it
// and starts the profile or trace there; it returns the file (nil otherwise).
func startToFile(b *testing.B, env string, start func(io.Writer) error) *os.File {
	path := os.Getenv(env)
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := start(f); err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkGet32 reads 32-message batches of 1 KiB messages from the page
// cache as views.
func BenchmarkGet32(b *testing.B) {
	s, _, err := Open(benchOptions(b, commitlog.FlushAsync))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 200_000
	m := Message{Topic: "get", BornHost: born, Body: make([]byte, 1024)}
	for i := 0; i < n; i++ {
		if _, err := s.Put(&m); err != nil {
			b.Fatal(err)
		}
	}
	waitVisible(b, s, "get", 0, int64(n))
	benchRead(b, n, func(off int64, res *GetResult) error { return s.Get("get", 0, off, 32, 1<<20, nil, res) })
}

// BenchmarkDispatchLatency measures, for 1 KiB messages put by one goroutine
// while 3 others load the store, the time from Put returning to the message
// being visible to Get; it reports p50 and p99.
func BenchmarkDispatchLatency(b *testing.B) {
	s, _, err := Open(benchOptions(b, commitlog.FlushAsync))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	body := make([]byte, 1024)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var probes, load atomic.Int64
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			m := Message{Topic: "load", QueueID: int32(w), BornHost: born, Body: body}
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Load, bounded: about 30 messages per probe, so the run's
				// size follows b.N rather than the clock.
				if load.Load() > 30*(probes.Load()+1) {
					runtime.Gosched()
					continue
				}
				load.Add(1)
				s.Put(&m)
			}
		}(w)
	}
	lat := make([]time.Duration, 0, b.N)
	m := Message{Topic: "probe", BornHost: born, Body: body}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := s.Put(&m)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for s.MaxOffset("probe", 0) <= r.QueueOffset {
			runtime.Gosched() // two cores: let the dispatcher run
		}
		lat = append(lat, time.Since(start))
		probes.Add(1)
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1000, "p99-µs")
}

// BenchmarkRecoverAfterCrash fills a store (APOGEE_BENCH_RECOVER_GIB GiB of
// commit log, default 10, over 1,000 topics × 1 queue), then makes the next
// open take the worst crash path: the abort marker present, the commit log's
// checkpoint and the store's checkpoint both unreadable. Open then validates
// every record of the log (CRC included) and re-dispatches all of it.
func BenchmarkRecoverAfterCrash(b *testing.B) {
	gib := int64(10)
	if s := os.Getenv("APOGEE_BENCH_RECOVER_GIB"); s != "" {
		fmt.Sscan(s, &gib)
	}
	dir := b.TempDir()
	o := Options{Dir: dir, CleanInterval: -1}
	s, _, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	batch := make([]Message, 64)
	for i := range batch {
		batch[i] = Message{QueueID: 0, BornHost: born, Body: body, Properties: props("KEYS", fmt.Sprint("key-", i))}
	}
	var res []PutResult
	for n := 0; s.Log().WrittenOffset() < gib<<30; n++ {
		for i := range batch {
			batch[i].Topic = fmt.Sprintf("topic-%d", (n*64+i)%1000)
		}
		if res, err = s.PutBatch(batch, res[:0]); err != nil {
			b.Fatal(err)
		}
	}
	records := s.Stats().Puts
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	crash := func() {
		os.WriteFile(filepath.Join(dir, abortName), nil, 0o644)
		os.WriteFile(filepath.Join(dir, "commitlog", "CHECKPOINT"), []byte("torn"), 0o644)
		os.WriteFile(filepath.Join(dir, checkpointName), []byte("torn"), 0o644)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		crash()
		b.StartTimer()
		s, rep, err := Open(o)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if rep.Clean || rep.ScannedRecords != records {
			b.Fatalf("recovery scanned %d of %d records: %s", rep.ScannedRecords, records, rep)
		}
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(records), "records")
}

// processCPU is the user plus system CPU time the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// monotonicNow is CLOCK_MONOTONIC as seconds.micros, perf's -k CLOCK_MONOTONIC timestamps.
func monotonicNow() string {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("%d.%06d", ts.Sec, ts.Nsec/1000)
}

// warmHostMemory, with APOGEE_BENCH_WARM set, populates and deletes a file of
// 2 GiB (or APOGEE_BENCH_WARM GiB when that is a larger number) in dir just
// before timing, so the run's page cache reuses pages the
// host has backed (this VM returns freed memory to its host, and a page it
// has to back again costs a host fault; see docs/benchmarks.md).
func warmHostMemory(dir string) {
	env := os.Getenv("APOGEE_BENCH_WARM")
	if env == "" {
		return
	}
	size := int64(2 << 30)
	if gib, err := strconv.Atoi(env); err == nil && gib > 2 {
		size = int64(gib) << 30
	}
	name := filepath.Join(dir, "warm")
	f, err := os.Create(name)
	if err != nil {
		panic(err)
	}
	defer os.Remove(name)
	defer f.Close()
	unix.Fallocate(int(f.Fd()), 0, 0, size)
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		panic(err)
	}
	unix.Madvise(m, 23)
	unix.Munmap(m)
}

// benchWriters is how many goroutines put in the PutDispatch benchmarks: 4,
// or APOGEE_BENCH_WRITERS.
func benchWriters() int {
	if n, err := strconv.Atoi(os.Getenv("APOGEE_BENCH_WRITERS")); err == nil && n > 0 {
		return n
	}
	return 4
}

// BenchmarkOpenManyQueues measures a clean restart of a store holding
// APOGEE_BENCH_QUEUES queues (default 160,000: 20,000 topics × 8) with
// one message each: what a broker's restart costs the store after 20,000
// auto-created topics. The figure is ns/op = one Open. APOGEE_BENCH_DIR
// keeps the filled directory there between runs (filled when empty);
// APOGEE_BENCH_CPUPROFILE profiles the first Open alone.
func BenchmarkOpenManyQueues(b *testing.B) {
	queues := 160_000
	if s := os.Getenv("APOGEE_BENCH_QUEUES"); s != "" {
		fmt.Sscan(s, &queues)
	}
	if probeRun(b) {
		return
	}
	dir := os.Getenv("APOGEE_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	o := Options{Dir: dir, SegmentSize: 64 << 20, CleanInterval: -1, ScrubRate: -1}
	if _, err := os.Stat(filepath.Join(dir, "commitlog")); err != nil {
		s, _, err := Open(o)
		if err != nil {
			b.Fatal(err)
		}
		body := make([]byte, 100)
		batch := make([]Message, 8)
		var res []PutResult
		for t := 0; t < queues/8; t++ {
			for q := range batch {
				batch[q] = Message{Topic: fmt.Sprintf("topic-%05d", t), QueueID: int32(q), BornHost: born, Body: body}
			}
			if res, err = s.PutBatch(batch, res[:0]); err != nil {
				b.Fatal(err)
			}
		}
		wait.Until(b, "dispatch to the end of the log", func() bool { return s.DispatchedOffset() >= s.Log().WrittenOffset() })
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		stop := func() {}
		if i == 0 {
			stop = startTimedProfile(b)
		}
		s, rep, err := Open(o)
		if err != nil {
			b.Fatal(err)
		}
		stop()
		b.StopTimer()
		if !rep.Verified {
			b.Fatalf("restart not verified: %s", rep)
		}
		n := 0
		s.Queues(func(string, int32, int64, int64) bool { n++; return true })
		if n != queues {
			b.Fatalf("%d queues after the restart, want %d", n, queues)
		}
		s.Close()
		b.StartTimer()
	}
}
