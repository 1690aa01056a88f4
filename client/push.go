package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// PushConsumer consumes subscribed topics with a listener: it pulls (long polling)
// the queues rebalancing gives it and calls the listener with what arrives, committing
// offsets as messages are consumed. See the package documentation.
type PushConsumer struct {
	cfg     pushConfig
	c       *consumer
	pool    workPool
	started atomic.Bool
	closed  atomic.Bool
	mu      sync.Mutex
}

// localRetryDelay is how long a message whose send-back failed waits before it is
// consumed again locally (the Java and Go clients wait 5 s).
var localRetryDelay = 5 * time.Second

// NewPushConsumer creates a push consumer; Start starts it.
func NewPushConsumer(opts ...PushConsumerOpt) (*PushConsumer, error) {
	cfg := defaultPushConfig()
	for _, o := range opts {
		o.applyPush(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := newConsumer(cfg.consumerConfig, "CONSUME_PASSIVELY")
	if err != nil {
		return nil, err
	}
	p := &PushConsumer{cfg: cfg, c: c}
	c.orderly = cfg.orderly != nil
	c.pullEvery = cfg.pullInterval
	c.lockEvery = cfg.lockInterval
	if !c.orderly {
		c.maxSpan = cfg.maxSpan
	}
	if cfg.model == Clustering {
		c.addRetrySubscription()
	}
	c.direct = p.consumeDirect
	p.pool.init(cfg.goroutines, p.consumeConcurrently)
	if c.orderly {
		c.onMessages = func(pq *processQueue, _ []*MessageExt) { p.startOrderly(pq) }
		c.onLockRegained = p.startOrderly
	} else {
		c.onMessages = p.dispatch
	}
	return p, nil
}

// ClientID returns the consumer's client ID.
func (p *PushConsumer) ClientID() string { return p.c.in.id }

// Start joins the group: it checks the subscribed topics' routes (failing if one has
// none), sends a heartbeat, rebalances, and starts pulling.
func (p *PushConsumer) Start(ctx context.Context) error {
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

// Close stops pulling, waits (until ctx ends) for the listener calls in progress,
// commits the offsets, releases the queue locks, leaves the group
// (UNREGISTER_CLIENT) and releases the instance.
func (p *PushConsumer) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Swap(true) {
		return nil
	}
	defer p.pool.stop()
	if !p.started.Load() {
		p.c.in.release()
		return nil
	}
	return p.c.stop(ctx, p.waitIdle)
}

// waitIdle waits for the listener calls in progress: the concurrent pool, and each
// orderly queue's batch (the queues are dropped, so their loops end after it). Only
// then are offsets final: an orderly queue's lock is released after its offset is
// committed, so its next owner never consumes a message twice.
func (p *PushConsumer) waitIdle(ctx context.Context) error {
	if !p.c.orderly {
		return p.pool.wait(ctx)
	}
	for _, pq := range p.c.pqsSnapshot() {
		pq.mu.Lock()
		idle, running := pq.loopIdle, pq.consuming
		pq.mu.Unlock()
		if !running || idle == nil {
			continue
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("client: waiting for orderly listeners: %w", ctx.Err())
		}
	}
	return nil
}

// Suspend pauses pulling (messages already pulled are still consumed).
func (p *PushConsumer) Suspend() { p.c.suspend() }

// Resume resumes pulling after Suspend.
func (p *PushConsumer) Resume() { p.c.resumePulling() }

// Lag returns the position of every assigned queue, asking each queue's broker for
// its max offset (GET_MAX_OFFSET); a queue whose broker does not answer reports the
// max offset seen by its last pull, and the errors are returned joined.
func (p *PushConsumer) Lag(ctx context.Context) ([]QueueLag, error) { return p.c.lag(ctx, true) }

// Stats returns the consumer's counters.
func (p *PushConsumer) Stats() ConsumerStats { return p.c.statsSnapshot() }

// Assignment returns the queues assigned to this consumer now.
func (p *PushConsumer) Assignment() []MessageQueue { return p.c.assignedQueues() }

// Rebalance rebalances now (the consumer also does every RebalanceInterval and when
// the broker reports a membership change).
func (p *PushConsumer) Rebalance(ctx context.Context) error {
	if !p.started.Load() || p.closed.Load() {
		return ErrNotStarted
	}
	p.c.rebalance(ctx)
	return nil
}

// ---------------------------------------------------------------------------
// Concurrent consumption.

type consumeTask struct {
	pq   *processQueue
	msgs []*MessageExt
}

// workPool runs tasks on at most max goroutines, started when there is work.
// A worker that finds the queue empty parks until a task comes or the pool
// stops, as the Java client's consume threads stay alive: a worker that
// exited instead was started again for the next message at moderate rates,
// a new goroutine and a stack grown anew per message (5 % of the client's
// CPU in a profile of apogee-bench e2e at 30,000 msgs/s).
type workPool struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when busy drops to 0 with no task queued (wait)
	tasks   []consumeTask
	head    int
	running int           // workers alive
	busy    int           // workers running a task
	parked  int           // workers parked and not yet woken
	wake    chan struct{} // one token per parked worker woken; cap max
	quit    chan struct{} // closed by stop
	stopped bool
	max     int
	run     func(consumeTask)
}

func (w *workPool) init(max int, run func(consumeTask)) {
	w.max, w.run = max, run
	w.cond = sync.NewCond(&w.mu)
	w.wake = make(chan struct{}, max)
	w.quit = make(chan struct{})
}

func (w *workPool) submit(t consumeTask) {
	w.mu.Lock()
	w.tasks = append(w.tasks, t)
	switch {
	case w.parked > 0:
		w.parked--
		w.wake <- struct{}{} // never blocks: at most one token per parked worker
	case w.running < w.max:
		w.running++
		go w.worker()
	}
	w.mu.Unlock()
}

func (w *workPool) worker() {
	w.mu.Lock()
	for {
		if w.head < len(w.tasks) {
			t := w.tasks[w.head]
			w.tasks[w.head] = consumeTask{}
			w.head++
			w.busy++
			w.mu.Unlock()
			w.run(t)
			w.mu.Lock()
			w.busy--
			continue
		}
		w.tasks, w.head = w.tasks[:0], 0
		if w.busy == 0 {
			w.cond.Broadcast()
		}
		if w.stopped {
			w.running--
			w.mu.Unlock()
			return
		}
		w.parked++
		w.mu.Unlock()
		select {
		case <-w.wake:
			w.mu.Lock()
		case <-w.quit:
			w.mu.Lock()
			select {
			case <-w.wake: // woken as the pool stopped: run what was submitted
			default:
				w.parked--
			}
		}
	}
}

// stop makes the workers exit once the queue is empty. Tasks submitted
// later still run, on a worker started for them.
func (w *workPool) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.quit)
	}
}

