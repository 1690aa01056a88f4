package core

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/core/stats"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// Special topic names and limits (RocketMQ's TopicValidator and MixAll).
const (
	topicAutoCreateKey = "TBW102"
	retryTopicPrefix   = "%RETRY%"
	dlqTopicPrefix     = "%DLQ%"
	systemTopicPrefix  = "rmq_sys_"
	replyTopicSuffix   = "_REPLY_TOPIC"
	maxTopicLength     = 127
	filterSingleTag    = "SINGLE_TAG"
	filterMultiTag     = "MULTI_TAG"
)

// notAllowedSendTopics are the system topics producers may not write
// (RocketMQ's NOT_ALLOWED_SEND_TOPIC_SET): NO_PERMISSION (16).
var notAllowedSendTopics = [...]string{
	"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
	"TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "SCHEDULE_TOPIC_XXXX_V2",
	"rmq_sys_wheel_timer", configTopic,
}

// systemTopics are RocketMQ's SYSTEM_TOPIC_SET: admin requests may not create them.
var systemTopics = [...]string{
	topicAutoCreateKey, "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
	"RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
	"SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "SCHEDULE_TOPIC_XXXX_V2",
}

func isNotAllowedSendTopic(t []byte) bool {
	for _, s := range notAllowedSendTopics {
		if string(t) == s {
			return true
		}
	}
	return false
}

func isSystemTopic(t string) bool {
	for _, s := range systemTopics {
		if t == s {
			return true
		}
	}
	return strings.HasPrefix(t, systemTopicPrefix)
}

// topicEntry is one topic's configuration. Entries are immutable once
// published (an update publishes a new entry), except the round-robin counter
// used for sends with a negative queue id and logOff.
type topicEntry struct {
	name    string
	cfg     protocol.TopicConfig
	typ     msgType // the message.type attribute, when hasType
	hasType bool
	mixed   bool // message.type=MIXED: every type
	rr      atomic.Uint32
	// logOff is the commit-log offset of the configuration record that set
	// the entry (configlog.go), -1 when no record of this log did (the
	// state file, the periodic slave sync, the system topics). Changed
	// under the core's cfg.mu only.
	logOff atomic.Int64
	// puts are the topic's put statistics, resolved by its first send
	// (putCounter): a send counts without looking the topic's items up.
	puts atomic.Pointer[stats.PutCounter]
}

// Topic attribute keys (RocketMQ 5): the admin request writes "+key=value"
// to add; the stored configuration has the key alone.
const attrMessageType = "message.type"

func newTopicEntry(cfg protocol.TopicConfig) *topicEntry {
	e := &topicEntry{name: cfg.TopicName, cfg: cfg}
	e.logOff.Store(-1)
	v, ok := cfg.Attributes[attrMessageType]
	if !ok {
		v, ok = cfg.Attributes["+"+attrMessageType]
	}
	if ok {
		e.typ, e.hasType = parseMsgType(v)
		e.mixed = strings.EqualFold(v, "MIXED")
	}
	return e
}

// parseMsgType parses a message.type attribute value; MIXED and unknown
// values mean no restriction.
func parseMsgType(v string) (msgType, bool) {
	for i, n := range msgTypeNames {
		if strings.EqualFold(v, n) {
			return msgType(i), true
		}
	}
	return 0, false
}

// msgType returns the topic's message type when it declares one.
func (e *topicEntry) msgType() (msgType, bool) { return e.typ, e.hasType }

// accepts reports whether the topic takes a message of type t by RocketMQ
// 5's rule (its proxy's DefaultTopicMessageTypeValidator against
// TopicConfig.getTopicMessageType): a topic without message.type is NORMAL;
// MIXED takes every type; any other takes its own type alone.
func (e *topicEntry) accepts(t MessageType) bool {
	switch {
	case e.mixed:
		return true
	case e.hasType:
		return e.typ == t
	}
	return t == MessageNormal
}

