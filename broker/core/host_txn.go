package core

import (
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// txnHost is the transaction manager's Host: the core's store, topic
// table, delay and timer routing, client registry and state files.
type txnHost struct {
	c  *Core
	rr atomic.Uint32 // round-robin over a group's producer connections
}

var _ txn.Host = (*txnHost)(nil)

func (h *txnHost) ReadEntries(topic string, queueID int32, offset int64, dst []store.QueueEntry) ([]store.QueueEntry, error) {
	return h.c.store.ReadEntries(topic, queueID, offset, dst)
}

func (h *txnHost) MinOffset(topic string, queueID int32) int64 {
	return h.c.store.MinOffset(topic, queueID)
}

func (h *txnHost) MaxOffset(topic string, queueID int32) int64 {
	return h.c.store.MaxOffset(topic, queueID)
}

func (h *txnHost) ReadMessage(off int64) (store.View, error) { return h.c.store.ReadMessage(off) }

// Put stores msgs without waiting for the flush, counted as inner puts.
func (h *txnHost) Put(msgs []store.Message, res []store.PutResult) ([]store.PutResult, error) {
	for i := range msgs {
		msgs[i].NoWait = true
	}
	res, err := h.c.store.PutBatch(msgs, res)
	if err == nil {
		h.c.stats.innerPuts.Add(int64(len(msgs)))
	}
	return res, err
}

func (h *txnHost) WaitDurable(end int64) error { return h.c.store.WaitPutDurable(end) }

func (h *txnHost) TopicName(name []byte) string { return h.c.topicName(name) }

func (h *txnHost) EnsureTopic(name string, queues int32) (string, error) {
	e, err := h.c.ensureGroupTopic(name, queues)
	if err != nil {
		return "", err
	}
	return e.name, nil
}

// RouteDelay applies a committed message's timer (TIMER_DELIVER_MS,
// TIMER_DELAY_SEC, TIMER_DELAY_MS in the future) or delay level, as
// routeSend does for a send.
func (h *txnHost) RouteDelay(m *store.Message, props []byte, start int) []byte {
	c := h.c
	var sp message.SendProps
	sp.Scan(props[start:])
	if deliver, isTimer, err := c.timerDeliverTime(&sp, time.Now); err == nil && isTimer {
		return c.timerProps(props, m, deliver)
	}
	if level, _, ok := sp.Int(message.SendDelay); ok && level > 0 {
		lv := c.features().sched.ClampLevel(level)
		props = message.AppendProperty(props, message.PropRealTopic, m.Topic)
		props = appendPropInt(props, message.PropRealQueueID, int64(m.QueueID))
		m.Topic, m.QueueID = scheduleTopic, lv-1
		c.stats.delayed.Add(1)
	}
	return props
}

// SendCheck asks one live connection of the producer group, round-robin,
// for the transaction's outcome (ClientConn.CheckTransaction:
// CHECK_TRANSACTION_STATE, 39).
func (h *txnHost) SendCheck(group string, c *txn.Check) error {
	conns := h.c.clients.producerConns(group)
	if len(conns) == 0 {
		return txn.ErrNoProducer
	}
	conn := conns[int(h.rr.Add(1))%len(conns)]
	return conn.CheckTransaction(group, c)
}

// LoadState reads DataDir/config/name (or its previous version, see
// loadStateFile).
func (h *txnHost) LoadState(name string, parse func([]byte) error) (bool, error) {
	_, found, _, err := loadStateFile(h.c.opts.FS, h.statePath(name), h.c.opts.Logger, func(data []byte) (struct{}, error) {
		return struct{}{}, parse(data)
	})
	return found, err
}

// WriteState writes DataDir/config/name through Options.WriteConfigFile.
func (h *txnHost) WriteState(name string, data []byte) error {
	return h.c.opts.WriteConfigFile(h.statePath(name), data)
}

func (h *txnHost) statePath(name string) string {
	return filepath.Join(h.c.opts.DataDir, ConfigDir, name)
}
