package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// consumer is what push and pull consumers share: subscriptions, rebalancing, the
// process queues and their pullers, offsets, send-back, and queue locks.
type consumer struct {
	cfg         consumerConfig
	in          *instance
	log         *slog.Logger
	consumeType string // CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)
	orderly     bool
	maxSpan     int64         // 0: no span limit
	pullEvery   time.Duration // pause between pulls of a queue
	subs        map[string]*subscription
	subList     []*subscription // in order, retry topic last
	offsets     offsetStore
	sendSubs    bool // pulls carry the subscription (pull consumer)
	rebalancing bool // false: queues are assigned by hand

	// onMessages is called by a puller with the messages it added to pq.
	onMessages func(pq *processQueue, msgs []*MessageExt)
	// onLockRegained is called (orderly) when a queue's lock is held again.
	onLockRegained func(pq *processQueue)

	runCtx    context.Context
	runCancel context.CancelFunc
	kick      chan struct{}
	loopDone  chan struct{}
	suspended atomic.Bool
	resume    chan struct{}

	mu      sync.Mutex // guards pqs and the suspend channel
	pqs     map[MessageQueue]*processQueue
	removes sync.WaitGroup // orderly removals finishing in the background

	rebalanceMu sync.Mutex // one rebalance at a time
	lockEvery   time.Duration

	stats consumerCounters

	// startedAt is when start ran (running info's rates average over it).
	startedAt time.Time
	// direct runs the push listener on one message for
	// CONSUME_MESSAGE_DIRECTLY; nil for a pull consumer. It returns the
	// listener's result, or the text of its panic.
	direct func(ctx context.Context, m *MessageExt) (ConsumeResult, string)
}

type consumerCounters struct {
	pulls, pullErrors, received, consumed, failed, sentBack, sendBackFailed atomic.Int64
	flowPauses, rebalances, duplicates, lockFailures                        atomic.Int64
}

// ConsumerStats are a consumer's counters since it started.
type ConsumerStats struct {
	Pulls          int64 // pull requests answered
	PullErrors     int64 // pull requests that failed (transport errors, unexpected codes)
	Received       int64 // messages pulled (after the client's tag check)
	Consumed       int64 // messages consumed successfully
	Failed         int64 // messages a listener failed (or timed out on)
	SentBack       int64 // failed messages sent back for redelivery (or to the DLQ)
	SendBackFailed int64 // send-backs that failed both ways (consumed again locally)
	FlowPauses     int64 // times a queue's pulling paused on the cache or span limits
	Rebalances     int64 // rebalances run
	// RebalanceDuplicates estimates the messages that may be delivered twice because
	// a rebalance (or shutdown) moved a queue: for each queue given up, the messages
	// consumed or being consumed at or above the offset the broker held when the
	// group last changed. It is an upper bound as long as the group's consumers agree
	// on the membership; the true number of redeliveries is usually far lower.
	RebalanceDuplicates int64
	LockFailures        int64 // orderly: queues this consumer could not lock
	Queues              int   // queues assigned now
}

func newConsumer(cfg consumerConfig, consumeType string) (*consumer, error) {
	in, err := acquireInstance(&cfg.client)
	if err != nil {
		return nil, err
	}
	c := &consumer{
		cfg: cfg, in: in, log: cfg.client.logger.With("group", cfg.group), consumeType: consumeType,
		subs: map[string]*subscription{}, kick: make(chan struct{}, 1), loopDone: make(chan struct{}),
		pqs: map[MessageQueue]*processQueue{}, resume: make(chan struct{}), rebalancing: true,
	}
	for i := range cfg.subs {
		s := cfg.subs[i]
		c.subs[s.topic] = &s
		c.subList = append(c.subList, &s)
	}
	if cfg.model == Broadcasting {
		lo, err := newLocalOffsets(cfg.offsetFS, cfg.offsetDir, in.id, cfg.group)
		if err != nil {
			in.release()
			return nil, err
		}
		c.offsets = lo
	} else {
		c.offsets = newRemoteOffsets(in, cfg.group)
	}
	return c, nil
}

// addRetrySubscription subscribes %RETRY%group (clustering push consumers), which is
// where messages sent back for redelivery come from.
func (c *consumer) addRetrySubscription() {
	rt := retryTopic(c.cfg.group)
	if c.subs[rt] != nil {
		return
	}
	s := newTagSubscription(rt, "*")
	s.isRetry = true
	c.subs[rt] = &s
	c.subList = append(c.subList, &s)
}

// consumerData is the consumer's entry in heartbeats.
func (c *consumer) consumerData() protocol.ConsumerData {
	cd := protocol.ConsumerData{
		GroupName:        c.cfg.group,
		ConsumeType:      c.consumeType,
		MessageModel:     c.cfg.model.String(),
		ConsumeFromWhere: c.cfg.from.String(),
	}
	for _, s := range c.subList {
		sd := protocol.SubscriptionData{Topic: s.topic, SubString: s.expr, SubVersion: s.version,
			ExpressionType: s.expressionType(), TagsSet: []string{}, CodeSet: []int32{}}
		if s.tags != nil {
			sd.TagsSet = s.tags
			sd.CodeSet = s.codes
		}
		cd.SubscriptionDataSet = append(cd.SubscriptionDataSet, sd)
	}
	return cd
}