// wait waits until no task runs or is queued, or ctx ends.
func (w *workPool) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		w.mu.Lock()
		for w.busy > 0 || w.head < len(w.tasks) {
			w.cond.Wait()
		}
		w.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("client: waiting for listeners: %w", ctx.Err())
	}
}

// dispatch cuts newly pulled messages into batches for the pool.
func (p *PushConsumer) dispatch(pq *processQueue, msgs []*MessageExt) {
	pq.markDispatched(msgs)
	for len(msgs) > 0 {
		n := min(len(msgs), p.cfg.batch)
		p.pool.submit(consumeTask{pq: pq, msgs: msgs[:n:n]})
		msgs = msgs[n:]
	}
}

// callListener runs the listener with a bounded context, turning a panic or a
// timeout into a failure.
func (p *PushConsumer) callListener(pq *processQueue, msgs []*MessageExt, cc *ConsumeContext, orderly bool) (res ConsumeResult) {
	ctx := newListenerCtx(p.c.runCtx, p.cfg.consumeTimeout, cc)
	defer func() {
		timedOut := ctx.finish()
		if v := recover(); v != nil {
			p.c.log.Error("client: listener panicked", "queue", pq.mq, "panic", v)
			res = ConsumeRetryLater
		}
		if timedOut && res == ConsumeSuccess {
			p.c.log.Warn("client: listener exceeded the consume timeout; the batch counts as failed", "queue", pq.mq)
			res = ConsumeRetryLater
		}
	}()
	if orderly {
		return p.cfg.orderly(ctx, msgs)
	}
	return p.cfg.concurrent(ctx, msgs)
}

// consumeDirect runs the listener on one message outside any process queue
// (CONSUME_MESSAGE_DIRECTLY): nothing is acknowledged, committed or sent
// back. It returns the listener's result, or the text of its panic.
func (p *PushConsumer) consumeDirect(ctx context.Context, m *MessageExt) (res ConsumeResult, panicked string) {
	cc := &ConsumeContext{AckIndex: -1}
	if m.Queue != nil {
		cc.Queue = *m.Queue
	}
	lctx := newListenerCtx(ctx, p.cfg.consumeTimeout, cc)
	defer func() {
		lctx.finish()
		if v := recover(); v != nil {
			panicked = fmt.Sprint("listener panicked: ", v)
		}
	}()
	if p.cfg.orderly != nil {
		return p.cfg.orderly(lctx, []*MessageExt{m}), ""
	}
	return p.cfg.concurrent(lctx, []*MessageExt{m}), ""
}

