package metrics

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counts gathers the histogram's sample count per (request, response) code.
func counts(t *testing.T, r *RPCLatency) map[[2]string]uint64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]uint64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			var k [2]string
			for _, l := range m.Label {
				switch l.GetName() {
				case "request_code":
					k[0] = l.GetValue()
				case "response_code":
					k[1] = l.GetValue()
				}
			}
			out[k] += histCount(m)
		}
	}
	return out
}

func histCount(m *dto.Metric) uint64 { return m.GetHistogram().GetSampleCount() }

func TestRPCLatencyCodes(t *testing.T) {
	r := NewRPCLatency("remoting", prometheus.Labels{"cluster": "c"})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				r.Observe(10, 0, time.Microsecond)                // SEND_MESSAGE, success
				r.Observe(200050, 0, time.Millisecond)            // POP_MESSAGE: a high code
				r.Observe(11, int32(i%2)*19, time.Second)         // PULL: found or not
				r.Observe(int32(300000+g), 1000, time.Nanosecond) // a response code past the table
			}
		}()
	}
	wg.Wait()
	got := counts(t, r)
	for k, want := range map[[2]string]uint64{
		{"10", "0"}: 4000, {"200050", "0"}: 4000, {"11", "0"}: 2000, {"11", "19"}: 2000,
		{"300000", "other"}: 1000, {"300003", "other"}: 1000,
	} {
		if got[k] != want {
			t.Errorf("%v: %d observations, want %d (all: %v)", k, got[k], want, got)
		}
	}
}

func TestRPCLatencyManyHighCodes(t *testing.T) {
	r := NewRPCLatency("remoting", nil)
	for c := range highSlots + 10 {
		r.Observe(int32(100000+c), 0, time.Microsecond)
	}
	var total uint64
	for _, n := range counts(t, r) {
		total += n
	}
	if total != highSlots+10 {
		t.Fatalf("%d observations kept, want %d (codes past the table share its last slot)", total, highSlots+10)
	}
}

func TestRPCLatencyObserveDoesNotAllocate(t *testing.T) {
	r := NewRPCLatency("remoting", nil)
	r.Observe(10, 0, time.Microsecond)
	r.Observe(200050, 0, time.Microsecond)
	if n := testing.AllocsPerRun(1000, func() {
		r.Observe(10, 0, time.Microsecond)
		r.Observe(200050, 0, time.Microsecond)
	}); n != 0 {
		t.Fatalf("Observe: %v allocations", n)
	}
}

// BenchmarkRPCLatencyObserve is what the metrics hook adds to a request:
// the handler's timing (two clock reads) and one observation.
func BenchmarkRPCLatencyObserve(b *testing.B) {
	r := NewRPCLatency("remoting", nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			start := time.Now()
			r.Observe(10, 0, time.Since(start))
		}
	})
}

// BenchmarkRPCLatencyObserveSerial is BenchmarkRPCLatencyObserve on one
// goroutine (no contention on the histogram's counters).
func BenchmarkRPCLatencyObserveSerial(b *testing.B) {
	r := NewRPCLatency("remoting", nil)
	b.ReportAllocs()
	for range b.N {
		start := time.Now()
		r.Observe(10, 0, time.Since(start))
	}
}

// BenchmarkRPCLatencyObserveOnly is the observation alone, without the
// clock reads (which apogee-broker pays anyway for --slow-request).
func BenchmarkRPCLatencyObserveOnly(b *testing.B) {
	r := NewRPCLatency("remoting", nil)
	b.ReportAllocs()
	for range b.N {
		r.Observe(10, 0, time.Millisecond)
	}
}
