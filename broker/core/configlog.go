package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// Configuration follows the log (docs/replication.md, "Configuration").
//
// A master appends a record of every change of its topic and
// subscription-group tables (a topic or group created, changed or deleted,
// by an admin request, a send's or a heartbeat's auto-creation, a group's
// %RETRY% or %DLQ% topic, an adoption) to the system topic configTopic
// (queue 0) BEFORE it publishes the change in its table, under cfg.mu. A
// message stored under a configuration is therefore after the
// configuration's record in the commit log, and a replica that holds the
// message holds the record: whatever replicates (or flushes) the message
// replicates the record with it.
//
// Every broker applies the records of its log to its tables, in log order:
// a slave as its store dispatches them (the store's arrival hook for
// configTopic), any broker at New (the whole queue, once the store is
// open), and a broker promoted to master through AdoptStoredTopics, which
// catches up first. A record at commit-log offset o sets or deletes a name
// only when the name's last change known here (its entry's logOff, or the
// tombstone of its deletion) is older than o: a master reading its own
// records back changes nothing, and a slave's record never undoes a later
// one.
//
// On conflict the log wins. The periodic slave sync (SyncTopics,
// SyncSubscriptionGroups: the catch-all for tables the log does not
// describe, such as those of brokers older than the records) adds what the
// table lacks and the log has not deleted, and replaces or deletes only
// entries no record of this log set; entries a record set change only with
// later records. When the replica's log is cut (truncated to its new
// master's, or started over after retention), the records are applied again
// from the queue's start, every entry first disowned, so that entries set
// by records no longer in the log are the periodic sync's again.
//
// configTopic is never in the topic table: it is not routed, registered or
// listed, producers may not send to it (isNotAllowedSendTopic) and
// consumers cannot pull it (TOPIC_NOT_EXIST); admin requests may not
// create it (the rmq_sys_ prefix). The record is JSON (configRecord).

// configTopic is the system topic that carries the configuration records.
const configTopic = "rmq_sys_apogee_config"

// Record operations.
const (
	opTopic       = "topic"       // create or replace a topic's configuration
	opDeleteTopic = "deleteTopic" // delete a topic
	opGroup       = "group"       // create or replace a subscription group's configuration
	opDeleteGroup = "deleteGroup" // delete a subscription group
)

// configRecord is one change of the topic or group table, as the body of a
// configTopic message.
type configRecord struct {
	Op    string                            `json:"op"`
	Name  string                            `json:"name"`
	Topic *protocol.TopicConfig             `json:"topic,omitempty"`
	Group *protocol.SubscriptionGroupConfig `json:"group,omitempty"`
}

// configLog is the state of the application of configuration records
// (see the comment at the top).
type configLog struct {
	// mu serialises the changes of the topic and group tables (a master's
	// append and publish, the application of records, the periodic sync,
	// adoption). It is taken before the tables' mu and before the store's
	// put path: a master appends its records under it. The store's
	// dispatcher never waits for it (drainConfig only tries it), since a
	// put may wait for the dispatcher.
	mu sync.Mutex
	// pending asks the holder of mu to apply the records that arrived
	// while it held mu (set by the arrival hook before it tries mu).
	pending atomic.Bool

	// Under mu: next is the queue offset of configTopic's queue 0 to apply
	// next; last the commit-log offset of the record at next-1 (-1 none),
	// which tells a cut log (its entry at next-1 is another record).
	next, last int64
	// deleted are the tombstones of names a record deleted: kind byte
	// ('t' topic, 'g' group) + name → the record's commit-log offset. A
	// name is dropped from it when it is set again, and by the periodic
	// sync when the master's table lacks it too.
	deleted map[string]int64
	scratch []store.QueueEntry
	// changedTopics and changedGroups are the changes applied records
	// made, told (outside mu) by whoever releases mu.
	changedTopics []string
	changedGroups bool

	applied, appended atomic.Int64 // records applied here, appended here
	// ready is set once New has opened the store (the dispatcher's hook
	// runs during the store's Open, before c.store is set); live once it
	// has created the state files' writers.
	ready, live atomic.Bool
}

func topicKey(name string) string { return "t" + name }
func groupKey(name string) string { return "g" + name }