func (e *topicEntry) writable() bool { return e.cfg.Perm&protocol.PermWrite != 0 }
func (e *topicEntry) readable() bool { return e.cfg.Perm&protocol.PermRead != 0 }

// queueLimit is the number of valid queue ids (RocketMQ checks sends against
// max(write, read)).
func (e *topicEntry) queueLimit() int32 { return max(e.cfg.WriteQueueNums, e.cfg.ReadQueueNums) }

// topicManager owns the topic table and config/topics.json.
//
// Creating, changing or deleting a topic is O(1) under mu (a map update and
// a change count); the file is written whole by the core's background
// stateWriter (persist), coalescing the changes made meanwhile.
type topicManager struct {
	fs   vfs.FS // load reads the file through it (Options.FS)
	path string
	// write writes the file (Options.WriteConfigFile); log receives the
	// fallback WARN of load.
	write func(string, []byte) error
	log   *slog.Logger

	mu      sync.RWMutex
	m       map[string]*topicEntry
	version protocol.DataVersion
	changes uint64 // bumped by every change of m

	persistMu sync.Mutex // serialises file writes; taken before mu
	persisted uint64     // changes covered by the last successful write (under persistMu)
}

func newTopicManager(fsys vfs.FS, path string, write func(string, []byte) error, log *slog.Logger) *topicManager {
	return &topicManager{fs: fsys, path: path, write: write, log: log, m: make(map[string]*topicEntry)}
}

// load reads topics.json (or its previous version, see loadStateFile) if
// it exists.
func (t *topicManager) load() error {
	w, found, fellBack, err := loadStateFile(t.fs, t.path, t.log, func(b []byte) (protocol.TopicConfigSerializeWrapper, error) {
		var w protocol.TopicConfigSerializeWrapper
		return w, w.Decode(b)
	})
	if err != nil || !found {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, c := range w.TopicConfigTable {
		if c == nil {
			continue
		}
		cfg := *c
		if cfg.TopicName == "" {
			cfg.TopicName = name
		}
		t.m[cfg.TopicName] = newTopicEntry(cfg)
	}
	t.version = w.DataVersion
	if fellBack {
		t.changes++ // write topics.json again
	}
	return nil
}

// get returns the topic's entry or nil. It does not allocate.
func (t *topicManager) get(name []byte) *topicEntry {
	t.mu.RLock()
	e := t.m[string(name)]
	t.mu.RUnlock()
	return e
}

func (t *topicManager) lookup(name string) *topicEntry {
	t.mu.RLock()
	e := t.m[name]
	t.mu.RUnlock()
	return e
}

// count returns the number of topics.
func (t *topicManager) count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.m)
}

// bump records a change: it advances the data version and the change
// count; t.mu must be held.
func (t *topicManager) bump() {
	t.version.Timestamp = time.Now().UnixMilli()
	t.version.Counter++
	t.changes++
}

// put creates or replaces a topic's configuration and reports whether the
// table changed.
func (t *topicManager) put(cfg protocol.TopicConfig) (*topicEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.m[cfg.TopicName]; old != nil && sameTopicConfig(&old.cfg, &cfg) {
		return old, false
	}
	e := newTopicEntry(cfg)
	t.m[cfg.TopicName] = e
	t.bump()
	return e, true
}

// putAt creates or replaces a topic's configuration as the configuration
// record at off sets it and reports whether the configuration changed (the
// entry's logOff is set either way).
func (t *topicManager) putAt(cfg protocol.TopicConfig, off int64) (*topicEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.m[cfg.TopicName]; old != nil && sameTopicConfig(&old.cfg, &cfg) {
		old.logOff.Store(off)
		return old, false
	}
	e := newTopicEntry(cfg)
	e.logOff.Store(off)
	t.m[cfg.TopicName] = e
	t.bump()
	return e, true
}

