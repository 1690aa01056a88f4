package protocol

// SendMessageRequest is the header of SEND_MESSAGE (10, long keys), SEND_MESSAGE_V2 (310)
// and SEND_BATCH_MESSAGE (320) (short keys "a".."n"), and of SEND_REPLY_MESSAGE (324/325).
// Decode accepts both key sets; Encode writes long keys, EncodeV2 short ones. Java's
// SendMessageRequestHeader also requires defaultTopic and defaultTopicQueueNums; every
// client sends them, and Apogee does not need them.
type SendMessageRequest struct {
	ProducerGroup         []byte `rmq:"producerGroup,short=a,required"`
	Topic                 []byte `rmq:"topic,short=b,required"`
	DefaultTopic          []byte `rmq:"defaultTopic,short=c"` // "TBW102"
	DefaultTopicQueueNums int32  `rmq:"defaultTopicQueueNums,short=d"`
	QueueID               int32  `rmq:"queueId,short=e,required"`
	SysFlag               int32  `rmq:"sysFlag,short=f,required"`
	BornTimestamp         int64  `rmq:"bornTimestamp,short=g,required"` // ms
	Flag                  int32  `rmq:"flag,short=h,required"`          // the user flag
	Properties            []byte `rmq:"properties,short=i"`             // key\x01value\x02...
	ReconsumeTimes        int32  `rmq:"reconsumeTimes,short=j"`
	UnitMode              bool   `rmq:"unitMode,short=k"`
	// MaxReconsumeTimes is the sender's limit for a message sent back to a retry topic;
	// without it (HasMaxReconsumeTimes false) the broker uses the group's setting.
	MaxReconsumeTimes    int32  `rmq:"maxReconsumeTimes,short=l,has=HasMaxReconsumeTimes"`
	HasMaxReconsumeTimes bool   // maxReconsumeTimes is present
	Batch                bool   `rmq:"batch,short=m"`
	BrokerName           []byte `rmq:"bname,short=n,omitempty"` // 5.x; may be absent or empty
}

// SendMessageResponse is the header of a send response.
type SendMessageResponse struct {
	MsgID         []byte `rmq:"msgId,required"` // offset message id, 32 hex chars for IPv4; comma-joined for batches
	QueueID       int32  `rmq:"queueId,required"`
	QueueOffset   int64  `rmq:"queueOffset,required"`    // consume-queue offset of the (first) message
	TransactionID []byte `rmq:"transactionId,omitempty"` // the message's UNIQ_KEY for transactional sends
	Region        []byte `rmq:"MSG_REGION,omitempty"`    // rocketmq-client-go uses "DefaultRegion" when empty
	TraceOn       bool   `rmq:"TRACE_ON"`
	// RecallHandle names a timer message for RECALL_MESSAGE (370; RocketMQ
	// 5.3.1+ sends it for timer messages only).
	RecallHandle []byte `rmq:"recallHandle,omitempty"`
}

// ReplyMessageRequest is the header of PUSH_REPLY_MESSAGE_TO_CLIENT (326), broker to the
// requesting client: the reply's send header (SEND_REPLY_MESSAGE's, V1 keys) plus where
// it came from and when the broker pushed it (Java's ReplyMessageRequestHeader). The
// body is the reply's body as sent.
type ReplyMessageRequest struct {
	ProducerGroup         string `rmq:"producerGroup,required"`
	Topic                 string `rmq:"topic,required"`
	DefaultTopic          string `rmq:"defaultTopic"`
	DefaultTopicQueueNums int32  `rmq:"defaultTopicQueueNums"`
	QueueID               int32  `rmq:"queueId,required"`
	SysFlag               int32  `rmq:"sysFlag,required"`
	BornTimestamp         int64  `rmq:"bornTimestamp,required"` // ms
	Flag                  int32  `rmq:"flag,required"`
	Properties            string `rmq:"properties"`
	ReconsumeTimes        int32  `rmq:"reconsumeTimes"`
	UnitMode              bool   `rmq:"unitMode"`
	BornHost              string `rmq:"bornHost,required"`  // the replier's address, as Java writes it: "/ip:port"
	StoreHost             string `rmq:"storeHost,required"` // the broker's, the same way
	StoreTimestamp        int64  `rmq:"storeTimestamp,required"`
}
