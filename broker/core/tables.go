package core

import "github.com/apogeemq/apogee/protocol"

// TopicTable is the topic table and its data version: what a master
// answers GET_ALL_TOPIC_CONFIG with and a slave follows (SyncTopics). The
// remoting front end encodes and decodes it as the protocol's
// TopicConfigSerializeWrapper body; the core names no body type.
type TopicTable struct {
	Topics  map[string]*protocol.TopicConfig // by topic name; nil entries are skipped
	Version protocol.DataVersion
}

// GroupTable is the subscription-group table and its data version
// (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, SyncSubscriptionGroups).
type GroupTable struct {
	Groups  map[string]*protocol.SubscriptionGroupConfig // by group name; nil entries are skipped
	Version protocol.DataVersion
}

// OffsetTable is every committed consumer offset and the table's data
// version (GET_ALL_CONSUMER_OFFSET, SyncConsumerOffsets).
type OffsetTable struct {
	Offsets map[string]map[int32]int64 // by "topic@group" (protocol.OffsetTableKey), then queue id
	Version protocol.DataVersion
}

// ConsumeQueueEntries is a view of a consume queue (QueryConsumeQueue):
// its bounds, the entries read, and the group's subscription of the topic
// when the query named a group that has one.
type ConsumeQueueEntries struct {
	MinIndex, MaxIndex int64
	Entries            []protocol.ConsumeQueueData // never nil
	Subscription       *protocol.SubscriptionData
}

// GroupStats is a group's consumption (ConsumeStats): its offsets per
// queue and its consume TPS (the messages it pulled per second over the
// last minute).
type GroupStats struct {
	Queues map[protocol.MessageQueue]protocol.OffsetWrapper // never nil
	TPS    float64
}

// Lag is the lag summed over the queues (what the Java broker's
// ConsumeStats.computeTotalDiff computes).
func (s *GroupStats) Lag() int64 {
	var n int64
	for _, w := range s.Queues {
		n += w.BrokerOffset - w.ConsumerOffset
	}
	return n
}

// GroupTopicStats is one group's GroupStats per topic (BrokerConsumeStats).
type GroupTopicStats struct {
	Group  string
	Topics []GroupStats // never nil
}

// BrokerGroupStats is every subscription group's consumption
// (BrokerConsumeStats), in the group table's order, and the lag summed over
// all of them.
type BrokerGroupStats struct {
	BrokerAddr string
	Groups     []GroupTopicStats
	TotalLag   int64
}

// TopicQueueStats is a topic's queues (TopicStats): every queue's min and
// max offset and the store time of its last message, and the topic's put
// TPS over the last minute.
type TopicQueueStats struct {
	Queues map[protocol.MessageQueue]protocol.TopicOffset // never nil
	PutTPS float64
}

// StatsWindows is one statistic over the last minute, hour and day
// (StatsData).
type StatsWindows struct {
	Minute, Hour, Day protocol.BrokerStatsItem
}
