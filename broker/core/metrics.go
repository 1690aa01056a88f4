package core

import (
	"sort"
	"time"

	"github.com/apogeemq/apogee/store"
)

// The read side for metrics exporters and dashboards (package
// broker/metrics, broker/dashboard): plain numbers read from the core's
// atomic counters, its tables and the store, at the time of a scrape or a
// page view. Nothing here is on a hot path, and nothing on a hot path
// counts for it: every number is one the core or the store keeps anyway.

// EngineStats is a snapshot of the core's and its features' counters.
type EngineStats struct {
	// Store is the store's counters (commit log, flush, dispatch, integrity).
	Store store.Stats
	// Send: requests, messages, errors (any error answered), refusals with
	// SYSTEM_BUSY by the in-flight byte budget or a stalled store, and the
	// message bytes of sends admitted but not yet answered.
	SendRequests, SendMessages, SendErrors, BusyRejects, InFlightBytes int64
	// Pull: requests, those that found messages, messages returned.
	PullRequests, PullFound, PullMessages int64
	// SendBacks counts messages consumers sent back for retry; DeadLetters,
	// those moved to a %DLQ% topic (by send-back and by POP).
	SendBacks, DeadLetters int64
	// Delayed counts messages routed to the delay levels since start;
	// DelayedDelivered, those delivered; DelayedPending is what the delay
	// levels' queues hold undelivered now.
	Delayed, DelayedDelivered, DelayedPending int64
	// Timers counts messages routed to the timer wheel since start;
	// TimersFired those delivered; TimersPending those loaded and waiting.
	Timers, TimersFired, TimersPending int64
	// Transactions: half messages stored, commits, rollbacks, checks sent,
	// half messages unresolved now (HalfPending) and waiting for a producer.
	HalfMessages, TxCommits, TxRollbacks, TxChecks, HalfPending, HalfWaiting int64
	// POP: messages handed out, acks, messages in flight now.
	PopMessages, PopAcks, PopInFlight int64
	// Clients: live connections, consumer groups and producer groups with
	// members.
	Connections, ConsumerGroups, ProducerGroups int
	// Topics is the topic table's size.
	Topics int
	// DiskRatio is the used fraction of the file system holding the data
	// directory, DiskTotal and DiskFree its bytes (zeros when unreadable).
	DiskRatio           float64
	DiskTotal, DiskFree int64
	// BrokerPermission is the broker's permission (6 read-write).
	BrokerPermission int32
}

// EngineStats reads the counters. It takes the feature managers' locks
// briefly (their pending counts are O(queues)) and calls statfs once.
func (a Admin) EngineStats() EngineStats {
	c := a.c
	e := EngineStats{Store: c.store.Stats()}
	e.SendRequests, e.SendMessages = c.stats.sendRequests.Load(), c.stats.sendMessages.Load()
	e.SendErrors, e.BusyRejects, e.InFlightBytes = c.stats.sendErrors.Load(), c.stats.busyRejects.Load(), c.inflight.Load()
	e.PullRequests, e.PullFound, e.PullMessages = c.stats.pullRequests.Load(), c.stats.pullFound.Load(), c.stats.pullMessages.Load()
	ps := c.features().pops.Stats()
	e.SendBacks, e.DeadLetters = c.stats.sendBacks.Load(), c.stats.deadLetters.Load()+ps.DeadLetters
	e.Delayed, e.DelayedDelivered = c.stats.delayed.Load(), c.features().sched.Stats().Delivered
	for level, next := range a.DelayOffsets() {
		if mx := c.store.MaxOffset(scheduleTopic, level-1); mx > next {
			e.DelayedPending += mx - max(next, 0)
		}
	}
	ts := c.features().timers.Stats()
	e.Timers, e.TimersFired, e.TimersPending = c.stats.timers.Load(), ts.Fired, int64(ts.Pending)
	tx := c.features().tx.Stats()
	e.HalfMessages, e.TxCommits, e.TxRollbacks, e.TxChecks = tx.HalfMessages, tx.Commits, tx.Rollbacks, tx.Checks
	e.HalfPending, e.HalfWaiting = int64(tx.Pending), int64(tx.Waiting)
	e.PopMessages, e.PopAcks, e.PopInFlight = ps.Popped, ps.Acks, int64(ps.InFlight)
	e.Connections, e.ConsumerGroups, e.ProducerGroups = c.clients.counts()
	e.Topics = c.topics.count()
	e.DiskRatio, e.DiskTotal, e.DiskFree = diskSpace(c.opts.DataDir)
	e.BrokerPermission = c.BrokerPermission()
	return e
}

