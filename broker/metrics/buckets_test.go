package metrics

import (
	"testing"
	"time"
)

// TestBucketsSumsCodes: Buckets adds the per-bucket counts of every code
// asked for and every response code, and leaves other codes out.
func TestBucketsSumsCodes(t *testing.T) {
	r := NewRPCLatency("remoting", nil)
	r.Observe(10, 0, 200*time.Microsecond)  // (0.1, 0.25]
	r.Observe(310, 0, 200*time.Microsecond) // (0.1, 0.25]
	r.Observe(310, 14, 2*time.Millisecond)  // (1, 3]
	r.Observe(11, 0, 200*time.Microsecond)  // a pull: not asked for
	r.Observe(200050, 0, 5*time.Second)     // a high code, above every bound
	bounds, counts := r.Buckets(10, 310, 200050)
	if len(counts) != len(bounds)+1 {
		t.Fatalf("%d counts for %d bounds", len(counts), len(bounds))
	}
	want := map[int]uint64{2: 2, 5: 1, len(bounds): 1}
	for i, n := range counts {
		if n != want[i] {
			t.Errorf("bucket %d (bound %v): %d, want %d", i, append(bounds, 0)[min(i, len(bounds))], n, want[i])
		}
	}
}
