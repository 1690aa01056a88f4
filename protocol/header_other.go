package protocol

// Headers off the hot path use strings and a sticky-error field reader. Their Decode
// follows the same rules as the hot-path headers: a required key that is missing or empty
// gives ErrMissingField, an unparsable value ErrBadField, unknown keys are ignored.

// fieldReader reads typed values out of an ExtFields, keeping the first error.
type fieldReader struct {
	header string
	ext    *ExtFields
	err    error
}

func (r *fieldReader) get(key string, required bool) ([]byte, bool) {
	if r.err != nil {
		return nil, false
	}
	v, ok := r.ext.Get(key)
	if !ok || len(v) == 0 {
		if required {
			r.err = missingField(r.header, key)
		}
		return nil, false
	}
	return v, true
}

func (r *fieldReader) str(key string, required bool) string {
	v, ok := r.get(key, required)
	if !ok {
		return ""
	}
	return string(v)
}

func (r *fieldReader) i64(key string, required bool, def int64) int64 {
	v, ok := r.get(key, required)
	if !ok {
		return def
	}
	n, ok := parseInt64(v)
	if !ok {
		r.err = badField(r.header, []byte(key), v)
	}
	return n
}

func (r *fieldReader) i32(key string, required bool, def int32) int32 {
	v, ok := r.get(key, required)
	if !ok {
		return def
	}
	n, ok := parseInt32(v)
	if !ok {
		r.err = badField(r.header, []byte(key), v)
	}
	return n
}

func (r *fieldReader) boolean(key string, required bool) bool {
	v, ok := r.get(key, required)
	if !ok {
		return false
	}
	b, ok := parseBool(v)
	if !ok {
		r.err = badField(r.header, []byte(key), v)
	}
	return b
}

// setOpt sets key only when value is not empty.
func setOpt(ext *ExtFields, key, value string) {
	if value != "" {
		ext.SetString(key, value)
	}
}

// GetConsumerListByGroupRequest is the header of GET_CONSUMER_LIST_BY_GROUP (38).
type GetConsumerListByGroupRequest struct {
	ConsumerGroup string // consumerGroup (required)
}

// Decode reads the header.
func (h *GetConsumerListByGroupRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "GetConsumerListByGroupRequest", ext: ext}
	*h = GetConsumerListByGroupRequest{ConsumerGroup: r.str("consumerGroup", true)}
	return r.err
}

// Encode writes consumerGroup.
func (h *GetConsumerListByGroupRequest) Encode(ext *ExtFields) {
	ext.SetString("consumerGroup", h.ConsumerGroup)
}

// NotifyConsumerIdsChangedRequest is the header of NOTIFY_CONSUMER_IDS_CHANGED (40).
type NotifyConsumerIdsChangedRequest struct {
	ConsumerGroup string // consumerGroup (required)
}

// Decode reads the header.
func (h *NotifyConsumerIdsChangedRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "NotifyConsumerIdsChangedRequest", ext: ext}
	*h = NotifyConsumerIdsChangedRequest{ConsumerGroup: r.str("consumerGroup", true)}
	return r.err
}

// Encode writes consumerGroup.
func (h *NotifyConsumerIdsChangedRequest) Encode(ext *ExtFields) {
	ext.SetString("consumerGroup", h.ConsumerGroup)
}

// ConsumerSendMsgBackRequest is the header of CONSUMER_SEND_MSG_BACK (36).
type ConsumerSendMsgBackRequest struct {
	Group                string // group (required)
	Offset               int64  // offset: the message's commit-log offset (required)
	DelayLevel           int32  // delayLevel: 0 = broker decides, -1 = straight to DLQ (required)
	OriginMsgID          string // originMsgId
	OriginTopic          string // originTopic
	UnitMode             bool   // unitMode
	MaxReconsumeTimes    int32  // maxReconsumeTimes, meaningful if HasMaxReconsumeTimes
	HasMaxReconsumeTimes bool   // maxReconsumeTimes was present (else use the group's setting)
	BrokerName           string // bname
}

// Decode reads the header. Required: group, offset, delayLevel.
func (h *ConsumerSendMsgBackRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "ConsumerSendMsgBackRequest", ext: ext}
	*h = ConsumerSendMsgBackRequest{
		Group:       r.str("group", true),
		Offset:      r.i64("offset", true, 0),
		DelayLevel:  r.i32("delayLevel", true, 0),
		OriginMsgID: r.str("originMsgId", false),
		OriginTopic: r.str("originTopic", false),
		UnitMode:    r.boolean("unitMode", false),
		BrokerName:  r.str("bname", false),
	}
	if v, ok := ext.Get("maxReconsumeTimes"); ok && len(v) > 0 {
		h.MaxReconsumeTimes = r.i32("maxReconsumeTimes", false, 0)
		h.HasMaxReconsumeTimes = true
	}
	return r.err
}

