package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/apogeemq/apogee/internal/javacompat"
)

// JSON bodies. They are off the hot path and use encoding/json, with the quirks of the
// Java (fastjson) and Go peers handled explicitly: heartbeat codeSet entries may be
// strings, 64-bit integers never go through float64, maps with integer keys may arrive
// with unquoted keys, and slices are written as [] rather than null.
//
// Each body type has Encode() ([]byte, error) and Decode([]byte) error. Decode errors
// wrap ErrBadBody.

// DataVersion versions a broker's or name server's table (topics, subscription groups,
// offsets).
type DataVersion struct {
	StateVersion int64 `json:"stateVersion"`
	Timestamp    int64 `json:"timestamp"` // ms
	Counter      int64 `json:"counter"`
}

// HeartbeatData is the body of HEART_BEAT (34).
type HeartbeatData struct {
	ClientID        string         `json:"clientID"`
	ProducerDataSet []ProducerData `json:"producerDataSet"`
	ConsumerDataSet []ConsumerData `json:"consumerDataSet"`
}

// ProducerData names a producer group of the client.
type ProducerData struct {
	GroupName string `json:"groupName"`
}

// ConsumerData describes a consumer group of the client and its subscriptions.
type ConsumerData struct {
	GroupName           string             `json:"groupName"`
	ConsumeType         string             `json:"consumeType"`      // CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)
	MessageModel        string             `json:"messageModel"`     // CLUSTERING or BROADCASTING
	ConsumeFromWhere    string             `json:"consumeFromWhere"` // CONSUME_FROM_LAST_OFFSET, _FIRST_OFFSET, _TIMESTAMP
	SubscriptionDataSet []SubscriptionData `json:"subscriptionDataSet"`
	UnitMode            bool               `json:"unitMode"`
}

// SubscriptionData is one topic subscription. rocketmq-client-go writes codeSet entries
// as strings and Java clients as numbers; both decode. codeSet holds tag hashes, which a
// broker should recompute from TagsSet (the Go client hashes UTF-8 bytes, Java UTF-16).
type SubscriptionData struct {
	ClassFilterMode bool     `json:"classFilterMode"`
	Topic           string   `json:"topic"`
	SubString       string   `json:"subString"` // "*", "a || b", or an SQL92 expression
	TagsSet         []string `json:"tagsSet"`
	CodeSet         []int32  `json:"codeSet"`
	SubVersion      int64    `json:"subVersion"`     // rocketmq-client-go: UnixNano
	ExpressionType  string   `json:"expressionType"` // TAG, SQL92, or "" (= TAG)
}