// appendConfig stores rec in configTopic and returns its commit-log
// offset. c.cfg.mu must be held. It does not wait for durability: the
// record is durable, replicated and flushed, with any message stored after
// it, which is all that needs it.
func (c *Core) appendConfig(rec *configRecord) (int64, error) {
	if c.slave.Load() {
		return 0, errSlaveAdmin // a slave's tables follow its master's
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("core: encode a configuration record: %w", err)
	}
	res, err := c.store.Put(&store.Message{Topic: configTopic, BornTimestamp: time.Now().UnixMilli(),
		BornHost: c.host, Body: body, NoWait: true})
	if err != nil {
		return 0, storeError(err)
	}
	c.cfg.appended.Add(1)
	return res.CommitLogOffset, nil
}

// cfgUnlock releases c.cfg.mu, tells of the changes records made while it
// was held, and applies the records that arrived meanwhile.
func (c *Core) cfgUnlock() {
	topics, groups := c.takeNotes()
	c.cfg.mu.Unlock()
	c.tell(topics, groups)
	c.drainConfig()
}

// takeNotes returns and clears the changes applied records made (topic
// names, whether a group changed); c.cfg.mu must be held.
func (c *Core) takeNotes() ([]string, bool) {
	topics, groups := c.cfg.changedTopics, c.cfg.changedGroups
	c.cfg.changedTopics, c.cfg.changedGroups = nil, false
	return topics, groups
}

// tell hands changes to Options.TopicChanged and the state files' writers,
// outside c.cfg.mu.
func (c *Core) tell(topics []string, groups bool) {
	for _, name := range topics {
		c.noteTopic(name)
	}
	if groups {
		c.noteGroups()
	}
}

// configArrived is the store's arrival hook for configTopic: it applies
// the records dispatched, unless c.cfg.mu is held, whose holder then does
// (cfgUnlock). It never blocks on the lock: it runs on the dispatcher,
// which a master's put (holding the lock) may wait for.
func (c *Core) configArrived() {
	c.cfg.pending.Store(true)
	c.drainConfig()
}

func (c *Core) drainConfig() {
	for c.cfg.pending.Load() && c.cfg.mu.TryLock() {
		c.cfg.pending.Store(false)
		c.applyConfigLocked()
		topics, groups := c.takeNotes()
		c.cfg.mu.Unlock()
		c.tell(topics, groups)
	}
}

// catchUpConfig applies every record the store has dispatched and this
// broker has not applied yet, waiting for c.cfg.mu.
func (c *Core) catchUpConfig() {
	c.cfg.mu.Lock()
	c.applyConfigLocked()
	c.cfgUnlock()
}

// applyConfigLocked applies the dispatched records from c.cfg.next on.
// c.cfg.mu must be held.
func (c *Core) applyConfigLocked() {
	if !c.cfg.ready.Load() {
		return // New: the store is being opened; New applies them all after
	}
	st, l := c.store, &c.cfg
	if l.next > 0 && !c.configContinues(st) {
		c.opts.Logger.Warn("broker: the log was cut below configuration records applied here (a replica truncated to its "+
			"new master's, or started over): the records are applied again from the start of the log",
			"appliedUpTo", l.last)
		c.disownConfigLocked()
		l.next, l.last = 0, -1
	}
	for {
		min, max := st.MinOffset(configTopic, 0), st.MaxOffset(configTopic, 0)
		if l.next < min {
			l.next = min // retention removed them (the tables hold their effect)
		}
		if l.next >= max {
			return
		}
		if cap(l.scratch) == 0 {
			l.scratch = make([]store.QueueEntry, 0, 64)
		}
		ents, err := st.ReadEntries(configTopic, 0, l.next, l.scratch[:0])
		if err != nil {
			if errors.Is(err, store.ErrOffsetOutOfRange) {
				continue // retention moved the queue's start: take it again
			}
			if errors.Is(err, store.ErrClosed) {
				return // Shutdown: the next start applies them
			}
			c.opts.Logger.Error("broker: reading configuration records failed; retried with the next arrival", "offset", l.next, "err", err)
			return
		}
		if len(ents) == 0 {
			return
		}
		for _, e := range ents {
			l.next++
			if e.Size <= 0 || e.Size == blankEntrySize {
				continue // a record the log lost, or a pre-fill entry
			}
			c.applyConfigRecord(e.CommitLogOffset)
			l.last = e.CommitLogOffset
		}
	}
}

