package core

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/logthrottle"

	"github.com/apogeemq/apogee/broker/core/stats"
	"github.com/apogeemq/apogee/broker/delay"
	"github.com/apogeemq/apogee/broker/pop"
	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// ErrClosed is returned by Shutdown when the core was already shut down.
var ErrClosed = errors.New("broker: closed")

// ArrivalFunc is told that a queue grew: its new max offset. It runs on the
// store's dispatcher and must not block (see Core.OnArrival).
type ArrivalFunc func(topic string, queueID int32, maxOffset int64)

// Core is the broker's messaging core: the store, the topic, group, offset
// and client tables, queue locks, the messaging features and the state
// files, behind operations that take and return plain Go types. Its methods
// are safe for concurrent use.
type Core struct {
	opts      Options
	host      netip.AddrPort // resolved AdvertiseAddr (the store host)
	start     time.Time
	memWindow int64 // commit-log bytes RocketMQ would deem still in memory

	// waitDurable: answers wait until what they stored is durable (sync
	// flush, or a SYNC_MASTER's replica: store.Store.DurableWaits), set by
	// New and SetRole (replica.go).
	waitDurable atomic.Bool
	// role is the current Role (Options.Role at New, then SetRole); slave
	// is role == RoleSlave, read by every write. roleMu serialises SetRole
	// (and Start and Shutdown with it).
	role   atomic.Uint32
	slave  atomic.Bool
	roleMu sync.Mutex
	// gate, when set, refuses every write with its error (SetWriteGate:
	// controller mode's fencing and minInSyncReplicas).
	gate atomic.Pointer[Error]

	// priorityPops counts the PRIORITY topics' pops, for
	// Options.PriorityRetryFirstPercent.
	priorityPops atomic.Uint64

	store   *store.Store
	topics  *topicManager
	groups  *groupManager
	offsets *offsetManager
	clients *clientManager
	locks   *lockManager
	// feat holds the features that write (features): New's, replaced by
	// new instances on each promotion (SetRole).
	feat   atomic.Pointer[features]
	levels []time.Duration // the delay levels (Options.DelayLevels)
	cfgDir string
	// revivers are OnRevive's listeners, given to every POP state the
	// features build. Under roleMu.
	revivers []pop.VisibleFunc
	filters  filterCache

	// lite is the lite topics' state (lite.go).
	lite *liteState

	sendPool sync.Pool // *sendScratch
	waitPool sync.Pool // *durableWait

	// arrivals are the front ends' arrival listeners (copy on write).
	arrivalsMu sync.Mutex
	arrivals   atomic.Pointer[[]ArrivalFunc]

	// Background writers of topics.json and subscriptionGroup.json.
	topicWriter, groupWriter *stateWriter
	// cfg: the configuration records of the log (configlog.go).
	cfg configLog

	// Back-pressure (send path).
	inflight     atomic.Int64 // message bytes of sends being stored or awaiting their flush
	putsActive   atomic.Int64 // puts inside the store
	lastProgress atomic.Int64 // ns since start: last put completed, or puts started from idle

	started atomic.Bool
	closing atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup

	stats coreStats

	autoCreate *autoCreateLimiter // caps what requests create by themselves

	// startup is how long New took per phase: reading the state files,
	// opening the store, and the rest (system topics, writes).
	startup struct{ load, store, tables time.Duration }

	// rstats are RocketMQ's runtime statistics (per topic and group rates,
	// today's totals), sampled every second between Start and Shutdown.
	rstats *stats.Stats
	// admin is the state of the admin operations (admin.go): the broker's
	// permission, the configuration changed at run time.
	admin adminState
}

type coreStats struct {
	sendRequests, sendMessages, sendErrors, busyRejects atomic.Int64
	pullRequests, pullFound, pullMessages               atomic.Int64
	persistErrors, notifies                             atomic.Int64
	innerPuts, sendBacks, deadLetters                   atomic.Int64
	delayed, timers                                     atomic.Int64 // routed to the schedule / timer topic
}

