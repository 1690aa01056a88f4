package client

import (
	"sync"
	"sync/atomic"
	"time"
)

// QueueSelector chooses the queue a message is sent to.
type QueueSelector interface {
	// Select returns the index in queues (the topic's writable queues, in route
	// order) of the queue msg goes to. An index out of range fails the send with
	// ErrQueueNotFound. It is called again, with the same arguments, for each retry,
	// and must be safe for concurrent use.
	Select(msg *Message, queues []MessageQueue) int
}

// SelectorFunc adapts a function to QueueSelector.
type SelectorFunc func(msg *Message, queues []MessageQueue) int

// Select calls f.
func (f SelectorFunc) Select(msg *Message, queues []MessageQueue) int { return f(msg, queues) }

type roundRobin struct{ n atomic.Uint32 }

// RoundRobinSelector spreads messages over the topic's queues in turn (one counter per
// topic), skipping, while FaultTolerance is on, brokers that recently failed or were
// slow, and on a retry the broker that just failed. It is the default.
func RoundRobinSelector() QueueSelector { return &roundRobin{} }

// Select is used only when the producer cannot apply its per-topic round robin (it
// never is for the producer's own default).
func (r *roundRobin) Select(_ *Message, queues []MessageQueue) int {
	return int(r.n.Add(1)-1) % len(queues)
}

type hashSelector struct{ rr roundRobin }

// HashSelector sends every message with the same ShardingKey to the same queue
// (FNV-1a of the key modulo the number of queues), which keeps their order for an
// orderly consumer as long as the topic's queues do not change. Messages without a
// sharding key go round robin.
func HashSelector() QueueSelector { return &hashSelector{} }

func (h *hashSelector) Select(m *Message, queues []MessageQueue) int {
	if m.ShardingKey == "" {
		return h.rr.Select(m, queues)
	}
	const offset32, prime32 = 2166136261, 16777619
	x := uint32(offset32)
	for i := 0; i < len(m.ShardingKey); i++ {
		x ^= uint32(m.ShardingKey[i])
		x *= prime32
	}
	return int(x % uint32(len(queues)))
}

type manualSelector struct{}

// ManualSelector sends each message to the queue named by its Queue field (topic,
// broker name and queue id must match one of the topic's writable queues).
func ManualSelector() QueueSelector { return manualSelector{} }

func (manualSelector) Select(m *Message, queues []MessageQueue) int {
	if m.Queue == nil {
		return -1
	}
	for i, q := range queues {
		if q.QueueID == m.Queue.QueueID && q.BrokerName == m.Queue.BrokerName {
			return i
		}
	}
	return -1
}

// faultTable is the latency-based fault tolerance of a producer (RocketMQ 5's
// MQFaultStrategy, simplified): after each send, the broker is marked unavailable for
// a time that grows with the send's latency; a failed send counts as 10 s.
type faultTable struct {
	mu sync.RWMutex
	m  map[string]*faultItem
}

type faultItem struct {
	availableAt atomic.Int64 // unix nanos
}

var (
	latencySteps      = [...]time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 550 * time.Millisecond, 1800 * time.Millisecond, 3 * time.Second, 5 * time.Second, 15 * time.Second}
	unavailableByStep = [...]time.Duration{0, 0, 2 * time.Second, 5 * time.Second, 6 * time.Second, 10 * time.Second, 30 * time.Second}
	isolationLatency  = 10 * time.Second
)

func unavailableFor(latency time.Duration) time.Duration {
	for i := len(latencySteps) - 1; i >= 0; i-- {
		if latency >= latencySteps[i] {
			return unavailableByStep[i]
		}
	}
	return 0
}

func (t *faultTable) item(broker string) *faultItem {
	t.mu.RLock()
	it := t.m[broker]
	t.mu.RUnlock()
	if it != nil {
		return it
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*faultItem{}
	}
	if it = t.m[broker]; it == nil {
		it = &faultItem{}
		t.m[broker] = it
	}
	return it
}

// update records a send to broker that took latency (or failed, when isolate).
func (t *faultTable) update(broker string, now int64, latency time.Duration, isolate bool) {
	if isolate {
		latency = isolationLatency
	}
	d := unavailableFor(latency)
	it := t.item(broker)
	if d == 0 {
		if it.availableAt.Load() != 0 {
			it.availableAt.Store(0)
		}
		return
	}
	it.availableAt.Store(now + int64(d))
}

// available reports whether broker may be chosen.
func (t *faultTable) available(broker string, now int64) bool {
	t.mu.RLock()
	it := t.m[broker]
	t.mu.RUnlock()
	return it == nil || it.availableAt.Load() <= now
}

// forget clears broker's record: its failures belonged to a master the route no
// longer names.
func (t *faultTable) forget(broker string) {
	t.mu.RLock()
	it := t.m[broker]
	t.mu.RUnlock()
	if it != nil {
		it.availableAt.Store(0)
	}
}
