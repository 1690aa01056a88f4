package core

import (
	"github.com/apogeemq/apogee/protocol"
)

// AdoptStoredTopics first applies the configuration records of the log
// this broker has not applied yet (configlog.go: a broker promoted to
// master has then every topic and group with the configuration its old
// master stored messages under), then adds to the topic table every topic
// the store holds consume queues of but the table lacks, and returns their
// names. The second part is for logs without records of a topic: written
// by a broker older than the records, or a topic whose record retention
// removed while topics.json missed it. Without it, the topic's
// acknowledged messages would answer TOPIC_NOT_EXIST after a restart or a
// failover. New calls it at every start; a broker promoted to master calls
// it once its store dispatched the replica's log.
//
// An adopted topic gets read and write permission and as many queues as
// its consume queues show were used (the highest queue id plus one), never
// a default: the queue count of a topic's messages is the store's to tell.
// A topic the table has keeps its configuration; a topic a record deleted
// (whose consume queues a slave keeps) is not adopted; system topics are
// left alone (New puts them in the table itself). On a master an adopted
// topic is recorded in the log like any other change, so that its slaves
// have it too; a slave only adds it to its own table.
func (rp Replication) AdoptStoredTopics() []string {
	c := rp.c
	c.catchUpConfig()
	c.cfg.mu.Lock()
	used := map[string]int32{}
	c.store.Queues(func(topic string, q int32, _, _ int64) bool {
		if topic != "" && !isSystemTopic(topic) && c.topics.lookup(topic) == nil && c.deletedAt(topicKey(topic)) < 0 {
			used[topic] = max(used[topic], q+1)
		}
		return true
	})
	var adopted []string
	for topic, queues := range used {
		if remark, ok := checkTopicName([]byte(topic)); !ok {
			c.opts.Logger.Warn("broker: the store holds a topic the table lacks, with an invalid name: not adopted",
				"topic", topic, "why", remark)
			continue
		}
		cfg := newTopicConfig(topic, queues, protocol.PermRead|protocol.PermWrite)
		var created bool
		if c.slave.Load() {
			_, created = c.topics.createIfAbsent(cfg)
		} else {
			var err error
			if _, created, err = c.setTopicLocked(cfg, true); err != nil {
				c.opts.Logger.Error("broker: adopting a topic the store holds messages of failed: its configuration record could not be stored",
					"topic", topic, "err", err)
				continue
			}
		}
		if created {
			c.opts.Logger.Warn("broker: topic the store holds messages of but the topic table lacked, adopted "+
				"(its log has no configuration record of it: written by an older broker, or removed by retention)",
				"topic", topic, "queues", queues)
			adopted = append(adopted, topic)
		}
	}
	c.cfgUnlock()
	for _, topic := range adopted {
		c.noteTopic(topic)
	}
	return adopted
}

// adoptOnSlave is a slave's answer to a pull of a topic its table lacks but
// its store holds messages of in the queue asked for: the topic's record
// has not been applied yet, or the log has none (see AdoptStoredTopics).
// Without it the consumers that move to the slave when their master stops
// would be refused the replicated messages. Only a queue with messages
// leads to the scan, so a pull of an unknown topic costs one map lookup.
func (c *Core) adoptOnSlave(topic string, queueID int32) *topicEntry {
	if c.store.MaxOffset(topic, queueID) <= 0 {
		return nil
	}
	c.Replication().AdoptStoredTopics()
	return c.topics.lookup(topic)
}