// New reads the state files, opens the store (recovering it) and puts the
// system topics in the table. Nothing runs in the background until Start;
// Shutdown stops and closes everything.
func New(opts Options) (*Core, error) {
	o, host, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfgDir := filepath.Join(o.DataDir, ConfigDir)
	if err := durable.MkdirAll(o.FS, cfgDir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: create %s: %w", cfgDir, err)
	}
	c := &Core{
		opts:      o,
		host:      host,
		start:     time.Now(),
		memWindow: int64(float64(memoryWindow()) * o.AccessMessageInMemoryMaxRatio / 40),
		cfgDir:    cfgDir,
		topics:    newTopicManager(o.FS, filepath.Join(cfgDir, TopicsFile), o.WriteConfigFile, o.Logger),
		groups:    newGroupManager(o.FS, filepath.Join(cfgDir, SubscriptionGroupFile), o.WriteConfigFile, o.Logger),
		offsets:   newOffsetManager(o.FS, filepath.Join(cfgDir, ConsumerOffsetFile), o.WriteConfigFile, o.Logger),
		clients:   newClientManager(o.Logger),
		locks:     newLockManager(o.LockExpiry),
		stop:      make(chan struct{}),
		rstats:    stats.New(stats.Options{BrokerKey: o.ClusterName}),
	}
	c.role.Store(uint32(o.Role))
	c.slave.Store(o.Role == RoleSlave)
	c.autoCreate = newAutoCreateLimiter(&c.opts)
	c.lite = newLiteState(c)
	if c.levels, err = delay.ParseLevels(o.DelayLevels); err != nil {
		return nil, err
	}
	began := time.Now()
	f, err := c.newFeatures()
	if err != nil {
		return nil, err
	}
	c.feat.Store(f)
	for _, load := range []func() error{c.topics.load, c.groups.load, c.offsets.load} {
		if err := load(); err != nil {
			return nil, err
		}
	}
	loaded := time.Now()

	so := o.Store
	switch o.Role {
	case RoleSlave:
		so.Replica = true
	case RoleSyncMaster:
		if so.SyncReplicas == 0 {
			so.SyncReplicas = 1
		}
	}
	so.Dir = o.DataDir
	so.StoreHost = host
	so.MaxMessageSize = o.MaxMessageSize
	if so.Logger == nil {
		so.Logger = o.Logger
	}
	userLite := so.OnLiteArrival
	so.OnLiteArrival = func(parent, l string, maxOffset int64) {
		c.liteArrived(parent, l, maxOffset)
		if userLite != nil {
			userLite(parent, l, maxOffset)
		}
	}
	userArrival := so.OnArrival
	so.OnArrival = func(topic string, queueID int32, maxOffset int64) {
		switch topic {
		case scheduleTopic:
			c.features().sched.Arrived(queueID)
		case timerTopic:
			c.features().timers.Arrived()
		case txn.HalfTopic, txn.OpHalfTopic:
			c.features().tx.Arrived()
		case configTopic:
			c.configArrived()
		default:
			if fns := c.arrivals.Load(); fns != nil {
				for _, fn := range *fns {
					fn(topic, queueID, maxOffset)
				}
			}
		}
		if userArrival != nil {
			userArrival(topic, queueID, maxOffset)
		}
	}
	userTagCode := so.TagCode
	so.TagCode = func(v message.View) (int64, bool) {
		switch string(v.Topic()) {
		case scheduleTopic:
			return c.features().sched.TagCode(v), true
		case timerTopic:
			return c.features().timers.TagCode(v), true
		}
		if userTagCode != nil {
			return userTagCode(v)
		}
		return 0, false
	}
	st, rep, err := store.Open(so)
	if err != nil {
		return nil, fmt.Errorf("broker: open store: %w", err)
	}
	c.store = st
	c.waitDurable.Store(c.durableWaits(o.Role))
	c.cfg.ready.Store(true)
	opened := time.Now()
	o.Logger.Info("broker: store opened", "dir", o.DataDir, "took", opened.Sub(loaded).Round(time.Millisecond),
		"recovery", fmt.Sprintf("%+v", rep))

	c.ensureAutoCreateKey()
	c.ensureSystemTopics()
	c.catchUpConfig() // every configuration record of the log: they win over the files (configlog.go)
	c.Replication().AdoptStoredTopics()
	// Written now when the table changed at start (system topics, TBW102)
	// or was read from its previous version.
	c.persistAtStart("topics", c.topics.persist)
	c.persistAtStart("subscription groups", c.groups.persist)
	c.topicWriter = newStateWriter(func() error { return c.topics.persist(false) }, func(err error) {
		c.stats.persistErrors.Add(1)
		o.Logger.Error("broker: persist topics failed", "err", err)
	})
	c.groupWriter = newStateWriter(func() error { return c.groups.persist(false) }, func(err error) {
		c.stats.persistErrors.Add(1)
		o.Logger.Error("broker: persist subscription groups failed", "err", err)
	})
	c.cfg.live.Store(true)
	c.startup.load, c.startup.store, c.startup.tables = loaded.Sub(began), opened.Sub(loaded), time.Since(opened)
	o.Logger.Info("broker: state loaded", "topics", c.topics.count(), "loadConfig", c.startup.load.Round(time.Millisecond),
		"openStore", c.startup.store.Round(time.Millisecond), "tables", c.startup.tables.Round(time.Millisecond))
	return c, nil
}