// idsChanged is called by the instance on NOTIFY_CONSUMER_IDS_CHANGED.
func (c *consumer) idsChanged() { c.kickRebalance() }

// resetOffsets applies an admin reset the broker pushed
// (RESET_CONSUMER_CLIENT_OFFSET): each assigned queue of topic that table lists
// is dropped without committing its old offset (its cached messages are
// discarded), its offset is set to the new one, and a rebalance starts it again
// from there. The broker committed the new offsets before pushing them.
func (c *consumer) resetOffsets(topic string, table map[MessageQueue]int64) {
	var stop []*processQueue
	c.mu.Lock()
	for mq, pq := range c.pqs {
		if off, ok := table[mq]; ok && mq.Topic == topic {
			stop = append(stop, pq)
			delete(c.pqs, mq)
			c.offsets.update(mq, off, true)
		}
	}
	c.mu.Unlock()
	for _, pq := range stop {
		pq.drop()
	}
	if len(stop) > 0 {
		c.log.Info("client: offsets reset by the broker", "topic", topic, "queues", len(stop))
		c.kickRebalance()
	}
}

func (c *consumer) kickRebalance() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *consumer) topics() []string {
	var out []string
	for _, s := range c.subList {
		out = append(out, s.topic)
	}
	return out
}

// start registers the consumer, checks its topics' routes, sends a heartbeat and
// runs the first rebalance, then starts the background loop.
func (c *consumer) start(ctx context.Context, self member) error {
	c.startedAt = time.Now()
	if err := c.in.registerConsumer(c.cfg.group, self); err != nil {
		return err
	}
	c.runCtx, c.runCancel = context.WithCancel(context.Background())
	c.in.addInterest(c.topics()...)
	for _, s := range c.subList {
		if s.isRetry {
			continue
		}
		if _, err := c.in.route(ctx, s.topic); err != nil {
			c.in.dropInterest(c.topics()...)
			c.in.unregisterConsumer(c.cfg.group)
			c.runCancel()
			return fmt.Errorf("client: consumer %s: subscribed topic %q: %w", c.cfg.group, s.topic, err)
		}
	}
	if err := c.in.heartbeat(ctx); err != nil {
		c.log.Warn("client: first heartbeat failed", "err", err)
	}
	if c.rebalancing {
		c.rebalance(ctx)
	}
	go c.loop()
	return nil
}

// loop rebalances, commits offsets and (orderly) renews locks until the consumer stops.
func (c *consumer) loop(extra ...func()) {
	defer close(c.loopDone)
	rb := time.NewTicker(c.cfg.rebalanceInterval)
	cm := time.NewTicker(c.cfg.commitInterval)
	defer rb.Stop()
	defer cm.Stop()
	var lockC <-chan time.Time
	if c.orderly {
		lt := time.NewTicker(c.lockInterval())
		defer lt.Stop()
		lockC = lt.C
	}
	for {
		select {
		case <-c.runCtx.Done():
			return
		case <-rb.C:
			if c.rebalancing {
				c.rebalance(c.runCtx)
			}
		case <-c.kick:
			if c.rebalancing {
				c.rebalance(c.runCtx)
			}
		case <-cm.C:
			c.commit(c.runCtx)
		case <-lockC:
			c.lockAll(c.runCtx)
		}
	}
}

func (c *consumer) lockInterval() time.Duration { return c.lockEvery }

// ---------------------------------------------------------------------------
// Rebalance.

// consumerIDs asks a broker of topic for the group's members: a master, or when
// none answers (none is up) a slave, which learns the members from their
// heartbeats too.
func (c *consumer) consumerIDs(ctx context.Context, r *topicRoute) ([]string, error) {
	var masters, slaves []string
	for _, bd := range r.data.BrokerDatas {
		for id, a := range bd.BrokerAddrs {
			switch {
			case a == "":
			case id == 0:
				masters = append(masters, a)
			default:
				slaves = append(slaves, a)
			}
		}
	}
	if len(masters)+len(slaves) == 0 {
		return nil, fmt.Errorf("client: consumer list of %q: %w", c.cfg.group, ErrNoRoute)
	}
	slices.Sort(masters)
	slices.Sort(slaves)
	addrs := append(masters, slaves...)
	var lastErr error
	for _, addr := range addrs {
		req := c.in.newRequest(protocol.ReqGetConsumerListByGroup)
		(&protocol.GetConsumerListByGroupRequest{ConsumerGroup: c.cfg.group}).Encode(&req.Ext)
		resp, err := c.in.invoke(ctx, addr, req, c.in.cfg.requestTimeout)
		if err != nil {
			lastErr = err
			continue
		}
		if resp.Code != protocol.RespSuccess {
			lastErr = brokerError(addr, resp)
			continue
		}
		var body protocol.ConsumerListBody
		if err := body.Decode(resp.Body); err != nil {
			lastErr = err
			continue
		}
		ids := slices.Clone(body.ConsumerIDList)
		slices.Sort(ids)
		return slices.Compact(ids), nil
	}
	return nil, fmt.Errorf("client: consumer list of %q: %w", c.cfg.group, lastErr)
}

