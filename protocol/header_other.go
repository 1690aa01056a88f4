package protocol

// Headers off the hot path keep text fields as strings (Decode copies them) unless a
// caller needs them without allocating (GetRouteInfoRequest, which the name server
// answers from a cache, and GetSubscriptionGroupConfigRequest).

// GetConsumerListByGroupRequest is the header of GET_CONSUMER_LIST_BY_GROUP (38).
type GetConsumerListByGroupRequest struct {
	ConsumerGroup string `rmq:"consumerGroup,required"`
}

// GetConsumerConnectionListRequest is the header of GET_CONSUMER_CONNECTION_LIST (203).
type GetConsumerConnectionListRequest = GetConsumerListByGroupRequest

// NotifyConsumerIdsChangedRequest is the header of NOTIFY_CONSUMER_IDS_CHANGED (40).
type NotifyConsumerIdsChangedRequest struct {
	ConsumerGroup string `rmq:"consumerGroup,required"`
}

// ConsumerSendMsgBackRequest is the header of CONSUMER_SEND_MSG_BACK (36).
type ConsumerSendMsgBackRequest struct {
	Group       string `rmq:"group,required"`
	Offset      int64  `rmq:"offset,required"`     // the message's commit-log offset
	DelayLevel  int32  `rmq:"delayLevel,required"` // 0 = broker decides, -1 = straight to DLQ
	OriginMsgID string `rmq:"originMsgId"`
	OriginTopic string `rmq:"originTopic"`
	UnitMode    bool   `rmq:"unitMode"`
	// MaxReconsumeTimes is the consumer's limit; without it (HasMaxReconsumeTimes
	// false) the broker uses the group's setting.
	MaxReconsumeTimes    int32  `rmq:"maxReconsumeTimes,has=HasMaxReconsumeTimes"`
	HasMaxReconsumeTimes bool   // maxReconsumeTimes is present
	BrokerName           string `rmq:"bname,omitempty"`
}

// EndTransactionRequest is the header of END_TRANSACTION (37).
type EndTransactionRequest struct {
	ProducerGroup        string `rmq:"producerGroup,required"`
	TranStateTableOffset int64  `rmq:"tranStateTableOffset,required"` // the half message's queue offset
	CommitLogOffset      int64  `rmq:"commitLogOffset,required"`      // the half message's commit-log offset
	CommitOrRollback     int32  `rmq:"commitOrRollback,required"`     // Transaction*Type
	FromTransactionCheck bool   `rmq:"fromTransactionCheck"`
	MsgID                string `rmq:"msgId,required"`
	TransactionID        string `rmq:"transactionId"`
	BrokerName           string `rmq:"bname,omitempty"`
}

// CheckTransactionStateRequest is the header of CHECK_TRANSACTION_STATE (39), broker to
// producer; the body is the half message's stored record.
type CheckTransactionStateRequest struct {
	TranStateTableOffset int64  `rmq:"tranStateTableOffset,required"`
	CommitLogOffset      int64  `rmq:"commitLogOffset,required"`
	MsgID                string `rmq:"msgId"` // UNIQ_KEY
	TransactionID        string `rmq:"transactionId"`
	OffsetMsgID          string `rmq:"offsetMsgId"`
	Topic                string `rmq:"topic,omitempty"`      // 5.x
	BrokerName           string `rmq:"brokerName,omitempty"` // 5.x
}

// QueryMessageRequest is the header of QUERY_MESSAGE (12).
type QueryMessageRequest struct {
	Topic          string `rmq:"topic,required"`
	Key            string `rmq:"key,required"`
	MaxNum         int32  `rmq:"maxNum,required"`
	BeginTimestamp int64  `rmq:"beginTimestamp,required"`     // ms
	EndTimestamp   int64  `rmq:"endTimestamp,required"`       // ms
	UniqueKeyQuery bool   `rmq:"_UNIQUE_KEY_QUERY,omitempty"` // Key is a UNIQ_KEY
}

