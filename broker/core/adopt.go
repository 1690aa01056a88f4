package core

import (
	"strings"

	"github.com/apogeemq/apogee/protocol"
)

// AdoptStoredTopics adds to the topic table every topic the store holds
// consume queues of but the table lacks, and returns their names. A topic
// created on demand (a send's auto-creation, a group's %RETRY% or %DLQ%
// topic) reaches topics.json through the background writer, so a crash
// right after its first acknowledged message can leave it out of the file;
// without this, the topic's acknowledged messages would answer
// TOPIC_NOT_EXIST after the restart. New calls it at every start; a broker
// promoted to master calls it for topics its slave table had not followed
// yet. Each topic gets read and write permission and as many queues as its
// consume queues show were used, at least the auto-create default for a
// user topic (a group's topics have one queue). System topics are left
// alone: New puts them in the table itself.
func (c *Core) AdoptStoredTopics() []string {
	used := map[string]int32{}
	c.store.Queues(func(topic string, q int32, _, _ int64) bool {
		if topic != "" && !isSystemTopic(topic) && c.topics.lookup(topic) == nil {
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
		if !strings.HasPrefix(topic, retryTopicPrefix) && !strings.HasPrefix(topic, dlqTopicPrefix) {
			queues = max(queues, int32(c.opts.DefaultTopicQueues))
		}
		if _, created := c.topics.createIfAbsent(newTopicConfig(topic, queues, protocol.PermRead|protocol.PermWrite)); created {
			c.opts.Logger.Warn("broker: topic the store holds messages of but the topic table lacked, adopted "+
				"(on a master: created just before a crash, before topics.json was written; on a slave: not yet followed from the master)",
				"topic", topic, "queues", queues)
			adopted = append(adopted, topic)
			if c.topicWriter != nil { // running (not in New, which persists and registers the table itself)
				c.topicChanged(topic, false)
			}
		}
	}
	return adopted
}

// adoptOnSlave is a slave's answer to a pull of a topic its table lacks but
// its store holds messages of in the queue asked for: the topic was created
// on the master after the slave last followed its tables (every
// SlaveSyncInterval), and the master may be gone before the next round.
// Without it the consumers that move to the slave when their master stops
// would be refused the replicated messages. Only a queue with messages
// leads to the scan, so a pull of an unknown topic costs one map lookup.
func (c *Core) adoptOnSlave(topic string, queueID int32) *topicEntry {
	if c.store.MaxOffset(topic, queueID) <= 0 {
		return nil
	}
	c.AdoptStoredTopics()
	return c.topics.lookup(topic)
}
