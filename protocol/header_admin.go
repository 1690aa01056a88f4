package protocol

// Headers of the admin codes that mqadmin, the RocketMQ dashboard and
// rocketmq-exporter send (the Java classes in
// org.apache.rocketmq.remoting.protocol.header name the keys).

// Request codes of the admin protocol not listed in codes.go.
const (
	ReqQueryTopicsByConsumer       int32 = 343
	ReqQuerySubscriptionByConsumer int32 = 345
)

// GetTopicStatsInfoRequest is the header of GET_TOPIC_STATS_INFO (202),
// QUERY_TOPIC_CONSUME_BY_WHO (300) and GET_TOPIC_CONFIG (351).
type GetTopicStatsInfoRequest struct {
	Topic string `rmq:"topic,required"`
}

// GetProducerConnectionListRequest is the header of GET_PRODUCER_CONNECTION_LIST (204).
type GetProducerConnectionListRequest struct {
	ProducerGroup string `rmq:"producerGroup,required"`
}

// GetConsumeStatsRequest is the header of GET_CONSUME_STATS (208): the
// group, and a topic or (5.x) a ';'-separated topic list, both optional.
type GetConsumeStatsRequest struct {
	ConsumerGroup string `rmq:"consumerGroup,required"`
	Topic         string `rmq:"topic,omitempty"`
	TopicList     string `rmq:"topicList,omitempty"`
}

// QueryConsumeTimeSpanRequest is the header of QUERY_CONSUME_TIME_SPAN (303).
type QueryConsumeTimeSpanRequest struct {
	Topic string `rmq:"topic,required"`
	Group string `rmq:"group,required"`
}

// CloneGroupOffsetRequest is the header of CLONE_GROUP_OFFSET (314).
type CloneGroupOffsetRequest struct {
	SrcGroup  string `rmq:"srcGroup,required"`
	DestGroup string `rmq:"destGroup,required"`
	Topic     string `rmq:"topic,omitempty"`
	Offline   bool   `rmq:"offline"`
}

// ViewBrokerStatsDataRequest is the header of VIEW_BROKER_STATS_DATA (315).
type ViewBrokerStatsDataRequest struct {
	StatsName string `rmq:"statsName,required"`
	StatsKey  string `rmq:"statsKey,required"`
}

// GetConsumeStatsInBrokerRequest is the header of GET_BROKER_CONSUME_STATS (317).
type GetConsumeStatsInBrokerRequest struct {
	IsOrder bool `rmq:"isOrder"`
}

// QueryConsumeQueueRequest is the header of QUERY_CONSUME_QUEUE (321).
type QueryConsumeQueueRequest struct {
	Topic         string `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"`
	Index         int64  `rmq:"index,required"`
	Count         int32  `rmq:"count,required"`
	ConsumerGroup string `rmq:"consumerGroup,omitempty"`
}

// QueryTopicsByConsumerRequest is the header of QUERY_TOPICS_BY_CONSUMER (343).
type QueryTopicsByConsumerRequest struct {
	Group string `rmq:"group,required"`
}

// QuerySubscriptionByConsumerRequest is the header of QUERY_SUBSCRIPTION_BY_CONSUMER (345).
type QuerySubscriptionByConsumerRequest struct {
	Group string `rmq:"group,required"`
	Topic string `rmq:"topic,required"`
}

// GetBrokerConfigResponse is the header of GET_BROKER_CONFIG's (26) answer:
// the configuration's DataVersion as JSON.
type GetBrokerConfigResponse struct {
	Version string `rmq:"version,omitempty"`
}

// BrokerNameRequest is the header of WIPE_WRITE_PERM_OF_BROKER (205) and
// ADD_WRITE_PERM_OF_BROKER (327), sent to a name server.
type BrokerNameRequest struct {
	BrokerName string `rmq:"brokerName,required"`
}

// WipeWritePermResponse is the header of WIPE_WRITE_PERM_OF_BROKER's answer.
type WipeWritePermResponse struct {
	WipeTopicCount int32 `rmq:"wipeTopicCount"`
}

// AddWritePermResponse is the header of ADD_WRITE_PERM_OF_BROKER's answer.
type AddWritePermResponse struct {
	AddTopicCount int32 `rmq:"addTopicCount"`
}
