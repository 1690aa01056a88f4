package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/delay"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/broker/pop"
	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// ErrClosed is returned by Shutdown when the broker was already shut down.
var ErrClosed = errors.New("broker: closed")

// Broker serves RocketMQ's broker requests (and, through its embedded
// registry, name-server requests) on top of an Apogee store. Its methods are
// safe for concurrent use.
type Broker struct {
	opts      Options
	host      netip.AddrPort // resolved AdvertiseAddr (the store host)
	syncFlush bool
	start     time.Time
	memWindow int64 // commit-log bytes RocketMQ would deem still in memory

	store     *store.Store
	registry  *namesrv.Registry
	registrar *namesrv.Registrar // nil without external name servers
	pool      *remoting.Pool     // the registrar's connections
	srv       *remoting.Server   // what Serve uses

	topics  *topicManager
	groups  *groupManager
	offsets *offsetManager
	clients *clientManager
	locks   *lockManager
	sched   *delay.Scheduler
	timers  *timerwheel.Wheel
	tx      *txn.Manager
	holds   *longpoll.Holder[heldPull]
	pops    *pop.Manager
	acks    ackPool // requests waiting for their messages to be durable

	popHolds popHolds // pops held for long polling

	handlers handlerTable // request code → handler, built by New
	filters  filterCache

	sendPool sync.Pool // *sendScratch
	pullPool sync.Pool // *pullJob

	registerMu sync.Mutex // orders registrations with the embedded registry

	// Background writers of topics.json and subscriptionGroup.json.
	topicWriter, groupWriter *stateWriter

	// Back-pressure (send path).
	inflight     atomic.Int64 // message bytes of sends being stored or awaiting their flush
	putsActive   atomic.Int64 // puts inside the store
	lastProgress atomic.Int64 // ns since start: last put completed, or puts started from idle

	closing atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup

	stats brokerStats

	// startup is how long New took per phase: reading the state files,
	// opening the store, and the rest (system topics, writes, registration).
	startup struct{ load, store, tables time.Duration }
}

type brokerStats struct {
	sendRequests, sendMessages, sendErrors, busyRejects atomic.Int64
	pullRequests, pullFound, pullMessages               atomic.Int64
	persistErrors, notifies                             atomic.Int64
	innerPuts, sendBacks, deadLetters                   atomic.Int64
	delayed, timers                                     atomic.Int64 // routed to the schedule / timer topic
}