func (p *PushConsumer) consumeConcurrently(t consumeTask) {
	pq, msgs := t.pq, t.msgs
	if pq.dropped.Load() {
		return // the queue's next owner consumes them
	}
	cc := &ConsumeContext{Queue: pq.mq, AckIndex: -1}
	res := p.callListener(pq, msgs, cc, false)
	c := p.c
	ack := len(msgs) - 1
	if res != ConsumeSuccess {
		ack = min(cc.AckIndex, len(msgs)-1)
	}
	c.stats.consumed.Add(int64(ack + 1))
	failed := msgs[ack+1:]
	if len(failed) == 0 {
		c.consumed(pq, msgs)
		return
	}
	c.stats.failed.Add(int64(len(failed)))
	if c.cfg.model == Broadcasting {
		c.log.Warn("client: broadcasting messages failed; they are not redelivered", "queue", pq.mq, "count", len(failed))
		c.consumed(pq, msgs)
		return
	}
	var local []*MessageExt
	done := msgs[: ack+1 : ack+1]
	for _, m := range failed {
		ctx, cancel := context.WithTimeout(c.runCtx, 2*c.in.cfg.requestTimeout)
		err := c.sendBack(ctx, m, cc.DelayLevel)
		cancel()
		if err != nil {
			c.stats.sendBackFailed.Add(1)
			c.log.Warn("client: send-back failed; consuming again locally", "msgId", m.MsgID, "err", err)
			m.ReconsumeTimes++
			local = append(local, m)
			continue
		}
		c.stats.sentBack.Add(1)
		done = append(done, m)
	}
	c.consumed(pq, done)
	if len(local) > 0 {
		time.AfterFunc(localRetryDelay, func() {
			if !pq.dropped.Load() {
				p.pool.submit(consumeTask{pq: pq, msgs: local})
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Orderly consumption.

// startOrderly starts pq's consume goroutine if it is not running and the queue has
// something to consume.
func (p *PushConsumer) startOrderly(pq *processQueue) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if pq.consuming || pq.dropped.Load() || pq.count == 0 {
		return
	}
	pq.consuming = true
	pq.loopIdle = make(chan struct{})
	go p.orderlyLoop(pq)
}

// stopIfIdle ends the loop when the queue is dropped, its lock is not valid, or
// nothing is pending.
func (p *PushConsumer) stopIfIdle(pq *processQueue, now time.Time) bool {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	pending := false
	for i := pq.head; i < len(pq.ents); i++ {
		if pq.ents[i].state == entPending {
			pending = true
			break
		}
	}
	valid := pq.locked && now.Sub(pq.lockedAt) < 30*time.Second
	if pq.dropped.Load() || !valid || !pending {
		pq.consuming = false
		close(pq.loopIdle)
		return true
	}
	return false
}

// orderlyLoop consumes pq in queue order, one batch at a time, while it holds the
// queue's lock.
func (p *PushConsumer) orderlyLoop(pq *processQueue) {
	c := p.c
	for {
		if p.stopIfIdle(pq, time.Now()) {
			return
		}
		batch := pq.take(p.cfg.batch)
		if len(batch) == 0 {
			continue
		}
		cc := &ConsumeContext{Queue: pq.mq, AckIndex: -1}
		res := p.callListener(pq, batch, cc, true)
		if res == ConsumeSuccess {
			c.stats.consumed.Add(int64(len(batch)))
			c.consumed(pq, batch)
			continue
		}
		c.stats.failed.Add(int64(len(batch)))
		if pq.retries(batch[0]) >= int32(c.cfg.maxReconsume) {
			// Out of local retries: to the dead-letter queue, then move on.
			ok := true
			for _, m := range batch {
				ctx, cancel := context.WithTimeout(c.runCtx, 2*c.in.cfg.requestTimeout)
				err := c.sendBack(ctx, m, -1)
				cancel()
				if err != nil {
					ok = false
					c.stats.sendBackFailed.Add(1)
					c.log.Warn("client: orderly message could not go to the dead-letter queue", "msgId", m.MsgID, "err", err)
					break
				}
				c.stats.sentBack.Add(1)
			}
			if ok {
				c.consumed(pq, batch)
				continue
			}
		}
		pq.rollback(batch)
		for _, m := range batch {
			m.ReconsumeTimes++
		}
		d := p.cfg.suspendTime
		if cc.SuspendTime > 0 {
			d = cc.SuspendTime
		}
		sleepCtx(pq.ctx, d)
	}
}