// rebalance divides every subscribed topic's queues again and adjusts the process
// queues: it drops the queues given up (committing their offsets synchronously) and
// starts the new ones.
func (c *consumer) rebalance(ctx context.Context) {
	c.rebalanceMu.Lock()
	defer c.rebalanceMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	c.stats.rebalances.Add(1)
	c.mu.Lock()
	for _, pq := range c.pqs {
		pq.snapPrev = pq.snapshot
		pq.snapshot = pq.persisted.Load()
	}
	c.mu.Unlock()
	for _, s := range c.subList {
		r, err := c.in.route(ctx, s.topic)
		if err != nil {
			c.log.Debug("client: rebalance: no route", "topic", s.topic, "err", err)
			continue
		}
		var mine []MessageQueue
		if c.cfg.model == Broadcasting {
			mine = r.subscribe
		} else {
			ids, err := c.consumerIDs(ctx, r)
			if err != nil || len(ids) == 0 {
				c.log.Debug("client: rebalance: no consumer list", "topic", s.topic, "err", err)
				continue
			}
			mine = c.cfg.strategy.Allocate(c.cfg.group, c.in.id, r.subscribe, ids)
		}
		c.assign(ctx, s.topic, mine)
	}
}

// assign makes topic's process queues exactly mine.
func (c *consumer) assign(ctx context.Context, topic string, mine []MessageQueue) {
	want := map[MessageQueue]bool{}
	for _, mq := range mine {
		want[mq] = true
	}
	var remove []*processQueue
	c.mu.Lock()
	for mq, pq := range c.pqs {
		if mq.Topic == topic && !want[mq] {
			remove = append(remove, pq)
			delete(c.pqs, mq)
		}
	}
	var add []MessageQueue
	for _, mq := range mine {
		if c.pqs[mq] == nil {
			add = append(add, mq)
		}
	}
	c.mu.Unlock()
	for _, pq := range remove {
		c.removeQueue(ctx, pq, pq.snapPrev)
	}
	if len(add) > 0 && c.orderly {
		locked := c.lockQueues(ctx, add)
		kept := add[:0]
		for _, mq := range add {
			if locked[mq] {
				kept = append(kept, mq)
			} else {
				c.stats.lockFailures.Add(1)
			}
		}
		add = kept
	}
	for _, mq := range add {
		if err := c.addQueue(ctx, mq); err != nil {
			c.log.Warn("client: cannot start consuming a queue; retrying at the next rebalance", "queue", mq, "err", err)
		}
	}
}

// addQueue computes the queue's start offset and starts its puller.
func (c *consumer) addQueue(ctx context.Context, mq MessageQueue) error {
	off, err := c.startOffset(ctx, mq)
	if err != nil {
		if c.orderly {
			c.unlockQueues(ctx, []MessageQueue{mq})
		}
		return err
	}
	c.offsets.update(mq, off, true)
	pq := newProcessQueue(c.runCtx, mq, off)
	if c.orderly {
		pq.locked, pq.lockedAt = true, time.Now()
	}
	c.mu.Lock()
	if c.pqs[mq] != nil || c.runCtx.Err() != nil {
		c.mu.Unlock()
		pq.cancel()
		return nil
	}
	c.pqs[mq] = pq
	c.mu.Unlock()
	go c.puller(pq)
	return nil
}

// startOffset is the stored offset, or where ConsumeFrom says a new group starts.
func (c *consumer) startOffset(ctx context.Context, mq MessageQueue) (int64, error) {
	off, err := c.offsets.read(ctx, mq)
	if err != nil {
		return 0, err
	}
	if off >= 0 {
		return off, nil
	}
	switch c.cfg.from {
	case ConsumeFromFirstOffset:
		return c.queueOffset(ctx, mq, protocol.ReqGetMinOffset, 0)
	case ConsumeFromTimestamp:
		if isRetryTopic(mq.Topic) {
			return c.queueOffset(ctx, mq, protocol.ReqGetMaxOffset, 0)
		}
		return c.queueOffset(ctx, mq, protocol.ReqSearchOffsetByTimestamp, c.cfg.fromTime.UnixMilli())
	default:
		if isRetryTopic(mq.Topic) {
			return 0, nil
		}
		return c.queueOffset(ctx, mq, protocol.ReqGetMaxOffset, 0)
	}
}

// queueOffset asks mq's master (its slave while the route names no master) for
// its min or max offset, or the offset of a time.
func (c *consumer) queueOffset(ctx context.Context, mq MessageQueue, code int32, ts int64) (int64, error) {
	addr := c.in.readAddr(mq.BrokerName)
	if addr == "" {
		return 0, fmt.Errorf("client: offset of %s: %w", mq, ErrNoRoute)
	}
	req := c.in.newRequest(code)
	if code == protocol.ReqSearchOffsetByTimestamp {
		h := protocol.SearchOffsetByTimestampRequest{Topic: []byte(mq.Topic), QueueID: mq.QueueID, Timestamp: ts, BrokerName: []byte(mq.BrokerName)}
		h.Encode(&req.Ext)
	} else {
		h := protocol.QueueRequest{Topic: []byte(mq.Topic), QueueID: mq.QueueID, BrokerName: []byte(mq.BrokerName)}
		h.Encode(&req.Ext)
	}
	resp, err := c.in.invoke(ctx, addr, req, c.in.cfg.requestTimeout)
	if err != nil {
		return 0, fmt.Errorf("client: offset of %s: %w", mq, err)
	}
	if resp.Code != protocol.RespSuccess {
		return 0, fmt.Errorf("client: offset of %s: %w", mq, brokerError(addr, resp))
	}
	var o protocol.OffsetResponse
	if err := o.Decode(&resp.Ext); err != nil {
		return 0, fmt.Errorf("client: offset of %s: %w", mq, err)
	}
	return o.Offset, nil
}