// QueueLag is one queue's backlog for a consumer group, as
// GET_CONSUME_STATS counts it: the queue's max offset less the group's
// committed offset (0 when it has none).
type QueueLag struct {
	QueueID        int32
	BrokerOffset   int64 // the queue's max offset (next to be stored)
	ConsumerOffset int64 // the group's committed offset, 0 when none
	// OldestMs is the store time (ms) of the first unconsumed message, 0
	// when the queue has no backlog (or LagOptions.Latency was off).
	OldestMs int64
}

// Lag is the backlog of a consumer group on one topic.
type Lag struct {
	Group, Topic string
	// Messages is the sum of the queues' lags.
	Messages int64
	// OldestMs is the earliest OldestMs of the queues with a backlog (0
	// when none).
	OldestMs int64
	// Queues is each queue's backlog, by queue id (LagOptions.Queues).
	Queues []QueueLag
}

// LagOptions say how much ConsumerLags reads.
type LagOptions struct {
	// Latency reads the store time of each lagging queue's first
	// unconsumed message (one consume-queue entry and one record header per
	// such queue).
	Latency bool
	// Queues keeps the per-queue figures in Lag.Queues.
	Queues bool
}

// ConsumerLags walks every group's committed offsets (the consumer offset
// table, as GET_BROKER_CONSUME_STATS does, over the topics' read queues)
// and returns each (group, topic) pair's backlog, sorted by group then
// topic. A topic no longer in the topic table is skipped.
func (a Admin) ConsumerLags(o LagOptions) []Lag {
	c := a.c
	type pair struct {
		group, topic string
		offs         []int64
	}
	var pairs []pair
	c.offsets.mu.Lock()
	for topic, groups := range c.offsets.m {
		for group, qs := range groups {
			pairs = append(pairs, pair{group, topic, append([]int64(nil), qs...)})
		}
	}
	c.offsets.mu.Unlock()
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].group != pairs[j].group {
			return pairs[i].group < pairs[j].group
		}
		return pairs[i].topic < pairs[j].topic
	})
	out := make([]Lag, 0, len(pairs))
	for _, p := range pairs {
		e := c.topics.lookup(p.topic)
		if e == nil {
			continue
		}
		l := Lag{Group: p.group, Topic: p.topic}
		for q := int32(0); q < e.cfg.ReadQueueNums; q++ {
			ql := QueueLag{QueueID: q, BrokerOffset: max(c.store.MaxOffset(p.topic, q), 0)}
			if int(q) < len(p.offs) {
				ql.ConsumerOffset = max(p.offs[q], 0)
			}
			if d := ql.BrokerOffset - ql.ConsumerOffset; d > 0 {
				l.Messages += d
				if o.Latency {
					ql.OldestMs = c.storeTimeAt(p.topic, q, max(ql.ConsumerOffset, c.store.MinOffset(p.topic, q)))
					if ql.OldestMs > 0 && (l.OldestMs == 0 || ql.OldestMs < l.OldestMs) {
						l.OldestMs = ql.OldestMs
					}
				}
			}
			if o.Queues {
				l.Queues = append(l.Queues, ql)
			}
		}
		out = append(out, l)
	}
	return out
}

// ConsumerGroupNames lists the consumer groups with live members, sorted.
func (a Admin) ConsumerGroupNames() []string {
	c := a.c
	c.clients.mu.RLock()
	out := make([]string, 0, len(c.clients.consumers))
	for g := range c.clients.consumers {
		out = append(out, g)
	}
	c.clients.mu.RUnlock()
	sort.Strings(out)
	return out
}

// SubscriptionGroupNames lists the subscription groups of the group table,
// sorted.
func (a Admin) SubscriptionGroupNames() []string {
	c := a.c
	out := c.groups.names()
	sort.Strings(out)
	return out
}

// StoreTimeAt is the store time (ms) of a queue's message at offset, or 0
// when there is none.
func (a Admin) StoreTimeAt(topic string, q int32, offset int64) int64 {
	c := a.c
	return c.storeTimeAt(topic, q, offset)
}

// Uptime is how long the core has run.
func (a Admin) Uptime() time.Duration { return time.Since(a.c.start) }
