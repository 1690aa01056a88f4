package stats

import (
	"math"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func newUTC() *Stats { return New(Options{BrokerKey: "C", Location: time.UTC}) }

func TestWindowsFromSamples(t *testing.T) {
	s := newUTC()
	s.Sample(t0)
	// 100 messages a second for 70 s, one request each second.
	for i := 1; i <= 70; i++ {
		s.Put("T", 100, 1000)
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	for _, c := range []struct {
		w    Window
		sum  int64
		tps  float64
		name string
	}{
		{Window10s, 1000, 100, "10s"},
		{Window1m, 6000, 100, "1m"},
	} {
		got := s.TopicPut.Window(Key{Topic: "T"}, c.w)
		if got.Sum != c.sum || math.Abs(got.TPS-c.tps) > 1e-9 || got.AvgPT != 100 {
			t.Errorf("%s: %+v, want sum %d tps %v avgpt 100", c.name, got, c.sum, c.tps)
		}
	}
	if got := s.TopicPutSize.Window(Key{Topic: "T"}, Window10s); got.Sum != 10000 || got.TPS != 1000 {
		t.Errorf("size 10s: %+v", got)
	}
	if got := s.BrokerPut(Window10s); got.TPS != 100 {
		t.Errorf("broker put 10s: %+v", got)
	}
	// The 10-min tier has only its first sample (t0) and one at 10 min: no
	// rate yet.
	if got := s.TopicPut.Window(Key{Topic: "T"}, Window1h); got != (Snapshot{}) {
		t.Errorf("1h with one sample: %+v", got)
	}
	if got := s.TopicPut.Window(Key{Topic: "nope"}, Window10s); got != (Snapshot{}) {
		t.Errorf("unknown key: %+v", got)
	}
}

func TestHourAndDayWindows(t *testing.T) {
	s := newUTC()
	s.Sample(t0)
	now := t0
	// 1 message a second for 2 hours, sampled every 10 s.
	for i := 0; i < 720; i++ {
		s.Get("T", "G", 10, 100, 7)
		now = now.Add(10 * time.Second)
		s.Sample(now)
	}
	k := Key{Topic: "T", Group: "G"}
	if got := s.GroupGet.Window(k, Window1h); got.Sum != 3600 || math.Abs(got.TPS-1) > 1e-9 {
		t.Errorf("1h: %+v", got)
	}
	if got := s.GroupGet.Window(k, Window10m); got.Sum != 600 || math.Abs(got.TPS-1) > 1e-9 {
		t.Errorf("10m: %+v", got)
	}
	// Day: two hourly intervals.
	if got := s.GroupGet.Window(k, Window1d); got.Sum != 7200 || math.Abs(got.TPS-1) > 1e-9 {
		t.Errorf("1d: %+v", got)
	}
	if got := s.GroupLatency.Window(k, Window1m); got.AvgPT != 7 {
		t.Errorf("latency avg: %+v", got)
	}
	if got := s.GroupGetSize.Item(k).Totals(); got.Value != 72000 || got.Times != 720 {
		t.Errorf("totals: %+v", got)
	}
}

func TestTodayAtMidnight(t *testing.T) {
	s := newUTC()
	day1 := time.Date(2026, 3, 1, 23, 59, 58, 0, time.UTC)
	s.Sample(day1)
	s.Put("T", 5, 50)
	s.Sample(day1.Add(time.Second))
	if d := s.Today(); d.PutTodayMorning != 0 || d.PutNow != 5 {
		t.Fatalf("before midnight: %+v", d)
	}
	s.Sample(day1.Add(3 * time.Second)) // 00:00:01 of day 2
	s.Put("T", 2, 20)
	s.Get("T", "G", 4, 40, 0)
	d := s.Today()
	if d.PutYesterdayMorning != 0 || d.PutTodayMorning != 5 || d.PutNow != 7 || d.GetTodayMorning != 0 || d.GetNow != 4 {
		t.Fatalf("after midnight: %+v", d)
	}
	s.Sample(day1.Add(24*time.Hour + 3*time.Second))
	if d := s.Today(); d.PutYesterdayMorning != 5 || d.PutTodayMorning != 7 || d.GetTodayMorning != 4 {
		t.Fatalf("second midnight: %+v", d)
	}
}

func TestRemoveAndKeys(t *testing.T) {
	s := newUTC()
	s.Put("A", 1, 1)
	s.Put("B", 1, 1)
	s.Get("A", "G1", 1, 1, 0)
	s.Get("B", "G2", 1, 1, 0)
	if got := s.TopicPut.Keys(); len(got) != 2 || got[0].Topic != "A" {
		t.Fatalf("keys %v", got)
	}
	s.RemoveTopic("A")
	s.RemoveGroup("G2")
	if got := s.TopicPut.Keys(); len(got) != 1 || got[0].Topic != "B" {
		t.Fatalf("after RemoveTopic: %v", got)
	}
	if n := s.GroupGet.Len(); n != 0 {
		t.Fatalf("groups left: %d (%v)", n, s.GroupGet.Keys())
	}
	if put, _ := s.BrokerTotals(); put.Value != 2 {
		t.Fatalf("broker totals lost with the topic: %+v", put)
	}
}

func TestKeyText(t *testing.T) {
	for _, k := range []Key{{Topic: "T"}, {Topic: "T", Group: "G"}, {Topic: "%RETRY%G", Group: "G"}} {
		if got := ParseKey(k.String()); got != k {
			t.Errorf("ParseKey(%q) = %+v", k.String(), got)
		}
	}
}

// TestConcurrentCounting counts from many goroutines while sampling and
// reading (run with -race): no count is lost.
func TestConcurrentCounting(t *testing.T) {
	s := newUTC()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		now := t0
		for {
			select {
			case <-stop:
				return
			default:
			}
			now = now.Add(time.Second)
			s.Sample(now)
			s.TopicPut.Window(Key{Topic: "T1"}, Window10s)
			s.Today()
		}
	}()
	topics := []string{"T0", "T1", "T2", "T3"}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				s.Put(topics[i%len(topics)], 1, 10)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-done
	var sum int64
	s.TopicPut.Each(func(_ Key, tot Totals) { sum += tot.Value })
	if put, _ := s.BrokerTotals(); sum != 40000 || put.Value != 40000 {
		t.Fatalf("counted %d / %d, want 40000", sum, put.Value)
	}
}
