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
// allocates nothing (an array or open-addressed table read, then
// client_golang's lock-free Histogram.Observe). Requests answered later
// (held pulls, sync-flush sends) are timed to the end of their handler, not
// to their answer.
type RPCLatency struct {
	vec *prometheus.HistogramVec

	low  [lowCodes]atomic.Pointer[respTable]
	high [highSlots]highSlot // codes >= lowCodes or < 0, open addressing

	mu sync.Mutex // serialises the creation of tables and observers
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
	code int32
	obs  [respCodes]atomic.Pointer[observer]
}

type observer struct{ prometheus.Observer }

// rpcBuckets are the histogram's bounds in ms: RocketMQ's
// (RemotingMetricsManager: 1, 3, 5, 7, 10, 100, 1000, 3000 ms) with
// finer steps below a millisecond, where an Apogee send answers.
var rpcBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 3, 5, 7, 10, 100, 1000, 3000}

// NewRPCLatency returns the histogram, labelled protocolType
// ("remoting", "grpc") and the constant labels given.
func NewRPCLatency(protocolType string, constLabels prometheus.Labels) *RPCLatency {
	cl := prometheus.Labels{"protocol_type": protocolType}
	for k, v := range constLabels {
		cl[k] = v
	}
	return &RPCLatency{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "rocketmq_rpc_latency",
		Help:        "Time a request's handler ran, in ms, by request and response code (held requests: until they were parked).",
		Buckets:     rpcBuckets,
		ConstLabels: cl,
	}, []string{"request_code", "response_code"})}
}

// Describe implements prometheus.Collector.
func (r *RPCLatency) Describe(ch chan<- *prometheus.Desc) { r.vec.Describe(ch) }

// Collect implements prometheus.Collector.
func (r *RPCLatency) Collect(ch chan<- prometheus.Metric) { r.vec.Collect(ch) }

// Observe counts one request of code answered with respCode after d.
func (r *RPCLatency) Observe(code, respCode int32, d time.Duration) {
	t := r.table(code)
	ri := int(respCode)
	if ri < 0 || ri >= respCodes {
		ri = respCodes - 1
	}
	o := t.obs[ri].Load()
	if o == nil {
		o = r.observer(t, ri, respCode)
	}
	o.Observe(float64(d.Nanoseconds()) / 1e6)
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

func (r *RPCLatency) observer(t *respTable, ri int, respCode int32) *observer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := t.obs[ri].Load(); o != nil {
		return o
	}
	rc := strconv.Itoa(int(respCode))
	if ri == respCodes-1 && respCode != respCodes-1 {
		rc = "other"
	}
	o := &observer{r.vec.WithLabelValues(strconv.Itoa(int(t.code)), rc)}
	t.obs[ri].Store(o)
	return o
}