// removeQueue stops consuming pq: its puller stops, its offset is committed
// synchronously and forgotten, and (orderly) its lock is released once the batch
// being consumed, if any, has finished. base is the broker's offset as of the
// rebalance before (for the duplicate estimate).
func (c *consumer) removeQueue(ctx context.Context, pq *processQueue, base int64) {
	pq.drop()
	finish := func() {
		off := pq.commitOffset()
		c.offsets.update(pq.mq, off, false)
		cctx, cancel := context.WithTimeout(context.Background(), c.in.cfg.requestTimeout)
		err := c.offsets.persist(cctx, []MessageQueue{pq.mq}, nil)
		cancel()
		if err != nil {
			c.log.Warn("client: committing the offset of a queue given up", "queue", pq.mq, "err", err)
		}
		if c.orderly {
			uctx, cancel := context.WithTimeout(context.Background(), c.in.cfg.requestTimeout)
			c.unlockQueues(uctx, []MessageQueue{pq.mq})
			cancel()
		} else if c.cfg.model == Clustering {
			c.stats.duplicates.Add(pq.estimatedDuplicates(base))
		}
		c.offsets.remove(pq.mq)
	}
	if !c.orderly {
		finish()
		return
	}
	// Orderly: the lock is held until the batch in progress is done, so the next
	// owner never overlaps with it; its offset is then exact.
	pq.mu.Lock()
	idle := pq.loopIdle
	running := pq.consuming
	pq.mu.Unlock()
	if !running || idle == nil {
		finish()
		return
	}
	c.removes.Add(1)
	go func() {
		defer c.removes.Done()
		<-idle
		finish()
	}()
}

// ---------------------------------------------------------------------------
// Pulling.

// puller pulls pq until it is dropped.
func (c *consumer) puller(pq *processQueue) {
	defer close(pq.pullDone)
	var req, resp = new(protocol.Command), new(protocol.Command)
	backoff := time.Duration(0)
	for !pq.dropped.Load() {
		if backoff > 0 {
			if !sleepCtx(pq.ctx, backoff) {
				return
			}
			backoff = 0
		}
		if c.suspended.Load() {
			c.mu.Lock()
			ch := c.resume
			c.mu.Unlock()
			if c.suspended.Load() {
				select {
				case <-ch:
				case <-pq.ctx.Done():
					return
				}
			}
			continue
		}
		if pq.overLimits(c.cfg.cacheMsgs, c.cfg.cacheBytes, c.maxSpan) {
			c.stats.flowPauses.Add(1)
			select {
			case <-pq.space:
			case <-time.After(50 * time.Millisecond):
			case <-pq.ctx.Done():
				return
			}
			continue
		}
		if c.orderly {
			if !pq.lockValid(time.Now()) {
				if !sleepCtx(pq.ctx, 100*time.Millisecond) {
					return
				}
				continue
			}
			pq.mu.Lock()
			lost := pq.lost
			pq.lost = false
			pq.mu.Unlock()
			if lost {
				// Another consumer may have owned the queue meanwhile: start again
				// from the committed offset.
				off, err := c.offsets.read(pq.ctx, pq.mq)
				if err != nil || off < 0 {
					off = pq.commitOffset()
				}
				pq.reset(off)
				c.offsets.update(pq.mq, off, true)
			}
		}
		if err := c.pullOnce(pq, req, resp); err != nil {
			if pq.ctx.Err() != nil {
				return
			}
			if err == errSeeked {
				continue
			}
			c.stats.pullErrors.Add(1)
			c.log.Debug("client: pull failed", "queue", pq.mq, "err", err)
			backoff = pullErrorBackoff
			if routeSuspect(err) {
				// The broker may have died or lost its mastership: the next pull
				// goes where the route names now (the broker table follows it).
				ctx, cancel := context.WithTimeout(pq.ctx, c.in.cfg.requestTimeout)
				c.in.refreshOnFailure(ctx, pq.mq.Topic, "", 0)
				cancel()
			}
			continue
		}
		if c.pullEvery > 0 && !sleepCtx(pq.ctx, c.pullEvery) {
			return
		}
	}
}

// routeSuspect reports whether a failed request may be explained by a route change:
// a connection or transport error, or an answer by which a broker refuses what only
// its group's master (or a broker that takes writes) serves.
func routeSuspect(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var be *BrokerError
	if !errors.As(err, &be) {
		return true
	}
	switch be.Code {
	case protocol.RespSystemError, protocol.RespSystemBusy, protocol.RespServiceNotAvailable,
		protocol.RespNoPermission, protocol.RespTopicNotExist, protocol.RespNotLeaderForQueue:
		return true
	}
	return false
}

