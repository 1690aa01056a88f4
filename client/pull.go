package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// PullConsumer is a consumer the application drives: Poll returns the messages its
// pullers have fetched in the background, and offsets move when the application
// commits them (or at every Poll with AutoCommit). Queues come from rebalancing
// (Subscribe options; the group shares the topic's queues) or from Assign.
type PullConsumer struct {
	cfg     pullConfig
	c       *consumer
	notify  chan struct{}
	started atomic.Bool
	closed  atomic.Bool
	manual  atomic.Bool
	mu      sync.Mutex // serialises Poll, Commit, Assign, Close
	next    int        // round-robin start over queues in Poll
}

// NewPullConsumer creates a pull consumer; Start starts it.
func NewPullConsumer(opts ...PullConsumerOpt) (*PullConsumer, error) {
	cfg := defaultPullConfig()
	for _, o := range opts {
		o.applyPull(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := newConsumer(cfg.consumerConfig, "CONSUME_ACTIVELY")
	if err != nil {
		return nil, err
	}
	p := &PullConsumer{cfg: cfg, c: c, notify: make(chan struct{}, 1)}
	c.sendSubs = true
	c.lockEvery = DefaultLockInterval
	c.rebalancing = len(cfg.subs) > 0
	c.onMessages = func(*processQueue, []*MessageExt) {
		select {
		case p.notify <- struct{}{}:
		default:
		}
	}
	return p, nil
}

// ClientID returns the consumer's client ID.
func (p *PullConsumer) ClientID() string { return p.c.in.id }

// Start joins the group (heartbeat) and, when the consumer subscribes topics,
// rebalances and starts pulling. Without subscriptions it waits for Assign.
func (p *PullConsumer) Start(ctx context.Context) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if p.started.Swap(true) {
		return ErrStarted
	}
	if err := p.c.start(ctx, p.c); err != nil {
		p.started.Store(false)
		return err
	}
	return nil
}

// Queues returns topic's readable queues (from the name server).
func (p *PullConsumer) Queues(ctx context.Context, topic string) ([]MessageQueue, error) {
	r, err := p.c.in.route(ctx, topic)
	if err != nil {
		return nil, err
	}
	return slices.Clone(r.subscribe), nil
}

// Assign sets the consumer's queues by hand (a consumer without subscriptions):
// queues no longer listed are dropped (their offsets committed), new ones start
// from their committed offset, or where ConsumeFrom says when there is none.
func (p *PullConsumer) Assign(ctx context.Context, queues []MessageQueue) error {
	if !p.started.Load() || p.closed.Load() {
		return ErrNotStarted
	}
	if p.c.rebalancing {
		return fmt.Errorf("%w: Assign on a consumer that subscribes (its queues come from rebalancing)", ErrConfig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.manual.Store(true)
	byTopic := map[string][]MessageQueue{}
	for _, q := range p.c.assignedQueues() {
		byTopic[q.Topic] = nil
	}
	for _, q := range queues {
		byTopic[q.Topic] = append(byTopic[q.Topic], q)
	}
	for topic, qs := range byTopic {
		if len(qs) > 0 {
			if _, err := p.c.in.route(ctx, topic); err != nil {
				return err
			}
			p.c.in.addInterest(topic)
		}
		p.c.rebalanceMu.Lock()
		p.c.assign(ctx, topic, qs)
		p.c.rebalanceMu.Unlock()
	}
	return nil
}

// Assignment returns the queues the consumer pulls now.
func (p *PullConsumer) Assignment() []MessageQueue { return p.c.assignedQueues() }

// Poll returns the next messages (at most MaxPollRecords, from the queues in turn,
// each queue's in order), waiting until some arrive or ctx ends. With AutoCommit it
// first marks everything the previous Polls returned consumed.
func (p *PullConsumer) Poll(ctx context.Context) ([]*MessageExt, error) {
	if !p.started.Load() {
		return nil, ErrNotStarted
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.autoCommit {
		p.markPolled()
	}
	for {
		if p.closed.Load() {
			return nil, ErrClosed
		}
		p.c.mu.Lock()
		pqs := make([]*processQueue, 0, len(p.c.pqs))
		for _, pq := range p.c.pqs {
			pqs = append(pqs, pq)
		}
		p.c.mu.Unlock()
		slices.SortFunc(pqs, func(a, b *processQueue) int { return mqLess(a.mq, b.mq) })
		var out []*MessageExt
		for i := range pqs {
			pq := pqs[(p.next+i)%len(pqs)]
			if n := p.cfg.maxPollRecords - len(out); n > 0 {
				out = append(out, pq.take(n)...)
			}
		}
		if len(pqs) > 0 {
			p.next = (p.next + 1) % len(pqs)
		}
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-p.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
			// New queues or a seek need no notification to be looked at.
		}
	}
}

// markPolled marks everything handed out by Poll consumed.
func (p *PullConsumer) markPolled() {
	for _, pq := range p.pqsSnapshot() {
		if msgs := pq.dispatchedLive(); len(msgs) > 0 {
			p.c.stats.consumed.Add(int64(len(msgs)))
			p.c.consumed(pq, msgs)
		}
	}
}

func (p *PullConsumer) pqsSnapshot() []*processQueue { return p.c.pqsSnapshot() }

// Commit marks everything Poll has returned consumed and writes the offsets now.
func (p *PullConsumer) Commit(ctx context.Context) error {
	if !p.started.Load() {
		return ErrNotStarted
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.markPolled()
	return p.c.commit(ctx)
}

// CommitOffsets sets the committed offsets of assigned queues (the next message to
// consume) and writes them now. It does not move what Poll returns; use Seek for that.
func (p *PullConsumer) CommitOffsets(ctx context.Context, offsets map[MessageQueue]int64) error {
	for mq, off := range offsets {
		p.c.mu.Lock()
		pq := p.c.pqs[mq]
		p.c.mu.Unlock()
		if pq == nil {
			return fmt.Errorf("%w: %s", ErrNotAssigned, mq)
		}
		p.c.offsets.update(mq, off, true)
	}
	return p.c.commit(ctx)
}

// Seek makes the next Polls of mq start at offset: messages already fetched are
// dropped and the pull in flight, if any, is abandoned. The committed offset moves
// to offset too.
func (p *PullConsumer) Seek(mq MessageQueue, offset int64) error {
	p.c.mu.Lock()
	pq := p.c.pqs[mq]
	p.c.mu.Unlock()
	if pq == nil {
		return fmt.Errorf("%w: %s", ErrNotAssigned, mq)
	}
	pq.reset(offset)
	p.c.offsets.update(mq, offset, true)
	return nil
}

// SeekToTimestamp seeks mq to its first message stored at or after t
// (SEARCH_OFFSET_BY_TIMESTAMP), or to its end when every message is older.
func (p *PullConsumer) SeekToTimestamp(ctx context.Context, mq MessageQueue, t time.Time) error {
	off, err := p.c.queueOffset(ctx, mq, protocol.ReqSearchOffsetByTimestamp, t.UnixMilli())
	if err != nil {
		return err
	}
	return p.Seek(mq, off)
}

// Lag returns the position of every assigned queue (see PushConsumer.Lag).
func (p *PullConsumer) Lag(ctx context.Context) ([]QueueLag, error) { return p.c.lag(ctx, true) }

// Stats returns the consumer's counters.
func (p *PullConsumer) Stats() ConsumerStats { return p.c.statsSnapshot() }

// Suspend pauses fetching; Resume resumes it.
func (p *PullConsumer) Suspend() { p.c.suspend() }

// Resume resumes fetching after Suspend.
func (p *PullConsumer) Resume() { p.c.resumePulling() }

// Close stops fetching, commits the offsets (with AutoCommit, after marking what
// Poll returned consumed), leaves the group and releases the instance.
func (p *PullConsumer) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Swap(true) {
		return nil
	}
	if !p.started.Load() {
		p.c.in.release()
		return nil
	}
	if p.cfg.autoCommit {
		p.markPolled()
	}
	return p.c.stop(ctx, nil)
}
