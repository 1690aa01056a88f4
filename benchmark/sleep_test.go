package benchmark

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSleepOvershoot measures how late a short time.Sleep wakes. The
// fixed-rate producer sleeps when its next send is more than 50 µs away, and
// its lateness counts as latency (measured from the intended send time);
// docs/benchmarks.md quotes this for low rates.
func BenchmarkSleepOvershoot(b *testing.B) {
	for _, d := range []time.Duration{50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond} {
		b.Run(fmt.Sprint("sleep=", d), func(b *testing.B) {
			var over time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				time.Sleep(d)
				over += time.Since(start) - d
			}
			b.ReportMetric(float64(over.Microseconds())/float64(b.N), "µs-late/op")
		})
	}
}
