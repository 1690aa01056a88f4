package core

import (
	"path/filepath"

	"github.com/apogeemq/apogee/broker/internal/reput"
	"github.com/apogeemq/apogee/store"
)

// innerHost is the host of the feature packages that re-store records (the
// delay scheduler and the timer wheel): the store's entry and record reads,
// the core's inner put, topic names and the state files under
// DataDir/config. It implements delay.Host and timerwheel.Host. The store
// is read through c.store at each call: the features are built (and load
// their state) before New opens the store, and start after.
type innerHost struct{ c *Core }

func (h innerHost) ReadEntries(topic string, queueID int32, offset int64, dst []store.QueueEntry) ([]store.QueueEntry, error) {
	return h.c.store.ReadEntries(topic, queueID, offset, dst)
}

func (h innerHost) MinOffset(topic string, queueID int32) int64 {
	return h.c.store.MinOffset(topic, queueID)
}

func (h innerHost) MaxOffset(topic string, queueID int32) int64 {
	return h.c.store.MaxOffset(topic, queueID)
}

func (h innerHost) Records() reput.Records { return &pinnedRecords{c: h.c} }

func (h innerHost) PutInner(msgs []store.Message, res []store.PutResult) ([]store.PutResult, error) {
	return h.c.putInner(msgs, res)
}

func (h innerHost) TopicName(name []byte) string { return h.c.topicName(name) }

// LoadState reads DataDir/config/name with loadStateFile (falling back to
// name.bak).
func (h innerHost) LoadState(name string, parse func([]byte) error) (bool, error) {
	_, found, _, err := loadStateFile(h.c.opts.FS, h.statePath(name), h.c.opts.Logger, func(data []byte) (struct{}, error) {
		return struct{}{}, parse(data)
	})
	return found, err
}

// WriteState replaces DataDir/config/name through Options.WriteConfigFile.
func (h innerHost) WriteState(name string, data []byte) error {
	return h.c.opts.WriteConfigFile(h.statePath(name), data)
}

func (h innerHost) statePath(name string) string {
	return filepath.Join(h.c.opts.DataDir, ConfigDir, name)
}

// pinnedRecords is a reput.Records on the store: each record read stays
// pinned (a store.View) until ReleaseAll.
type pinnedRecords struct {
	c     *Core
	views []store.View
}

func (p *pinnedRecords) Read(commitLogOffset int64) ([]byte, error) {
	v, err := p.c.store.ReadMessage(commitLogOffset)
	if err != nil {
		return nil, err
	}
	p.views = append(p.views, v)
	return v.Bytes(), nil
}

func (p *pinnedRecords) ReleaseAll() {
	for i := range p.views {
		p.views[i].Release()
	}
	clear(p.views)
	p.views = p.views[:0]
}
