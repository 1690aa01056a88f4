package protocol

// QueryConsumerOffsetRequest is the header of QUERY_CONSUMER_OFFSET (14).
type QueryConsumerOffsetRequest struct {
	ConsumerGroup []byte // consumerGroup (required)
	Topic         []byte // topic (required)
	QueueID       int32  // queueId (required)
	BrokerName    []byte // bname (optional)
}

var groupTopicQueueNames = [...]string{"consumerGroup", "topic", "queueId"}

// Decode reads the header. Required: consumerGroup, topic, queueId.
func (h *QueryConsumerOffsetRequest) Decode(ext *ExtFields) error {
	*h = QueryConsumerOffsetRequest{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "consumerGroup":
			h.ConsumerGroup = v
			seen |= nonEmpty(v, 1<<0)
		case "topic":
			h.Topic = v
			seen |= nonEmpty(v, 1<<1)
		case "queueId":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<2)
		case "bname":
			h.BrokerName = v
		}
		if !ok {
			return badField("QueryConsumerOffsetRequest", k, v)
		}
	}
	return checkRequired("QueryConsumerOffsetRequest", seen, 1<<3-1, groupTopicQueueNames[:])
}

// Encode writes consumerGroup, topic, queueId and bname (when set).
func (h *QueryConsumerOffsetRequest) Encode(ext *ExtFields) {
	ext.Set("consumerGroup", h.ConsumerGroup)
	ext.Set("topic", h.Topic)
	ext.SetInt("queueId", int64(h.QueueID))
	if len(h.BrokerName) > 0 {
		ext.Set("bname", h.BrokerName)
	}
}

// UpdateConsumerOffsetRequest is the header of UPDATE_CONSUMER_OFFSET (15).
type UpdateConsumerOffsetRequest struct {
	ConsumerGroup []byte // consumerGroup (required)
	Topic         []byte // topic (required)
	QueueID       int32  // queueId (required)
	CommitOffset  int64  // commitOffset (required)
	BrokerName    []byte // bname (optional)
}

var updateOffsetNames = [...]string{"consumerGroup", "topic", "queueId", "commitOffset"}

// Decode reads the header. Required: consumerGroup, topic, queueId, commitOffset.
func (h *UpdateConsumerOffsetRequest) Decode(ext *ExtFields) error {
	*h = UpdateConsumerOffsetRequest{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "consumerGroup":
			h.ConsumerGroup = v
			seen |= nonEmpty(v, 1<<0)
		case "topic":
			h.Topic = v
			seen |= nonEmpty(v, 1<<1)
		case "queueId":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<2)
		case "commitOffset":
			h.CommitOffset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<3)
		case "bname":
			h.BrokerName = v
		}
		if !ok {
			return badField("UpdateConsumerOffsetRequest", k, v)
		}
	}
	return checkRequired("UpdateConsumerOffsetRequest", seen, 1<<4-1, updateOffsetNames[:])
}

// Encode writes consumerGroup, topic, queueId, commitOffset and bname (when set).
func (h *UpdateConsumerOffsetRequest) Encode(ext *ExtFields) {
	ext.Set("consumerGroup", h.ConsumerGroup)
	ext.Set("topic", h.Topic)
	ext.SetInt("queueId", int64(h.QueueID))
	ext.SetInt("commitOffset", h.CommitOffset)
	if len(h.BrokerName) > 0 {
		ext.Set("bname", h.BrokerName)
	}
}

// QueueRequest is the header shared by GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and
// GET_EARLIEST_MSG_STORETIME (32): a topic and a queue id.
type QueueRequest struct {
	Topic      []byte // topic (required)
	QueueID    int32  // queueId (required)
	BrokerName []byte // bname (optional)
}

// GetMaxOffsetRequest is the header of GET_MAX_OFFSET (30).
type GetMaxOffsetRequest = QueueRequest

// GetMinOffsetRequest is the header of GET_MIN_OFFSET (31).
type GetMinOffsetRequest = QueueRequest

// GetEarliestMsgStoretimeRequest is the header of GET_EARLIEST_MSG_STORETIME (32).
type GetEarliestMsgStoretimeRequest = QueueRequest

var topicQueueNames = [...]string{"topic", "queueId"}

// Decode reads the header. Required: topic, queueId. Old rocketmq-client-go versions
// wrote "Topic" and "QueueId"; those spellings are accepted too.
func (h *QueueRequest) Decode(ext *ExtFields) error {
	*h = QueueRequest{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "topic", "Topic":
			h.Topic = v
			seen |= nonEmpty(v, 1<<0)
		case "queueId", "QueueId":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<1)
		case "bname":
			h.BrokerName = v
		}
		if !ok {
			return badField("QueueRequest", k, v)
		}
	}
	return checkRequired("QueueRequest", seen, 1<<2-1, topicQueueNames[:])
}