// Encode writes the keys rocketmq-client-go sends.
func (h *ConsumerSendMsgBackRequest) Encode(ext *ExtFields) {
	ext.SetString("group", h.Group)
	ext.SetInt("offset", h.Offset)
	ext.SetInt("delayLevel", int64(h.DelayLevel))
	ext.SetString("originMsgId", h.OriginMsgID)
	ext.SetString("originTopic", h.OriginTopic)
	ext.SetBool("unitMode", h.UnitMode)
	if h.HasMaxReconsumeTimes {
		ext.SetInt("maxReconsumeTimes", int64(h.MaxReconsumeTimes))
	}
	setOpt(ext, "bname", h.BrokerName)
}

// EndTransactionRequest is the header of END_TRANSACTION (37).
type EndTransactionRequest struct {
	ProducerGroup        string // producerGroup (required)
	TranStateTableOffset int64  // tranStateTableOffset: the half message's queue offset (required)
	CommitLogOffset      int64  // commitLogOffset: the half message's commit-log offset (required)
	CommitOrRollback     int32  // commitOrRollback: Transaction*Type (required)
	FromTransactionCheck bool   // fromTransactionCheck
	MsgID                string // msgId (required)
	TransactionID        string // transactionId
	BrokerName           string // bname
}

// Decode reads the header. Required: producerGroup, tranStateTableOffset,
// commitLogOffset, commitOrRollback, msgId.
func (h *EndTransactionRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "EndTransactionRequest", ext: ext}
	*h = EndTransactionRequest{
		ProducerGroup:        r.str("producerGroup", true),
		TranStateTableOffset: r.i64("tranStateTableOffset", true, 0),
		CommitLogOffset:      r.i64("commitLogOffset", true, 0),
		CommitOrRollback:     r.i32("commitOrRollback", true, 0),
		FromTransactionCheck: r.boolean("fromTransactionCheck", false),
		MsgID:                r.str("msgId", true),
		TransactionID:        r.str("transactionId", false),
		BrokerName:           r.str("bname", false),
	}
	return r.err
}

// Encode writes the keys rocketmq-client-go sends.
func (h *EndTransactionRequest) Encode(ext *ExtFields) {
	ext.SetString("producerGroup", h.ProducerGroup)
	ext.SetInt("tranStateTableOffset", h.TranStateTableOffset)
	ext.SetInt("commitLogOffset", h.CommitLogOffset)
	ext.SetInt("commitOrRollback", int64(h.CommitOrRollback))
	ext.SetBool("fromTransactionCheck", h.FromTransactionCheck)
	ext.SetString("msgId", h.MsgID)
	ext.SetString("transactionId", h.TransactionID)
	setOpt(ext, "bname", h.BrokerName)
}

// CheckTransactionStateRequest is the header of CHECK_TRANSACTION_STATE (39), broker to
// producer; the body is the half message's stored record.
type CheckTransactionStateRequest struct {
	TranStateTableOffset int64  // tranStateTableOffset (required)
	CommitLogOffset      int64  // commitLogOffset (required)
	MsgID                string // msgId: UNIQ_KEY
	TransactionID        string // transactionId
	OffsetMsgID          string // offsetMsgId
	Topic                string // topic (5.x)
	BrokerName           string // brokerName (5.x)
}

// Decode reads the header. Required: tranStateTableOffset, commitLogOffset.
func (h *CheckTransactionStateRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "CheckTransactionStateRequest", ext: ext}
	*h = CheckTransactionStateRequest{
		TranStateTableOffset: r.i64("tranStateTableOffset", true, 0),
		CommitLogOffset:      r.i64("commitLogOffset", true, 0),
		MsgID:                r.str("msgId", false),
		TransactionID:        r.str("transactionId", false),
		OffsetMsgID:          r.str("offsetMsgId", false),
		Topic:                r.str("topic", false),
		BrokerName:           r.str("brokerName", false),
	}
	return r.err
}

