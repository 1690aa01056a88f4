// Package history keeps a broker's recent history for the dashboard's
// charts: a ring of per-second samples and a ring of per-minute samples
// (the last Options.Seconds seconds, 15 minutes by default, and the last
// Options.Minutes minutes, an hour by default) of put and get rates per
// topic and per consumer group, lag per group, send latency percentiles
// and the disk ratio.
//
// A History is fed from outside: its owner reads what the broker already
// counts (the core's cumulative statistics, the request latency histogram,
// the consumer offsets, the disk) once a second into a Counts and hands it
// to Add (Run does so on a ticker). Nothing here is on a message's path: a
// send or a pull only bumps the counters it bumped before.
//
// # Invariants
//
//   - Bounded memory. A series is one float32 per second slot and per
//     minute slot: (Seconds+Minutes)*4 bytes. There are at most
//     len(BrokerSeries) broker series, MaxTopics+1 topic series (put rate)
//     and 2*(MaxGroups+1) group series (get rate, lag): once MaxTopics
//     topics (MaxGroups groups) have a series, a further one is added into
//     the series named Other of its kind, until a named series has been
//     idle (zero or absent) for a whole minute ring and is dropped.
//   - Rates are deltas of cumulative counters between two Adds, divided by
//     the time between them; a counter that went down (a topic deleted and
//     created again) restarts from its new value. The first Add only
//     records the counters.
//   - A slot without data (a series that did not exist yet, a second
//     without a send for the latency) is NaN, which the JSON answer writes
//     as null: a gap in the chart, not a zero.
//   - A minute sample is the mean of the minute's second rates, the last
//     lag and disk ratio, and the percentiles of the minute's latency
//     histogram (summed bucket counts, not an average of percentiles). It
//     is written when the first Add of the next minute arrives.
//   - Every method is safe for concurrent use: Add takes the write lock,
//     readers the read lock, and what they return is a copy.
package history

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"
)

// Series kinds.
const (
	KindBroker = "broker" // Name is one of BrokerSeries
	KindPut    = "put"    // a topic's put rate, messages/s
	KindGet    = "get"    // a group's get (consumed) rate, messages/s
	KindLag    = "lag"    // a group's lag, messages
)

// The broker's own series (KindBroker).
const (
	BrokerPut  = "put"       // messages stored per second
	BrokerGet  = "get"       // messages consumed per second
	SendP50    = "send_p50"  // median send latency, ms
	SendP99    = "send_p99"  // 99th percentile send latency, ms
	DiskRatio  = "disk"      // used share of the data directory's disk, 0..1
	SendsPerSc = "send_reqs" // send requests per second
)

// BrokerSeries are KindBroker's names, in the order Query returns them.
var BrokerSeries = []string{BrokerPut, BrokerGet, SendsPerSc, SendP50, SendP99, DiskRatio}

// Other is the name of the series that sums the topics (groups) beyond
// MaxTopics (MaxGroups).
const Other = "(other)"

// Counts is one reading of what the broker counts. The maps are the
// caller's; Add does not keep them.
type Counts struct {
	// Put and Get are the broker's cumulative put and get counts.
	Put, Get int64
	// TopicPut is each topic's cumulative put count.
	TopicPut map[string]int64
	// GroupGet is each group's cumulative get count.
	GroupGet map[string]int64
	// GroupLag is each group's lag now (messages).
	GroupLag map[string]int64
	// LatencyBounds are the upper bounds (ms) of the send latency
	// histogram's buckets; LatencyCounts the cumulative count of each
	// bucket (not summed over buckets), with one more for +Inf.
	LatencyBounds []float64
	LatencyCounts []uint64
	// DiskRatio is the used share of the data directory's disk.
	DiskRatio float64
}

// Options configure a History.
type Options struct {
	// Seconds is how many per-second samples are kept. Default 900.
	Seconds int
	// Minutes is how many per-minute samples are kept. Default 60.
	Minutes int
	// MaxTopics and MaxGroups bound the named topic and group series.
	// Default 32 each.
	MaxTopics, MaxGroups int
}