// configContinues reports whether the queue entry before c.cfg.next is
// still the record last applied (false: the log was cut and grew again, or
// is shorter).
func (c *Core) configContinues(st *store.Store) bool {
	l := &c.cfg
	if l.next > st.MaxOffset(configTopic, 0) {
		return false
	}
	if l.last < 0 || l.next-1 < st.MinOffset(configTopic, 0) {
		return true // nothing to compare with: retention removed it
	}
	var one [1]store.QueueEntry
	ents, err := st.ReadEntries(configTopic, 0, l.next-1, one[:0])
	if err != nil || len(ents) == 0 {
		return errors.Is(err, store.ErrOffsetOutOfRange)
	}
	return ents[0].CommitLogOffset == l.last
}

// disownConfigLocked forgets which entries records set, and the
// tombstones.
func (c *Core) disownConfigLocked() {
	c.topics.disown()
	c.groups.disown()
	clear(c.cfg.deleted)
}

// applyConfigRecord applies the record at a commit-log offset.
func (c *Core) applyConfigRecord(off int64) {
	v, err := c.store.ReadMessage(off)
	if err != nil {
		c.opts.Logger.Warn("broker: a configuration record cannot be read; skipped", "offset", off, "err", err)
		return
	}
	var rec configRecord
	mv, err := message.Decode(v.Bytes(), false)
	if err == nil {
		err = json.Unmarshal(mv.Body(), &rec)
	}
	v.Release()
	if err != nil {
		c.opts.Logger.Warn("broker: a configuration record cannot be decoded; skipped", "offset", off, "err", err)
		return
	}
	if c.applyRecord(&rec, off) {
		c.cfg.applied.Add(1)
	}
}

// applyRecord applies one record set at off, unless the name changed later
// here; it reports whether the table changed. c.cfg.mu must be held.
func (c *Core) applyRecord(rec *configRecord, off int64) bool {
	l := &c.cfg
	switch rec.Op {
	case opTopic:
		if rec.Topic == nil || rec.Topic.TopicName != rec.Name || isSystemTopic(rec.Name) {
			return false
		}
		if e := c.topics.lookup(rec.Name); (e != nil && e.logOff.Load() >= off) || c.deletedAt(topicKey(rec.Name)) >= off {
			return false
		}
		delete(l.deleted, topicKey(rec.Name))
		if _, changed := c.topics.putAt(*rec.Topic, off); changed {
			l.changedTopics = append(l.changedTopics, rec.Name)
			return true
		}
	case opDeleteTopic:
		if isSystemTopic(rec.Name) {
			return false
		}
		e := c.topics.lookup(rec.Name)
		if (e != nil && e.logOff.Load() >= off) || c.deletedAt(topicKey(rec.Name)) >= off {
			return false
		}
		c.tombstone(topicKey(rec.Name), off)
		if c.topics.remove(rec.Name) {
			l.changedTopics = append(l.changedTopics, rec.Name)
			return true
		}
	case opGroup:
		if rec.Group == nil || rec.Group.GroupName != rec.Name {
			return false
		}
		if c.groups.logOff(rec.Name) >= off || c.deletedAt(groupKey(rec.Name)) >= off {
			return false
		}
		delete(l.deleted, groupKey(rec.Name))
		if c.groups.putAt(*rec.Group, off) {
			l.changedGroups = true
			return true
		}
	case opDeleteGroup:
		if c.groups.logOff(rec.Name) >= off || c.deletedAt(groupKey(rec.Name)) >= off {
			return false
		}
		c.tombstone(groupKey(rec.Name), off)
		if c.groups.remove(rec.Name) {
			l.changedGroups = true
			return true
		}
	default:
		c.opts.Logger.Warn("broker: a configuration record of an unknown kind; skipped (written by a newer broker?)",
			"offset", off, "op", rec.Op)
	}
	return false
}

// deletedAt returns the offset of the record that deleted a name, -1 when
// no tombstone names it. c.cfg.mu must be held.
func (c *Core) deletedAt(key string) int64 {
	if off, ok := c.cfg.deleted[key]; ok {
		return off
	}
	return -1
}

// tombstone records the deletion of a name by the record at off.
func (c *Core) tombstone(key string, off int64) {
	if c.cfg.deleted == nil {
		c.cfg.deleted = make(map[string]int64)
	}
	c.cfg.deleted[key] = off
}