// Encode writes topic, queueId and bname (when set).
func (h *QueueRequest) Encode(ext *ExtFields) {
	ext.Set("topic", h.Topic)
	ext.SetInt("queueId", int64(h.QueueID))
	if len(h.BrokerName) > 0 {
		ext.Set("bname", h.BrokerName)
	}
}

// SearchOffsetByTimestampRequest is the header of SEARCH_OFFSET_BY_TIMESTAMP (29).
type SearchOffsetByTimestampRequest struct {
	Topic        []byte // topic (required)
	QueueID      int32  // queueId (required)
	Timestamp    int64  // timestamp, ms (required)
	BoundaryType []byte // boundaryType (5.x): "lower" (default) or "upper"
	BrokerName   []byte // bname (optional)
}

var searchOffsetNames = [...]string{"topic", "queueId", "timestamp"}

// Decode reads the header. Required: topic, queueId, timestamp ("Topic" and "QueueId"
// accepted as for QueueRequest).
func (h *SearchOffsetByTimestampRequest) Decode(ext *ExtFields) error {
	*h = SearchOffsetByTimestampRequest{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "topic", "Topic":
			h.Topic = v
			seen |= nonEmpty(v, 1<<0)
		case "queueId", "QueueId":
			h.QueueID, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<1)
		case "timestamp":
			h.Timestamp, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<2)
		case "boundaryType":
			h.BoundaryType = v
		case "bname":
			h.BrokerName = v
		}
		if !ok {
			return badField("SearchOffsetByTimestampRequest", k, v)
		}
	}
	return checkRequired("SearchOffsetByTimestampRequest", seen, 1<<3-1, searchOffsetNames[:])
}

// Encode writes topic, queueId, timestamp, and boundaryType and bname when set.
func (h *SearchOffsetByTimestampRequest) Encode(ext *ExtFields) {
	ext.Set("topic", h.Topic)
	ext.SetInt("queueId", int64(h.QueueID))
	ext.SetInt("timestamp", h.Timestamp)
	if len(h.BoundaryType) > 0 {
		ext.Set("boundaryType", h.BoundaryType)
	}
	if len(h.BrokerName) > 0 {
		ext.Set("bname", h.BrokerName)
	}
}

// OffsetResponse is the response header of QUERY_CONSUMER_OFFSET (14), GET_MAX_OFFSET
// (30), GET_MIN_OFFSET (31) and SEARCH_OFFSET_BY_TIMESTAMP (29): ext "offset".
// rocketmq-client-go ignores the response code of 29 and 30 and parses "offset", so it
// must always be present.
type OffsetResponse struct {
	Offset int64 // offset (required)
}

// Decode reads the header. Required: offset.
func (h *OffsetResponse) Decode(ext *ExtFields) error {
	h.Offset = 0
	v, ok := ext.Get("offset")
	if !ok || len(v) == 0 {
		return missingField("OffsetResponse", "offset")
	}
	n, ok := parseInt64(v)
	if !ok {
		return badField("OffsetResponse", []byte("offset"), v)
	}
	h.Offset = n
	return nil
}

// Encode writes offset.
func (h *OffsetResponse) Encode(ext *ExtFields) { ext.SetInt("offset", h.Offset) }

// QueryConsumerOffsetResponse is the response header of QUERY_CONSUMER_OFFSET (14).
type QueryConsumerOffsetResponse = OffsetResponse

// GetEarliestMsgStoretimeResponse is the response header of GET_EARLIEST_MSG_STORETIME (32).
type GetEarliestMsgStoretimeResponse struct {
	Timestamp int64 // timestamp, ms (required)
}

// Decode reads the header. Required: timestamp.
func (h *GetEarliestMsgStoretimeResponse) Decode(ext *ExtFields) error {
	h.Timestamp = 0
	v, ok := ext.Get("timestamp")
	if !ok || len(v) == 0 {
		return missingField("GetEarliestMsgStoretimeResponse", "timestamp")
	}
	n, ok := parseInt64(v)
	if !ok {
		return badField("GetEarliestMsgStoretimeResponse", []byte("timestamp"), v)
	}
	h.Timestamp = n
	return nil
}

// Encode writes timestamp.
func (h *GetEarliestMsgStoretimeResponse) Encode(ext *ExtFields) {
	ext.SetInt("timestamp", h.Timestamp)
}