// errSeeked: the queue was repositioned while a pull was in flight.
var errSeeked = errors.New("client: queue repositioned")

// pullErrorBackoff is the pause after a failed pull (the Go client waits 3 s).
var pullErrorBackoff = time.Second

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pullOnce sends one long-polling PULL_MESSAGE for pq and files what it returns.
func (c *consumer) pullOnce(pq *processQueue, req, resp *protocol.Command) error {
	mq := pq.mq
	offset, gen, broker := pq.pullState()
	addr := c.in.brokerAddr(mq.BrokerName, broker)
	if addr == "" {
		return fmt.Errorf("client: pull %s: %w", mq, ErrNoRoute)
	}
	sub := c.subs[mq.Topic]
	sysFlag := protocol.PullFlagSuspend
	var commit int64
	if c.cfg.model == Clustering {
		if o, ok := c.offsets.get(mq); ok && o > 0 {
			commit = o
			sysFlag |= protocol.PullFlagCommitOffset
		}
	}
	h := protocol.PullMessageRequest{
		ConsumerGroup:        []byte(c.cfg.group),
		Topic:                []byte(mq.Topic),
		QueueID:              mq.QueueID,
		QueueOffset:          offset,
		MaxMsgNums:           int32(c.cfg.pullBatch),
		CommitOffset:         commit,
		SuspendTimeoutMillis: c.cfg.longPoll.Milliseconds(),
		ExpressionType:       []byte("TAG"),
		BrokerName:           []byte(mq.BrokerName),
	}
	if c.sendSubs {
		sysFlag |= protocol.PullFlagSubscription
		h.Subscription = []byte("*")
		if sub != nil {
			h.Subscription = []byte(sub.expr)
			h.ExpressionType = []byte(sub.expressionType())
			h.SubVersion = sub.version
		}
	}
	h.SysFlag = sysFlag
	c.in.initRequest(req, protocol.ReqPullMessage)
	h.Encode(&req.Ext)
	ctx, cancel := context.WithTimeout(pq.ctx, c.cfg.longPoll+10*time.Second)
	defer cancel()
	pq.mu.Lock()
	if pq.gen != gen {
		pq.mu.Unlock()
		return errSeeked
	}
	pq.pullCancel = cancel
	pq.mu.Unlock()
	defer func() {
		pq.mu.Lock()
		pq.pullCancel = nil
		pq.mu.Unlock()
	}()
	cl, err := c.in.pool.Get(ctx, addr)
	if err != nil {
		return err
	}
	// The messages of the last response keep its body: each one's Body aliases
	// it (decodeMessage). This response gets an array of its own.
	resp.Body = nil
	if err := cl.InvokeInto(ctx, req, resp); err != nil {
		if _, g, _ := pq.pullState(); g != gen {
			return errSeeked
		}
		return err
	}
	c.stats.pulls.Add(1)
	var rh protocol.PullMessageResponse
	switch resp.Code {
	case protocol.RespSuccess, protocol.RespPullNotFound, protocol.RespPullRetryImmediately, protocol.RespPullOffsetMoved:
		if err := rh.Decode(&resp.Ext); err != nil {
			return fmt.Errorf("client: pull %s: %w", mq, err)
		}
	case protocol.RespSubscriptionNotExist, protocol.RespSubscriptionNotLatest:
		c.in.kickHeartbeat()
		return fmt.Errorf("client: pull %s: %w", mq, brokerError(addr, resp))
	default:
		return fmt.Errorf("client: pull %s: %w", mq, brokerError(addr, resp))
	}
	pq.mu.Lock()
	pq.brokerMax = rh.MaxOffset
	pq.suggestBroker = rh.SuggestWhichBrokerID
	pq.mu.Unlock()
	switch resp.Code {
	case protocol.RespSuccess:
		msgs := make([]*MessageExt, 0, c.cfg.pullBatch)
		minOff, maxOff := itoa(rh.MinOffset), itoa(rh.MaxOffset) // once per response, not per message
		err := message.ForEachRecord(resp.Body, false, func(v message.View) error {
			m, derr := decodeMessage(v, mq)
			if derr != nil {
				c.log.Warn("client: message body does not inflate; delivered as stored", "queue", mq, "offset", v.QueueOffset(), "err", derr)
			}
			if sub != nil && !sub.matchTag(m.Tags) {
				return nil
			}
			if m.Properties != nil {
				m.Properties[message.PropMinOffset] = minOff
				m.Properties[message.PropMaxOffset] = maxOff
			}
			msgs = append(msgs, m)
			return nil
		})
		if err != nil {
			c.log.Warn("client: malformed pull body; skipping to the next offset", "queue", mq, "err", err)
		}
		added := pq.put(msgs, rh.NextBeginOffset, gen)
		if len(added) > 0 {
			c.stats.received.Add(int64(len(added)))
			c.onMessages(pq, added)
		} else if len(msgs) == 0 {
			c.advanceEmpty(pq)
		}
	case protocol.RespPullNotFound, protocol.RespPullRetryImmediately:
		pq.setNext(rh.NextBeginOffset, gen)
		c.advanceEmpty(pq)
	case protocol.RespPullOffsetMoved:
		c.log.Warn("client: pull offset moved", "queue", mq, "from", offset, "to", rh.NextBeginOffset)
		pq.setNext(rh.NextBeginOffset, gen)
		c.offsets.update(mq, rh.NextBeginOffset, true)
	}
	return nil
}

