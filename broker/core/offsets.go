package core

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// maxOffsetQueueID bounds the queue ids offsets are kept for, so that a
// client's bytes cannot make the table allocate without limit.
const maxOffsetQueueID = 1 << 16

// offsetManager owns committed consumer offsets and
// config/consumerOffset.json ({"offsetTable":{"topic@group":{"0":12}}}).
// Offsets are persisted every OffsetFlushInterval and at Shutdown.
type offsetManager struct {
	fs    vfs.FS // load reads the file through it (Options.FS)
	path  string
	write func(string, []byte) error
	log   *slog.Logger

	mu      sync.Mutex
	m       map[string]map[string][]int64 // topic -> group -> offset by queue id; -1 = none
	changes uint64                        // bumped by every change
	version protocol.DataVersion
	// pending, on a slave, holds the offsets clients committed on it that
	// its master has not reached yet (see SyncConsumerOffsets).
	pending map[pendingKey]int64

	persistMu sync.Mutex // serialises file writes; taken before mu
	persisted uint64     // changes covered by the last successful write (under persistMu)
}

func newOffsetManager(fsys vfs.FS, path string, write func(string, []byte) error, log *slog.Logger) *offsetManager {
	return &offsetManager{fs: fsys, path: path, write: write, log: log, m: make(map[string]map[string][]int64)}
}

