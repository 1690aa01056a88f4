package protocol

// QueryConsumerOffsetRequest is the header of QUERY_CONSUMER_OFFSET (14).
type QueryConsumerOffsetRequest struct {
	ConsumerGroup []byte `rmq:"consumerGroup,required"`
	Topic         []byte `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"`
	BrokerName    []byte `rmq:"bname,omitempty"`
}

// UpdateConsumerOffsetRequest is the header of UPDATE_CONSUMER_OFFSET (15).
type UpdateConsumerOffsetRequest struct {
	ConsumerGroup []byte `rmq:"consumerGroup,required"`
	Topic         []byte `rmq:"topic,required"`
	QueueID       int32  `rmq:"queueId,required"`
	CommitOffset  int64  `rmq:"commitOffset,required"`
	BrokerName    []byte `rmq:"bname,omitempty"`
}

// QueueRequest is the header shared by GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and
// GET_EARLIEST_MSG_STORETIME (32): a topic and a queue id. Old rocketmq-client-go
// versions wrote "Topic" and "QueueId"; Decode accepts those spellings too.
type QueueRequest struct {
	Topic      []byte `rmq:"topic,alias=Topic,required"`
	QueueID    int32  `rmq:"queueId,alias=QueueId,required"`
	BrokerName []byte `rmq:"bname,omitempty"`
}

// GetMaxOffsetRequest is the header of GET_MAX_OFFSET (30).
type GetMaxOffsetRequest = QueueRequest

// GetMinOffsetRequest is the header of GET_MIN_OFFSET (31).
type GetMinOffsetRequest = QueueRequest

// GetEarliestMsgStoretimeRequest is the header of GET_EARLIEST_MSG_STORETIME (32).
type GetEarliestMsgStoretimeRequest = QueueRequest

// SearchOffsetByTimestampRequest is the header of SEARCH_OFFSET_BY_TIMESTAMP (29).
// "Topic" and "QueueId" are accepted as for QueueRequest.
type SearchOffsetByTimestampRequest struct {
	Topic        []byte `rmq:"topic,alias=Topic,required"`
	QueueID      int32  `rmq:"queueId,alias=QueueId,required"`
	Timestamp    int64  `rmq:"timestamp,required"`     // ms
	BoundaryType []byte `rmq:"boundaryType,omitempty"` // 5.x: "lower" (default) or "upper"
	BrokerName   []byte `rmq:"bname,omitempty"`
}

// OffsetResponse is the response header of QUERY_CONSUMER_OFFSET (14), GET_MAX_OFFSET
// (30), GET_MIN_OFFSET (31) and SEARCH_OFFSET_BY_TIMESTAMP (29). rocketmq-client-go
// ignores the response code of 29 and 30 and parses "offset", so it must always be
// present.
type OffsetResponse struct {
	Offset int64 `rmq:"offset,required"`
}

// QueryConsumerOffsetResponse is the response header of QUERY_CONSUMER_OFFSET (14).
type QueryConsumerOffsetResponse = OffsetResponse

// GetEarliestMsgStoretimeResponse is the response header of GET_EARLIEST_MSG_STORETIME (32).
type GetEarliestMsgStoretimeResponse struct {
	Timestamp int64 `rmq:"timestamp,required"` // ms
}