// advanceEmpty moves the committed offset past messages the broker filtered out,
// when nothing is cached.
func (c *consumer) advanceEmpty(pq *processQueue) {
	if pq.dropped.Load() {
		return
	}
	c.offsets.update(pq.mq, pq.commitOffset(), false)
}

// ---------------------------------------------------------------------------
// Offsets.

// commit writes the offsets that changed since their last write.
func (c *consumer) commit(ctx context.Context) error {
	c.mu.Lock()
	mqs := make([]MessageQueue, 0, len(c.pqs))
	for mq := range c.pqs {
		mqs = append(mqs, mq)
	}
	c.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, c.in.cfg.requestTimeout*2)
	defer cancel()
	return c.offsets.persist(cctx, mqs, c.persisted)
}

// persisted records that the broker holds off for mq (duplicate estimate).
func (c *consumer) persisted(mq MessageQueue, off int64) {
	c.mu.Lock()
	pq := c.pqs[mq]
	c.mu.Unlock()
	if pq != nil {
		pq.persisted.Store(off)
	}
}

// consumed marks msgs of pq consumed and moves the queue's offset.
func (c *consumer) consumed(pq *processQueue, msgs []*MessageExt) {
	off := pq.done(msgs)
	if !pq.dropped.Load() {
		c.offsets.update(pq.mq, off, false)
	}
}

// ---------------------------------------------------------------------------
// Send-back.

// sendBack returns a message the listener failed to the broker for redelivery
// (CONSUMER_SEND_MSG_BACK with delayLevel: 0 lets the broker choose, -1 is the
// dead-letter queue). When the broker refuses, the client sends the message to
// %RETRY%group itself (or to %DLQ%group once MaxReconsumeTimes is reached).
func (c *consumer) sendBack(ctx context.Context, m *MessageExt, delayLevel int) error {
	addr := c.in.masterAddr(m.queue.BrokerName)
	if addr != "" {
		req := c.in.newRequest(protocol.ReqConsumerSendMsgBack)
		h := protocol.ConsumerSendMsgBackRequest{
			Group: c.cfg.group, Offset: m.CommitLogOffset, DelayLevel: int32(delayLevel), OriginMsgID: m.MsgID,
			OriginTopic: m.Topic, MaxReconsumeTimes: int32(c.cfg.maxReconsume), HasMaxReconsumeTimes: true,
			BrokerName: m.queue.BrokerName,
		}
		h.Encode(&req.Ext)
		resp, err := c.in.invoke(ctx, addr, req, c.in.cfg.requestTimeout)
		if err == nil && resp.Code == protocol.RespSuccess {
			return nil
		}
		if err == nil {
			err = brokerError(addr, resp)
		}
		c.log.Debug("client: send-back refused; sending to the retry topic directly", "msgId", m.MsgID, "err", err)
	}
	return c.resend(ctx, m, delayLevel)
}

// resend sends m to %RETRY%group (or %DLQ%group) with SEND_MESSAGE, as the Java and
// Go clients do when CONSUMER_SEND_MSG_BACK fails: reconsumeTimes + 1, RETRY_TOPIC,
// ORIGIN_MESSAGE_ID, and DELAY = 3 + reconsumeTimes.
func (c *consumer) resend(ctx context.Context, m *MessageExt, delayLevel int) error {
	topic := retryTopic(c.cfg.group)
	dlq := delayLevel < 0 || int(m.ReconsumeTimes) >= c.cfg.maxReconsume
	if dlq {
		topic = "%DLQ%" + c.cfg.group
	}
	r, err := c.in.publishRoute(ctx, topic, DefaultCreateTopicKey, 1)
	if err != nil {
		return fmt.Errorf("client: resend %s: %w", m.MsgID, err)
	}
	pi := r.publish
	idx := int(pi.next.Add(1)-1) % len(pi.queues)
	props := map[string]string{}
	for k, v := range m.Properties {
		props[k] = v
	}
	delete(props, message.PropTranMsg)
	delete(props, message.PropMinOffset)
	delete(props, message.PropMaxOffset)
	if props[message.PropRetryTopic] == "" {
		props[message.PropRetryTopic] = m.Topic
	}
	if props[message.PropOriginMessageID] == "" {
		props[message.PropOriginMessageID] = m.MsgID
	}
	delete(props, message.PropDelay)
	if !dlq {
		level := delayLevel
		if level <= 0 {
			level = 3 + int(m.ReconsumeTimes)
		}
		props[message.PropDelay] = itoa(int64(level))
	}
	enc, err := message.EncodeProperties(props)
	if err != nil {
		return fmt.Errorf("client: resend %s: %w", m.MsgID, err)
	}
	h := protocol.SendMessageRequest{
		ProducerGroup: []byte("CLIENT_INNER_PRODUCER"), Topic: []byte(topic), DefaultTopic: []byte(DefaultCreateTopicKey),
		DefaultTopicQueueNums: 1, QueueID: pi.queues[idx].QueueID,
		SysFlag:       m.SysFlag &^ (message.FlagCompressed | message.CompressionMask | message.TxTypeMask | message.FlagBornHostV6 | message.FlagStoreHostV6),
		BornTimestamp: time.Now().UnixMilli(), Flag: m.Flag, Properties: enc,
		ReconsumeTimes: m.ReconsumeTimes + 1, MaxReconsumeTimes: int32(c.cfg.maxReconsume), HasMaxReconsumeTimes: true,
		BrokerName: []byte(pi.queues[idx].BrokerName),
	}
	req := c.in.newRequest(protocol.ReqSendMessage)
	h.Encode(&req.Ext)
	req.Body = m.Body
	resp, err := c.in.invoke(ctx, pi.addrs[idx], req, c.in.cfg.requestTimeout)
	if err != nil {
		return fmt.Errorf("client: resend %s: %w", m.MsgID, err)
	}
	switch resp.Code {
	case protocol.RespSuccess, protocol.RespFlushDiskTimeout, protocol.RespFlushSlaveTimeout, protocol.RespSlaveNotAvailable:
		return nil
	}
	return fmt.Errorf("client: resend %s: %w", m.MsgID, brokerError(pi.addrs[idx], resp))
}