// setTopic creates or replaces a topic's configuration on a master: the
// record first, then the table (ifAbsent: only when the table lacks it).
// It returns the topic's entry and whether the table changed, and tells
// Options.TopicChanged and topics.json's writer of a change.
func (c *Core) setTopic(cfg protocol.TopicConfig, ifAbsent bool) (*topicEntry, bool, error) {
	if old := c.topics.lookup(cfg.TopicName); old != nil && ifAbsent {
		return old, false, nil // without the lock: a heartbeat's retry topic, every time
	}
	c.cfg.mu.Lock()
	e, changed, err := c.setTopicLocked(cfg, ifAbsent)
	c.cfgUnlock()
	if changed {
		c.noteTopic(cfg.TopicName)
	}
	return e, changed, err
}

// setTopicLocked is setTopic without the notice; c.cfg.mu must be held.
func (c *Core) setTopicLocked(cfg protocol.TopicConfig, ifAbsent bool) (*topicEntry, bool, error) {
	if old := c.topics.lookup(cfg.TopicName); old != nil && (ifAbsent || sameTopicConfig(&old.cfg, &cfg)) {
		return old, false, nil
	}
	off, err := c.appendConfig(&configRecord{Op: opTopic, Name: cfg.TopicName, Topic: &cfg})
	if err != nil {
		return nil, false, err
	}
	delete(c.cfg.deleted, topicKey(cfg.TopicName))
	e, _ := c.topics.putAt(cfg, off)
	return e, true, nil
}

// deleteTopicConfig deletes a topic from the table of a master (the record
// first) and reports whether it was there. The caller tells
// Options.TopicChanged and topics.json's writer.
func (c *Core) deleteTopicConfig(name string) (bool, error) {
	c.cfg.mu.Lock()
	defer c.cfgUnlock()
	if c.topics.lookup(name) == nil {
		return false, nil
	}
	off, err := c.appendConfig(&configRecord{Op: opDeleteTopic, Name: name})
	if err != nil {
		return false, err
	}
	c.tombstone(topicKey(name), off)
	return c.topics.remove(name), nil
}

// setGroup creates or replaces a subscription group's configuration on a
// master (ifAbsent: only when the table lacks it); it returns the group's
// configuration and whether the table changed. The caller has
// subscriptionGroup.json written (groupsChanged).
func (c *Core) setGroup(cfg protocol.SubscriptionGroupConfig, ifAbsent bool) (*protocol.SubscriptionGroupConfig, bool, error) {
	if old := c.groups.get([]byte(cfg.GroupName)); old != nil && ifAbsent {
		return old, false, nil // without the lock: a heartbeat's group, every time
	}
	c.cfg.mu.Lock()
	defer c.cfgUnlock()
	if old := c.groups.get([]byte(cfg.GroupName)); old != nil && (ifAbsent || sameGroupConfig(old, &cfg)) {
		return old, false, nil
	}
	off, err := c.appendConfig(&configRecord{Op: opGroup, Name: cfg.GroupName, Group: &cfg})
	if err != nil {
		return nil, false, err
	}
	delete(c.cfg.deleted, groupKey(cfg.GroupName))
	c.groups.putAt(cfg, off)
	return c.groups.get([]byte(cfg.GroupName)), true, nil
}

// deleteGroupConfig deletes a subscription group from the table of a
// master (the record first) and reports whether it was there.
func (c *Core) deleteGroupConfig(name string) (bool, error) {
	c.cfg.mu.Lock()
	defer c.cfgUnlock()
	if c.groups.get([]byte(name)) == nil {
		return false, nil
	}
	off, err := c.appendConfig(&configRecord{Op: opDeleteGroup, Name: name})
	if err != nil {
		return false, err
	}
	c.tombstone(groupKey(name), off)
	return c.groups.remove(name), nil
}

// noteTopic tells Options.TopicChanged and topics.json's writer of a
// change, once New has created the writer (New writes and registers the
// whole table itself).
func (c *Core) noteTopic(name string) {
	if c.cfg.live.Load() {
		c.topicChanged(name, false)
	}
}

// noteGroups has subscriptionGroup.json written soon (once New has created
// the writer).
func (c *Core) noteGroups() {
	if c.cfg.live.Load() {
		c.groupsChanged(false)
	}
}

// ConfigLogStats are the counters of the configuration records: appended
// here (as a master) and applied here (changes a record made to the
// tables).
type ConfigLogStats struct{ Appended, Applied int64 }

// ConfigLogStats returns the counters of the configuration records.
func (rp Replication) ConfigLogStats() ConfigLogStats {
	c := rp.c
	return ConfigLogStats{Appended: c.cfg.appended.Load(), Applied: c.cfg.applied.Load()}
}