// Start starts the background tasks: offset and progress persistence, the
// client scanner, lock expiry, the writers of topics.json and
// subscriptionGroup.json, and the features' goroutines (delay scanners, the
// timer wheel, the transaction checker, POP's persister). A front end calls
// it once it is ready to be told of topic changes and arrivals. Calling it
// twice does nothing.
func (c *Core) Start() {
	c.roleMu.Lock()
	defer c.roleMu.Unlock()
	if c.started.Swap(true) {
		return
	}
	c.wg.Add(5)
	go c.liteMaintain()
	go func() { defer c.wg.Done(); c.rstats.Run(c.stop) }()
	go c.maintain()
	go func() { defer c.wg.Done(); c.topicWriter.run(c.stop) }()
	go func() { defer c.wg.Done(); c.groupWriter.run(c.stop) }()
	if c.slave.Load() {
		return // the features write: their master runs them
	}
	c.features().start()
}

// Shutdown stops the background tasks and the features, persists offsets,
// topics, groups and the features' progress, and flushes and closes the
// store. It returns the errors met, after doing all of it. The front ends
// must have stopped calling the core (their requests finished) before.
func (c *Core) Shutdown() error {
	if c.closing.Swap(true) {
		return ErrClosed
	}
	// A role change under way finishes first; later ones see closing.
	c.roleMu.Lock()
	defer c.roleMu.Unlock()
	var errs []error
	close(c.stop)
	c.wg.Wait()
	f := c.features()
	f.stop()
	if err := c.offsets.persist(true); err != nil {
		errs = append(errs, err)
	}
	if err := c.topicWriter.finish(func() error { return c.topics.persist(true) }); err != nil {
		errs = append(errs, err)
	}
	if err := c.groupWriter.finish(func() error { return c.groups.persist(true) }); err != nil {
		errs = append(errs, err)
	}
	if err := c.persistProgress(true); err != nil {
		errs = append(errs, err)
	}
	if err := f.pops.Stop(); err != nil { // writes popState.json a last time
		errs = append(errs, err)
	}
	if err := c.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("broker: close store: %w", err))
	}
	return errors.Join(errs...)
}

