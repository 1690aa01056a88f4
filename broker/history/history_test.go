package history

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

func find(f Frame, kind, name string) []float32 {
	for _, s := range f.Series {
		if s.Kind == kind && s.Name == name {
			return s.Values
		}
	}
	return nil
}

// TestSecondRingWraps: with 5 second slots, 12 readings keep the last 5
// rates, oldest first, at their times.
func TestSecondRingWraps(t *testing.T) {
	h := New(Options{Seconds: 5, Minutes: 3})
	for i := range 13 {
		// Put grows by i each second: the rate of second i is i.
		var put int64
		for j := range i + 1 {
			put += int64(j)
		}
		h.Add(t0.Add(time.Duration(i)*time.Second), Counts{Put: put, TopicPut: map[string]int64{"T": put}})
	}
	f := h.Query(PerSecond, "", nil)
	if len(f.Times) != 5 {
		t.Fatalf("%d times, want 5", len(f.Times))
	}
	for i, ms := range f.Times {
		if want := t0.Add(time.Duration(8+i) * time.Second).UnixMilli(); ms != want {
			t.Errorf("time %d: %d, want %d", i, ms, want)
		}
	}
	for _, vals := range [][]float32{find(f, KindBroker, BrokerPut), find(f, KindPut, "T")} {
		for i, v := range vals {
			if want := float32(8 + i); v != want {
				t.Errorf("rate %d: %v, want %v", i, v, want)
			}
		}
	}
}

// TestMinuteRollup: a minute sample is the mean of its second rates and
// the last lag, written when the next minute begins; the minute ring
// wraps too.
func TestMinuteRollup(t *testing.T) {
	h := New(Options{Seconds: 10, Minutes: 2})
	var put int64
	at := t0
	h.Add(at, Counts{})
	for m := range 4 {
		for s := range 60 {
			at = at.Add(time.Second)
			put += int64(m + 1) // rate m+1 in minute m
			h.Add(at, Counts{Put: put, GroupLag: map[string]int64{"G": int64(100*m + s)}})
		}
	}
	f := h.Query(PerMinute, "", nil)
	// Minutes 0..3 are written (the reading at t0+4m began minute 4);
	// two slots keep minutes 2 and 3.
	if len(f.Times) != 2 || f.Times[0] != t0.Add(2*time.Minute).UnixMilli() || f.Times[1] != t0.Add(3*time.Minute).UnixMilli() {
		t.Fatalf("minute times %v", f.Times)
	}
	puts, lags := find(f, KindBroker, BrokerPut), find(f, KindLag, "G")
	// Minute 2 holds the readings at t0+120s (rate 2, the last of minute
	// loop 1) to t0+179s (rate 3).
	if want := float32((2 + 3*59) / 60.0); math.Abs(float64(puts[0]-want)) > 1e-4 {
		t.Errorf("minute 2 put rate %v, want %v", puts[0], want)
	}
	if lags[0] != 258 || lags[1] != 358 {
		t.Errorf("minute lags %v, want the last of each minute (258, 358)", lags)
	}
}

// TestBoundedSeries: beyond MaxTopics topics the rest add up in Other,
// and the series count never passes MaxSeries.
func TestBoundedSeries(t *testing.T) {
	o := Options{Seconds: 4, Minutes: 2, MaxTopics: 3, MaxGroups: 2}
	h := New(o)
	cum := map[string]int64{}
	lag := map[string]int64{}
	for i := range 10 {
		for j := range 20 {
			cum[fmt.Sprint("T", j)] += 1
			lag[fmt.Sprint("G", j)] = 1
		}
		h.Add(t0.Add(time.Duration(i)*time.Second), Counts{TopicPut: cum, GroupLag: lag, GroupGet: cum})
	}
	if n, max := h.Len(), MaxSeries(o); n > max {
		t.Fatalf("%d series, bound %d", n, max)
	}
	f := h.Query(PerSecond, KindPut, nil)
	if len(f.Series) != 4 || f.Series[3].Name != Other {
		t.Fatalf("put series %+v", f.Series)
	}
	var total float32
	for _, s := range f.Series {
		total += s.Values[len(s.Values)-1]
	}
	if total != 20 {
		t.Errorf("the put rates add up to %v, want 20 (each topic 1/s)", total)
	}
	if v := find(h.Query(PerSecond, KindLag, nil), KindLag, Other); v[len(v)-1] != 18 {
		t.Errorf("other groups' lag %v, want 18", v)
	}
	if b := MaxBytes(o); b != MaxSeries(o)*6*4+6*8 {
		t.Errorf("MaxBytes %d", b)
	}
}