// ---------------------------------------------------------------------------
// Locks (orderly).

// lockQueues locks mqs on their brokers (LOCK_BATCH_MQ) and returns those locked.
func (c *consumer) lockQueues(ctx context.Context, mqs []MessageQueue) map[MessageQueue]bool {
	byBroker := map[string][]protocol.MessageQueue{}
	for _, mq := range mqs {
		byBroker[mq.BrokerName] = append(byBroker[mq.BrokerName], protocol.MessageQueue{Topic: mq.Topic, BrokerName: mq.BrokerName, QueueID: mq.QueueID})
	}
	out := map[MessageQueue]bool{}
	for broker, set := range byBroker {
		addr := c.in.masterAddr(broker)
		if addr == "" {
			continue
		}
		body, err := (&protocol.LockBatchRequestBody{ConsumerGroup: c.cfg.group, ClientID: c.in.id, MQSet: set}).Encode()
		if err != nil {
			continue
		}
		req := c.in.newRequest(protocol.ReqLockBatchMQ)
		req.Body = body
		resp, err := c.in.invoke(ctx, addr, req, c.in.cfg.requestTimeout)
		if err != nil || resp.Code != protocol.RespSuccess {
			c.log.Debug("client: lock failed", "broker", addr, "err", err)
			continue
		}
		var rb protocol.LockBatchResponseBody
		if err := rb.Decode(resp.Body); err != nil {
			continue
		}
		for _, mq := range rb.LockOKMQSet {
			out[MessageQueue{Topic: mq.Topic, BrokerName: mq.BrokerName, QueueID: mq.QueueID}] = true
		}
	}
	return out
}

// unlockQueues releases locks (UNLOCK_BATCH_MQ, waited for).
func (c *consumer) unlockQueues(ctx context.Context, mqs []MessageQueue) {
	byBroker := map[string][]protocol.MessageQueue{}
	for _, mq := range mqs {
		byBroker[mq.BrokerName] = append(byBroker[mq.BrokerName], protocol.MessageQueue{Topic: mq.Topic, BrokerName: mq.BrokerName, QueueID: mq.QueueID})
	}
	for broker, set := range byBroker {
		addr := c.in.masterAddr(broker)
		if addr == "" {
			continue
		}
		body, err := (&protocol.UnlockBatchRequestBody{ConsumerGroup: c.cfg.group, ClientID: c.in.id, MQSet: set}).Encode()
		if err != nil {
			continue
		}
		req := c.in.newRequest(protocol.ReqUnlockBatchMQ)
		req.Body = body
		if _, err := c.in.invoke(ctx, addr, req, c.in.cfg.requestTimeout); err != nil {
			c.log.Debug("client: unlock failed", "broker", addr, "err", err)
		}
	}
}

// lockAll renews the locks of every orderly queue; a queue whose lock is regained
// after a loss restarts from the committed offset.
func (c *consumer) lockAll(ctx context.Context) {
	c.mu.Lock()
	pqs := make([]*processQueue, 0, len(c.pqs))
	mqs := make([]MessageQueue, 0, len(c.pqs))
	for mq, pq := range c.pqs {
		pqs = append(pqs, pq)
		mqs = append(mqs, mq)
	}
	c.mu.Unlock()
	if len(mqs) == 0 {
		return
	}
	ok := c.lockQueues(ctx, mqs)
	now := time.Now()
	for _, pq := range pqs {
		pq.mu.Lock()
		if ok[pq.mq] {
			if !pq.locked || now.Sub(pq.lockedAt) >= 30*time.Second {
				pq.lost = true
			}
			pq.locked, pq.lockedAt = true, now
		} else {
			pq.locked = false
		}
		pq.mu.Unlock()
		if ok[pq.mq] && c.onLockRegained != nil {
			c.onLockRegained(pq)
		}
	}
}

// ---------------------------------------------------------------------------
// Shutdown, suspend, lag.

