package store

import "github.com/apogeemq/apogee/internal/hotmap"

// queueCounter assigns a queue's offsets; next is touched only inside the
// commit log's append critical section.
type queueCounter struct{ next int64 }

// counterTable maps topic → queue id → counter. Put looks a counter up on
// every message: established topics are read without a lock, and new ones
// cost a constant each (see hotmap), where copying the whole table per new
// queue made creating n topics cost n².
type counterTable struct{ m *hotmap.Map[[]*queueCounter] }

func (t *counterTable) init() { t.m = hotmap.New[[]*queueCounter]() }

// get returns the counter of (topic, queueID), creating it.
func (t *counterTable) get(topic string, queueID int32) *queueCounter {
	if qs := t.m.Load(topic); qs != nil && int(queueID) < len(*qs) && (*qs)[queueID] != nil {
		return (*qs)[queueID]
	}
	qs := t.m.Update(topic, func(old *[]*queueCounter) *[]*queueCounter {
		var cur []*queueCounter
		if old != nil {
			cur = *old
		}
		if int(queueID) < len(cur) && cur[queueID] != nil {
			return old
		}
		grown := make([]*queueCounter, max(len(cur), int(queueID)+1))
		copy(grown, cur)
		grown[queueID] = &queueCounter{}
		return &grown
	})
	return (*qs)[queueID]
}

// remove forgets a topic's counters (a deleted topic).
func (t *counterTable) remove(topic string) { t.m.Delete(topic) }