// disown marks every entry as set by no record (configlog.go).
func (t *topicManager) disown() {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, e := range t.m {
		e.logOff.Store(-1)
	}
}

// createIfAbsent adds cfg unless the topic exists; it returns the topic's
// entry and whether it was created.
func (t *topicManager) createIfAbsent(cfg protocol.TopicConfig) (*topicEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.m[cfg.TopicName]; old != nil {
		return old, false
	}
	e := newTopicEntry(cfg)
	t.m[cfg.TopicName] = e
	t.bump()
	return e, true
}

// remove deletes a topic and reports whether it existed.
func (t *topicManager) remove(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[name]; !ok {
		return false
	}
	delete(t.m, name)
	t.bump()
	return true
}

// snapshot returns copies of every configuration, in no particular order,
// and the data version. It is O(topics): for whole-table operations only
// (the file, GET_ALL_TOPIC_CONFIG, full registrations), never per topic.
func (t *topicManager) snapshot() ([]protocol.TopicConfig, protocol.DataVersion) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]protocol.TopicConfig, 0, len(t.m))
	for _, e := range t.m {
		out = append(out, e.cfg)
	}
	return out, t.version
}

// wrapper returns the table in topics.json's (and GET_ALL_TOPIC_CONFIG's) shape.
func (t *topicManager) wrapper() protocol.TopicConfigSerializeWrapper {
	cfgs, v := t.snapshot()
	w := protocol.TopicConfigSerializeWrapper{TopicConfigTable: make(map[string]*protocol.TopicConfig, len(cfgs)), DataVersion: v}
	for i := range cfgs {
		w.TopicConfigTable[cfgs[i].TopicName] = &cfgs[i]
	}
	return w
}

// encode returns the table as topics.json JSON.
func (t *topicManager) encode() ([]byte, error) {
	w := t.wrapper()
	return w.Encode()
}

// persist writes topics.json if the table changed since the last
// successful write, or always with force.
func (t *topicManager) persist(force bool) error {
	t.persistMu.Lock()
	defer t.persistMu.Unlock()
	t.mu.RLock()
	changes := t.changes
	t.mu.RUnlock()
	if changes == t.persisted && !force {
		return nil
	}
	b, err := t.encode() // covers at least changes
	if err != nil {
		return fmt.Errorf("broker: encode topics: %w", err)
	}
	if err := t.write(t.path, b); err != nil {
		return err
	}
	t.persisted = changes
	return nil
}

