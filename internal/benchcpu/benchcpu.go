// Package benchcpu reports a benchmark's CPU time per operation beside its
// wall time: on a VM whose cores are shared, ns/op counts the time other
// processes ran, the process's CPU time (user and system) does not. For
// benchmarks only; it imports nothing of the module.
package benchcpu

import "testing"

// Report starts measuring and returns the function that reports the
// process's CPU time per iteration as cpu-ns/op. Call it just before the
// benchmark's loop and the function it returns just after. Where getrusage
// is not available it reports nothing.
func Report(b *testing.B) func() {
	start, ok := processCPU()
	return func() {
		end, ok2 := processCPU()
		if ok && ok2 && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