// Encode writes the offsets and ids, and topic and brokerName when set.
func (h *CheckTransactionStateRequest) Encode(ext *ExtFields) {
	ext.SetInt("tranStateTableOffset", h.TranStateTableOffset)
	ext.SetInt("commitLogOffset", h.CommitLogOffset)
	ext.SetString("msgId", h.MsgID)
	ext.SetString("transactionId", h.TransactionID)
	ext.SetString("offsetMsgId", h.OffsetMsgID)
	setOpt(ext, "topic", h.Topic)
	setOpt(ext, "brokerName", h.BrokerName)
}

// QueryMessageRequest is the header of QUERY_MESSAGE (12).
type QueryMessageRequest struct {
	Topic          string // topic (required)
	Key            string // key (required)
	MaxNum         int32  // maxNum (required)
	BeginTimestamp int64  // beginTimestamp, ms (required)
	EndTimestamp   int64  // endTimestamp, ms (required)
	UniqueKeyQuery bool   // _UNIQUE_KEY_QUERY: Key is a UNIQ_KEY
}

// Decode reads the header. Required: topic, key, maxNum, beginTimestamp, endTimestamp.
func (h *QueryMessageRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "QueryMessageRequest", ext: ext}
	*h = QueryMessageRequest{
		Topic:          r.str("topic", true),
		Key:            r.str("key", true),
		MaxNum:         r.i32("maxNum", true, 0),
		BeginTimestamp: r.i64("beginTimestamp", true, 0),
		EndTimestamp:   r.i64("endTimestamp", true, 0),
		UniqueKeyQuery: r.boolean("_UNIQUE_KEY_QUERY", false),
	}
	return r.err
}

// Encode writes the header; _UNIQUE_KEY_QUERY only when set.
func (h *QueryMessageRequest) Encode(ext *ExtFields) {
	ext.SetString("topic", h.Topic)
	ext.SetString("key", h.Key)
	ext.SetInt("maxNum", int64(h.MaxNum))
	ext.SetInt("beginTimestamp", h.BeginTimestamp)
	ext.SetInt("endTimestamp", h.EndTimestamp)
	if h.UniqueKeyQuery {
		ext.SetString("_UNIQUE_KEY_QUERY", "true")
	}
}

// QueryMessageResponse is the response header of QUERY_MESSAGE (12).
type QueryMessageResponse struct {
	IndexLastUpdateTimestamp int64 // indexLastUpdateTimestamp (required)
	IndexLastUpdatePhyoffset int64 // indexLastUpdatePhyoffset (required)
}

// Decode reads the header; both keys are required.
func (h *QueryMessageResponse) Decode(ext *ExtFields) error {
	r := fieldReader{header: "QueryMessageResponse", ext: ext}
	*h = QueryMessageResponse{
		IndexLastUpdateTimestamp: r.i64("indexLastUpdateTimestamp", true, 0),
		IndexLastUpdatePhyoffset: r.i64("indexLastUpdatePhyoffset", true, 0),
	}
	return r.err
}

// Encode writes both keys.
func (h *QueryMessageResponse) Encode(ext *ExtFields) {
	ext.SetInt("indexLastUpdateTimestamp", h.IndexLastUpdateTimestamp)
	ext.SetInt("indexLastUpdatePhyoffset", h.IndexLastUpdatePhyoffset)
}

// ViewMessageByIDRequest is the header of VIEW_MESSAGE_BY_ID (33).
type ViewMessageByIDRequest struct {
	Offset int64  // offset: commit-log offset (required)
	Topic  string // topic (5.x, optional)
}

// Decode reads the header. Required: offset.
func (h *ViewMessageByIDRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "ViewMessageByIDRequest", ext: ext}
	*h = ViewMessageByIDRequest{Offset: r.i64("offset", true, 0), Topic: r.str("topic", false)}
	return r.err
}

// Encode writes offset, and topic when set.
func (h *ViewMessageByIDRequest) Encode(ext *ExtFields) {
	ext.SetInt("offset", h.Offset)
	setOpt(ext, "topic", h.Topic)
}

// GetRouteInfoRequest is the header of GET_ROUTEINFO_BY_TOPIC (105).
type GetRouteInfoRequest struct {
	Topic                  string // topic (required)
	AcceptStandardJSONOnly bool   // acceptStandardJsonOnly (5.x): see RouteJSONStandard
}

// Decode reads the header. Required: topic.
func (h *GetRouteInfoRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "GetRouteInfoRequest", ext: ext}
	*h = GetRouteInfoRequest{
		Topic:                  r.str("topic", true),
		AcceptStandardJSONOnly: r.boolean("acceptStandardJsonOnly", false),
	}
	return r.err
}

