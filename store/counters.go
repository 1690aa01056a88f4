package store

import (
	"sync"
	"sync/atomic"
	"time"
)

// queueCounter assigns a queue's offsets; next is touched only inside the
// commit log's append critical section.
type queueCounter struct{ next int64 }

// counterTable maps topic → queue id → counter. Put looks a counter up on
// every message, so established topics are read without a lock from an
// immutable map (hot). A new topic or queue goes into a small map under a
// mutex (cold), and cold is merged into a new hot map once it holds an
// eighth as many topics as hot (at once while the table is small), or a
// second after the last merge when a cold topic is used: the copies add up
// to a constant per topic, where copying the whole table per new topic made
// creating n topics cost n² (20,000 auto-created topics slowed to a crawl).
type counterTable struct {
	hot atomic.Pointer[map[string][]*queueCounter]

	mu        sync.Mutex
	cold      map[string][]*queueCounter // under mu
	lastMerge time.Time                  // under mu
}

func (t *counterTable) init() {
	t.hot.Store(&map[string][]*queueCounter{})
	t.cold = map[string][]*queueCounter{}
}

// get returns the counter of (topic, queueID), creating it.
func (t *counterTable) get(topic string, queueID int32) *queueCounter {
	if qs := (*t.hot.Load())[topic]; int(queueID) < len(qs) && qs[queueID] != nil {
		return qs[queueID]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	hot := *t.hot.Load()
	qs, cold := t.cold[topic]
	if !cold {
		qs = hot[topic]
	}
	if int(queueID) >= len(qs) || qs[queueID] == nil {
		grown := make([]*queueCounter, max(len(qs), int(queueID)+1))
		copy(grown, qs)
		grown[queueID] = &queueCounter{}
		qs = grown
		t.cold[topic] = qs
	}
	if len(t.cold) >= max(1, len(hot)/8) || time.Since(t.lastMerge) > time.Second {
		t.merge(hot)
	}
	return qs[queueID]
}

// merge publishes hot plus cold as the new hot map. Holds mu.
func (t *counterTable) merge(hot map[string][]*queueCounter) {
	if len(t.cold) == 0 {
		return
	}
	m := make(map[string][]*queueCounter, len(hot)+len(t.cold))
	for k, v := range hot {
		m[k] = v
	}
	for k, v := range t.cold {
		m[k] = v
	}
	t.hot.Store(&m)
	clear(t.cold)
	t.lastMerge = time.Now()
}

// remove forgets a topic's counters (a deleted topic).
func (t *counterTable) remove(topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cold, topic)
	hot := *t.hot.Load()
	if _, ok := hot[topic]; !ok {
		return
	}
	m := make(map[string][]*queueCounter, len(hot))
	for k, v := range hot {
		if k != topic {
			m[k] = v
		}
	}
	t.hot.Store(&m)
}
