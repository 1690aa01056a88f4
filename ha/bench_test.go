package ha

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/store"
)

// benchBacklog is the commit log a slave catches up in BenchmarkCatchUp
// (APOGEE_HA_BENCH_MIB overrides, in MiB).
func benchBacklog() int64 {
	if v, err := strconv.Atoi(os.Getenv("APOGEE_HA_BENCH_MIB")); err == nil && v > 0 {
		return int64(v) << 20
	}
	return 512 << 20
}

// BenchmarkCatchUp measures the replication stream: a new slave (an empty
// replica store) catches up a master's backlog of 1 KiB messages over
// loopback TCP. The time is from the slave's start until its commit log ends
// where the master's does (appended and validated, not yet all dispatched);
// MB/s is that throughput, for three frame sizes (MasterOptions.BatchSize).
// dispatch-ms is how much longer the slave took to make every message
// visible in its consume queues. The tls/ runs do the same over TLS (an
// enforcing master, tlsconf, with the test PKI's ECDSA P-256 certificate;
// AES-GCM as Go negotiates it), in the same process, for the cost of the
// encryption and of the copy it needs (docs/replication.md).
func BenchmarkCatchUp(b *testing.B) {
	backlog := benchBacklog()
	o := storeOptions(b.TempDir())
	o.SegmentSize = 128 << 20
	o.IndexMaxEntries = 1 << 20
	o.IndexSlots = 1 << 16
	o.ConsumeQueueEntries = 300_000
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Logger = quiet
	master := openStore(b, o)
	defer master.Close()
	msgs := make([]store.Message, 64)
	body := make([]byte, 1024-200) // ~1 KiB records with the topic and properties
	for i := range msgs {
		msgs[i] = store.Message{Topic: fmt.Sprintf("bench-%d", i%8), QueueID: int32(i % 4), BornHost: born, Body: body, NoWait: true}
	}
	var res []store.PutResult
	for master.WrittenOffset() < backlog {
		var err error
		if res, err = master.PutBatch(msgs, res[:0]); err != nil {
			b.Fatal(err)
		}
	}
	if err := master.Log().Flush(); err != nil {
		b.Fatal(err)
	}
	size := master.WrittenOffset()
	pki := tlstest.Write(b, b.TempDir())
	srv := tlsServer(b, pki, tlsconf.Enforcing, false)
	for _, run := range []struct {
		name  string
		batch int
		tls   bool
	}{
		{"batch=256KiB", 256 << 10, false}, {"batch=1024KiB", 1 << 20, false}, {"batch=4096KiB", 4 << 20, false},
		{"tls/batch=256KiB", 256 << 10, true}, {"tls/batch=1024KiB", 1 << 20, true}, {"tls/batch=4096KiB", 4 << 20, true},
	} {
		b.Run(run.name, func(b *testing.B) {
			mo, so := MasterOptions{BatchSize: run.batch, Logger: quiet}, SlaveOptions{Logger: quiet}
			if run.tls {
				mo.Secure, so.TLS = srv.Handshake, slaveTLS(b, pki, false)
			}
			m, addr := startMaster(b, master, mo)
			defer m.Close()
			b.SetBytes(size)
			var dispatch time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				ro := o
				ro.Dir = b.TempDir()
				ro.Replica = true
				replica := openStore(b, ro)
				b.StartTimer()
				start := time.Now()
				s := startSlave(b, replica, addr, so)
				for replica.WrittenOffset() < size {
					time.Sleep(200 * time.Microsecond) // a fine poll: its pause is the measurement's resolution
				}
				b.StopTimer()
				streamed := time.Since(start)
				for replica.DispatchedOffset() < size {
					time.Sleep(time.Millisecond) // a fine poll, as above
				}
				dispatch += time.Since(start) - streamed
				s.Close()
				if err := replica.Close(); err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(ro.Dir)
			}
			b.ReportMetric(float64(dispatch.Milliseconds())/float64(b.N), "dispatch-ms")
		})
	}
}

// BenchmarkSyncPut measures Put of 1 KiB messages from 64 goroutines, each
// waiting for its message to be durable, on a store without replicas
// (replicas=0: an ASYNC_MASTER's puts answer at once) and on a SYNC_MASTER
// whose slave, over loopback TCP, must acknowledge every message
// (replicas=1). Both flush asynchronously.
func BenchmarkSyncPut(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			o := storeOptions(b.TempDir())
			o.SegmentSize = 128 << 20
			o.IndexMaxEntries = 1 << 20
			o.IndexSlots = 1 << 16
			o.Logger = quiet
			o.SyncReplicas = replicas
			master := openStore(b, o)
			defer master.Close()
			if replicas > 0 {
				m, addr := startMaster(b, master, MasterOptions{Logger: quiet})
				defer m.Close()
				ro := o
				ro.Dir, ro.Replica, ro.SyncReplicas = b.TempDir(), true, 0
				replica := openStore(b, ro)
				defer replica.Close()
				s := startSlave(b, replica, addr, SlaveOptions{Logger: quiet})
				defer s.Close()
				wait.Until(b, "the slave", func() bool { return len(master.Replicas()) == 1 })
			}
			body := make([]byte, 1024-200)
			b.SetBytes(1024)
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				m := store.Message{Topic: "sync-bench", BornHost: born, Body: body}
				for pb.Next() {
					r, err := master.Put(&m)
					if err != nil || r.Status != store.StatusOK {
						b.Errorf("put: %v, status %d", err, r.Status)
						return
					}
				}
			})
		})
	}
}