// TestIdleSeriesDropped: a topic idle for a whole minute ring goes, and
// its place is free for another.
func TestIdleSeriesDropped(t *testing.T) {
	h := New(Options{Seconds: 4, Minutes: 2, MaxTopics: 1})
	at := t0
	h.Add(at, Counts{TopicPut: map[string]int64{"A": 0}})
	at = at.Add(time.Second)
	h.Add(at, Counts{TopicPut: map[string]int64{"A": 5}})
	for range 4 * 60 {
		at = at.Add(time.Second)
		h.Add(at, Counts{TopicPut: map[string]int64{"A": 5, "B": 0}})
	}
	names := map[string]bool{}
	for _, s := range h.Query(PerSecond, KindPut, nil).Series {
		names[s.Name] = true
	}
	if names["A"] {
		t.Errorf("A is still kept after idling: %v", names)
	}
	at = at.Add(time.Second)
	h.Add(at, Counts{TopicPut: map[string]int64{"B": 3}})
	if find(h.Query(PerSecond, KindPut, nil), KindPut, "B") == nil {
		t.Error("B did not get the freed place")
	}
}

// TestLatencyPercentiles: a second's percentiles come from that second's
// histogram (the deltas), not from the cumulative counts; a second
// without sends is a gap.
func TestLatencyPercentiles(t *testing.T) {
	bounds := []float64{1, 2, 4}
	h := New(Options{Seconds: 4})
	h.Add(t0, Counts{LatencyBounds: bounds, LatencyCounts: []uint64{1000, 0, 0, 0}})
	h.Add(t0.Add(time.Second), Counts{LatencyBounds: bounds, LatencyCounts: []uint64{1000, 0, 100, 0}})
	h.Add(t0.Add(2*time.Second), Counts{LatencyBounds: bounds, LatencyCounts: []uint64{1000, 0, 100, 0}})
	f := h.Query(PerSecond, KindBroker, nil)
	p50, sends := find(f, KindBroker, SendP50), find(f, KindBroker, SendsPerSc)
	if p50[0] != 3 || sends[0] != 100 {
		t.Errorf("second 1: p50 %v (want 3, the middle of (2,4]), sends %v", p50[0], sends[0])
	}
	if !math.IsNaN(float64(p50[1])) || sends[1] != 0 {
		t.Errorf("second 2 (no sends): p50 %v, sends %v", p50[1], sends[1])
	}
	if p := Percentile(bounds, []uint64{0, 0, 0, 5}, 0.99); p != 4 {
		t.Errorf("overflow percentile %v, want the last bound", p)
	}
}

// TestOutOfOrderIgnored: a reading not later than the last is dropped.
func TestOutOfOrderIgnored(t *testing.T) {
	h := New(Options{Seconds: 4})
	h.Add(t0, Counts{Put: 0})
	h.Add(t0.Add(time.Second), Counts{Put: 10})
	h.Add(t0, Counts{Put: 1000})
	if f := h.Query(PerSecond, "", nil); len(f.Times) != 1 || find(f, KindBroker, BrokerPut)[0] != 10 {
		t.Errorf("%+v", f)
	}
}

// TestConcurrentAddAndQuery (-race): readers copy while the writer adds.
func TestConcurrentAddAndQuery(t *testing.T) {
	h := New(Options{Seconds: 16, Minutes: 4, MaxTopics: 4})
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				for _, r := range []Resolution{PerSecond, PerMinute} {
					f := h.Query(r, "", nil)
					for _, s := range f.Series {
						if len(s.Values) != len(f.Times) {
							t.Errorf("series %s/%s: %d values, %d times", s.Kind, s.Name, len(s.Values), len(f.Times))
						}
					}
				}
			}
		}()
	}
	cum := map[string]int64{}
	for i := range 3000 {
		cum[fmt.Sprint("T", i%7)] += int64(i)
		h.Add(t0.Add(time.Duration(i)*time.Second), Counts{Put: int64(i), TopicPut: cum})
	}
	cancel()
	wg.Wait()
}

// TestRun adds readings on its ticker until its context ends.
func TestRun(t *testing.T) {
	h := New(Options{Seconds: 8})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var n int64
	go func() {
		defer close(done)
		h.Run(ctx, time.Millisecond, func() Counts { n++; return Counts{Put: n} })
	}()
	wait.For(t, "three readings", func() error {
		if n := len(h.Query(PerSecond, "", nil).Times); n < 3 {
			return fmt.Errorf("%d samples", n)
		}
		return nil
	})
	cancel()
	<-done
}
