package protocol

// PullMessageRequest is the header of PULL_MESSAGE (11).
type PullMessageRequest struct {
	ConsumerGroup        []byte // consumerGroup (required)
	Topic                []byte // topic (required)
	QueueID              int32  // queueId (required)
	QueueOffset          int64  // queueOffset (required)
	MaxMsgNums           int32  // maxMsgNums (required)
	SysFlag              int32  // sysFlag, PullFlag* bits (required)
	CommitOffset         int64  // commitOffset (required)
	SuspendTimeoutMillis int64  // suspendTimeoutMillis (required)
	Subscription         []byte // subscription expression; "" unless PullFlagSubscription
	SubVersion           int64  // subVersion (required)
	ExpressionType       []byte // expressionType: "TAG", "SQL92" or "" (= TAG)
	MaxMsgBytes          int32  // maxMsgBytes (5.x, optional; 0 when absent)
	BrokerName           []byte // bname (optional)
}

var pullFieldNames = [...]string{"consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis", "subVersion"}

// Decode reads a pull request header. Required (as the Java broker requires them):
// consumerGroup, topic, queueId, queueOffset, maxMsgNums, sysFlag, commitOffset,
// suspendTimeoutMillis, subVersion.
func (h *PullMessageRequest) Decode(ext *ExtFields) error {
	*h = PullMessageRequest{}
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
		case "queueOffset":
			h.QueueOffset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<3)
		case "maxMsgNums":
			h.MaxMsgNums, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<4)
		case "sysFlag":
			h.SysFlag, ok = optInt32(v)
			seen |= nonEmpty(v, 1<<5)
		case "commitOffset":
			h.CommitOffset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<6)
		case "suspendTimeoutMillis":
			h.SuspendTimeoutMillis, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<7)
		case "subscription":
			h.Subscription = v
		case "subVersion":
			h.SubVersion, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<8)
		case "expressionType":
			h.ExpressionType = v
		case "maxMsgBytes":
			h.MaxMsgBytes, ok = optInt32(v)
		case "bname":
			h.BrokerName = v
		}
		if !ok {
			return badField("PullMessageRequest", k, v)
		}
	}
	return checkRequired("PullMessageRequest", seen, 1<<9-1, pullFieldNames[:])
}

// Encode writes the keys rocketmq-client-go sends; maxMsgBytes and bname only when set.
func (h *PullMessageRequest) Encode(ext *ExtFields) {
	ext.Set("consumerGroup", h.ConsumerGroup)
	ext.Set("topic", h.Topic)
	ext.SetInt("queueId", int64(h.QueueID))
	ext.SetInt("queueOffset", h.QueueOffset)
	ext.SetInt("maxMsgNums", int64(h.MaxMsgNums))
	ext.SetInt("sysFlag", int64(h.SysFlag))
	ext.SetInt("commitOffset", h.CommitOffset)
	ext.SetInt("suspendTimeoutMillis", h.SuspendTimeoutMillis)
	ext.Set("subscription", h.Subscription)
	ext.SetInt("subVersion", h.SubVersion)
	ext.Set("expressionType", h.ExpressionType)
	if h.MaxMsgBytes != 0 {
		ext.SetInt("maxMsgBytes", int64(h.MaxMsgBytes))
	}
	if len(h.BrokerName) > 0 {
		ext.Set("bname", h.BrokerName)
	}
}

// PullMessageResponse is the header of a pull response. All four keys must be present on
// codes 0/19/20/21: rocketmq-client-go reads a missing nextBeginOffset as 0 and resets
// the consumer, and follows a non-zero suggestWhichBrokerId to a slave.
type PullMessageResponse struct {
	SuggestWhichBrokerID int64 // suggestWhichBrokerId: 0 (master) unless slaves exist
	NextBeginOffset      int64 // nextBeginOffset
	MinOffset            int64 // minOffset
	MaxOffset            int64 // maxOffset
}

var pullRespFieldNames = [...]string{"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"}

// Decode reads a pull response header; all four keys are required.
func (h *PullMessageResponse) Decode(ext *ExtFields) error {
	*h = PullMessageResponse{}
	var seen uint32
	for i := range ext.ents {
		k, v := ext.At(i)
		ok := true
		switch string(k) {
		case "suggestWhichBrokerId":
			h.SuggestWhichBrokerID, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<0)
		case "nextBeginOffset":
			h.NextBeginOffset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<1)
		case "minOffset":
			h.MinOffset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<2)
		case "maxOffset":
			h.MaxOffset, ok = optInt64(v)
			seen |= nonEmpty(v, 1<<3)
		}
		if !ok {
			return badField("PullMessageResponse", k, v)
		}
	}
	return checkRequired("PullMessageResponse", seen, 1<<4-1, pullRespFieldNames[:])
}

// Encode writes all four keys.
func (h *PullMessageResponse) Encode(ext *ExtFields) {
	ext.SetInt("suggestWhichBrokerId", h.SuggestWhichBrokerID)
	ext.SetInt("nextBeginOffset", h.NextBeginOffset)
	ext.SetInt("minOffset", h.MinOffset)
	ext.SetInt("maxOffset", h.MaxOffset)
}