func (o *Options) defaults() {
	if o.Seconds <= 0 {
		o.Seconds = 900
	}
	if o.Minutes <= 0 {
		o.Minutes = 60
	}
	if o.MaxTopics <= 0 {
		o.MaxTopics = 32
	}
	if o.MaxGroups <= 0 {
		o.MaxGroups = 32
	}
}

// Key names a series.
type Key struct{ Kind, Name string }

type series struct {
	sec, min []float32
	// idle counts the minute samples in a row that were zero or absent.
	idle int
}

// clock is a ring's time axis: times[i] is slot i's sample time (unix ms).
type clock struct {
	times []int64
	next  int // the slot the next sample goes to
	n     int // samples held (<= len(times))
}

func (c *clock) push(ms int64) int {
	i := c.next
	c.times[i] = ms
	c.next = (c.next + 1) % len(c.times)
	c.n = min(c.n+1, len(c.times))
	return i
}

// order returns the slots from the oldest to the newest.
func (c *clock) order() []int {
	out := make([]int, 0, c.n)
	start := (c.next - c.n + len(c.times)) % len(c.times)
	for i := range c.n {
		out = append(out, (start+i)%len(c.times))
	}
	return out
}

// History is the two rings. Its zero value is not usable; call New.
type History struct {
	o Options

	mu     sync.RWMutex
	sec    clock
	min    clock
	series map[Key]*series
	named  map[string]int // named (not Other) series per kind

	prev     Counts // the last Add's counters (maps owned here)
	prevAt   time.Time
	havePrev bool

	// The minute being accumulated: its start and, per series, the sum
	// of its second samples and their number; the last value of the
	// gauges; the latency histogram's deltas.
	minStart time.Time
	minSum   map[Key]float64
	minN     map[Key]int
	minLast  map[Key]float64
	minLat   []uint64
	// lastBounds are the latest reading's latency bucket bounds.
	lastBounds []float64
}

// New returns an empty History.
func New(o Options) *History {
	o.defaults()
	return &History{o: o,
		sec:    clock{times: make([]int64, o.Seconds)},
		min:    clock{times: make([]int64, o.Minutes)},
		series: map[Key]*series{}, named: map[string]int{},
		minSum: map[Key]float64{}, minN: map[Key]int{}, minLast: map[Key]float64{},
	}
}

// Options are the History's options, defaults applied.
func (h *History) Options() Options { return h.o }

// MaxSeries is the most series a History with o can hold.
func MaxSeries(o Options) int {
	o.defaults()
	return len(BrokerSeries) + o.MaxTopics + 1 + 2*(o.MaxGroups+1)
}

// MaxBytes is the bound on the samples' memory of a History with o: every
// series' two rings and the time axes (the map and key overhead aside).
func MaxBytes(o Options) int {
	o.defaults()
	return MaxSeries(o)*(o.Seconds+o.Minutes)*4 + (o.Seconds+o.Minutes)*8
}

// Len is the number of series held.
func (h *History) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.series)
}

var nan32 = float32(math.NaN())

func (h *History) newSeries() *series {
	s := &series{sec: make([]float32, h.o.Seconds), min: make([]float32, h.o.Minutes)}
	for i := range s.sec {
		s.sec[i] = nan32
	}
	for i := range s.min {
		s.min[i] = nan32
	}
	return s
}

// key returns the series kind's name goes to: its own, or Other when the
// kind is full.
func (h *History) key(kind, name string) Key {
	k := Key{kind, name}
	if kind == KindBroker {
		return k
	}
	if _, ok := h.series[k]; ok {
		return k
	}
	limit := h.o.MaxTopics
	if kind != KindPut {
		limit = h.o.MaxGroups
	}
	if h.named[kind] >= limit {
		return Key{kind, Other}
	}
	return k
}

func (h *History) get(k Key) *series {
	s := h.series[k]
	if s == nil {
		s = h.newSeries()
		h.series[k] = s
		if k.Kind != KindBroker && k.Name != Other {
			h.named[k.Kind]++
		}
	}
	return s
}