// UnmarshalJSON accepts codeSet entries as numbers or numeric strings (an entry that is
// neither is skipped: brokers recompute codes from tags) and subVersion as a number or a
// numeric string, parsed as int64 without going through float64.
func (s *SubscriptionData) UnmarshalJSON(b []byte) error {
	type plain SubscriptionData
	var aux struct {
		plain
		CodeSet    []json.RawMessage `json:"codeSet"`
		SubVersion json.RawMessage   `json:"subVersion"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*s = SubscriptionData(aux.plain)
	s.CodeSet = nil
	for _, raw := range aux.CodeSet {
		if n, ok := lenientInt(raw); ok {
			s.CodeSet = append(s.CodeSet, int32(n)) // int32 wrap, as Java's String.hashCode
		}
	}
	s.SubVersion = 0
	if len(aux.SubVersion) > 0 && string(aux.SubVersion) != "null" {
		n, ok := lenientInt(aux.SubVersion)
		if !ok {
			return &json.UnmarshalTypeError{Value: string(aux.SubVersion), Field: "subVersion"}
		}
		s.SubVersion = n
	}
	return nil
}

// lenientInt parses a JSON integer or a JSON string holding one.
func lenientInt(raw json.RawMessage) (int64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		return javacompat.ParseInt64([]byte(strings.TrimSpace(s)))
	}
	return javacompat.ParseInt64(raw)
}

// Encode writes the heartbeat as JSON. Empty sets are written as [].
func (h *HeartbeatData) Encode() ([]byte, error) {
	cp := *h
	cp.ProducerDataSet = nonNil(cp.ProducerDataSet)
	cp.ConsumerDataSet = make([]ConsumerData, len(h.ConsumerDataSet))
	for i, c := range h.ConsumerDataSet {
		c.SubscriptionDataSet = make([]SubscriptionData, len(c.SubscriptionDataSet))
		for j, s := range h.ConsumerDataSet[i].SubscriptionDataSet {
			s.TagsSet = nonNil(s.TagsSet)
			s.CodeSet = nonNil(s.CodeSet)
			c.SubscriptionDataSet[j] = s
		}
		cp.ConsumerDataSet[i] = c
	}
	return json.Marshal(&cp)
}

// Decode parses a heartbeat body.
func (h *HeartbeatData) Decode(body []byte) error {
	*h = HeartbeatData{}
	if err := json.Unmarshal(body, h); err != nil {
		return bodyErr("HeartbeatData", err)
	}
	return nil
}

// ConsumerListBody is the body of a GET_CONSUMER_LIST_BY_GROUP (38) response. It must
// list the exact clientIDs from heartbeats, the caller's own included.
type ConsumerListBody struct {
	ConsumerIDList []string `json:"consumerIdList"`
}

// Encode writes {"consumerIdList":[...]}.
func (b *ConsumerListBody) Encode() ([]byte, error) {
	return json.Marshal(ConsumerListBody{ConsumerIDList: nonNil(b.ConsumerIDList)})
}

// Decode parses the body.
func (b *ConsumerListBody) Decode(body []byte) error {
	*b = ConsumerListBody{}
	if err := json.Unmarshal(body, b); err != nil {
		return bodyErr("ConsumerListBody", err)
	}
	return nil
}

// MessageQueue identifies a queue: topic, broker name, queue id.
type MessageQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
}

// LockBatchRequestBody is the body of LOCK_BATCH_MQ (41).
type LockBatchRequestBody struct {
	ConsumerGroup  string         `json:"consumerGroup"`
	ClientID       string         `json:"clientId"`
	OnlyThisBroker bool           `json:"onlyThisBroker"`
	MQSet          []MessageQueue `json:"mqSet"`
}

// Encode writes the body; an empty mqSet as [].
func (b *LockBatchRequestBody) Encode() ([]byte, error) {
	cp := *b
	cp.MQSet = nonNil(cp.MQSet)
	return json.Marshal(&cp)
}

// Decode parses the body.
func (b *LockBatchRequestBody) Decode(body []byte) error {
	*b = LockBatchRequestBody{}
	if err := json.Unmarshal(body, b); err != nil {
		return bodyErr("LockBatchRequestBody", err)
	}
	return nil
}

// UnlockBatchRequestBody is the body of UNLOCK_BATCH_MQ (42); same shape as the lock request.
type UnlockBatchRequestBody LockBatchRequestBody

// Encode writes the body; an empty mqSet as [].
func (b *UnlockBatchRequestBody) Encode() ([]byte, error) {
	return (*LockBatchRequestBody)(b).Encode()
}

// Decode parses the body.
func (b *UnlockBatchRequestBody) Decode(body []byte) error {
	*b = UnlockBatchRequestBody{}
	if err := json.Unmarshal(body, (*LockBatchRequestBody)(b)); err != nil {
		return bodyErr("UnlockBatchRequestBody", err)
	}
	return nil
}

// LockBatchResponseBody is the body of a LOCK_BATCH_MQ (41) response: the queues now
// locked by the caller.
type LockBatchResponseBody struct {
	LockOKMQSet []MessageQueue `json:"lockOKMQSet"`
}

// Encode writes {"lockOKMQSet":[...]}.
func (b *LockBatchResponseBody) Encode() ([]byte, error) {
	return json.Marshal(LockBatchResponseBody{LockOKMQSet: nonNil(b.LockOKMQSet)})
}

// Decode parses the body.
func (b *LockBatchResponseBody) Decode(body []byte) error {
	*b = LockBatchResponseBody{}
	if err := json.Unmarshal(body, b); err != nil {
		return bodyErr("LockBatchResponseBody", err)
	}
	return nil
}

// TopicConfig is a broker's configuration of one topic.
type TopicConfig struct {
	TopicName       string            `json:"topicName"`
	ReadQueueNums   int32             `json:"readQueueNums"`
	WriteQueueNums  int32             `json:"writeQueueNums"`
	Perm            int32             `json:"perm"`
	TopicFilterType string            `json:"topicFilterType"` // SINGLE_TAG or MULTI_TAG
	TopicSysFlag    int32             `json:"topicSysFlag"`
	Order           bool              `json:"order"`
	Attributes      map[string]string `json:"attributes,omitempty"` // 5.x
}

// TopicConfigSerializeWrapper is a broker's topic table: the body of GET_ALL_TOPIC_CONFIG
// (21), the topicConfigSerializeWrapper of REGISTER_BROKER, and config/topics.json.
type TopicConfigSerializeWrapper struct {
	TopicConfigTable map[string]*TopicConfig `json:"topicConfigTable"`
	DataVersion      DataVersion             `json:"dataVersion"`
}

// Encode writes the table (keys sorted); an empty table as {}.
func (w *TopicConfigSerializeWrapper) Encode() ([]byte, error) {
	cp := *w
	if cp.TopicConfigTable == nil {
		cp.TopicConfigTable = map[string]*TopicConfig{}
	}
	return json.Marshal(&cp)
}

// Decode parses the wrapper.
func (w *TopicConfigSerializeWrapper) Decode(body []byte) error {
	*w = TopicConfigSerializeWrapper{}
	if err := json.Unmarshal(body, w); err != nil {
		return bodyErr("TopicConfigSerializeWrapper", err)
	}
	return nil
}

// RegisterBrokerBody is the uncompressed body of REGISTER_BROKER (103). (The compressed
// form, RegisterBrokerRequest.Compressed, is not implemented; Java brokers send it only
// with compressedRegister=true.)
type RegisterBrokerBody struct {
	TopicConfigSerializeWrapper TopicConfigSerializeWrapper `json:"topicConfigSerializeWrapper"`
	FilterServerList            []string                    `json:"filterServerList"`
}

// Encode writes the body; empty lists and tables as [] and {}.
func (b *RegisterBrokerBody) Encode() ([]byte, error) {
	cp := *b
	if cp.TopicConfigSerializeWrapper.TopicConfigTable == nil {
		cp.TopicConfigSerializeWrapper.TopicConfigTable = map[string]*TopicConfig{}
	}
	cp.FilterServerList = nonNil(cp.FilterServerList)
	return json.Marshal(&cp)
}

// Decode parses the body.
func (b *RegisterBrokerBody) Decode(body []byte) error {
	*b = RegisterBrokerBody{}
	if err := json.Unmarshal(body, b); err != nil {
		return bodyErr("RegisterBrokerBody", err)
	}
	return nil
}

// SubscriptionGroupConfig is a broker's configuration of one consumer group.
type SubscriptionGroupConfig struct {
	GroupName                      string            `json:"groupName"`
	ConsumeEnable                  bool              `json:"consumeEnable"`
	ConsumeFromMinEnable           bool              `json:"consumeFromMinEnable"`
	ConsumeBroadcastEnable         bool              `json:"consumeBroadcastEnable"`
	ConsumeMessageOrderly          bool              `json:"consumeMessageOrderly"`
	RetryQueueNums                 int32             `json:"retryQueueNums"`
	RetryMaxTimes                  int32             `json:"retryMaxTimes"`
	BrokerID                       int64             `json:"brokerId"`
	WhichBrokerWhenConsumeSlowly   int64             `json:"whichBrokerWhenConsumeSlowly"`
	NotifyConsumerIdsChangedEnable bool              `json:"notifyConsumerIdsChangedEnable"`
	GroupSysFlag                   int32             `json:"groupSysFlag"`
	ConsumeTimeoutMinute           int32             `json:"consumeTimeoutMinute"`
	GroupRetryPolicy               json.RawMessage   `json:"groupRetryPolicy,omitempty"` // 5.x, kept as is
	Attributes                     map[string]string `json:"attributes,omitempty"`       // 5.x
}

// DefaultSubscriptionGroupConfig returns the Java broker's defaults for an auto-created
// group: consumption enabled, 1 retry queue, 16 retries, notify on membership change.
func DefaultSubscriptionGroupConfig(group string) SubscriptionGroupConfig {
	return SubscriptionGroupConfig{
		GroupName: group, ConsumeEnable: true, ConsumeFromMinEnable: true, ConsumeBroadcastEnable: true,
		RetryQueueNums: 1, RetryMaxTimes: 16, BrokerID: 0, WhichBrokerWhenConsumeSlowly: 1,
		NotifyConsumerIdsChangedEnable: true, ConsumeTimeoutMinute: 15,
	}
}

// SubscriptionGroupWrapper is the body of GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) and
// config/subscriptionGroup.json.
type SubscriptionGroupWrapper struct {
	SubscriptionGroupTable map[string]*SubscriptionGroupConfig `json:"subscriptionGroupTable"`
	DataVersion            DataVersion                         `json:"dataVersion"`
}

// Encode writes the wrapper (keys sorted); an empty table as {}.
func (w *SubscriptionGroupWrapper) Encode() ([]byte, error) {
	cp := *w
	if cp.SubscriptionGroupTable == nil {
		cp.SubscriptionGroupTable = map[string]*SubscriptionGroupConfig{}
	}
	return json.Marshal(&cp)
}

// Decode parses the wrapper.
func (w *SubscriptionGroupWrapper) Decode(body []byte) error {
	*w = SubscriptionGroupWrapper{}
	if err := json.Unmarshal(body, w); err != nil {
		return bodyErr("SubscriptionGroupWrapper", err)
	}
	return nil
}

// TopicList is the body of GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) and similar listings.
type TopicList struct {
	TopicList  []string `json:"topicList"`
	BrokerAddr string   `json:"brokerAddr,omitempty"`
}

// Encode writes the list; an empty one as [].
func (l *TopicList) Encode() ([]byte, error) {
	return json.Marshal(TopicList{TopicList: nonNil(l.TopicList), BrokerAddr: l.BrokerAddr})
}

// Decode parses the list.
func (l *TopicList) Decode(body []byte) error {
	*l = TopicList{}
	if err := json.Unmarshal(body, l); err != nil {
		return bodyErr("TopicList", err)
	}
	return nil
}

// KVTable is a string table: the optional body of a REGISTER_BROKER response (order-topic
// configuration) and of GET_KVLIST_BY_NAMESPACE.
type KVTable struct {
	Table map[string]string `json:"table"`
}

// Encode writes {"table":{...}} with sorted keys.
func (t *KVTable) Encode() ([]byte, error) {
	cp := *t
	if cp.Table == nil {
		cp.Table = map[string]string{}
	}
	return json.Marshal(&cp)
}

// Decode parses the table.
func (t *KVTable) Decode(body []byte) error {
	*t = KVTable{}
	if err := json.Unmarshal(body, t); err != nil {
		return bodyErr("KVTable", err)
	}
	return nil
}

// ConsumerOffsetSerializeWrapper is config/consumerOffset.json and the body of
// GET_ALL_CONSUMER_OFFSET (43): committed offsets by "topic@group" key, then queue id.
type ConsumerOffsetSerializeWrapper struct {
	OffsetTable map[string]map[int32]int64 `json:"offsetTable"`
	DataVersion DataVersion                `json:"dataVersion"`
}

// OffsetTableKey returns the offset table key of a topic and a group: "topic@group".
func OffsetTableKey(topic, group string) string { return topic + "@" + group }

// SplitOffsetTableKey splits "topic@group" at its first '@' (topic names cannot hold one).
func SplitOffsetTableKey(key string) (topic, group string, ok bool) {
	return strings.Cut(key, "@")
}

// Encode writes the table with quoted queue-id keys, sorted.
func (w *ConsumerOffsetSerializeWrapper) Encode() ([]byte, error) {
	cp := *w
	if cp.OffsetTable == nil {
		cp.OffsetTable = map[string]map[int32]int64{}
	}
	return json.Marshal(&cp)
}

// Decode parses the wrapper; queue-id keys may be quoted or bare (as fastjson writes them).
func (w *ConsumerOffsetSerializeWrapper) Decode(body []byte) error {
	*w = ConsumerOffsetSerializeWrapper{}
	if err := json.Unmarshal(quoteBareKeys(body), w); err != nil {
		return bodyErr("ConsumerOffsetSerializeWrapper", err)
	}
	return nil
}

// DelayOffsetSerializeWrapper is config/delayOffset.json: the schedule-topic progress by
// delay level.
type DelayOffsetSerializeWrapper struct {
	OffsetTable map[int32]int64 `json:"offsetTable"`
	DataVersion *DataVersion    `json:"dataVersion,omitempty"` // 5.x
}

// Encode writes the table with quoted, sorted level keys.
func (w *DelayOffsetSerializeWrapper) Encode() ([]byte, error) {
	cp := *w
	if cp.OffsetTable == nil {
		cp.OffsetTable = map[int32]int64{}
	}
	return json.Marshal(&cp)
}

// Decode parses the wrapper; level keys may be quoted or bare.
func (w *DelayOffsetSerializeWrapper) Decode(body []byte) error {
	*w = DelayOffsetSerializeWrapper{}
	if err := json.Unmarshal(quoteBareKeys(body), w); err != nil {
		return bodyErr("DelayOffsetSerializeWrapper", err)
	}
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// String renders a MessageQueue for logs.
func (mq MessageQueue) String() string {
	return mq.Topic + "@" + mq.BrokerName + ":" + strconv.Itoa(int(mq.QueueID))
}