// New opens the store (recovering it) and the managers' files, registers
// the broker with the embedded registry (and starts registering with the
// external name servers), and starts the background tasks. Serve or Handler
// then put it on the network; Shutdown stops it.
func New(opts Options) (*Broker, error) {
	o, host, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfgDir := filepath.Join(o.DataDir, configDirName)
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: create %s: %w", cfgDir, err)
	}
	b := &Broker{
		opts:      o,
		host:      host,
		start:     time.Now(),
		memWindow: memoryWindow(),
		topics:    newTopicManager(filepath.Join(cfgDir, topicsFileName), o.WriteConfigFile, o.Logger),
		groups:    newGroupManager(filepath.Join(cfgDir, subscriptionGroupsName), o.WriteConfigFile, o.Logger),
		offsets:   newOffsetManager(filepath.Join(cfgDir, consumerOffsetFileName), o.WriteConfigFile, o.Logger),
		clients:   newClientManager(o.Logger),
		locks:     newLockManager(o.LockExpiry),
		stop:      make(chan struct{}),
	}
	levels, err := delay.ParseLevels(o.DelayLevels)
	if err != nil {
		return nil, err
	}
	if b.sched, err = delay.New(innerHost{b}, delay.Config{Levels: levels, Logger: o.Logger}); err != nil {
		return nil, err
	}
	if b.timers, err = timerwheel.New(innerHost{b}, timerwheel.Config{RollInterval: o.TimerRollInterval,
		CheckpointInterval: o.ProgressFlushInterval / 2, Logger: o.Logger}); err != nil {
		return nil, err
	}
	b.tx = txn.New(txn.Config{Timeout: o.TransactionTimeout, CheckInterval: o.TransactionCheckInterval,
		CheckMax: o.TransactionCheckMax, BornHost: host, Logger: o.Logger}, &txnHost{b: b})
	b.pops = newPopManager(b, cfgDir)
	if err := b.pops.Load(); err != nil {
		return nil, err
	}
	began := time.Now()
	for _, load := range []func() error{b.topics.load, b.groups.load, b.offsets.load, b.sched.Load, b.timers.Load, b.tx.Load} {
		if err := load(); err != nil {
			return nil, err
		}
	}
	loaded := time.Now()
	b.holds = newPullHolder(b)

	so := o.Store
	so.Dir = o.DataDir
	so.StoreHost = host
	so.MaxMessageSize = o.MaxMessageSize
	if so.Logger == nil {
		so.Logger = o.Logger
	}
	userArrival := so.OnArrival
	so.OnArrival = func(topic string, queueID int32, maxOffset int64) {
		switch topic {
		case scheduleTopic:
			b.sched.Arrived(queueID)
		case timerTopic:
			b.timers.Arrived()
		case txn.HalfTopic, txn.OpHalfTopic:
			b.tx.Arrived()
		default:
			b.holds.Arrived(topic, queueID, maxOffset)
		}
		if userArrival != nil {
			userArrival(topic, queueID, maxOffset)
		}
	}
	userTagCode := so.TagCode
	so.TagCode = func(v message.View) (int64, bool) {
		switch string(v.Topic()) {
		case scheduleTopic:
			return b.sched.TagCode(v), true
		case timerTopic:
			return b.timers.TagCode(v), true
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
	b.store = st
	b.syncFlush = so.FlushMode == store.FlushSync
	opened := time.Now()
	o.Logger.Info("broker: store opened", "dir", o.DataDir, "took", opened.Sub(loaded).Round(time.Millisecond),
		"recovery", fmt.Sprintf("%+v", rep))

	b.ensureAutoCreateKey()
	b.ensureSystemTopics()
	// Written now when the table changed at start (system topics, TBW102)
	// or was read from its previous version.
	b.persistAtStart("topics", b.topics.persist)
	b.persistAtStart("subscription groups", b.groups.persist)
	b.topicWriter = newStateWriter(func() error { return b.topics.persist(false) }, func(err error) {
		b.stats.persistErrors.Add(1)
		o.Logger.Error("broker: persist topics failed", "err", err)
	})
	b.groupWriter = newStateWriter(func() error { return b.groups.persist(false) }, func(err error) {
		b.stats.persistErrors.Add(1)
		o.Logger.Error("broker: persist subscription groups failed", "err", err)
	})
	b.registry = namesrv.NewRegistry(namesrv.Options{Logger: o.Logger})
	b.registerEmbedded()
	if len(o.NamesrvAddrs) > 0 {
		b.pool = remoting.NewPool(nil)
		b.registrar = namesrv.NewRegistrar(o.NamesrvAddrs, b.pool, b.registration, o.Logger)
		b.registrar.Period = o.RegisterInterval
		b.registrar.LookupTopic = b.topicConfig
		b.registrar.Start() // a full round at once, then every RegisterInterval
	}
	b.startup.load, b.startup.store, b.startup.tables = loaded.Sub(began), opened.Sub(loaded), time.Since(opened)
	o.Logger.Info("broker: state loaded", "topics", b.topics.count(), "loadConfig", b.startup.load.Round(time.Millisecond),
		"openStore", b.startup.store.Round(time.Millisecond), "tablesAndRegistration", b.startup.tables.Round(time.Millisecond))
	b.buildHandlers()
	b.srv = remoting.NewServer(b, o.Remoting)
	b.srv.OnClose(b.ConnClosed)

	b.holds.Start()
	b.wg.Add(3)
	go b.maintain()
	go func() { defer b.wg.Done(); b.topicWriter.run(b.stop) }()
	go func() { defer b.wg.Done(); b.groupWriter.run(b.stop) }()
	b.sched.Start()
	b.timers.Start()
	b.tx.Start()
	b.pops.Start()
	return b, nil
}

// ensureSystemTopics keeps the messaging features' system topics in the
// topic table: SCHEDULE_TOPIC_XXXX with one queue per delay level, the timer
// topic, and the transaction half and op topics (one queue each). Producers
// may not send to them; admin requests may not create or delete them. New
// persists the table afterwards.
func (b *Broker) ensureSystemTopics() {
	for _, cfg := range []protocol.TopicConfig{
		newTopicConfig(scheduleTopic, int32(b.sched.Levels()), protocol.PermRead|protocol.PermWrite),
		newTopicConfig(timerTopic, 1, protocol.PermRead|protocol.PermWrite),
		newTopicConfig(txn.HalfTopic, 1, protocol.PermRead|protocol.PermWrite),
		newTopicConfig(txn.OpHalfTopic, 1, protocol.PermRead|protocol.PermWrite),
	} {
		b.topics.put(cfg)
	}
}

// persistAtStart writes a table New changed (or read from its previous
// version); a failure is logged and counted, and the background writer
// tries again with the next change.
func (b *Broker) persistAtStart(what string, persist func(force bool) error) {
	if err := persist(false); err != nil {
		b.stats.persistErrors.Add(1)
		b.opts.Logger.Error("broker: persist "+what+" failed", "err", err)
	}
}

// persistProgress writes the delay scanners', the timer wheel's and the
// transaction checker's progress (when it changed, or always with force).
func (b *Broker) persistProgress(force bool) error {
	var errs []error
	if err := b.sched.Persist(force); err != nil {
		errs = append(errs, err)
	}
	if err := b.timers.Persist(force); err != nil {
		errs = append(errs, err)
	}
	if err := b.tx.Persist(force); err != nil {
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if err != nil {
		b.stats.persistErrors.Add(1)
		b.opts.Logger.Error("broker: persist the progress of delays, timers or transactions failed", "err", err)
	}
	return err
}

// ensureAutoCreateKey keeps TBW102 (perm 7: inheritable) in the topic table
// while auto-create is on, and out of it when it is off. New persists the
// table afterwards.
func (b *Broker) ensureAutoCreateKey() {
	if b.opts.DisableAutoCreateTopic {
		b.topics.remove(topicAutoCreateKey)
		return
	}
	b.topics.put(newTopicConfig(topicAutoCreateKey, int32(b.opts.DefaultTopicQueues),
		protocol.PermRead|protocol.PermWrite|protocol.PermInherit))
}

// Handler returns the remoting handler that serves broker requests and, via
// the embedded registry, name-server requests. A caller that runs its own
// remoting.Server with it must also register ConnClosed with Server.OnClose.
func (b *Broker) Handler() remoting.Handler { return b }

// Registry returns the embedded name-server registry (serve it on a separate
// listener with its ServeRemoting for --namesrv-listen).
func (b *Broker) Registry() *namesrv.Registry { return b.registry }

// Store returns the message store.
func (b *Broker) Store() *store.Store { return b.store }

// Serve accepts connections on l and serves them until Shutdown. It may be
// called for several listeners.
func (b *Broker) Serve(l net.Listener) error { return b.srv.Serve(l) }

// ConnClosed forgets everything tied to a closed connection: its clients
// leave their groups (the remaining members are notified) and the embedded
// registry drops what the connection registered. Serve wires it; callers
// with their own remoting.Server register it with OnClose.
func (b *Broker) ConnClosed(c *remoting.Conn) {
	b.notify(b.clients.remove(c))
	b.registry.ConnClosed(c)
}

// Shutdown stops the broker: held pulls are answered, the server Serve runs
// stops accepting and finishes the requests in flight (until ctx ends),
// background tasks stop, offsets, topics and groups are persisted, and the
// store is flushed and closed. It returns the errors met, after doing all of
// it; a failed unregistration from external name servers is logged as a WARN
// and is not one of them.
func (b *Broker) Shutdown(ctx context.Context) error {
	if b.closing.Swap(true) {
		return ErrClosed
	}
	var errs []error
	b.holds.Stop()
	if err := b.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("broker: shutdown server: %w", err))
	}
	close(b.stop)
	b.wg.Wait()
	b.tx.Stop()
	b.sched.Stop()
	b.timers.Stop() // publishes its last checkpoint for persistProgress
	if b.registrar != nil {
		// A name server forgets a broker whose registration is not renewed
		// (after 120 s, as in RocketMQ), so a failed unregistration (a name
		// server that is down, or already stopped) costs nothing the broker's
		// data depends on: a WARN, not a failed stop.
		if err := b.registrar.Close(ctx); err != nil {
			b.opts.Logger.Warn("broker: unregister from the name servers failed; they drop this broker when its registration expires", "err", err)
		}
		b.pool.Close()
	}
	b.registry.UnregisterBroker(b.opts.ClusterName, b.opts.BrokerName, b.opts.AdvertiseAddr, 0)
	if err := b.offsets.persist(true); err != nil {
		errs = append(errs, err)
	}
	if err := b.topicWriter.finish(func() error { return b.topics.persist(true) }); err != nil {
		errs = append(errs, err)
	}
	if err := b.groupWriter.finish(func() error { return b.groups.persist(true) }); err != nil {
		errs = append(errs, err)
	}
	if err := b.persistProgress(true); err != nil {
		errs = append(errs, err)
	}
	if err := b.closePops(); err != nil {
		errs = append(errs, err)
	}
	b.registry.Close()
	if err := b.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("broker: close store: %w", err))
	}
	return errors.Join(errs...)
}