// Encode writes topic, and acceptStandardJsonOnly when set.
func (h *GetRouteInfoRequest) Encode(ext *ExtFields) {
	ext.SetString("topic", h.Topic)
	if h.AcceptStandardJSONOnly {
		ext.SetString("acceptStandardJsonOnly", "true")
	}
}

// RegisterBrokerRequest is the header of REGISTER_BROKER (103); the body is a
// RegisterBrokerBody.
type RegisterBrokerRequest struct {
	BrokerName             string // brokerName (required)
	BrokerAddr             string // brokerAddr, ip:port (required)
	ClusterName            string // clusterName (required)
	HAServerAddr           string // haServerAddr (required, may be empty)
	BrokerID               int64  // brokerId: 0 = master (required)
	HeartbeatTimeoutMillis int64  // heartbeatTimeoutMillis (optional; 0 when absent)
	EnableActingMaster     bool   // enableActingMaster (optional)
	Compressed             bool   // compressed: the body is the zlib form
	BodyCRC32              int32  // bodyCrc32: IEEE CRC32 of the body & 0x7FFFFFFF; 0 = don't check
}

// Decode reads the header. Required: brokerName, brokerAddr, clusterName, brokerId.
// haServerAddr is read if present (Java requires the key but it may be empty).
func (h *RegisterBrokerRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "RegisterBrokerRequest", ext: ext}
	*h = RegisterBrokerRequest{
		BrokerName:             r.str("brokerName", true),
		BrokerAddr:             r.str("brokerAddr", true),
		ClusterName:            r.str("clusterName", true),
		HAServerAddr:           r.str("haServerAddr", false),
		BrokerID:               r.i64("brokerId", true, 0),
		HeartbeatTimeoutMillis: r.i64("heartbeatTimeoutMillis", false, 0),
		EnableActingMaster:     r.boolean("enableActingMaster", false),
		Compressed:             r.boolean("compressed", false),
		BodyCRC32:              r.i32("bodyCrc32", false, 0),
	}
	return r.err
}

// Encode writes the header; heartbeatTimeoutMillis only when non-zero.
func (h *RegisterBrokerRequest) Encode(ext *ExtFields) {
	ext.SetString("brokerName", h.BrokerName)
	ext.SetString("brokerAddr", h.BrokerAddr)
	ext.SetString("clusterName", h.ClusterName)
	ext.SetString("haServerAddr", h.HAServerAddr)
	ext.SetInt("brokerId", h.BrokerID)
	if h.HeartbeatTimeoutMillis != 0 {
		ext.SetInt("heartbeatTimeoutMillis", h.HeartbeatTimeoutMillis)
	}
	ext.SetBool("enableActingMaster", h.EnableActingMaster)
	ext.SetBool("compressed", h.Compressed)
	ext.SetInt("bodyCrc32", int64(h.BodyCRC32))
}

// RegisterBrokerResponse is the response header of REGISTER_BROKER (103).
type RegisterBrokerResponse struct {
	HAServerAddr string // haServerAddr
	MasterAddr   string // masterAddr
}

// Decode reads the header; both keys are optional.
func (h *RegisterBrokerResponse) Decode(ext *ExtFields) error {
	r := fieldReader{header: "RegisterBrokerResponse", ext: ext}
	*h = RegisterBrokerResponse{HAServerAddr: r.str("haServerAddr", false), MasterAddr: r.str("masterAddr", false)}
	return r.err
}

// Encode writes both keys.
func (h *RegisterBrokerResponse) Encode(ext *ExtFields) {
	ext.SetString("haServerAddr", h.HAServerAddr)
	ext.SetString("masterAddr", h.MasterAddr)
}

// UnregisterBrokerRequest is the header of UNREGISTER_BROKER (104).
type UnregisterBrokerRequest struct {
	BrokerName  string // brokerName (required)
	BrokerAddr  string // brokerAddr (required)
	ClusterName string // clusterName (required)
	BrokerID    int64  // brokerId (required)
}

// Decode reads the header; all keys are required.
func (h *UnregisterBrokerRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "UnregisterBrokerRequest", ext: ext}
	*h = UnregisterBrokerRequest{
		BrokerName:  r.str("brokerName", true),
		BrokerAddr:  r.str("brokerAddr", true),
		ClusterName: r.str("clusterName", true),
		BrokerID:    r.i64("brokerId", true, 0),
	}
	return r.err
}