// QueryMessageResponse is the response header of QUERY_MESSAGE (12).
type QueryMessageResponse struct {
	IndexLastUpdateTimestamp int64 `rmq:"indexLastUpdateTimestamp,required"`
	IndexLastUpdatePhyoffset int64 `rmq:"indexLastUpdatePhyoffset,required"`
}

// ViewMessageByIDRequest is the header of VIEW_MESSAGE_BY_ID (33).
type ViewMessageByIDRequest struct {
	Offset int64  `rmq:"offset,required"` // commit-log offset
	Topic  string `rmq:"topic,omitempty"` // 5.x
}

// GetRouteInfoRequest is the header of GET_ROUTEINFO_BY_TOPIC (105).
type GetRouteInfoRequest struct {
	Topic                  []byte `rmq:"topic,required"`
	AcceptStandardJSONOnly bool   `rmq:"acceptStandardJsonOnly,omitempty"` // 5.x: see RouteJSONStandard
}

// RegisterBrokerRequest is the header of REGISTER_BROKER (103); the body is a
// RegisterBrokerBody. Java requires haServerAddr, but it may be empty.
type RegisterBrokerRequest struct {
	BrokerName             string `rmq:"brokerName,required"`
	BrokerAddr             string `rmq:"brokerAddr,required"` // ip:port
	ClusterName            string `rmq:"clusterName,required"`
	HAServerAddr           string `rmq:"haServerAddr"`
	BrokerID               int64  `rmq:"brokerId,required"`                // 0 = master
	HeartbeatTimeoutMillis int64  `rmq:"heartbeatTimeoutMillis,omitempty"` // 0 when absent
	EnableActingMaster     bool   `rmq:"enableActingMaster"`
	Compressed             bool   `rmq:"compressed"` // the body is the zlib form
	BodyCRC32              int32  `rmq:"bodyCrc32"`  // IEEE CRC32 of the body & 0x7FFFFFFF; 0 = don't check
}

// RegisterBrokerResponse is the response header of REGISTER_BROKER (103).
type RegisterBrokerResponse struct {
	HAServerAddr string `rmq:"haServerAddr"`
	MasterAddr   string `rmq:"masterAddr"`
}

// UnregisterBrokerRequest is the header of UNREGISTER_BROKER (104).
type UnregisterBrokerRequest struct {
	BrokerName  string `rmq:"brokerName,required"`
	BrokerAddr  string `rmq:"brokerAddr,required"`
	ClusterName string `rmq:"clusterName,required"`
	BrokerID    int64  `rmq:"brokerId,required"`
}

// CreateTopicRequest is the header of UPDATE_AND_CREATE_TOPIC (17).
type CreateTopicRequest struct {
	Topic           string `rmq:"topic,required"`
	DefaultTopic    string `rmq:"defaultTopic,required"`
	ReadQueueNums   int32  `rmq:"readQueueNums,required"`
	WriteQueueNums  int32  `rmq:"writeQueueNums,required"`
	Perm            int32  `rmq:"perm,required"`            // Perm* bits
	TopicFilterType string `rmq:"topicFilterType,required"` // SINGLE_TAG or MULTI_TAG
	TopicSysFlag    int32  `rmq:"topicSysFlag"`
	Order           bool   `rmq:"order"`
	Attributes      string `rmq:"attributes,omitempty"` // 5.x: "+key=value,..." text
	Force           bool   `rmq:"force,omitempty"`      // 5.x
}

// RegisterTopicRequest is the header of REGISTER_TOPIC_IN_NAMESRV (217), a
// broker registering one topic's queues (Java 5's registerSingleTopicAll);
// the body is a TopicRouteData.
type RegisterTopicRequest struct {
	Topic string `rmq:"topic,required"`
}

// DeleteTopicRequest is the header of DELETE_TOPIC_IN_BROKER (215) and
// DELETE_TOPIC_IN_NAMESRV (216).
type DeleteTopicRequest struct {
	Topic       string `rmq:"topic,required"`
	ClusterName string `rmq:"clusterName,omitempty"` // 216, 5.x: only that cluster's brokers
}