// registration describes this broker and all its topics, for a full
// registration. It is O(topics): New, the RegisterInterval tick, a deleted
// topic and the registrar's full rounds use it, never a created one.
func (b *Broker) registration() namesrv.BrokerRegistration {
	cfgs, v := b.topics.snapshot()
	return namesrv.BrokerRegistration{
		ClusterName: b.opts.ClusterName,
		BrokerName:  b.opts.BrokerName,
		BrokerAddr:  b.opts.AdvertiseAddr,
		BrokerID:    0,
		Topics:      cfgs,
		DataVersion: v,
	}
}

// topicConfig returns a topic's current configuration (the registrar's
// LookupTopic).
func (b *Broker) topicConfig(name string) (protocol.TopicConfig, bool) {
	if e := b.topics.lookup(name); e != nil {
		return e.cfg, true
	}
	return protocol.TopicConfig{}, false
}

// registerEmbedded publishes the whole topic table to the embedded
// registry (replacing this broker's topic set there): at start and every
// RegisterInterval, which brings back topics a DELETE_TOPIC_IN_NAMESRV
// removed. The registrar registers with the external name servers on its
// own period (RegisterInterval too).
func (b *Broker) registerEmbedded() {
	b.registerMu.Lock()
	b.registry.RegisterBroker(b.registration())
	b.registerMu.Unlock()
}

