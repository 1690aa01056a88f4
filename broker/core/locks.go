package core

import (
	"sync"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// lockManager is the table of queue locks orderly consumers take with
// LOCK_BATCH_MQ (RocketMQ's RebalanceLockManager): per group and queue, the
// holding clientID and when it last locked. A lock is granted when the queue
// is free, its lock expired, or the same client holds it; granting renews it.
type lockManager struct {
	expiry time.Duration

	mu     sync.Mutex
	groups map[string]map[protocol.MessageQueue]*queueLock
}

type queueLock struct {
	clientID string
	last     time.Time
}

func newLockManager(expiry time.Duration) *lockManager {
	return &lockManager{expiry: expiry, groups: make(map[string]map[protocol.MessageQueue]*queueLock)}
}

// tryLock locks every queue it can for clientID and returns those it holds.
func (l *lockManager) tryLock(group, clientID string, mqs []protocol.MessageQueue, now time.Time) []protocol.MessageQueue {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.groups[group]
	if t == nil {
		t = make(map[protocol.MessageQueue]*queueLock)
		l.groups[group] = t
	}
	ok := make([]protocol.MessageQueue, 0, len(mqs))
	for _, mq := range mqs {
		lk := t[mq]
		switch {
		case lk == nil:
			t[mq] = &queueLock{clientID: clientID, last: now}
		case lk.clientID == clientID || now.Sub(lk.last) > l.expiry:
			lk.clientID, lk.last = clientID, now
		default:
			continue
		}
		if !containsMQ(ok, mq) {
			ok = append(ok, mq)
		}
	}
	return ok
}

// unlock releases the queues clientID holds among mqs.
func (l *lockManager) unlock(group, clientID string, mqs []protocol.MessageQueue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.groups[group]
	if t == nil {
		return
	}
	for _, mq := range mqs {
		if lk := t[mq]; lk != nil && lk.clientID == clientID {
			delete(t, mq)
		}
	}
	if len(t) == 0 {
		delete(l.groups, group)
	}
}

// sweep drops expired locks so that the table does not grow forever.
func (l *lockManager) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for g, t := range l.groups {
		for mq, lk := range t {
			if now.Sub(lk.last) > l.expiry {
				delete(t, mq)
			}
		}
		if len(t) == 0 {
			delete(l.groups, g)
		}
	}
}

func containsMQ(s []protocol.MessageQueue, mq protocol.MessageQueue) bool {
	for _, x := range s {
		if x == mq {
			return true
		}
	}
	return false
}

// groupLocked reports whether a group holds an unexpired queue lock (it
// consumes orderly: RocketMQ 5 then sends its retried messages straight to
// the dead-letter queue).
func (l *lockManager) groupLocked(group string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lk := range l.groups[group] {
		if now.Sub(lk.last) <= l.expiry {
			return true
		}
	}
	return false
}

// LockQueues locks for clientID every queue of mqs it can (LOCK_BATCH_MQ,
// 41, orderly consumers) and returns those it holds: a queue is granted
// when free, when its lock expired (Options.LockExpiry) or when clientID
// holds it already; granting renews it.
func (c *Core) LockQueues(group, clientID string, mqs []protocol.MessageQueue) []protocol.MessageQueue {
	return c.locks.tryLock(group, clientID, mqs, time.Now())
}

// UnlockQueues releases the queues of mqs that clientID holds
// (UNLOCK_BATCH_MQ, 42).
func (c *Core) UnlockQueues(group, clientID string, mqs []protocol.MessageQueue) {
	c.locks.unlock(group, clientID, mqs)
}