// UnregisterClientRequest is the header of UNREGISTER_CLIENT (35), sent by Java clients only.
type UnregisterClientRequest struct {
	ClientID      string `rmq:"clientID,required"`
	ProducerGroup string `rmq:"producerGroup,omitempty"`
	ConsumerGroup string `rmq:"consumerGroup,omitempty"`
}

// ResetOffsetRequest is the header of RESET_CONSUMER_CLIENT_OFFSET (220, broker to
// client) and INVOKE_BROKER_TO_RESET_OFFSET (222, admin to broker).
type ResetOffsetRequest struct {
	Topic     string `rmq:"topic,required"`
	Group     string `rmq:"group,required"`
	Timestamp int64  `rmq:"timestamp,required"` // ms
	IsForce   bool   `rmq:"isForce"`
	QueueID   int32  `rmq:"queueId,default=-1,omitempty"` // 5.x; -1 when absent
	Offset    int64  `rmq:"offset,default=-1,omitempty"`  // 5.x; -1 when absent
}

// GetConsumerRunningInfoRequest is the header of GET_CONSUMER_RUNNING_INFO (307), broker
// (on behalf of an admin tool) to client.
type GetConsumerRunningInfoRequest struct {
	ConsumerGroup string `rmq:"consumerGroup,required"`
	ClientID      string `rmq:"clientId,required"`
	JstackEnable  bool   `rmq:"jstackEnable"`
}

// ConsumeMessageDirectlyRequest is the header of CONSUME_MESSAGE_DIRECTLY (309), broker to
// client; the body is one stored record.
type ConsumeMessageDirectlyRequest struct {
	ConsumerGroup string `rmq:"consumerGroup,required"`
	ClientID      string `rmq:"clientId"`
	MsgID         string `rmq:"msgId"`
	BrokerName    string `rmq:"brokerName,omitempty"`
}

// GetConsumerStatusRequest is the header of GET_CONSUMER_STATUS_FROM_CLIENT (221) and
// INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223).
type GetConsumerStatusRequest struct {
	Topic      string `rmq:"topic,required"`
	Group      string `rmq:"group,required"`
	ClientAddr string `rmq:"clientAddr,omitempty"`
}

// GetSubscriptionGroupConfigRequest is the header of GET_SUBSCRIPTIONGROUP_CONFIG (352).
type GetSubscriptionGroupConfigRequest struct {
	Group []byte `rmq:"group,required"`
}

// DeleteSubscriptionGroupRequest is the header of DELETE_SUBSCRIPTIONGROUP (207).
type DeleteSubscriptionGroupRequest struct {
	GroupName   string `rmq:"groupName,required"`
	CleanOffset bool   `rmq:"cleanOffset"` // drop the group's committed offsets too
}

// GetTopicsByClusterRequest is the header of GET_TOPICS_BY_CLUSTER (224).
type GetTopicsByClusterRequest struct {
	Cluster string `rmq:"cluster,required"`
}

// KVConfigRequest is the header of the name server's KV-config requests: PUT_KV_CONFIG
// (100: namespace, key, value), GET_KV_CONFIG and DELETE_KV_CONFIG (101, 102: namespace,
// key) and GET_KVLIST_BY_NAMESPACE (219: namespace). Java's headers for them require
// the keys each code names; Decode requires only the namespace, common to all four, and
// callers check Key and HasValue per code. (An empty value counts as absent, as
// everywhere in this package; Java's name server would store "".)
type KVConfigRequest struct {
	Namespace string `rmq:"namespace,required"`
	Key       string `rmq:"key,omitempty"`
	Value     string `rmq:"value,has=HasValue"`
	HasValue  bool   // value is present
}

// GetKVConfigResponse is the response header of GET_KV_CONFIG (101).
type GetKVConfigResponse struct {
	Value string `rmq:"value"`
}