// registerTopic publishes one topic's current configuration, or its
// absence, to the embedded registry at once (this broker's other topics
// untouched), and hands its name to the registrar, which sends it to the
// external name servers with its next round (REGISTER_TOPIC_IN_NAMESRV, or
// a full registration for a deleted topic). O(1).
//
// The configuration is read from the table under registerMu, as a full
// registration's snapshot is: whatever order concurrent changes of a topic
// reach here in, the registry ends with the table's latest state.
func (b *Broker) registerTopic(name string) {
	b.registerMu.Lock()
	if e := b.topics.lookup(name); e != nil {
		b.registry.RegisterTopic(name, []protocol.QueueData{{BrokerName: b.opts.BrokerName,
			ReadQueueNums: e.cfg.ReadQueueNums, WriteQueueNums: e.cfg.WriteQueueNums,
			Perm: e.cfg.Perm, TopicSysFlag: e.cfg.TopicSysFlag}})
	} else {
		b.registry.UnregisterTopic(b.opts.BrokerName, name)
	}
	b.registerMu.Unlock()
	if b.registrar != nil {
		b.registrar.TopicsChanged(name)
	}
}

// topicChanged publishes a topic created, changed or deleted in the table:
// to the name servers (registerTopic) and to topics.json, which the
// background writer writes within stateWriteGap plus two writes (see
// stateWriter). With wait (admin requests), it returns once a write that
// covers the change has finished, with that write's error.
func (b *Broker) topicChanged(name string, wait bool) error {
	b.registerTopic(name)
	if wait {
		return b.topicWriter.sync()
	}
	b.topicWriter.request()
	return nil
}

// groupsChanged has subscriptionGroup.json written: by the background
// writer soon, or, with wait, before it returns (with the write's error).
func (b *Broker) groupsChanged(wait bool) error {
	if wait {
		return b.groupWriter.sync()
	}
	b.groupWriter.request()
	return nil
}

// notify sends NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every member of each
// group.
func (b *Broker) notify(groups []string) {
	if len(groups) == 0 {
		return
	}
	var cmd protocol.Command
	for _, g := range groups {
		for _, c := range b.clients.memberConns(g) {
			if c == nil {
				continue
			}
			cmd.InitRequest(protocol.ReqNotifyConsumerIdsChanged, 0)
			(&protocol.NotifyConsumerIdsChangedRequest{ConsumerGroup: g}).Encode(&cmd.Ext)
			if err := c.InvokeOneway(&cmd); err == nil {
				b.stats.notifies.Add(1)
			}
		}
	}
}

// maintain runs the periodic tasks: offset persistence, the client scanner,
// lock sweeping and re-registration.
func (b *Broker) maintain() {
	defer b.wg.Done()
	offsets := time.NewTicker(b.opts.OffsetFlushInterval)
	defer offsets.Stop()
	scan := time.NewTicker(min(10*time.Second, max(b.opts.ClientTimeout/4, 20*time.Millisecond)))
	defer scan.Stop()
	reg := time.NewTicker(b.opts.RegisterInterval)
	defer reg.Stop()
	progress := time.NewTicker(b.opts.ProgressFlushInterval)
	defer progress.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-progress.C:
			b.persistProgress(false)
		case <-offsets.C:
			if err := b.offsets.persist(false); err != nil {
				b.stats.persistErrors.Add(1)
				b.opts.Logger.Error("broker: persist consumer offsets failed", "err", err)
			}
		case now := <-scan.C:
			conns, changed := b.clients.expire(now.Add(-b.opts.ClientTimeout))
			for _, c := range conns {
				if c != nil {
					b.opts.Logger.Info("broker: client silent too long, closing its connection", "remote", c.RemoteAddr().String())
					c.Close()
				}
			}
			b.notify(changed)
			b.locks.sweep(now)
		case <-reg.C:
			b.registerEmbedded()
		}
	}
}

// fail sets the response code and remark and replies.
func fail(resp *remoting.Response, code int32, remark string) remoting.Action {
	resp.Cmd.Code = code
	resp.Cmd.SetRemark(remark)
	return remoting.Reply
}

// sinceStart is a monotonic clock in nanoseconds.
func (b *Broker) sinceStart() int64 { return int64(time.Since(b.start)) }
