package core

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apogeemq/apogee/broker/delay"
	"github.com/apogeemq/apogee/broker/pop"
	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// Broker groups (docs/replication.md). A broker is a master (broker id 0),
// which takes every write, or a slave (id 1 or more), whose store is a
// replica of its master's commit log (package ha keeps it one; the front
// end runs it). What the core does differently per role:
//
//   - A SYNC_MASTER's store needs one replica's acknowledgement before a
//     message is durable (store.Options.SyncReplicas = 1): sends, send-backs
//     and ended transactions wait for it exactly as for a sync flush (a
//     Pending), and a wait the slave does not answer ends in
//     FLUSH_SLAVE_TIMEOUT (12) or SLAVE_NOT_AVAILABLE (11), with the messages
//     stored on the master all the same.
//   - A slave refuses writes with RocketMQ's answers (slaveRefusal): sends
//     and send-backs SYSTEM_BUSY "[REJECTREQUEST]..." (the Java broker's
//     SendMessageProcessor rejects requests on a slave), END_TRANSACTION
//     SLAVE_NOT_AVAILABLE, changes of topics and groups and offset resets
//     SYSTEM_ERROR with the Java admin processor's remarks, POP SERVICE_NOT_AVAILABLE
//     (POP's state is the master's). It runs none of the features' goroutines
//     (delay scanners, timer wheel, transaction checker, POP's persister):
//     they write, and the master runs them. It serves pulls, queries and
//     offsets. It never creates a topic or a group (a route query of an
//     unknown topic is TOPIC_NOT_EXIST, a heartbeat creates neither its
//     groups nor their retry topics, an unknown group's pull is served with
//     the defaults: ReasonSlaveCreate). Its topic and group tables follow the
//     master's through the configuration records of the log, applied as
//     they are dispatched (configlog.go); its consumer-offset and
//     delay-offset tables, and its topic and group tables as a catch-all,
//     follow the master's periodically (SyncTopics,
//     SyncSubscriptionGroups, SyncConsumerOffsets, SyncDelayOffsets: the
//     front end fetches them every SlaveSyncInterval, as RocketMQ's
//     SlaveSynchronize does).
//   - Offsets a client commits on a slave (UPDATE_CONSUMER_OFFSET while its
//     master is away: RocketMQ's Java client does that) are kept as
//     pending: SyncConsumerOffsets keeps those the master has not reached
//     and returns them, for the front end to send to the master; a pull's
//     commitOffset is ignored on a slave, as in RocketMQ.
//   - Reads from slaves (Options.SlaveReadEnable): the master's pull answer
//     suggests the group's whichBrokerWhenConsumeSlowly (1 by default) when
//     the consumer reads further behind the log's end than the memory
//     window (RocketMQ's rule: the data is likely no longer in the page
//     cache), its brokerId (0) otherwise. A slave whose master is online
//     (Options.MasterOnline) suggests the master back for a consumer that
//     is not that far behind (RocketMQ's slave also answers a miss with
//     PULL_RETRY_IMMEDIATELY; Apogee's holds it as usual: see
//     suggestBroker). A slave never moves a consumer's offset: an offset
//     beyond its queue's end (it lags) is "nothing yet"; one below its
//     start is sent to the master while it is online and is "nothing yet"
//     while it is away (RocketMQ's offsetCheckInSlave=false answers
//     PULL_RETRY_IMMEDIATELY with the same offset, and consumer and slave
//     spin until the master returns).
//
// Role changes (SetRole; Role reads the current role, Options.Role is the
// one at New) happen in place, as RocketMQ's BrokerController.changeToSlave
// and changeToMaster: the store, the tables, the clients and the front
// ends' connections stay; the front end swaps the HA side and the
// registrations.
//   - To SLAVE: the slave flag that every write checks is set first (sends
//     are refused with errSlaveSend from then on; one already inside the
//     store is stored or refused the same way, never half), then the
//     features that write (delay scanners, timer wheel, transaction checker,
//     POP's persister) stop, waiting for the puts they have in flight, and
//     their progress and POP's state are persisted; then the store becomes
//     a replica (store.Store.SetReplica), refusing any put still on its way.
//   - To a master: the store becomes a master (its replication stopped
//     first by the caller): it dispatches what it received and continues
//     every queue's offsets. The features are built again and load their
//     state files, as a newly opened master's would (the delay offsets the
//     slave followed from its master with SyncDelayOffsets are persisted
//     first), so nothing of an earlier term as master carries over, and
//     start; only then are writes let in. Topics the store holds and the
//     table lacks are adopted (AdoptStoredTopics).
//   - The replica requirement: a SYNC_MASTER's store needs one replica (or
//     Store.SyncReplicas when more), an ASYNC_MASTER's Store.SyncReplicas
//     (store.Store.SetSyncReplicas), unless a SyncStateSet was set
//     (store.Store.SetInSyncReplicas, controller mode): that one wins and
//     SetRole leaves it alone. Answers wait for durability when the store's
//     waits can block, and always on a SYNC_MASTER (whose requirement a
//     controller may raise from 0 at any time).
//   - Features are reached through an atomic pointer (Core.features): a
//     request that holds an instance across a swap finds it stopped, never
//     freed. Two role changes are serialised, with Start and Shutdown too.

