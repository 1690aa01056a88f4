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