// Add records a reading taken at now. Readings must come in time order;
// one not later than the previous is ignored.
func (h *History) Add(now time.Time, c Counts) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.havePrev && !now.After(h.prevAt) {
		return
	}
	if !h.havePrev {
		h.keep(now, c)
		h.minStart = now.Truncate(time.Minute)
		return
	}
	if m := now.Truncate(time.Minute); m.After(h.minStart) {
		h.rollMinute()
		h.minStart = m
	}
	dt := now.Sub(h.prevAt).Seconds()
	vals := map[Key]float64{}
	add := func(kind, name string, v float64) {
		k := h.key(kind, name)
		if h.series[k] == nil {
			if kind != KindBroker && (v == 0 || math.IsNaN(v)) {
				return // no series for what never moved
			}
			h.get(k)
		}
		vals[k] += v
	}
	add(KindBroker, BrokerPut, rate(c.Put, h.prev.Put, dt))
	add(KindBroker, BrokerGet, rate(c.Get, h.prev.Get, dt))
	for t, v := range c.TopicPut {
		add(KindPut, t, rate(v, h.prev.TopicPut[t], dt))
	}
	for g, v := range c.GroupGet {
		add(KindGet, g, rate(v, h.prev.GroupGet[g], dt))
	}
	for g, v := range c.GroupLag {
		add(KindLag, g, float64(v))
	}
	add(KindBroker, DiskRatio, c.DiskRatio)
	// Latency: this second's histogram.
	delta := histDelta(c.LatencyCounts, h.prev.LatencyCounts)
	var sends uint64
	for _, n := range delta {
		sends += n
	}
	add(KindBroker, SendsPerSc, float64(sends)/dt)
	p50, p99 := math.NaN(), math.NaN()
	if sends > 0 && len(c.LatencyBounds) > 0 {
		p50, p99 = Percentile(c.LatencyBounds, delta, 0.5), Percentile(c.LatencyBounds, delta, 0.99)
	}
	add(KindBroker, SendP50, p50)
	add(KindBroker, SendP99, p99)
	if len(delta) > 0 {
		if len(h.minLat) != len(delta) {
			h.minLat = make([]uint64, len(delta))
		}
		for i, n := range delta {
			h.minLat[i] += n
		}
	}

	slot := h.sec.push(now.UnixMilli())
	for _, s := range h.series {
		s.sec[slot] = nan32
	}
	for k, v := range vals {
		s := h.get(k)
		s.sec[slot] = float32(v)
		if k.Kind == KindLag || k == (Key{KindBroker, DiskRatio}) {
			h.minLast[k] = v
		} else if !math.IsNaN(v) {
			h.minSum[k] += v
			h.minN[k]++
		}
	}
	h.keep(now, c)
	h.lastBounds = c.LatencyBounds
}

func rate(cur, prev int64, dt float64) float64 {
	if cur < prev { // restarted (deleted and created again)
		return float64(cur) / dt
	}
	return float64(cur-prev) / dt
}

func histDelta(cur, prev []uint64) []uint64 {
	out := make([]uint64, len(cur))
	for i, n := range cur {
		if i < len(prev) && prev[i] <= n && len(prev) == len(cur) {
			out[i] = n - prev[i]
		} else {
			out[i] = n
		}
	}
	return out
}

// keep records c as the previous reading (copying its maps).
func (h *History) keep(now time.Time, c Counts) {
	h.prev = Counts{Put: c.Put, Get: c.Get, DiskRatio: c.DiskRatio,
		TopicPut: copyMap(c.TopicPut), GroupGet: copyMap(c.GroupGet),
		LatencyCounts: append([]uint64(nil), c.LatencyCounts...)}
	h.prevAt, h.havePrev = now, true
}