func sameTopicConfig(a, b *protocol.TopicConfig) bool {
	if a.TopicName != b.TopicName || a.ReadQueueNums != b.ReadQueueNums || a.WriteQueueNums != b.WriteQueueNums ||
		a.Perm != b.Perm || a.TopicFilterType != b.TopicFilterType || a.TopicSysFlag != b.TopicSysFlag ||
		a.Order != b.Order || len(a.Attributes) != len(b.Attributes) {
		return false
	}
	for k, v := range a.Attributes {
		if bv, ok := b.Attributes[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// newTopicConfig is a topic configuration with RocketMQ's defaults.
func newTopicConfig(name string, queues int32, perm int32) protocol.TopicConfig {
	return protocol.TopicConfig{
		TopicName: name, ReadQueueNums: queues, WriteQueueNums: queues, Perm: perm,
		TopicFilterType: filterSingleTag,
	}
}

// TopicRequest is a topic's configuration as an admin creates or changes it
// (UPDATE_AND_CREATE_TOPIC, 17).
type TopicRequest struct {
	Topic                         string
	ReadQueueNums, WriteQueueNums int32
	Perm                          int32  // protocol.Perm* bits
	TopicFilterType               string // SINGLE_TAG (default) or MULTI_TAG
	TopicSysFlag                  int32
	Order                         bool
	// Attributes are RocketMQ 5's attribute changes, applied to the topic's
	// current attributes: "+key=value" adds or replaces, "-key" removes,
	// comma-separated. The one key is message.type.
	Attributes string
}

// CreateTopic creates or changes a topic (UPDATE_AND_CREATE_TOPIC, 17). It
// refuses system topics and the cluster's and broker's names, and returns
// once topics.json holds the change (a failed write is SYSTEM_ERROR: the
// topic is in the table, not on disk).
func (a Admin) CreateTopic(r *TopicRequest) error {
	c := a.c
	if c.slave.Load() {
		return errSlaveAdmin
	}
	if remark, ok := checkTopicName([]byte(r.Topic)); !ok {
		return newError(ReasonTopicIllegal, remark)
	}
	if isSystemTopic(r.Topic) {
		return newError(ReasonTopicReserved, "The topic["+r.Topic+"] is conflict with system topic.")
	}
	if r.Topic == c.opts.ClusterName || r.Topic == c.opts.BrokerName {
		return newError(ReasonTopicReserved, "the topic["+r.Topic+"] is conflict with system reserved words.")
	}
	if r.ReadQueueNums <= 0 || r.WriteQueueNums <= 0 || r.ReadQueueNums > MaxQueues || r.WriteQueueNums > MaxQueues {
		return newError(ReasonInvalidParameter, fmt.Sprintf("queue numbers must be in 1..%d, got read %d write %d",
			MaxQueues, r.ReadQueueNums, r.WriteQueueNums))
	}
	if r.Perm&^(protocol.PermRead|protocol.PermWrite|protocol.PermInherit|protocol.PermPriority) != 0 {
		return newError(ReasonInvalidParameter, fmt.Sprintf("invalid perm %d", r.Perm))
	}
	filterType := r.TopicFilterType
	switch filterType {
	case "", filterSingleTag:
		filterType = filterSingleTag
	case filterMultiTag:
	default:
		return newError(ReasonInvalidParameter, "invalid topicFilterType "+filterType)
	}
	cfg := protocol.TopicConfig{
		TopicName: r.Topic, ReadQueueNums: r.ReadQueueNums, WriteQueueNums: r.WriteQueueNums, Perm: r.Perm,
		TopicFilterType: filterType, TopicSysFlag: r.TopicSysFlag, Order: r.Order,
	}
	var old map[string]string
	if e := c.topics.lookup(r.Topic); e != nil {
		old = e.cfg.Attributes
	}
	attrs, err := applyTopicAttributes(old, r.Attributes)
	if err != nil {
		return wrapError(ReasonInvalidParameter, err.Error(), err)
	}
	cfg.Attributes = attrs
	_, changed, err := c.setTopic(cfg, false)
	if err != nil {
		return err
	}
	if changed { // setTopic told Options.TopicChanged; topics.json must hold it before the answer
		if err := c.topicWriter.sync(); err != nil {
			return wrapError(ReasonPersistFailed, "the topic is created but could not be persisted: "+err.Error(), err)
		}
	}
	return nil
}

// DeleteTopic deletes a topic (DELETE_TOPIC_IN_BROKER, 215): its
// configuration, consume queues and committed offsets go (its records stay
// in the commit log until retention removes them). System topics are
// refused.
func (a Admin) DeleteTopic(name string) error {
	c := a.c
	if c.slave.Load() {
		return errSlaveAdmin
	}
	if remark, ok := checkTopicName([]byte(name)); !ok {
		return newError(ReasonTopicIllegal, remark)
	}
	if isSystemTopic(name) {
		return newError(ReasonTopicReserved, "The topic["+name+"] is conflict with system topic.")
	}
	removed, err := c.deleteTopicConfig(name)
	if err != nil {
		return err // nothing deleted: the record of the deletion could not be stored
	}
	var errs []string
	if err := c.store.DeleteTopic(name); err != nil {
		errs = append(errs, err.Error())
	}
	c.offsets.removeTopic(name)
	if err := c.offsets.persist(false); err != nil {
		c.stats.persistErrors.Add(1)
		errs = append(errs, err.Error())
	}
	if removed {
		// The topic leaves this broker's routes (Options.TopicChanged) and
		// topics.json.
		if err := c.topicChanged(name, true); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return newError(ReasonSystemError, fmt.Sprintf("delete topic %s: %v", name, errs))
	}
	return nil
}

// TopicConfig returns a topic's current configuration.
func (c *Core) TopicConfig(name string) (protocol.TopicConfig, bool) {
	if e := c.topics.lookup(name); e != nil {
		return e.cfg, true
	}
	return protocol.TopicConfig{}, false
}

// Topics returns every topic's configuration, in no particular order, and
// the table's data version. It is O(topics): for whole-table operations
// (GET_ALL_TOPIC_CONFIG, a full registration), never per topic.
func (a Admin) Topics() ([]protocol.TopicConfig, protocol.DataVersion) { return a.c.topics.snapshot() }

// TopicTable returns the topic table and its version (what
// GET_ALL_TOPIC_CONFIG answers). O(topics).
func (rp Replication) TopicTable() TopicTable {
	c := rp.c
	w := c.topics.wrapper()
	return TopicTable{Topics: w.TopicConfigTable, Version: w.DataVersion}
}

// ensureGroupTopic returns the entry of a group's %RETRY% or %DLQ% topic,
// creating it with one read-write queue (RocketMQ's
// createTopicInSendMessageBackMethod). A slave does not create it
// (ReasonSlaveCreate: its tables follow its master's).
func (c *Core) ensureGroupTopic(name string, queues int32) (*topicEntry, error) {
	if e := c.topics.lookup(name); e != nil {
		return e, nil
	}
	if len(name) > message.MaxTopicLength {
		return nil, fmt.Errorf("topic[%s] is longer than %d bytes", name, message.MaxTopicLength)
	}
	if c.slave.Load() {
		return nil, errSlaveCreateTopic(name)
	}
	e, created, err := c.setTopic(newTopicConfig(name, queues, protocol.PermRead|protocol.PermWrite), true)
	if err != nil {
		return nil, err
	}
	if created {
		c.opts.Logger.Info("broker: topic created for a consumer group", "topic", name)
	}
	return e, nil
}

// topicName returns a topic's name as a string, without allocating when the
// topic is in the topic table.
func (c *Core) topicName(t []byte) string {
	if e := c.topics.get(t); e != nil {
		return e.name
	}
	return string(t)
}

// applyTopicAttributes applies RocketMQ 5's attribute changes ("+key=value"
// adds or replaces, "-key" removes, comma-separated) to a topic's current
// attributes. The supported keys are message.type (NORMAL, FIFO, DELAY, PRIORITY,
// TRANSACTION, LITE or MIXED) and lite.topic.expiration (lite.go).
func applyTopicAttributes(cur map[string]string, change string) (map[string]string, error) {
	out := make(map[string]string, len(cur)+1)
	for k, v := range cur {
		out[k] = v
	}
	for _, item := range strings.Split(change, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		switch item[0] {
		case '+':
			k, v, ok := strings.Cut(item[1:], "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("attribute %q: want +key=value", item)
			}
			if k == attrLiteTopicExpiration {
				if err := checkLiteTopicExpiration(v); err != nil {
					return nil, err
				}
				out[k] = v
				continue
			}
			if k != attrMessageType {
				return nil, fmt.Errorf("unsupported topic attribute %q", k)
			}
			if _, ok := parseMsgType(v); !ok && !strings.EqualFold(v, "MIXED") {
				return nil, fmt.Errorf("message.type %q: want NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY, LITE or MIXED", v)
			}
			out[k] = strings.ToUpper(v)
		case '-':
			delete(out, item[1:])
		default:
			return nil, fmt.Errorf("attribute %q: want +key=value or -key", item)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