// Checkpoint writes now every state file whose contents changed since its
// last write: consumer offsets, topics, subscription groups, the progress
// of the delay scanners, the timer wheel and the transaction checker, and
// POP's state, as the background tasks would within their intervals (for
// an operator's backup, and tests that restart from a known state). It
// returns the errors met, after trying every file.
func (c *Core) Checkpoint() error {
	var errs []error
	for _, persist := range []func(bool) error{c.offsets.persist, c.topics.persist, c.groups.persist,
		c.persistProgress, c.features().pops.Persist} {
		if err := persist(false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Store returns the message store.
func (c *Core) Store() *store.Store { return c.store }

// Options returns the options in use, defaults filled in.
func (c *Core) Options() Options { return c.opts }

// StartTime is when New began.
func (c *Core) StartTime() time.Time { return c.start }

// Closing reports whether Shutdown has begun.
func (c *Core) Closing() bool { return c.closing.Load() }

// OnArrival registers fn to be told every time a queue of a client topic
// grows (the system topics of the features are theirs): a front end wakes
// the requests it holds for that queue (long polling). fn runs on the
// store's dispatcher, in commit-log order, after the queue's growth is
// visible to MaxOffset; it must not block or call back into the store's
// put path. Listeners may be added at any time and are never removed.
func (c *Core) OnArrival(fn ArrivalFunc) {
	c.arrivalsMu.Lock()
	defer c.arrivalsMu.Unlock()
	var fns []ArrivalFunc
	if old := c.arrivals.Load(); old != nil {
		fns = append(fns, *old...)
	}
	fns = append(fns, fn)
	c.arrivals.Store(&fns)
}

// ensureSystemTopics keeps the messaging features' system topics in the
// topic table: SCHEDULE_TOPIC_XXXX with one queue per delay level, the timer
// topic, and the transaction half and op topics (one queue each), which
// producers may not send to and admin requests may not create or delete;
// and the cluster's reply topic (ReplyTopic, one queue, as RocketMQ's
// TopicConfigManager creates it at start), which repliers send to; the
// trace topic when Options.TraceTopic names one. New persists the table
// afterwards.
func (c *Core) ensureSystemTopics() {
	for _, cfg := range []protocol.TopicConfig{
		newTopicConfig(scheduleTopic, int32(len(c.levels)), protocol.PermRead|protocol.PermWrite),
		newTopicConfig(timerTopic, 1, protocol.PermRead|protocol.PermWrite),
		newTopicConfig(txn.HalfTopic, 1, protocol.PermRead|protocol.PermWrite),
		newTopicConfig(txn.OpHalfTopic, 1, protocol.PermRead|protocol.PermWrite),
		newTopicConfig(c.ReplyTopic(), 1, protocol.PermRead|protocol.PermWrite),
	} {
		c.topics.put(cfg)
	}
	if t := c.opts.TraceTopic; t != "" {
		if _, ok := c.TopicConfig(t); !ok {
			c.topics.put(newTopicConfig(t, 1, protocol.PermRead|protocol.PermWrite))
		}
	}
}

// ReplyTopic is the topic replies of request-reply are sent to and stored
// in: "<cluster>_REPLY_TOPIC" (RocketMQ's MixAll.REPLY_TOPIC_POSTFIX), in
// every broker's table from its start.
func (c *Core) ReplyTopic() string { return c.opts.ClusterName + replyTopicSuffix }

// ensureAutoCreateKey keeps TBW102 (perm 7: inheritable) in the topic table
// while auto-create is on, and out of it when it is off. New persists the
// table afterwards.
func (c *Core) ensureAutoCreateKey() {
	if c.opts.DisableAutoCreateTopic {
		c.topics.remove(topicAutoCreateKey)
		return
	}
	c.topics.put(newTopicConfig(topicAutoCreateKey, int32(c.opts.DefaultTopicQueues),
		protocol.PermRead|protocol.PermWrite|protocol.PermInherit))
}

// persistAtStart writes a table New changed (or read from its previous
// version); a failure is logged and counted, and the background writer
// tries again with the next change.
func (c *Core) persistAtStart(what string, persist func(force bool) error) {
	if err := persist(false); err != nil {
		c.stats.persistErrors.Add(1)
		c.opts.Logger.Error("broker: persist "+what+" failed", "err", err)
	}
}

// persistProgress writes the delay scanners', the timer wheel's and the
// transaction checker's progress (when it changed, or always with force).
func (c *Core) persistProgress(force bool) error { return c.features().persistProgress(c, force) }

func (f *features) persistProgress(c *Core, force bool) error {
	var errs []error
	if err := f.sched.Persist(force); err != nil {
		errs = append(errs, err)
	}
	if err := f.timers.Persist(force); err != nil {
		errs = append(errs, err)
	}
	if err := f.tx.Persist(force); err != nil {
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	key := fmt.Sprintf("%p|progress", c)
	if err != nil {
		c.stats.persistErrors.Add(1)
		persistLogs.Error(c.opts.Logger, key, "broker: persist the progress of delays, timers or transactions failed (disk full or failing?); retried at the next flush", "err", err)
	} else {
		persistLogs.Clear(key)
	}
	return err
}

// persistLogs throttles the background writer's failures (one per flush
// interval, for as long as the disk fails): one line per core and table
// a minute, with the count of the ones held back.
var persistLogs = logthrottle.New(time.Minute)

// topicChanged publishes a topic created, changed or deleted in the table:
// to Options.TopicChanged and to topics.json, which the background writer
// writes within stateWriteGap plus two writes (see stateWriter). With wait
// (admin requests), it returns once a write that covers the change has
// finished, with that write's error.
func (c *Core) topicChanged(name string, wait bool) error {
	if fn := c.opts.TopicChanged; fn != nil {
		fn(name)
	}
	if wait {
		return c.topicWriter.sync()
	}
	c.topicWriter.request()
	return nil
}

// groupsChanged has subscriptionGroup.json written: by the background
// writer soon, or, with wait, before it returns (with the write's error).
func (c *Core) groupsChanged(wait bool) error {
	if wait {
		return c.groupWriter.sync()
	}
	c.groupWriter.request()
	return nil
}

// maintain runs the periodic tasks: offset and progress persistence, the
// client scanner and lock sweeping.
func (c *Core) maintain() {
	defer c.wg.Done()
	offsets := time.NewTicker(c.opts.OffsetFlushInterval)
	defer offsets.Stop()
	scan := time.NewTicker(min(10*time.Second, max(c.opts.ClientTimeout/4, 20*time.Millisecond)))
	defer scan.Stop()
	progress := time.NewTicker(c.opts.ProgressFlushInterval)
	defer progress.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-progress.C:
			c.persistProgress(false)
		case <-offsets.C:
			key := fmt.Sprintf("%p|offsets", c)
			if err := c.offsets.persist(false); err != nil {
				c.stats.persistErrors.Add(1)
				persistLogs.Error(c.opts.Logger, key, "broker: persist consumer offsets failed (disk full or failing?); retried at the next flush", "err", err)
			} else {
				persistLogs.Clear(key)
			}
		case now := <-scan.C:
			conns, changed := c.clients.expire(now.Add(-c.opts.ClientTimeout))
			for _, cc := range conns {
				if cc != nil {
					c.opts.Logger.Info("broker: client silent too long, closing its connection", "remote", cc.RemoteAddr())
					cc.Close()
				}
			}
			c.notify(changed)
			c.locks.sweep(now)
		}
	}
}

// sinceStart is a monotonic clock in nanoseconds.
func (c *Core) sinceStart() int64 { return int64(time.Since(c.start)) }