func copyMap(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// rollMinute writes the accumulated minute into the minute ring and drops
// the named series idle for a whole minute ring.
func (h *History) rollMinute() {
	if len(h.minSum) == 0 && len(h.minLast) == 0 && h.minLat == nil {
		return
	}
	slot := h.min.push(h.minStart.UnixMilli())
	for k, s := range h.series {
		v := nan32
		switch {
		case k == Key{KindBroker, SendP50} || k == Key{KindBroker, SendP99}:
			var n uint64
			for _, c := range h.minLat {
				n += c
			}
			if n > 0 && len(h.lastBounds) > 0 {
				q := 0.5
				if k.Name == SendP99 {
					q = 0.99
				}
				v = float32(Percentile(h.lastBounds, h.minLat, q))
			}
		default:
			if last, ok := h.minLast[k]; ok {
				v = float32(last)
			} else if n := h.minN[k]; n > 0 {
				v = float32(h.minSum[k] / float64(n))
			}
		}
		s.min[slot] = v
		if v == 0 || v != v {
			s.idle++
		} else {
			s.idle = 0
		}
		if k.Kind != KindBroker && s.idle >= h.o.Minutes {
			delete(h.series, k)
			if k.Name != Other {
				h.named[k.Kind]--
			}
		}
	}
	clear(h.minSum)
	clear(h.minN)
	clear(h.minLast)
	h.minLat = nil
}

// Percentile estimates the q quantile (0..1) of a histogram: counts[i]
// samples fell at or below bounds[i] (and above bounds[i-1]); the last
// count, when there is one more than bounds, is above every bound. The
// estimate interpolates linearly within the bucket; in the overflow bucket
// it is the last bound.
func Percentile(bounds []float64, counts []uint64, q float64) float64 {
	var total uint64
	for _, n := range counts {
		total += n
	}
	if total == 0 || len(bounds) == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	var cum float64
	for i, n := range counts {
		if n == 0 {
			continue
		}
		if cum+float64(n) >= rank {
			if i >= len(bounds) {
				return bounds[len(bounds)-1]
			}
			lo := 0.0
			if i > 0 {
				lo = bounds[i-1]
			}
			return lo + (bounds[i]-lo)*(rank-cum)/float64(n)
		}
		cum += float64(n)
	}
	return bounds[len(bounds)-1]
}

// Resolution picks a ring.
type Resolution int

const (
	PerSecond Resolution = iota
	PerMinute
)

// Series is one series' samples, oldest first, aligned with Frame.Times.
type Series struct {
	Kind, Name string
	Values     []float32
}

// Frame is what Query returns: the sample times (unix ms) and the series.
type Frame struct {
	Times  []int64
	Series []Series
}

// Query copies the series of kind (every kind when "") whose names pass
// keep (all when nil), at resolution r: broker series in BrokerSeries'
// order, the others by name, Other last.
func (h *History) Query(r Resolution, kind string, keep func(Key) bool) Frame {
	h.mu.RLock()
	defer h.mu.RUnlock()
	c := &h.sec
	if r == PerMinute {
		c = &h.min
	}
	slots := c.order()
	f := Frame{Times: make([]int64, len(slots))}
	for i, s := range slots {
		f.Times[i] = c.times[s]
	}
	var keys []Key
	for k := range h.series {
		if (kind == "" || k.Kind == kind) && (keep == nil || keep(k)) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return less(keys[i], keys[j]) })
	for _, k := range keys {
		s := h.series[k]
		vals := s.sec
		if r == PerMinute {
			vals = s.min
		}
		out := make([]float32, len(slots))
		for i, sl := range slots {
			out[i] = vals[sl]
		}
		f.Series = append(f.Series, Series{Kind: k.Kind, Name: k.Name, Values: out})
	}
	return f
}

var kindOrder = map[string]int{KindBroker: 0, KindPut: 1, KindGet: 2, KindLag: 3}

func brokerIndex(name string) int {
	for i, n := range BrokerSeries {
		if n == name {
			return i
		}
	}
	return len(BrokerSeries)
}

func less(a, b Key) bool {
	if a.Kind != b.Kind {
		return kindOrder[a.Kind] < kindOrder[b.Kind]
	}
	if a.Kind == KindBroker {
		return brokerIndex(a.Name) < brokerIndex(b.Name)
	}
	if (a.Name == Other) != (b.Name == Other) {
		return b.Name == Other
	}
	return a.Name < b.Name
}

// Run calls read and adds its reading every interval (a second, when 0)
// until ctx ends. read runs on Run's goroutine, never concurrently.
func (h *History) Run(ctx context.Context, interval time.Duration, read func() Counts) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	h.Add(time.Now(), read())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.Add(now, read())
		}
	}
}