// Encode writes all keys.
func (h *UnregisterBrokerRequest) Encode(ext *ExtFields) {
	ext.SetString("brokerName", h.BrokerName)
	ext.SetString("brokerAddr", h.BrokerAddr)
	ext.SetString("clusterName", h.ClusterName)
	ext.SetInt("brokerId", h.BrokerID)
}

// CreateTopicRequest is the header of UPDATE_AND_CREATE_TOPIC (17).
type CreateTopicRequest struct {
	Topic           string // topic (required)
	DefaultTopic    string // defaultTopic (required)
	ReadQueueNums   int32  // readQueueNums (required)
	WriteQueueNums  int32  // writeQueueNums (required)
	Perm            int32  // perm, Perm* bits (required)
	TopicFilterType string // topicFilterType: SINGLE_TAG or MULTI_TAG (required)
	TopicSysFlag    int32  // topicSysFlag
	Order           bool   // order
	Attributes      string // attributes (5.x): "+key=value,..." text
	Force           bool   // force (5.x)
}

// Decode reads the header. Required: topic, defaultTopic, readQueueNums,
// writeQueueNums, perm, topicFilterType.
func (h *CreateTopicRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "CreateTopicRequest", ext: ext}
	*h = CreateTopicRequest{
		Topic:           r.str("topic", true),
		DefaultTopic:    r.str("defaultTopic", true),
		ReadQueueNums:   r.i32("readQueueNums", true, 0),
		WriteQueueNums:  r.i32("writeQueueNums", true, 0),
		Perm:            r.i32("perm", true, 0),
		TopicFilterType: r.str("topicFilterType", true),
		TopicSysFlag:    r.i32("topicSysFlag", false, 0),
		Order:           r.boolean("order", false),
		Attributes:      r.str("attributes", false),
		Force:           r.boolean("force", false),
	}
	return r.err
}

// Encode writes the keys rocketmq-client-go's admin sends; attributes and force when set.
func (h *CreateTopicRequest) Encode(ext *ExtFields) {
	ext.SetString("topic", h.Topic)
	ext.SetString("defaultTopic", h.DefaultTopic)
	ext.SetInt("readQueueNums", int64(h.ReadQueueNums))
	ext.SetInt("writeQueueNums", int64(h.WriteQueueNums))
	ext.SetInt("perm", int64(h.Perm))
	ext.SetString("topicFilterType", h.TopicFilterType)
	ext.SetInt("topicSysFlag", int64(h.TopicSysFlag))
	ext.SetBool("order", h.Order)
	setOpt(ext, "attributes", h.Attributes)
	if h.Force {
		ext.SetString("force", "true")
	}
}

// DeleteTopicRequest is the header of DELETE_TOPIC_IN_BROKER (215) and
// DELETE_TOPIC_IN_NAMESRV (216).
type DeleteTopicRequest struct {
	Topic string // topic (required)
}

// Decode reads the header.
func (h *DeleteTopicRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "DeleteTopicRequest", ext: ext}
	*h = DeleteTopicRequest{Topic: r.str("topic", true)}
	return r.err
}

// Encode writes topic.
func (h *DeleteTopicRequest) Encode(ext *ExtFields) { ext.SetString("topic", h.Topic) }

// UnregisterClientRequest is the header of UNREGISTER_CLIENT (35), sent by Java clients only.
type UnregisterClientRequest struct {
	ClientID      string // clientID (required)
	ProducerGroup string // producerGroup (optional)
	ConsumerGroup string // consumerGroup (optional)
}

// Decode reads the header. Required: clientID.
func (h *UnregisterClientRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "UnregisterClientRequest", ext: ext}
	*h = UnregisterClientRequest{
		ClientID:      r.str("clientID", true),
		ProducerGroup: r.str("producerGroup", false),
		ConsumerGroup: r.str("consumerGroup", false),
	}
	return r.err
}

// Encode writes clientID, and the groups when set.
func (h *UnregisterClientRequest) Encode(ext *ExtFields) {
	ext.SetString("clientID", h.ClientID)
	setOpt(ext, "producerGroup", h.ProducerGroup)
	setOpt(ext, "consumerGroup", h.ConsumerGroup)
}

// ResetOffsetRequest is the header of RESET_CONSUMER_CLIENT_OFFSET (220, broker to
// client) and INVOKE_BROKER_TO_RESET_OFFSET (222, admin to broker).
type ResetOffsetRequest struct {
	Topic     string // topic (required)
	Group     string // group (required)
	Timestamp int64  // timestamp, ms (required)
	IsForce   bool   // isForce
	QueueID   int32  // queueId (5.x); -1 when absent
	Offset    int64  // offset (5.x); -1 when absent
}

