//go:build unix

package acl

import (
	"syscall"
	"testing"
)

// reportCPU reports the process's CPU time (user and system) per
// iteration as cpu-ns/op: on a VM whose cores are shared, the wall time of
// ns/op counts the time other processes ran, the CPU time does not.
// Call it just before the loop and the function it returns just after.
func reportCPU(b *testing.B) func() {
	start := cpuNow()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
