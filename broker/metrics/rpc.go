package metrics

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RPCLatency is rocketmq_rpc_latency: a histogram of the time each request's
// handler ran, in milliseconds (RocketMQ's unit), by protocol, request code
// and response code. Observe is the front end's per-request hook: after the
// first request of a (code, response code) pair it takes no lock and
// allocates nothing: an array or open-addressed table read, a scan of 12
// bucket bounds and two atomic adds (the bucket's count and the sum).
// The cumulative buckets, the count and the sum are assembled when
// Prometheus scrapes (a const histogram per series), not per request.
// Requests answered later (held pulls, sync-flush sends) are timed to the
// end of their handler, not to their answer.
type RPCLatency struct {
	desc *prometheus.Desc
	// names render a request code and a response code as labels (nil:
	// the number).
	reqName, respName func(int32) string

	low  [lowCodes]atomic.Pointer[respTable]
	high [highSlots]highSlot // codes >= lowCodes or < 0, open addressing

	mu sync.Mutex // serialises the creation of tables and cells
}

const (
	lowCodes  = 512 // request codes indexed directly (every hot remoting code)
	highSlots = 128 // further codes (POP's 200050..., gRPC's), linear probing
	respCodes = 256 // response codes kept apart; larger ones share the last slot
)

type highSlot struct {
	code  atomic.Int64 // code+1; 0: empty
	table atomic.Pointer[respTable]
}

type respTable struct {
	code  int32
	cells [respCodes]atomic.Pointer[cell]
}

// cell is one series: per-bucket counts (not cumulative; the last is
// +Inf's) and the sum in nanoseconds.
type cell struct {
	label   string // the response code label
	buckets [len(rpcBuckets) + 1]atomic.Uint64
	sumNs   atomic.Int64
}

// rpcBuckets are the histogram's bounds in ms: RocketMQ's
// (RemotingMetricsManager: 1, 3, 5, 7, 10, 100, 1000, 3000 ms) with
// finer steps below a millisecond, where an Apogee send answers.
var rpcBuckets = [...]float64{0.05, 0.1, 0.25, 0.5, 1, 3, 5, 7, 10, 100, 1000, 3000}

// rpcBoundsNs are rpcBuckets in nanoseconds, for Observe's comparisons.
var rpcBoundsNs = func() (b [len(rpcBuckets)]int64) {
	for i, ms := range rpcBuckets {
		b[i] = int64(ms * 1e6)
	}
	return b
}()

// NewRPCLatency returns the histogram, labelled protocolType
// ("remoting", "grpc") and the constant labels given.
func NewRPCLatency(protocolType string, constLabels prometheus.Labels) *RPCLatency {
	cl := prometheus.Labels{"protocol_type": protocolType}
	for k, v := range constLabels {
		cl[k] = v
	}
	return &RPCLatency{desc: prometheus.NewDesc("rocketmq_rpc_latency",
		"Time a request's handler ran, in ms, by request and response code (held requests: until they were parked).",
		[]string{"request_code", "response_code"}, cl)}
}

// Describe implements prometheus.Collector.
func (r *RPCLatency) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

// Collect implements prometheus.Collector: one histogram per (request,
// response) code pair seen.
func (r *RPCLatency) Collect(ch chan<- prometheus.Metric) {
	emit := func(t *respTable) {
		if t == nil {
			return
		}
		code := strconv.Itoa(int(t.code))
		if r.reqName != nil {
			code = r.reqName(t.code)
		}
		for i := range t.cells {
			c := t.cells[i].Load()
			if c == nil {
				continue
			}
			cum := make(map[float64]uint64, len(rpcBuckets))
			var n uint64
			for b, bound := range rpcBuckets {
				n += c.buckets[b].Load()
				cum[bound] = n
			}
			n += c.buckets[len(rpcBuckets)].Load()
			ch <- prometheus.MustNewConstHistogram(r.desc, n, float64(c.sumNs.Load())/1e6, cum, code, c.label)
		}
	}
	for i := range r.low {
		emit(r.low[i].Load())
	}
	for i := range r.high {
		emit(r.high[i].table.Load())
	}
}

// Observe counts one request of code answered with respCode after d.
func (r *RPCLatency) Observe(code, respCode int32, d time.Duration) {
	t := r.table(code)
	ri := int(respCode)
	if ri < 0 || ri >= respCodes {
		ri = respCodes - 1
	}
	c := t.cells[ri].Load()
	if c == nil {
		c = r.cell(t, ri, respCode)
	}
	ns := int64(d)
	b := 0
	for b < len(rpcBoundsNs) && ns > rpcBoundsNs[b] {
		b++
	}
	c.buckets[b].Add(1)
	c.sumNs.Add(ns)
}
func (r *RPCLatency) table(code int32) *respTable {
	if code >= 0 && code < lowCodes {
		if t := r.low[code].Load(); t != nil {
			return t
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if t := r.low[code].Load(); t != nil {
			return t
		}
		t := &respTable{code: code}
		r.low[code].Store(t)
		return t
	}
	key := int64(code) + 1
	h := uint32(code) * 2654435761
	for i := range highSlots {
		s := &r.high[(int(h>>16)+i)%highSlots]
		switch s.code.Load() {
		case key:
			if t := s.table.Load(); t != nil {
				return t
			}
		case 0:
		default:
			continue
		}
		r.mu.Lock()
		if c := s.code.Load(); c == 0 || c == key {
			t := s.table.Load()
			if t == nil {
				t = &respTable{code: code}
				s.table.Store(t)
				s.code.Store(key)
			}
			r.mu.Unlock()
			return t
		}
		r.mu.Unlock()
	}
	// More distinct codes than slots: count them under the last slot's
	// table rather than lose them (its label names its first code).
	return r.high[highSlots-1].table.Load()
}

func (r *RPCLatency) cell(t *respTable, ri int, respCode int32) *cell {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := t.cells[ri].Load(); c != nil {
		return c
	}
	c := &cell{label: strconv.Itoa(int(respCode))}
	if r.respName != nil {
		c.label = r.respName(respCode)
	}
	if ri == respCodes-1 && respCode != respCodes-1 {
		c.label = "other"
	}
	t.cells[ri].Store(c)
	return c
}

// Buckets returns the histogram's bucket bounds (ms) and the counts, per
// bucket and not cumulative, of the requests of the given codes (every
// response code summed), the last count being above every bound: what the
// dashboard's history reads once a second for the send latency
// percentiles. It reads the atomics Observe adds to and takes no lock.
func (r *RPCLatency) Buckets(codes ...int32) (bounds []float64, counts []uint64) {
	counts = make([]uint64, len(rpcBuckets)+1)
	for _, code := range codes {
		var t *respTable
		if code >= 0 && code < lowCodes {
			t = r.low[code].Load()
		} else {
			for i := range r.high {
				if r.high[i].code.Load() == int64(code)+1 {
					t = r.high[i].table.Load()
					break
				}
			}
		}
		if t == nil {
			continue
		}
		for i := range t.cells {
			if c := t.cells[i].Load(); c != nil {
				for b := range c.buckets {
					counts[b] += c.buckets[b].Load()
				}
			}
		}
	}
	return rpcBuckets[:], counts
}
