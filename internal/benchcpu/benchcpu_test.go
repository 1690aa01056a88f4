package benchcpu

import "testing"

// Spinning for a while shows as CPU time.
func TestProcessCPUGrows(t *testing.T) {
	start, ok := processCPU()
	if !ok {
		t.Skip("no getrusage here")
	}
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i & 7
	}
	end, _ := processCPU()
	if end <= start {
		t.Fatalf("CPU time %d then %d after a busy loop (%d)", start, end, x)
	}
}
