package broker

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// maxOffsetQueueID bounds the queue ids offsets are kept for, so that a
// client's bytes cannot make the table allocate without limit.
const maxOffsetQueueID = 1 << 16

// offsetManager owns committed consumer offsets and
// config/consumerOffset.json ({"offsetTable":{"topic@group":{"0":12}}}).
// Offsets are persisted every OffsetFlushInterval and at Shutdown.
type offsetManager struct {
	path  string
	write func(string, []byte) error
	log   *slog.Logger

	mu      sync.Mutex
	m       map[string]map[string][]int64 // topic -> group -> offset by queue id; -1 = none
	changes uint64                        // bumped by every change
	version protocol.DataVersion

	persistMu sync.Mutex // serialises file writes; taken before mu
	persisted uint64     // changes covered by the last successful write (under persistMu)
}

func newOffsetManager(path string, write func(string, []byte) error, log *slog.Logger) *offsetManager {
	return &offsetManager{path: path, write: write, log: log, m: make(map[string]map[string][]int64)}
}

// load reads consumerOffset.json (or its previous version, see
// loadStateFile) if it exists.
func (o *offsetManager) load() error {
	w, found, fellBack, err := loadStateFile(o.path, o.log, func(b []byte) (protocol.ConsumerOffsetSerializeWrapper, error) {
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
