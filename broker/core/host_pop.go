package core

import (
	"path/filepath"
	"sync"

	"github.com/apogeemq/apogee/broker/pop"
	"github.com/apogeemq/apogee/store"
)

// PopStateFile is the POP manager's state file under DataDir/config.
const PopStateFile = "popState.json"

// popHost is the core's side of the POP manager (pop.Host): the store's
// queues, the offset table, the group's dead-letter topic and
// config/popState.json. The manager calls it with its mutex held; nothing
// here calls back into the manager.
type popHost struct {
	c     *Core
	path  string
	reads sync.Pool // *store.GetResult
}

func newPopManager(c *Core, cfgDir string) *pop.Manager {
	h := &popHost{c: c, path: filepath.Join(cfgDir, PopStateFile)}
	return pop.New(h, pop.Config{FlushInterval: c.opts.ProgressFlushInterval, Logger: c.opts.Logger})
}

func (h *popHost) MinOffset(topic string, queue int32) int64 {
	return h.c.store.MinOffset(topic, queue)
}
func (h *popHost) MaxOffset(topic string, queue int32) int64 {
	return h.c.store.MaxOffset(topic, queue)
}

// Read runs store.Get and passes its views to fn; they are released before
// it returns.
func (h *popHost) Read(topic string, queue int32, offset int64, max, maxBytes int, f store.Filter,
	fn func(rec []byte)) (store.GetStatus, int64, error) {
	res, _ := h.reads.Get().(*store.GetResult)
	if res == nil {
		res = new(store.GetResult)
	}
	defer func() {
		res.Release()
		h.reads.Put(res)
	}()
	if err := h.c.store.Get(topic, queue, offset, max, maxBytes, f, res); err != nil {
		return res.Status, res.NextOffset, err
	}
	for i := range res.Messages {
		fn(res.Messages[i].Bytes())
	}
	return res.Status, res.NextOffset, nil
}

func (h *popHost) CommittedOffset(group, topic string, queue int32) (int64, bool) {
	return h.c.offsets.query([]byte(topic), []byte(group), queue)
}

func (h *popHost) CommitOffset(group, topic string, queue int32, offset int64) {
	h.c.offsets.commit([]byte(topic), []byte(group), queue, offset)
}

func (h *popHost) DeadLetterTopic(group string) (string, error) {
	t, err := h.c.ensureGroupTopic(dlqTopic(group), dlqQueues)
	if err != nil {
		return "", err
	}
	return t.name, nil
}

// Put stores m without waiting for a flush (m.NoWait), as a dead letter of
// the send path does, and counts it as an inner put.
func (h *popHost) Put(m store.Message) error {
	m.NoWait = true
	if _, err := h.c.store.PutBatch([]store.Message{m}, nil); err != nil {
		return err
	}
	h.c.stats.innerPuts.Add(1)
	return nil
}

// LoadState reads popState.json, or its previous version (loadStateFile).
func (h *popHost) LoadState(parse func([]byte) error) (bool, error) {
	_, found, _, err := loadStateFile(h.c.opts.FS, h.path, h.c.opts.Logger, func(data []byte) (struct{}, error) {
		return struct{}{}, parse(data)
	})
	return found, err
}

// WriteState writes popState.json through Options.WriteConfigFile; a
// failure is counted in configPersistErrors.
func (h *popHost) WriteState(data []byte) error {
	if err := h.c.opts.WriteConfigFile(h.path, data); err != nil {
		h.c.stats.persistErrors.Add(1)
		return err
	}
	return nil
}
