package protocol

// PullMessageRequest is the header of PULL_MESSAGE (11). The required keys are the ones
// the Java broker requires.
type PullMessageRequest struct {
	ConsumerGroup        []byte `rmq:"consumerGroup,required"`
	Topic                []byte `rmq:"topic,required"`
	QueueID              int32  `rmq:"queueId,required"`
	QueueOffset          int64  `rmq:"queueOffset,required"`
	MaxMsgNums           int32  `rmq:"maxMsgNums,required"`
	SysFlag              int32  `rmq:"sysFlag,required"` // PullFlag* bits
	CommitOffset         int64  `rmq:"commitOffset,required"`
	SuspendTimeoutMillis int64  `rmq:"suspendTimeoutMillis,required"`
	Subscription         []byte `rmq:"subscription"` // the expression; "" unless PullFlagSubscription
	SubVersion           int64  `rmq:"subVersion,required"`
	ExpressionType       []byte `rmq:"expressionType"`        // "TAG", "SQL92" or "" (= TAG)
	MaxMsgBytes          int32  `rmq:"maxMsgBytes,omitempty"` // 5.x; 0 when absent
	BrokerName           []byte `rmq:"bname,omitempty"`
}

// PullMessageResponse is the header of a pull response. All four keys must be present on
// codes 0/19/20/21: rocketmq-client-go reads a missing nextBeginOffset as 0 and resets
// the consumer, and follows a non-zero suggestWhichBrokerId to a slave.
type PullMessageResponse struct {
	SuggestWhichBrokerID int64 `rmq:"suggestWhichBrokerId,required"` // 0 (master) unless slaves exist
	NextBeginOffset      int64 `rmq:"nextBeginOffset,required"`
	MinOffset            int64 `rmq:"minOffset,required"`
	MaxOffset            int64 `rmq:"maxOffset,required"`
}
