package commitlog

import (
	"bytes"
	"sync"
	"testing"

	"github.com/apogeemq/apogee/message"
)

// TestZeroAheadNeverOverwritesAppends: with the allocator writing zeros a
// few KiB past the writer (zeroAheadMargin lowered) while four goroutines
// append as fast as they can, every record reads back as it was appended:
// no zero lands on appended bytes, appends that reach a chunk being zeroed
// wait for it, and the run does zero ahead.
func TestZeroAheadNeverOverwritesAppends(t *testing.T) {
	saved := zeroAheadMargin
	zeroAheadMargin = 4096
	t.Cleanup(func() { zeroAheadMargin = saved })

	l := openLog(t, Options{SegmentSize: 16 * MinSegmentSize, PrefaultAhead: 256 << 10, RetentionInterval: -1})
	defer l.Close()
	const writers, each = 4, 3000
	type written struct {
		off  int64
		body []byte
	}
	got := make([][]written, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res Result
			for i := 0; i < each; i++ {
				body := bodyOf(w*each+i, 100+(i*37)%900)
				res.Offsets = res.Offsets[:0]
				if err := l.Append(encode(t, "T", body), nil, &res); err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], written{res.Offsets[0], body})
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if l.zeroWrites.Load() == 0 {
		t.Fatal("the allocator wrote no zeros ahead: the test did not exercise zeroAhead")
	}
	n := 0
	for _, recs := range got {
		for _, r := range recs {
			v, err := l.ReadRecord(r.off)
			if err != nil {
				t.Fatalf("record at %d: %v", r.off, err)
			}
			m, err := message.Decode(v.Bytes(), true)
			if err != nil {
				t.Fatalf("record at %d: %v", r.off, err)
			}
			if !bytes.Equal(m.Body(), r.body) {
				t.Fatalf("record at %d: body %q, want %q", r.off, m.Body()[:12], r.body[:12])
			}
			v.Release()
			n++
		}
	}
	if all := readAll(t, l); len(all) != n {
		t.Fatalf("cursor read %d records, want %d", len(all), n)
	}
}