// load reads consumerOffset.json (or its previous version, see
// loadStateFile) if it exists.
func (o *offsetManager) load() error {
	w, found, fellBack, err := loadStateFile(o.fs, o.path, o.log, func(b []byte) (protocol.ConsumerOffsetSerializeWrapper, error) {
		var w protocol.ConsumerOffsetSerializeWrapper
		return w, w.Decode(b)
	})
	if err != nil || !found {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, qs := range w.OffsetTable {
		topic, group, ok := protocol.SplitOffsetTableKey(key)
		if !ok || topic == "" || group == "" {
			continue
		}
		for q, off := range qs {
			if q < 0 || q >= maxOffsetQueueID {
				continue
			}
			o.setLocked(topic, group, q, off)
		}
	}
	o.version = w.DataVersion
	if !fellBack {
		o.persisted = o.changes // the file holds exactly this
	}
	return nil
}

// setLocked stores an offset; o.mu must be held. It allocates only for a
// new topic, group or higher queue id.
func (o *offsetManager) setLocked(topic, group string, q int32, off int64) {
	groups := o.m[topic]
	if groups == nil {
		groups = make(map[string][]int64)
		o.m[topic] = groups
	}
	qs := groups[group]
	if int(q) >= len(qs) {
		n := make([]int64, int(q)+1)
		copy(n, qs)
		for i := len(qs); i < len(n); i++ {
			n[i] = -1
		}
		qs = n
		groups[group] = qs
	}
	qs[q] = off
	o.changes++
}

// commit stores a consumer's offset. It does not allocate once the
// (topic, group, queue) exists.
func (o *offsetManager) commit(topic, group []byte, q int32, off int64) bool {
	if q < 0 || q >= maxOffsetQueueID || len(topic) == 0 || len(group) == 0 {
		return false
	}
	o.mu.Lock()
	if qs := o.m[string(topic)][string(group)]; int(q) < len(qs) {
		if qs[q] != off {
			qs[q] = off
			o.changes++
		}
		o.mu.Unlock()
		return true
	}
	o.setLocked(string(topic), string(group), q, off)
	o.mu.Unlock()
	return true
}

// query returns a committed offset.
func (o *offsetManager) query(topic, group []byte, q int32) (int64, bool) {
	if q < 0 {
		return 0, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	qs := o.m[string(topic)][string(group)]
	if int(q) >= len(qs) || qs[q] < 0 {
		return 0, false
	}
	return qs[q], true
}

// removeTopic forgets every group's offsets of a topic.
func (o *offsetManager) removeTopic(topic string) {
	o.mu.Lock()
	if _, ok := o.m[topic]; ok {
		delete(o.m, topic)
		o.changes++
	}
	o.mu.Unlock()
}

// encode returns the table as JSON and the change count it covers.
func (o *offsetManager) encode() ([]byte, uint64, error) {
	o.mu.Lock()
	w := o.tableLocked()
	changes := o.changes
	if changes != o.persisted {
		o.version.Timestamp = time.Now().UnixMilli()
		o.version.Counter++
	}
	w.DataVersion = o.version
	o.mu.Unlock()
	b, err := w.Encode()
	return b, changes, err
}

// tableLocked returns the committed offsets in consumerOffset.json's shape
// (without the data version); o.mu must be held.
func (o *offsetManager) tableLocked() protocol.ConsumerOffsetSerializeWrapper {
	w := protocol.ConsumerOffsetSerializeWrapper{OffsetTable: make(map[string]map[int32]int64)}
	for topic, groups := range o.m {
		for group, qs := range groups {
			t := make(map[int32]int64, len(qs))
			for q, off := range qs {
				if off >= 0 {
					t[int32(q)] = off
				}
			}
			if len(t) > 0 {
				w.OffsetTable[protocol.OffsetTableKey(topic, group)] = t
			}
		}
	}
	return w
}

// persist writes consumerOffset.json if anything changed since the last
// successful write (or always when force is set).
func (o *offsetManager) persist(force bool) error {
	o.persistMu.Lock()
	defer o.persistMu.Unlock()
	o.mu.Lock()
	unchanged := o.changes == o.persisted
	o.mu.Unlock()
	if unchanged && !force {
		return nil
	}
	b, changes, err := o.encode()
	if err != nil {
		return fmt.Errorf("broker: encode consumer offsets: %w", err)
	}
	if err := o.write(o.path, b); err != nil {
		return err
	}
	o.mu.Lock()
	o.persisted = changes
	o.mu.Unlock()
	return nil
}

// removeGroup forgets a group's offsets of every topic.
func (o *offsetManager) removeGroup(group string) {
	o.mu.Lock()
	for _, groups := range o.m {
		if _, ok := groups[group]; ok {
			delete(groups, group)
			o.changes++
		}
	}
	o.mu.Unlock()
}

// QueryConsumerOffset returns a group's committed offset of a queue
// (QUERY_CONSUMER_OFFSET, 14). With no committed offset it follows the Java
// broker: offset 0 when the queue's min offset is 0 and its first message
// is still in memory (or the queue is empty), so that a new group reads a
// young queue from its start whatever its consume-from-where;
// QUERY_NOT_FOUND (22) otherwise.
func (c *Core) QueryConsumerOffset(topic, group []byte, queueID int32) (int64, error) {
	if off, ok := c.offsets.query(topic, group, queueID); ok {
		return off, nil
	}
	t := string(topic)
	if c.store.MinOffset(t, queueID) <= 0 && !c.firstMessageOnDisk(t, queueID) {
		return 0, nil
	}
	return 0, newError(ReasonOffsetNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
}

// firstMessageOnDisk reports whether the queue's message at offset 0 is
// further behind the commit log's end than RocketMQ keeps in memory (40% of
// RAM); an empty or unknown queue has none, so it is not.
func (c *Core) firstMessageOnDisk(topic string, queueID int32) bool {
	if c.store.MaxOffset(topic, queueID) == 0 {
		return false
	}
	var res store.GetResult
	if err := c.store.Get(topic, queueID, 0, 1, 0, nil, &res); err != nil || res.Status != store.Found {
		res.Release()
		return false
	}
	defer res.Release()
	v, err := message.Decode(res.Messages[0].Bytes(), false)
	if err != nil {
		return false
	}
	return c.store.WrittenOffset()-v.PhysicalOffset() > c.memWindow
}

// CommittedOffset returns a group's committed offset of a queue, if any
// (no Java fallback: see QueryConsumerOffset).
func (c *Core) CommittedOffset(topic, group string, queueID int32) (int64, bool) {
	return c.offsets.query([]byte(topic), []byte(group), queueID)
}

// UpdateConsumerOffset commits a group's offset of a queue
// (UPDATE_CONSUMER_OFFSET, 15; a pull's commitOffset). It does not allocate
// once the (topic, group, queue) is known; persisted every
// OffsetFlushInterval.
func (c *Core) UpdateConsumerOffset(topic, group []byte, queueID int32, offset int64) error {
	commit := c.offsets.commit
	if c.slave.Load() {
		commit = c.offsets.commitLocal // kept for the master (SyncConsumerOffsets)
	}
	if !commit(topic, group, queueID, offset) {
		return newError(ReasonQueueIllegal, fmt.Sprintf("invalid queueId %d", queueID))
	}
	return nil
}

// MaxOffset returns a queue's max offset: one past its last message
// (GET_MAX_OFFSET, 30).
func (c *Core) MaxOffset(topic string, queueID int32) int64 { return c.store.MaxOffset(topic, queueID) }

// MinOffset returns a queue's min offset: its first message retention kept
// (GET_MIN_OFFSET, 31).
func (c *Core) MinOffset(topic string, queueID int32) int64 { return c.store.MinOffset(topic, queueID) }

// SearchOffset returns the first offset of a queue stored at or after
// timestampMs (SEARCH_OFFSET_BY_TIMESTAMP, 29). On error the offset
// returned is the queue's max offset, where a client that reads the offset
// whatever the answer (the Go client) should go.
func (c *Core) SearchOffset(topic string, queueID int32, timestampMs int64) (int64, error) {
	off, err := c.store.OffsetByTime(topic, queueID, timestampMs)
	if err != nil {
		return c.store.MaxOffset(topic, queueID), wrapError(ReasonSystemError, "search offset by timestamp: "+err.Error(), err)
	}
	return off, nil
}

// EarliestStoreTime returns the store time (ms) of a queue's first message
// (GET_EARLIEST_MSG_STORETIME, 32); -1 when the queue holds none.
func (c *Core) EarliestStoreTime(topic string, queueID int32) int64 {
	if c.store.MaxOffset(topic, queueID) > c.store.MinOffset(topic, queueID) {
		if t, err := c.store.EarliestStoreTime(topic, queueID); err == nil {
			return t
		}
	}
	return -1
}

// ErrNoTopic is returned by ResetConsumerOffset for a topic the broker does
// not have (errors.Is matches by its reason, ReasonResetNoTopic).
var ErrNoTopic = newError(ReasonResetNoTopic, "[reset-offset] reset offset failed, no topic in this broker")

// QueueOffset is a queue id and an offset in it.
type QueueOffset struct {
	QueueID int32
	Offset  int64
}

// ResetConsumerOffset moves a consumer group's committed offsets of a topic
// to the first message stored at or after timestampMs (-1: the end of each
// queue), as RocketMQ's admin resetOffsetByTime does
// (INVOKE_BROKER_TO_RESET_OFFSET, 222): without force an offset only moves
// backwards. queueID < 0 means every queue; offset >= 0 sets that offset
// instead of searching by time (RocketMQ 5's per-queue reset). The new
// offsets are committed at once and pushed (ClientConn.ResetOffset) to the
// group's live members, which drop what they hold of those queues and
// resume from there. It returns the new offsets, sorted by queue id, and
// how many members were told.
func (a Admin) ResetConsumerOffset(topic, group string, timestampMs int64, force bool, queueID int32, offset int64) ([]QueueOffset, int, error) {
	c := a.c
	if c.slave.Load() {
		return nil, 0, errSlaveReset
	}
	t := c.topics.lookup(topic)
	if t == nil {
		return nil, 0, newError(ReasonResetNoTopic, ErrNoTopic.Remark+". topic="+topic)
	}
	var table []QueueOffset
	for q := int32(0); q < max(t.cfg.WriteQueueNums, t.cfg.ReadQueueNums); q++ {
		if queueID >= 0 && q != queueID {
			continue
		}
		target := offset
		switch {
		case offset >= 0:
		case timestampMs == -1:
			target = c.store.MaxOffset(topic, q)
		default:
			var err error
			if target, err = c.store.OffsetByTime(topic, q, timestampMs); err != nil {
				return nil, 0, fmt.Errorf("broker: search offset of %s/%d by time: %w", topic, q, err)
			}
		}
		target = max(target, 0)
		cur, committed := c.offsets.query([]byte(topic), []byte(group), q)
		if committed && !force && target >= cur {
			target = cur
		}
		c.offsets.commit([]byte(topic), []byte(group), q, target)
		table = append(table, QueueOffset{QueueID: q, Offset: target})
	}
	if err := c.offsets.persist(false); err != nil {
		c.stats.persistErrors.Add(1)
		c.opts.Logger.Error("broker: persist consumer offsets failed", "err", err)
	}
	sort.Slice(table, func(i, j int) bool { return table[i].QueueID < table[j].QueueID })
	push := &OffsetReset{Topic: topic, Group: group, Timestamp: timestampMs, Force: force, Offsets: table}
	notified := 0
	for _, cc := range c.clients.memberConns(group) {
		if cc == nil {
			continue
		}
		if err := cc.ResetOffset(push); err == nil {
			notified++
		}
	}
	c.opts.Logger.Info("broker: consumer offsets reset", "topic", topic, "group", group, "timestamp", timestampMs,
		"force", force, "offsets", table, "clientsNotified", notified)
	return table, notified, nil
}
