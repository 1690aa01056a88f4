package pop

import (
	"fmt"
	"slices"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// Looks without popping: Peek (RocketMQ's PEEK_MESSAGE) and HasMessage
// (its NOTIFICATION). Neither changes the state: a group or queue the
// manager has no state of is read where its first pop would start, and
// nothing is created for it.

// peekWindow bounds the new messages HasMessage reads of a queue whose
// FIFO message groups are blocked, to find one of a group that is not.
const peekWindow = MaxMessages

// Peek copies into res up to max messages a pop of group would hand out
// next, without handing them out: per queue (queueID, or every one of the
// topic's queues with queueID -1, from a round-robin start), the in-flight
// messages visible again (redeliveries, Attempts their deliveries so far),
// then the messages never handed out. res.Rest counts, per queue, the
// messages never handed out; res.PopTime is now. No filter applies and no
// message group is considered (RocketMQ's peek reads the queue from the
// group's offset likewise).
func (m *Manager) Peek(group, topic string, queueID, queues int32, limit int, res *Result) error {
	res.reset()
	if limit < 1 || limit > MaxMessages {
		return fmt.Errorf("%w: max %d is not in 1..%d", ErrInvalidArgument, limit, MaxMessages)
	}
	if queueID < -1 || (queueID == -1 && queues <= 0) {
		return fmt.Errorf("%w: queue %d of %d", ErrInvalidArgument, queueID, queues)
	}
	now := time.Now().UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	if queueID >= 0 {
		res.Rest += m.peekQueueLocked(group, topic, queueID, now, limit, res)
	} else {
		first := m.rr.Add(1)
		for i := int32(0); i < queues; i++ {
			res.Rest += m.peekQueueLocked(group, topic, int32((first+uint32(i))%uint32(queues)), now, limit, res)
		}
	}
	res.PopTime = now
	return nil
}

// startLocked returns where the group's next pop of a queue reads new
// messages, and its state (nil when it has none). m.mu is held.
func (m *Manager) startLocked(k key) (int64, *queueState) {
	h := m.host
	q := m.queues[k]
	next := int64(-1)
	if q != nil {
		next = q.next
	}
	if next < 0 {
		if off, ok := h.CommittedOffset(k.group, k.topic, k.queue); ok {
			next = off
		} else {
			next = h.MinOffset(k.topic, k.queue)
		}
	}
	return max(next, h.MinOffset(k.topic, k.queue)), q
}

// peekQueueLocked copies one queue's messages into res (up to limit in
// all) and returns its rest. m.mu is held.
func (m *Manager) peekQueueLocked(group, topic string, qid int32, now int64, limit int, res *Result) int64 {
	k := key{group, topic, qid}
	next, q := m.startLocked(k)
	h := m.host
	rest := max(h.MaxOffset(topic, qid)-next, 0)
	if q != nil && len(q.inflight) > 0 && len(res.Msgs) < limit {
		offs := make([]int64, 0, len(q.inflight))
		for off, e := range q.inflight {
			if e.VisibleAt <= now {
				offs = append(offs, off)
			}
		}
		slices.Sort(offs)
		for _, off := range offs {
			if len(res.Msgs) >= limit {
				break
			}
			e := q.inflight[off]
			found := false
			_, _, _ = h.Read(topic, qid, off, 1, 0, nil, func(rec []byte) {
				if !found {
					found = true
					m.appendRecord(res, qid, off, rec, max(e.Attempts, 1))
				}
			})
		}
	}
	for reads := 0; len(res.Msgs) < limit && reads < maxReads; reads++ {
		status, n, err := h.Read(topic, qid, next, limit-len(res.Msgs), maxReadBytes, nil, func(rec []byte) {
			if v, err := message.Decode(rec, false); err == nil {
				m.appendRecord(res, qid, v.QueueOffset(), rec, 1)
			}
		})
		if err != nil || status != store.Found || n <= next {
			break
		}
		next = n
	}
	return rest
}

// HasMessage reports whether a pop of group would find a message now in
// (topic, queueID) (or any of the topic's queues with queueID -1): a
// message never handed out, or an in-flight one visible again; with
// orderly, one whose message group is not blocked by an earlier message in
// flight (new messages are read for that, at most peekWindow per queue).
// Otherwise nextVisible (unix ms; 0: none) is when the first of the
// group's in-flight messages there becomes visible again: when a held
// notification should look again. It changes nothing.
func (m *Manager) HasMessage(group, topic string, queueID, queues int32, orderly bool) (has bool, nextVisible int64) {
	if queueID < -1 || (queueID == -1 && queues <= 0) {
		return false, 0
	}
	now := time.Now().UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	look := func(qid int32) bool {
		ok, nv := m.hasQueueLocked(key{group, topic, qid}, now, orderly)
		if nv > 0 && (nextVisible == 0 || nv < nextVisible) {
			nextVisible = nv
		}
		return ok
	}
	if queueID >= 0 {
		return look(queueID), nextVisible
	}
	for qid := int32(0); qid < queues; qid++ {
		if look(qid) {
			return true, nextVisible
		}
	}
	return false, nextVisible
}

// hasQueueLocked is HasMessage for one queue. m.mu is held.
func (m *Manager) hasQueueLocked(k key, now int64, orderly bool) (bool, int64) {
	next, q := m.startLocked(k)
	h := m.host
	var blocked map[string]bool // orderly: groups with a message invisible now
	var nextVisible int64
	if q != nil && len(q.inflight) > 0 {
		offs := make([]int64, 0, len(q.inflight))
		for off := range q.inflight {
			offs = append(offs, off)
		}
		slices.Sort(offs)
		for _, off := range offs {
			e := q.inflight[off]
			fifo := orderly && e.Key != ""
			if fifo && blocked[e.Key] {
				continue
			}
			if e.VisibleAt <= now {
				return true, 0 // a redelivery, or a FIFO message its group no longer holds back
			}
			if nextVisible == 0 || e.VisibleAt < nextVisible {
				nextVisible = e.VisibleAt
			}
			if fifo {
				if blocked == nil {
					blocked = make(map[string]bool)
				}
				blocked[e.Key] = true
			}
		}
	}
	if next >= h.MaxOffset(k.topic, k.queue) {
		return false, nextVisible
	}
	if len(blocked) == 0 {
		return true, 0
	}
	// Orderly with blocked groups: is one of the next messages free to go?
	free := false
	_, _, _ = h.Read(k.topic, k.queue, next, peekWindow, maxReadBytes, nil, func(rec []byte) {
		if free {
			return
		}
		v, err := message.Decode(rec, false)
		if err != nil {
			return
		}
		kb, ok := v.Property(message.PropShardingKey)
		if !ok || len(kb) == 0 {
			kb, _ = v.Property(message.PropJavaShardingKey)
		}
		if len(kb) == 0 || !blocked[string(kb)] {
			free = true
		}
	})
	if free {
		return true, 0
	}
	return false, nextVisible
}