// Role is a broker's role in its group (RocketMQ's brokerRole).
type Role uint8

const (
	// RoleAsyncMaster: a master that answers sends without waiting for its
	// slaves (the default).
	RoleAsyncMaster Role = iota
	// RoleSyncMaster: a master that answers a send once a slave has it.
	RoleSyncMaster
	// RoleSlave: a replica of its master.
	RoleSlave
)

// String returns RocketMQ's name of the role.
func (r Role) String() string {
	switch r {
	case RoleAsyncMaster:
		return "ASYNC_MASTER"
	case RoleSyncMaster:
		return "SYNC_MASTER"
	case RoleSlave:
		return "SLAVE"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// ParseRole accepts RocketMQ's names (ASYNC_MASTER, SYNC_MASTER, SLAVE), in
// any case.
func ParseRole(s string) (Role, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "ASYNC_MASTER":
		return RoleAsyncMaster, nil
	case "SYNC_MASTER":
		return RoleSyncMaster, nil
	case "SLAVE":
		return RoleSlave, nil
	}
	return 0, fmt.Errorf("broker role %q: want ASYNC_MASTER, SYNC_MASTER or SLAVE", s)
}

// IsSlave reports whether the core runs as a slave now.
func (c *Core) IsSlave() bool { return c.slave.Load() }

// Role returns the current role (Options.Role at New, then SetRole's).
func (c *Core) Role() Role { return Role(c.role.Load()) }

// features are the messaging features that write: the delay scheduler, the
// timer wheel, the transaction checker and POP. New builds and loads them
// from their state files; each promotion (SetRole) builds and loads new
// ones, so nothing of an earlier term as master (the wheel's slots, the
// checker's loaded halves) carries over. Every use reads them through
// Core.features; a request holding an older instance across a swap only
// finds it stopped.
type features struct {
	sched  *delay.Scheduler
	timers *timerwheel.Wheel
	tx     *txn.Manager
	pops   *pop.Manager
}

// features returns the current instances.
func (c *Core) features() *features { return c.feat.Load() }

// newFeatures builds the features and loads their state files.
func (c *Core) newFeatures() (*features, error) {
	o := &c.opts
	f := &features{}
	var err error
	if f.sched, err = delay.New(innerHost{c}, delay.Config{Levels: c.levels, Logger: o.Logger}); err != nil {
		return nil, err
	}
	if f.timers, err = timerwheel.New(innerHost{c}, timerwheel.Config{RollInterval: o.TimerRollInterval,
		CheckpointInterval: o.ProgressFlushInterval / 2, Logger: o.Logger}); err != nil {
		return nil, err
	}
	f.tx = txn.New(txn.Config{Timeout: o.TransactionTimeout, CheckInterval: o.TransactionCheckInterval,
		CheckMax: o.TransactionCheckMax, BornHost: c.host, Logger: o.Logger}, &txnHost{c: c})
	f.pops = newPopManager(c, c.cfgDir)
	for _, fn := range c.revivers {
		f.pops.OnVisible(fn)
	}
	for _, load := range []func() error{f.pops.Load, f.sched.Load, f.timers.Load, f.tx.Load} {
		if err := load(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// start starts the features' goroutines (a master's, once the core started).
func (f *features) start() {
	f.sched.Start()
	f.timers.Start()
	f.tx.Start()
	f.pops.Start()
}

// stop stops the features' goroutines, waiting for the puts they have in
// flight; POP's persister is stopped by pops.Stop, which also persists.
func (f *features) stop() {
	f.tx.Stop()
	f.sched.Stop()
	f.timers.Stop() // publishes its last checkpoint for persistProgress
}

// durableWaits reports whether answers wait for durability in role r: when
// the store's durability waits (sync flush; replicas required of a
// master), and always on a SYNC_MASTER, whose store's requirement a
// controller may raise from 0 at any time (SetInSyncReplicas).
func (c *Core) durableWaits(r Role) bool {
	return c.store.DurableWaits() || r == RoleSyncMaster
}

// SetRole changes the broker's role in place, as RocketMQ's
// BrokerController.changeToMaster and changeToSlave do: the store, the
// tables, the clients and the front ends' connections stay; see "Role
// changes" at the top of this file. It returns nil at once when the role
// does not change, ErrClosed once Shutdown began; role changes are
// serialised. An error leaves the previous role in force. Failures to
// persist the features' progress on a demotion are logged and counted, as
// the background writes' are, and do not fail it.
func (rp Replication) SetRole(r Role) error {
	c := rp.c
	switch r {
	case RoleAsyncMaster, RoleSyncMaster, RoleSlave:
	default:
		return fmt.Errorf("broker: unknown role %v", r)
	}
	c.roleMu.Lock()
	defer c.roleMu.Unlock()
	if c.closing.Load() {
		return ErrClosed
	}
	cur := c.Role()
	if cur == r {
		return nil
	}
	began := time.Now()
	var err error
	switch {
	case r == RoleSlave:
		err = c.toSlave()
	case cur == RoleSlave:
		err = c.toMaster(r)
	default: // between SYNC_MASTER and ASYNC_MASTER
		c.setSyncReplicas(r)
		c.waitDurable.Store(c.durableWaits(r))
		c.role.Store(uint32(r))
	}
	if err != nil {
		c.opts.Logger.Error("broker: role change failed", "from", cur, "to", r, "err", err)
		return err
	}
	c.opts.Logger.Info("broker: role changed", "from", cur, "to", r, "took", time.Since(began))
	return nil
}

// setSyncReplicas sets the store's replica requirement for master role r:
// one replica (or Store.SyncReplicas, when more) for a SYNC_MASTER,
// Store.SyncReplicas (0 by default) for an ASYNC_MASTER. The store ignores
// it once a SyncStateSet was set (store.Store.SetInSyncReplicas: controller
// mode decides the requirement itself).
func (c *Core) setSyncReplicas(r Role) {
	n := c.opts.Store.SyncReplicas
	if r == RoleSyncMaster {
		n = max(n, 1)
	}
	c.store.SetSyncReplicas(n)
}

// toSlave demotes a master: writes are refused first (the slave flag every
// write checks, then the store), the features stop with their progress
// persisted, then the store becomes a replica. Called with roleMu held.
func (c *Core) toSlave() error {
	c.slave.Store(true)
	f := c.features()
	f.stop()
	if err := f.persistProgress(c, true); err != nil {
		c.stats.persistErrors.Add(1)
	}
	if err := f.pops.Stop(); err != nil { // writes popState.json a last time
		c.stats.persistErrors.Add(1)
		c.opts.Logger.Error("broker: persist POP's state failed", "err", err)
	}
	if err := c.store.SetReplica(true); err != nil {
		return fmt.Errorf("broker: demote the store: %w", err)
	}
	c.waitDurable.Store(c.durableWaits(RoleSlave))
	c.role.Store(uint32(RoleSlave))
	return nil
}

// toMaster promotes a slave to master role r: the store becomes a master
// (its replication stopped by the caller), new features are built from
// their state files (the delay offsets the slave followed from its master
// are persisted first) and started, and writes are let in; then topics the
// store holds and the table lacks are adopted. Called with roleMu held.
func (c *Core) toMaster(r Role) error {
	old := c.features()
	if err := old.sched.Persist(true); err != nil {
		c.stats.persistErrors.Add(1)
		c.opts.Logger.Error("broker: persist the delay offsets followed from the master failed", "err", err)
	}
	c.setSyncReplicas(r)
	if err := c.store.SetReplica(false); err != nil {
		return fmt.Errorf("broker: promote the store: %w", err)
	}
	f, err := c.newFeatures()
	if err != nil {
		if rerr := c.store.SetReplica(true); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("broker: promote: load the features' state: %w", err)
	}
	c.feat.Store(f)
	if c.started.Load() {
		f.start()
	}
	// Configuration records dispatched but not applied yet are applied
	// before the first write (a send must not auto-create a topic whose
	// record is pending); topics without records are adopted after.
	c.catchUpConfig()
	c.waitDurable.Store(c.durableWaits(r))
	c.role.Store(uint32(r))
	c.slave.Store(false)
	c.Replication().AdoptStoredTopics()
	return nil
}

// The answers of a slave to writes (see the comment at the top).
var (
	// errSlaveSend: the Java broker's code for a request its processor
	// rejects (SendMessageProcessor.rejectRequest on a slave: SYSTEM_BUSY,
	// which producers retry on another broker) and its [REJECTREQUEST]
	// mark; the remark says what happened instead of the Java broker's
	// "system busy, start flow control for a while", which sent operators
	// of a demoted master looking for a load problem.
	errSlaveSend = newError(ReasonSlaveSend, "[REJECTREQUEST]this broker is a slave (a replica, or a master demoted by a later election): sends go to its group's master")
	// errSlaveEndTransaction: EndTransactionProcessor on a slave.
	errSlaveEndTransaction = newError(ReasonSlaveEndTransaction, "Message store is slave mode, so end transaction is forbidden.")
	// errSlaveAdmin: AdminBrokerProcessor's validateSlave.
	errSlaveAdmin = newError(ReasonSlaveAdmin, "Can't modify topic or subscription group from slave broker, please execute it from master broker.")
	// errSlaveReset: AdminBrokerProcessor's resetOffset on a slave.
	errSlaveReset = newError(ReasonSlaveResetOffset, "Can not reset offset in slave broker")
	// errSlavePop: POP's state and redeliveries are the master's.
	errSlavePop = newError(ReasonSlavePop, "service not available now: this broker is a slave; POP is served by the master")
)

// errSlaveCreateTopic is a slave's answer where a master would create a
// topic (a route query of an unknown topic, a group's retry or dead-letter
// topic): ReasonSlaveCreate (TOPIC_NOT_EXIST, gRPC TOPIC_NOT_FOUND).
func errSlaveCreateTopic(name string) *Error {
	return newError(ReasonSlaveCreate, "topic["+name+"] not exist on this slave broker; a slave never creates topics, its master does")
}

// suggestBroker sets res.SuggestBrokerID (and, on a slave, redirects to the
// master) once read filled res from offset; see "Reads from slaves" at the
// top of this file.
func (c *Core) suggestBroker(res *PullResult, offset int64) {
	far := false
	if res.Status == PullFound && len(res.Records) > 0 {
		last := res.Records[len(res.Records)-1]
		pulled := int64(binary.BigEndian.Uint64(last[message.OffPhysicalOffset:]))
		far = c.store.WrittenOffset()-pulled > c.memWindow
	}
	res.SuggestBrokerID = 0
	if c.opts.SlaveReadEnable {
		if far {
			res.SuggestBrokerID = res.slowBrokerID
		} else {
			res.SuggestBrokerID = res.okBrokerID
		}
	}
	if !c.slave.Load() {
		return
	}
	// A slave never moves a consumer's offset (RocketMQ's offsetCheckInSlave
	// is false): it may only be behind its master. An offset beyond its
	// queue's end is "nothing yet" (the pull may wait for the replica to
	// reach it). One below its start is the master's alone: while the master
	// is online the consumer is sent there (PULL_RETRY_IMMEDIATELY, suggesting
	// the master, far behind or not); while it is away the pull is "nothing
	// yet" too, held as a long poll, because RocketMQ's answer,
	// PULL_RETRY_IMMEDIATELY with the same offset, has the consumer ask this
	// slave again at once, and the two spin until the master returns.
	masterOnline := c.opts.MasterOnline != nil && c.opts.MasterOnline()
	if res.Status == PullOffsetMoved {
		switch {
		case offset > res.MaxOffset || !masterOnline:
			res.Status = PullNoNewMessage
		default:
			res.Status = PullRetryImmediately
			res.SuggestBrokerID = 0
		}
		res.NextOffset = offset
	}
	if !far && masterOnline {
		// RocketMQ also turns a miss into PULL_RETRY_IMMEDIATELY here; but a
		// client that does not know the master's address yet (its route is
		// refreshed every 30 s) comes straight back, and the two spin. A
		// miss stays PULL_NOT_FOUND (held until something arrives here, a
		// few ms after the master has it) and the suggestion moves the
		// consumer's next pull.
		res.SuggestBrokerID = 0
	}
}

// SyncTopics makes the topic table follow the master's (RocketMQ's
// SlaveSynchronize.syncTopicConfig), as the catch-all behind the
// configuration records of the log (configlog.go), which win: a topic the
// table lacks is created unless a record of this log deleted it; a topic
// no record of this log set is changed to the master's, or deleted when
// the master lacks it; a topic a record set is left to the records that
// follow it. topics.json is written soon after. It returns how many topics
// changed. On a master it does nothing.
func (rp Replication) SyncTopics(t TopicTable) int {
	c := rp.c
	if !c.slave.Load() {
		return 0
	}
	var changed []string
	c.cfg.mu.Lock()
	for name, cfg := range t.Topics {
		if cfg == nil {
			continue
		}
		tc := *cfg
		if tc.TopicName == "" {
			tc.TopicName = name
		}
		if e := c.topics.lookup(tc.TopicName); (e != nil && e.logOff.Load() >= 0) || (e == nil && c.deletedAt(topicKey(tc.TopicName)) >= 0) {
			continue // the log's
		}
		if _, ok := c.topics.put(tc); ok {
			changed = append(changed, tc.TopicName)
		}
	}
	cur, _ := c.topics.snapshot()
	for i := range cur {
		name := cur[i].TopicName
		if _, ok := t.Topics[name]; ok {
			continue
		}
		if e := c.topics.lookup(name); e != nil && e.logOff.Load() < 0 && c.topics.remove(name) {
			changed = append(changed, name)
		}
	}
	c.pruneTombstones()
	c.cfgUnlock()
	for _, name := range changed {
		c.topicChanged(name, false)
	}
	return len(changed)
}

// pruneTombstones drops the tombstones of deletion records retention
// removed from the log (a restart would not know them either). c.cfg.mu
// must be held.
func (c *Core) pruneTombstones() {
	min := c.store.LogMinOffset()
	for k, off := range c.cfg.deleted {
		if off < min {
			delete(c.cfg.deleted, k)
		}
	}
}

// SyncSubscriptionGroups makes the subscription-group table follow the
// master's (syncSubscriptionGroupConfig) with SyncTopics' rules: the
// configuration records of the log win. subscriptionGroup.json is written
// soon after. It returns how many groups changed. On a master it does
// nothing.
func (rp Replication) SyncSubscriptionGroups(t GroupTable) int {
	c := rp.c
	if !c.slave.Load() {
		return 0
	}
	changed := 0
	c.cfg.mu.Lock()
	for name, cfg := range t.Groups {
		if cfg == nil {
			continue
		}
		g := *cfg
		if g.GroupName == "" {
			g.GroupName = name
		}
		if c.groups.logOff(g.GroupName) >= 0 {
			continue // the log's
		}
		old := c.groups.get([]byte(g.GroupName))
		if old == nil && c.deletedAt(groupKey(g.GroupName)) >= 0 {
			continue // a record deleted it
		}
		if old == nil || !sameGroupConfig(old, &g) {
			c.groups.put(g)
			changed++
		}
	}
	for _, name := range c.groups.names() {
		if _, ok := t.Groups[name]; !ok && c.groups.logOff(name) < 0 && c.groups.remove(name) {
			changed++
		}
	}
	c.cfgUnlock()
	if changed > 0 {
		c.groupsChanged(false)
	}
	return changed
}

// sameGroupConfig compares two group configurations by their encodings
// (the struct holds a raw JSON policy and a map).
func sameGroupConfig(a, b *protocol.SubscriptionGroupConfig) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// OffsetCommit is one committed consumer offset.
type OffsetCommit struct {
	Topic, Group string
	QueueID      int32
	Offset       int64
}

// AllConsumerOffsets returns every committed consumer offset and the
// table's version (what GET_ALL_CONSUMER_OFFSET, 43, answers and a slave
// follows).
func (rp Replication) AllConsumerOffsets() OffsetTable {
	c := rp.c
	o := c.offsets
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.tableLocked()
	return OffsetTable{Offsets: w.OffsetTable, Version: o.version}
}

// SyncConsumerOffsets applies the master's committed offsets
// (syncConsumerOffset: each offset the master has replaces this broker's;
// offsets the master does not have stay). An offset a client committed on
// this slave (UpdateConsumerOffset) and the master has not reached stays
// too, and is returned: the caller sends each to the master and reports
// it with OffsetForwarded. On a master it does nothing.
func (rp Replication) SyncConsumerOffsets(t OffsetTable) []OffsetCommit {
	c := rp.c
	if !c.slave.Load() {
		return nil
	}
	return c.offsets.follow(t.Offsets)
}

// OffsetForwarded records that the master accepted an offset
// SyncConsumerOffsets returned: it is no longer this slave's to keep.
func (rp Replication) OffsetForwarded(oc OffsetCommit) { rp.c.offsets.forwarded(oc) }

// SyncDelayOffsets applies the master's delay-level progress
// (GET_ALL_DELAY_OFFSET's table, level → next queue offset): the scanners
// do not run on a slave; the progress is persisted with the others. On a
// master it does nothing.
func (rp Replication) SyncDelayOffsets(table map[int32]int64) {
	c := rp.c
	if !c.slave.Load() {
		return
	}
	c.features().sched.SetOffsets(table)
}

// pendingKey names a queue of a group's offsets.
type pendingKey struct {
	topic, group string
	queue        int32
}

// commitLocal stores an offset a client committed on a slave and keeps it
// as pending for the master.
func (o *offsetManager) commitLocal(topic, group []byte, q int32, off int64) bool {
	if !o.commit(topic, group, q, off) {
		return false
	}
	o.mu.Lock()
	if o.pending == nil {
		o.pending = make(map[pendingKey]int64)
	}
	o.pending[pendingKey{string(topic), string(group), q}] = off
	o.mu.Unlock()
	return true
}

// follow applies the master's table (see SyncConsumerOffsets) and returns
// the pending offsets the master has not reached.
func (o *offsetManager) follow(table map[string]map[int32]int64) []OffsetCommit {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, qs := range table {
		topic, group, ok := protocol.SplitOffsetTableKey(key)
		if !ok || topic == "" || group == "" {
			continue
		}
		for q, off := range qs {
			if q < 0 || q >= maxOffsetQueueID {
				continue
			}
			k := pendingKey{topic, group, q}
			if p, ok := o.pending[k]; ok {
				if p > off {
					continue // the master has not reached it: keep ours
				}
				delete(o.pending, k)
			}
			if cur := o.m[topic][group]; int(q) < len(cur) && cur[q] == off {
				continue
			}
			o.setLocked(topic, group, q, off)
		}
	}
	var out []OffsetCommit
	for k, off := range o.pending {
		if m, ok := table[protocol.OffsetTableKey(k.topic, k.group)][k.queue]; ok && m >= off {
			delete(o.pending, k)
			continue
		}
		out = append(out, OffsetCommit{Topic: k.topic, Group: k.group, QueueID: k.queue, Offset: off})
	}
	return out
}

// forwarded drops a pending offset the master accepted (unless a later
// commit replaced it meanwhile).
func (o *offsetManager) forwarded(oc OffsetCommit) {
	o.mu.Lock()
	k := pendingKey{oc.Topic, oc.Group, oc.QueueID}
	if p, ok := o.pending[k]; ok && p == oc.Offset {
		delete(o.pending, k)
	}
	o.mu.Unlock()
}