// Decode reads the header. Required: topic, group, timestamp.
func (h *ResetOffsetRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "ResetOffsetRequest", ext: ext}
	*h = ResetOffsetRequest{
		Topic:     r.str("topic", true),
		Group:     r.str("group", true),
		Timestamp: r.i64("timestamp", true, 0),
		IsForce:   r.boolean("isForce", false),
		QueueID:   r.i32("queueId", false, -1),
		Offset:    r.i64("offset", false, -1),
	}
	return r.err
}

// Encode writes topic, group, timestamp, isForce, and queueId and offset when >= 0.
func (h *ResetOffsetRequest) Encode(ext *ExtFields) {
	ext.SetString("topic", h.Topic)
	ext.SetString("group", h.Group)
	ext.SetInt("timestamp", h.Timestamp)
	ext.SetBool("isForce", h.IsForce)
	if h.QueueID >= 0 {
		ext.SetInt("queueId", int64(h.QueueID))
	}
	if h.Offset >= 0 {
		ext.SetInt("offset", h.Offset)
	}
}

// GetConsumerRunningInfoRequest is the header of GET_CONSUMER_RUNNING_INFO (307), broker
// (on behalf of an admin tool) to client.
type GetConsumerRunningInfoRequest struct {
	ConsumerGroup string // consumerGroup (required)
	ClientID      string // clientId (required)
	JstackEnable  bool   // jstackEnable
}

// Decode reads the header. Required: consumerGroup, clientId.
func (h *GetConsumerRunningInfoRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "GetConsumerRunningInfoRequest", ext: ext}
	*h = GetConsumerRunningInfoRequest{
		ConsumerGroup: r.str("consumerGroup", true),
		ClientID:      r.str("clientId", true),
		JstackEnable:  r.boolean("jstackEnable", false),
	}
	return r.err
}

// Encode writes all keys.
func (h *GetConsumerRunningInfoRequest) Encode(ext *ExtFields) {
	ext.SetString("consumerGroup", h.ConsumerGroup)
	ext.SetString("clientId", h.ClientID)
	ext.SetBool("jstackEnable", h.JstackEnable)
}

// ConsumeMessageDirectlyRequest is the header of CONSUME_MESSAGE_DIRECTLY (309), broker to
// client; the body is one stored record.
type ConsumeMessageDirectlyRequest struct {
	ConsumerGroup string // consumerGroup (required)
	ClientID      string // clientId
	MsgID         string // msgId
	BrokerName    string // brokerName
}

// Decode reads the header. Required: consumerGroup.
func (h *ConsumeMessageDirectlyRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "ConsumeMessageDirectlyRequest", ext: ext}
	*h = ConsumeMessageDirectlyRequest{
		ConsumerGroup: r.str("consumerGroup", true),
		ClientID:      r.str("clientId", false),
		MsgID:         r.str("msgId", false),
		BrokerName:    r.str("brokerName", false),
	}
	return r.err
}

// Encode writes consumerGroup, clientId and msgId, and brokerName when set.
func (h *ConsumeMessageDirectlyRequest) Encode(ext *ExtFields) {
	ext.SetString("consumerGroup", h.ConsumerGroup)
	ext.SetString("clientId", h.ClientID)
	ext.SetString("msgId", h.MsgID)
	setOpt(ext, "brokerName", h.BrokerName)
}

// GetConsumerStatusRequest is the header of GET_CONSUMER_STATUS_FROM_CLIENT (221) and
// INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223).
type GetConsumerStatusRequest struct {
	Topic      string // topic (required)
	Group      string // group (required)
	ClientAddr string // clientAddr (optional)
}

// Decode reads the header. Required: topic, group.
func (h *GetConsumerStatusRequest) Decode(ext *ExtFields) error {
	r := fieldReader{header: "GetConsumerStatusRequest", ext: ext}
	*h = GetConsumerStatusRequest{
		Topic:      r.str("topic", true),
		Group:      r.str("group", true),
		ClientAddr: r.str("clientAddr", false),
	}
	return r.err
}

// Encode writes topic and group, and clientAddr when set.
func (h *GetConsumerStatusRequest) Encode(ext *ExtFields) {
	ext.SetString("topic", h.Topic)
	ext.SetString("group", h.Group)
	setOpt(ext, "clientAddr", h.ClientAddr)
}
