package broker

import (
	"path/filepath"
	"sync"

	"github.com/apogeemq/apogee/broker/pop"
	"github.com/apogeemq/apogee/store"
)

// popStateFileName is the POP manager's state file under DataDir/config.
const popStateFileName = "popState.json"

// popHost is the broker's side of the POP manager (pop.Host): the store's
// queues, the offset table, the group's dead-letter topic and
// config/popState.json. The manager calls it with its mutex held; nothing
// here calls back into the manager.
type popHost struct {
	b     *Broker
	path  string
	reads sync.Pool // *store.GetResult
}

func newPopManager(b *Broker, cfgDir string) *pop.Manager {
	h := &popHost{b: b, path: filepath.Join(cfgDir, popStateFileName)}
	return pop.New(h, pop.Config{FlushInterval: b.opts.ProgressFlushInterval, Logger: b.opts.Logger})
}

func (h *popHost) MinOffset(topic string, queue int32) int64 {
	return h.b.store.MinOffset(topic, queue)
}
func (h *popHost) MaxOffset(topic string, queue int32) int64 {
	return h.b.store.MaxOffset(topic, queue)
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
	if err := h.b.store.Get(topic, queue, offset, max, maxBytes, f, res); err != nil {
		return res.Status, res.NextOffset, err
	}
	for i := range res.Messages {
		fn(res.Messages[i].Bytes())
	}
	return res.Status, res.NextOffset, nil
}

func (h *popHost) CommittedOffset(group, topic string, queue int32) (int64, bool) {
	return h.b.offsets.query([]byte(topic), []byte(group), queue)
}

func (h *popHost) CommitOffset(group, topic string, queue int32, offset int64) {
	h.b.offsets.commit([]byte(topic), []byte(group), queue, offset)
}

func (h *popHost) DeadLetterTopic(group string) (string, error) {
	t, err := h.b.ensureGroupTopic(dlqTopic(group), dlqQueues)
	if err != nil {
		return "", err
	}
	return t.name, nil
}

// Put stores m without waiting for a flush (m.NoWait), as a dead letter of
// the send path does, and counts it as an inner put.
func (h *popHost) Put(m store.Message) error {
	m.NoWait = true
	if _, err := h.b.store.PutBatch([]store.Message{m}, nil); err != nil {
		return err
	}
	h.b.stats.innerPuts.Add(1)
	return nil
}

// LoadState reads popState.json, or its previous version (loadStateFile).
func (h *popHost) LoadState(parse func([]byte) error) (bool, error) {
	_, found, _, err := loadStateFile(h.path, h.b.opts.Logger, func(data []byte) (struct{}, error) {
		return struct{}{}, parse(data)
	})
	return found, err
}

// WriteState writes popState.json through Options.WriteConfigFile; a
// failure is counted in configPersistErrors.
func (h *popHost) WriteState(data []byte) error {
	if err := h.b.opts.WriteConfigFile(h.path, data); err != nil {
		h.b.stats.persistErrors.Add(1)
		return err
	}
	return nil
}