// stop stops the consumer: no more rebalances or pulls, offsets committed, locks
// released, the group left. waitIdle waits for consumption in progress.
func (c *consumer) stop(ctx context.Context, waitIdle func(context.Context) error) error {
	c.runCancel()
	<-c.loopDone
	c.rebalanceMu.Lock()
	c.mu.Lock()
	pqs := make([]*processQueue, 0, len(c.pqs))
	for _, pq := range c.pqs {
		pqs = append(pqs, pq)
	}
	c.mu.Unlock()
	for _, pq := range pqs {
		pq.drop()
	}
	for _, pq := range pqs {
		<-pq.pullDone
	}
	var errs []error
	if waitIdle != nil {
		if err := waitIdle(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	c.removes.Wait()
	mqs := make([]MessageQueue, 0, len(pqs))
	for _, pq := range pqs {
		off := pq.commitOffset()
		c.offsets.update(pq.mq, off, false)
		mqs = append(mqs, pq.mq)
		if c.cfg.model == Clustering && !c.orderly {
			// Consumed out of order above the commit offset, or still in flight.
			c.stats.duplicates.Add(pq.estimatedDuplicates(off))
		}
	}
	pctx, cancel := context.WithTimeout(context.Background(), c.in.cfg.requestTimeout*2)
	if err := c.offsets.persist(pctx, mqs, nil); err != nil {
		errs = append(errs, fmt.Errorf("client: committing offsets at shutdown: %w", err))
	}
	if c.orderly {
		c.unlockQueues(pctx, mqs)
	}
	cancel()
	c.mu.Lock()
	c.pqs = map[MessageQueue]*processQueue{}
	c.mu.Unlock()
	c.rebalanceMu.Unlock()
	c.in.unregisterConsumer(c.cfg.group)
	uctx, cancel := context.WithTimeout(context.Background(), c.in.cfg.requestTimeout)
	c.in.unregisterClient(uctx, "", c.cfg.group)
	cancel()
	c.in.dropInterest(c.topics()...)
	c.in.release()
	return errors.Join(errs...)
}

func (c *consumer) suspend() { c.suspended.Store(true) }

func (c *consumer) resumePulling() {
	c.mu.Lock()
	if c.suspended.Swap(false) {
		close(c.resume)
		c.resume = make(chan struct{})
	}
	c.mu.Unlock()
}

// QueueLag is one assigned queue's position.
type QueueLag struct {
	Queue MessageQueue
	// ConsumerOffset is the next offset to consume (the commit offset).
	ConsumerOffset int64
	// BrokerOffset is the queue's max offset on the broker (the next offset it will
	// write).
	BrokerOffset int64
	// Lag is BrokerOffset - ConsumerOffset.
	Lag int64
	// Cached is the number of messages pulled and not yet consumed; CachedBytes their bodies.
	Cached      int
	CachedBytes int64
}

// lag reports every assigned queue; with fresh, the broker's max offsets are asked
// for (GET_MAX_OFFSET), otherwise those seen by the last pulls are used.
func (c *consumer) lag(ctx context.Context, fresh bool) ([]QueueLag, error) {
	c.mu.Lock()
	pqs := make([]*processQueue, 0, len(c.pqs))
	for _, pq := range c.pqs {
		pqs = append(pqs, pq)
	}
	c.mu.Unlock()
	out := make([]QueueLag, 0, len(pqs))
	var errs []error
	for _, pq := range pqs {
		cached, bytes, _, bmax := pq.stats()
		if fresh {
			if m, err := c.queueOffset(ctx, pq.mq, protocol.ReqGetMaxOffset, 0); err == nil {
				bmax = m
			} else {
				errs = append(errs, err)
			}
		}
		off := pq.commitOffset()
		out = append(out, QueueLag{Queue: pq.mq, ConsumerOffset: off, BrokerOffset: bmax, Lag: max(0, bmax-off), Cached: cached, CachedBytes: bytes})
	}
	slices.SortFunc(out, func(a, b QueueLag) int { return mqLess(a.Queue, b.Queue) })
	return out, errors.Join(errs...)
}

func (c *consumer) statsSnapshot() ConsumerStats {
	c.mu.Lock()
	n := len(c.pqs)
	c.mu.Unlock()
	s := &c.stats
	return ConsumerStats{
		Pulls: s.pulls.Load(), PullErrors: s.pullErrors.Load(), Received: s.received.Load(),
		Consumed: s.consumed.Load(), Failed: s.failed.Load(), SentBack: s.sentBack.Load(),
		SendBackFailed: s.sendBackFailed.Load(), FlowPauses: s.flowPauses.Load(), Rebalances: s.rebalances.Load(),
		RebalanceDuplicates: s.duplicates.Load(), LockFailures: s.lockFailures.Load(), Queues: n,
	}
}

func (c *consumer) pqsSnapshot() []*processQueue {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*processQueue, 0, len(c.pqs))
	for _, pq := range c.pqs {
		out = append(out, pq)
	}
	return out
}

// assignedQueues returns the queues assigned now, sorted.
func (c *consumer) assignedQueues() []MessageQueue {
	c.mu.Lock()
	out := make([]MessageQueue, 0, len(c.pqs))
	for mq := range c.pqs {
		out = append(out, mq)
	}
	c.mu.Unlock()
	slices.SortFunc(out, mqLess)
	return out
}
