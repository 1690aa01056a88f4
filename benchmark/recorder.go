package benchmark

import (
	"sync"
	"sync/atomic"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in µs from 1 µs to one hour, 3 significant digits.
const (
	minLatencyUs = 1
	maxLatencyUs = 3_600_000_000
	sigFigs      = 3
)

func newHistogram() *hdr.Histogram { return hdr.New(minLatencyUs, maxLatencyUs, sigFigs) }

// recorder is one worker's interval histogram. The worker records into it
// under an uncontended mutex; the reporter swaps it out once a second.
type recorder struct {
	mu  sync.Mutex
	cur *hdr.Histogram
}

func newRecorder() *recorder { return &recorder{cur: newHistogram()} }

func (r *recorder) record(us int64) {
	if us < minLatencyUs {
		us = minLatencyUs
	}
	if us > maxLatencyUs {
		us = maxLatencyUs
	}
	r.mu.Lock()
	r.cur.RecordValue(us)
	r.mu.Unlock()
}

// swap returns the interval's histogram and starts a fresh one (reusing spare).
func (r *recorder) swap(spare *hdr.Histogram) *hdr.Histogram {
	spare.Reset()
	r.mu.Lock()
	h := r.cur
	r.cur = spare
	r.mu.Unlock()
	return h
}

// metric is one latency series (send, e2e, send delay) over all workers.
type metric struct {
	name      string
	mu        sync.Mutex
	recorders []*recorder
	total     *hdr.Histogram // the measured part of the run
	interval  *hdr.Histogram // the last second
	spare     *hdr.Histogram
}

func newMetric(name string) *metric {
	return &metric{name: name, total: newHistogram(), interval: newHistogram(), spare: newHistogram()}
}

// recorder adds a worker's recorder.
func (m *metric) recorder() *recorder {
	r := newRecorder()
	m.mu.Lock()
	m.recorders = append(m.recorders, r)
	m.mu.Unlock()
	return r
}

// tick collects every worker's interval; measured says whether it counts
// towards the total (false during the warm-up).
func (m *metric) tick(measured bool) *hdr.Histogram {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.interval.Reset()
	for _, r := range m.recorders {
		h := r.swap(m.spare)
		m.interval.Merge(h)
		m.spare = h
	}
	if measured {
		m.total.Merge(m.interval)
	}
	return m.interval
}

// paddedInt64 keeps a hot counter on its own cache line: producers and
// consumers update different counters from different cores.
type paddedInt64 struct {
	atomic.Int64
	_ [56]byte
}

// counters are the run's shared counts.
type counters struct {
	sent, acked, errors, received, bytes paddedInt64
}
