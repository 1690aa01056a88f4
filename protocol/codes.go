package protocol

// Request codes (Java org.apache.rocketmq.remoting.protocol.RequestCode). Directions:
// C = client, B = broker, NS = name server. "GoC" notes what rocketmq-client-go does.
const (
	ReqSendMessage              int32 = 10 // C→B, single message, long-key header (GoC)
	ReqPullMessage              int32 = 11 // C→B
	ReqQueryMessage             int32 = 12 // C→B, by key
	ReqQueryBrokerOffset        int32 = 13
	ReqQueryConsumerOffset      int32 = 14 // C→B
	ReqUpdateConsumerOffset     int32 = 15 // C→B ("oneway" in GoC, but without the flag)
	ReqUpdateAndCreateTopic     int32 = 17 // admin → B
	ReqUpdateAndCreateTopicList int32 = 18
	ReqGetAllTopicConfig        int32 = 21 // → B, body TopicConfigSerializeWrapper
	ReqGetTopicConfigList       int32 = 22
	ReqGetTopicNameList         int32 = 23
	ReqUpdateBrokerConfig       int32 = 25
	ReqGetBrokerConfig          int32 = 26
	ReqTriggerDeleteFiles       int32 = 27
	ReqGetBrokerRuntimeInfo     int32 = 28
	ReqSearchOffsetByTimestamp  int32 = 29 // C→B
	ReqGetMaxOffset             int32 = 30 // C→B
	ReqGetMinOffset             int32 = 31 // C→B
	ReqGetEarliestMsgStoretime  int32 = 32
	ReqViewMessageByID          int32 = 33
	ReqHeartBeat                int32 = 34 // C→B, body HeartbeatData
	ReqUnregisterClient         int32 = 35 // Java clients only
	ReqConsumerSendMsgBack      int32 = 36 // C→B
	ReqEndTransaction           int32 = 37 // C→B
	ReqGetConsumerListByGroup   int32 = 38 // C→B, response body ConsumerListBody
	ReqCheckTransactionState    int32 = 39 // B→C
	ReqNotifyConsumerIdsChanged int32 = 40 // B→C
	ReqLockBatchMQ              int32 = 41 // C→B, body LockBatchRequestBody
	ReqUnlockBatchMQ            int32 = 42 // C→B, body UnlockBatchRequestBody
	ReqGetAllConsumerOffset     int32 = 43
	ReqGetAllDelayOffset        int32 = 45
	// ReqApogeeGetLiteConsumerOffsets: Apogee-only (no RocketMQ code): a
	// page of the lite consumer offsets changed since a slave's last sync,
	// body LiteConsumerOffsetsRequest → LiteConsumerOffsetsBody.
	ReqApogeeGetLiteConsumerOffsets int32 = 90045
	ReqCheckClientConfig            int32 = 46
	ReqGetClientConfig              int32 = 47
	ReqGetTimerCheckPoint           int32 = 60
	ReqGetTimerMetrics              int32 = 61
	ReqPutKVConfig                  int32 = 100
	ReqGetKVConfig                  int32 = 101
	ReqDeleteKVConfig               int32 = 102
	ReqRegisterBroker               int32 = 103 // B→NS
	ReqUnregisterBroker             int32 = 104 // B→NS
	ReqGetRouteInfoByTopic          int32 = 105 // C→NS, response body TopicRouteData
	ReqGetBrokerClusterInfo         int32 = 106 // C→NS, response body ClusterInfo
	ReqUpdateAndCreateSubscription  int32 = 200
	ReqGetAllSubscriptionGroup      int32 = 201 // → B, body SubscriptionGroupWrapper
	ReqGetTopicStatsInfo            int32 = 202
	ReqGetConsumerConnectionList    int32 = 203
	ReqGetProducerConnectionList    int32 = 204
	ReqWipeWritePermOfBroker        int32 = 205
	ReqGetAllTopicListFromNameSrv   int32 = 206 // C→NS, body TopicList
	ReqDeleteSubscriptionGroup      int32 = 207
	ReqGetConsumeStats              int32 = 208
	ReqSuspendConsumer              int32 = 209
	ReqResumeConsumer               int32 = 210
	ReqResetConsumerOffsetInConsume int32 = 211
	ReqResetConsumerOffsetInBroker  int32 = 212
	ReqAdjustConsumerThreadPool     int32 = 213
	ReqWhoConsumeTheMessage         int32 = 214
	ReqDeleteTopicInBroker          int32 = 215
	ReqDeleteTopicInNameSrv         int32 = 216
	ReqRegisterTopicInNameSrv       int32 = 217
	ReqGetKVListByNamespace         int32 = 219
	ReqResetConsumerClientOffset    int32 = 220 // B→C
	ReqGetConsumerStatusFromClient  int32 = 221 // B→C
	ReqInvokeBrokerToResetOffset    int32 = 222
	ReqInvokeBrokerToGetConsumerSts int32 = 223
	ReqGetTopicsByCluster           int32 = 224
	ReqQueryTopicConsumeByWho       int32 = 300
	ReqRegisterFilterServer         int32 = 301
	ReqQueryConsumeTimeSpan         int32 = 303
	ReqGetSystemTopicListFromNS     int32 = 304
	ReqGetSystemTopicListFromBroker int32 = 305
	ReqCleanExpiredConsumeQueue     int32 = 306
	ReqGetConsumerRunningInfo       int32 = 307 // B→C
	ReqQueryCorrectionOffset        int32 = 308
	ReqConsumeMessageDirectly       int32 = 309 // B→C
	ReqSendMessageV2                int32 = 310 // C→B, short-key header (Java clients)
	ReqGetUnitTopicList             int32 = 311
	ReqCloneGroupOffset             int32 = 314
	ReqViewBrokerStatsData          int32 = 315
	ReqCleanUnusedTopic             int32 = 316
	ReqGetBrokerConsumeStats        int32 = 317
	ReqUpdateNamesrvConfig          int32 = 318
	ReqGetNamesrvConfig             int32 = 319
	ReqSendBatchMessage             int32 = 320 // C→B, short-key header
	ReqQueryConsumeQueue            int32 = 321
	ReqQueryDataVersion             int32 = 322 // B→NS (5.x)
	ReqResumeCheckHalfMessage       int32 = 323
	ReqSendReplyMessage             int32 = 324
	ReqSendReplyMessageV2           int32 = 325
	ReqPushReplyMessageToClient     int32 = 326
	ReqAddWritePermOfBroker         int32 = 327
	ReqGetAllProducerInfo           int32 = 328
	ReqDeleteExpiredCommitLog       int32 = 329
	ReqGetTopicConfig               int32 = 351
	ReqGetSubscriptionGroupConfig   int32 = 352
	ReqLitePullMessage              int32 = 361
	ReqRecallMessage                int32 = 370 // 5.3.1+
	ReqQueryAssignment              int32 = 400
	ReqSetMessageRequestMode        int32 = 401
	ReqGetAllMessageRequestMode     int32 = 402
	ReqBrokerHeartbeat              int32 = 904 // B→NS (5.x)

	// 5.x pop consumption (Java declares these as short).
	ReqPopMessage                 int32 = 3442
	ReqAckMessage                 int32 = 3443
	ReqPeekMessage                int32 = 3444
	ReqChangeMessageInvisibleTime int32 = 3445
	ReqNotification               int32 = 3446
	ReqPollingInfo                int32 = 3447
	ReqBatchAckMessage            int32 = 3543
)

// Response codes (Java RemotingSysResponseCode and ResponseCode).
const (
	RespSuccess                    int32 = 0
	RespSystemError                int32 = 1
	RespSystemBusy                 int32 = 2
	RespRequestCodeNotSupported    int32 = 3
	RespTransactionFailed          int32 = 4
	RespFlushDiskTimeout           int32 = 10 // a send "success" to clients
	RespSlaveNotAvailable          int32 = 11 // a send "success" to clients
	RespFlushSlaveTimeout          int32 = 12 // a send "success" to clients
	RespMessageIllegal             int32 = 13
	RespServiceNotAvailable        int32 = 14
	RespVersionNotSupported        int32 = 15
	RespNoPermission               int32 = 16
	RespTopicNotExist              int32 = 17
	RespTopicExistAlready          int32 = 18
	RespPullNotFound               int32 = 19
	RespPullRetryImmediately       int32 = 20
	RespPullOffsetMoved            int32 = 21
	RespQueryNotFound              int32 = 22
	RespSubscriptionParseFailed    int32 = 23
	RespSubscriptionNotExist       int32 = 24
	RespSubscriptionNotLatest      int32 = 25
	RespSubscriptionGroupNotExist  int32 = 26
	RespFilterDataNotExist         int32 = 27
	RespFilterDataNotLatest        int32 = 28
	RespInvalidParameter           int32 = 29
	RespTransactionShouldCommit    int32 = 200
	RespTransactionShouldRollback  int32 = 201
	RespTransactionStateUnknown    int32 = 202
	RespTransactionStateGroupWrong int32 = 203
	RespNoBuyerID                  int32 = 204
	RespNotInCurrentUnit           int32 = 205
	RespConsumerNotOnline          int32 = 206
	RespConsumeMsgTimeout          int32 = 207
	RespNoMessage                  int32 = 208
	RespPollingFull                int32 = 209
	RespPollingTimeout             int32 = 210
	RespBrokerNotExist             int32 = 211
	RespBrokerDispatchNotComplete  int32 = 212
	RespBroadcastConsumption       int32 = 213
	RespFlowControl                int32 = 215
	RespNotLeaderForQueue          int32 = 501
	RespIllegalOperation           int32 = 604
	RespGoAway                     int32 = 1500
)

var requestCodeNames = map[int32]string{
	ReqSendMessage: "SEND_MESSAGE", ReqPullMessage: "PULL_MESSAGE", ReqQueryMessage: "QUERY_MESSAGE",
	ReqQueryBrokerOffset: "QUERY_BROKER_OFFSET", ReqQueryConsumerOffset: "QUERY_CONSUMER_OFFSET",
	ReqUpdateConsumerOffset: "UPDATE_CONSUMER_OFFSET", ReqUpdateAndCreateTopic: "UPDATE_AND_CREATE_TOPIC",
	ReqUpdateAndCreateTopicList: "UPDATE_AND_CREATE_TOPIC_LIST", ReqGetAllTopicConfig: "GET_ALL_TOPIC_CONFIG",
	ReqGetTopicConfigList: "GET_TOPIC_CONFIG_LIST", ReqGetTopicNameList: "GET_TOPIC_NAME_LIST",
	ReqUpdateBrokerConfig: "UPDATE_BROKER_CONFIG", ReqGetBrokerConfig: "GET_BROKER_CONFIG",
	ReqTriggerDeleteFiles: "TRIGGER_DELETE_FILES", ReqGetBrokerRuntimeInfo: "GET_BROKER_RUNTIME_INFO",
	ReqSearchOffsetByTimestamp: "SEARCH_OFFSET_BY_TIMESTAMP", ReqGetMaxOffset: "GET_MAX_OFFSET",
	ReqGetMinOffset: "GET_MIN_OFFSET", ReqGetEarliestMsgStoretime: "GET_EARLIEST_MSG_STORETIME",
	ReqViewMessageByID: "VIEW_MESSAGE_BY_ID", ReqHeartBeat: "HEART_BEAT", ReqUnregisterClient: "UNREGISTER_CLIENT",
	ReqConsumerSendMsgBack: "CONSUMER_SEND_MSG_BACK", ReqEndTransaction: "END_TRANSACTION",
	ReqGetConsumerListByGroup: "GET_CONSUMER_LIST_BY_GROUP", ReqCheckTransactionState: "CHECK_TRANSACTION_STATE",
	ReqNotifyConsumerIdsChanged: "NOTIFY_CONSUMER_IDS_CHANGED", ReqLockBatchMQ: "LOCK_BATCH_MQ",
	ReqUnlockBatchMQ: "UNLOCK_BATCH_MQ", ReqGetAllConsumerOffset: "GET_ALL_CONSUMER_OFFSET",
	ReqGetAllDelayOffset: "GET_ALL_DELAY_OFFSET", ReqApogeeGetLiteConsumerOffsets: "APOGEE_GET_LITE_CONSUMER_OFFSETS", ReqCheckClientConfig: "CHECK_CLIENT_CONFIG",
	ReqGetClientConfig: "GET_CLIENT_CONFIG", ReqGetTimerCheckPoint: "GET_TIMER_CHECK_POINT",
	ReqGetTimerMetrics: "GET_TIMER_METRICS", ReqPutKVConfig: "PUT_KV_CONFIG", ReqGetKVConfig: "GET_KV_CONFIG",
	ReqDeleteKVConfig: "DELETE_KV_CONFIG", ReqRegisterBroker: "REGISTER_BROKER", ReqUnregisterBroker: "UNREGISTER_BROKER",
	ReqGetRouteInfoByTopic: "GET_ROUTEINFO_BY_TOPIC", ReqGetBrokerClusterInfo: "GET_BROKER_CLUSTER_INFO",
	ReqUpdateAndCreateSubscription: "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
	ReqGetAllSubscriptionGroup:     "GET_ALL_SUBSCRIPTIONGROUP_CONFIG", ReqGetTopicStatsInfo: "GET_TOPIC_STATS_INFO",
	ReqGetConsumerConnectionList: "GET_CONSUMER_CONNECTION_LIST", ReqGetProducerConnectionList: "GET_PRODUCER_CONNECTION_LIST",
	ReqWipeWritePermOfBroker: "WIPE_WRITE_PERM_OF_BROKER", ReqGetAllTopicListFromNameSrv: "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
	ReqDeleteSubscriptionGroup: "DELETE_SUBSCRIPTIONGROUP", ReqGetConsumeStats: "GET_CONSUME_STATS",
	ReqSuspendConsumer: "SUSPEND_CONSUMER", ReqResumeConsumer: "RESUME_CONSUMER",
	ReqResetConsumerOffsetInConsume: "RESET_CONSUMER_OFFSET_IN_CONSUMER",
	ReqResetConsumerOffsetInBroker:  "RESET_CONSUMER_OFFSET_IN_BROKER", ReqAdjustConsumerThreadPool: "ADJUST_CONSUMER_THREAD_POOL",
	ReqWhoConsumeTheMessage: "WHO_CONSUME_THE_MESSAGE", ReqDeleteTopicInBroker: "DELETE_TOPIC_IN_BROKER",
	ReqDeleteTopicInNameSrv: "DELETE_TOPIC_IN_NAMESRV", ReqRegisterTopicInNameSrv: "REGISTER_TOPIC_IN_NAMESRV",
	ReqGetKVListByNamespace: "GET_KVLIST_BY_NAMESPACE", ReqResetConsumerClientOffset: "RESET_CONSUMER_CLIENT_OFFSET",
	ReqGetConsumerStatusFromClient: "GET_CONSUMER_STATUS_FROM_CLIENT", ReqInvokeBrokerToResetOffset: "INVOKE_BROKER_TO_RESET_OFFSET",
	ReqInvokeBrokerToGetConsumerSts: "INVOKE_BROKER_TO_GET_CONSUMER_STATUS", ReqGetTopicsByCluster: "GET_TOPICS_BY_CLUSTER",
	ReqQueryTopicConsumeByWho: "QUERY_TOPIC_CONSUME_BY_WHO", ReqRegisterFilterServer: "REGISTER_FILTER_SERVER",
	ReqQueryConsumeTimeSpan: "QUERY_CONSUME_TIME_SPAN", ReqGetSystemTopicListFromNS: "GET_SYSTEM_TOPIC_LIST_FROM_NS",
	ReqGetSystemTopicListFromBroker: "GET_SYSTEM_TOPIC_LIST_FROM_BROKER", ReqCleanExpiredConsumeQueue: "CLEAN_EXPIRED_CONSUMEQUEUE",
	ReqGetConsumerRunningInfo: "GET_CONSUMER_RUNNING_INFO", ReqQueryCorrectionOffset: "QUERY_CORRECTION_OFFSET",
	ReqConsumeMessageDirectly: "CONSUME_MESSAGE_DIRECTLY", ReqSendMessageV2: "SEND_MESSAGE_V2",
	ReqGetUnitTopicList: "GET_UNIT_TOPIC_LIST", ReqCloneGroupOffset: "CLONE_GROUP_OFFSET",
	ReqViewBrokerStatsData: "VIEW_BROKER_STATS_DATA", ReqCleanUnusedTopic: "CLEAN_UNUSED_TOPIC",
	ReqGetBrokerConsumeStats: "GET_BROKER_CONSUME_STATS", ReqUpdateNamesrvConfig: "UPDATE_NAMESRV_CONFIG",
	ReqGetNamesrvConfig: "GET_NAMESRV_CONFIG", ReqSendBatchMessage: "SEND_BATCH_MESSAGE",
	ReqQueryConsumeQueue: "QUERY_CONSUME_QUEUE", ReqQueryDataVersion: "QUERY_DATA_VERSION",
	ReqResumeCheckHalfMessage: "RESUME_CHECK_HALF_MESSAGE", ReqSendReplyMessage: "SEND_REPLY_MESSAGE",
	ReqSendReplyMessageV2: "SEND_REPLY_MESSAGE_V2", ReqPushReplyMessageToClient: "PUSH_REPLY_MESSAGE_TO_CLIENT",
	ReqAddWritePermOfBroker: "ADD_WRITE_PERM_OF_BROKER", ReqGetAllProducerInfo: "GET_ALL_PRODUCER_INFO",
	ReqDeleteExpiredCommitLog: "DELETE_EXPIRED_COMMITLOG", ReqGetTopicConfig: "GET_TOPIC_CONFIG",
	ReqGetSubscriptionGroupConfig: "GET_SUBSCRIPTIONGROUP_CONFIG", ReqLitePullMessage: "LITE_PULL_MESSAGE",
	ReqQueryAssignment: "QUERY_ASSIGNMENT", ReqSetMessageRequestMode: "SET_MESSAGE_REQUEST_MODE",
	ReqGetAllMessageRequestMode: "GET_ALL_MESSAGE_REQUEST_MODE", ReqBrokerHeartbeat: "BROKER_HEARTBEAT",
	ReqPopMessage: "POP_MESSAGE", ReqAckMessage: "ACK_MESSAGE", ReqPeekMessage: "PEEK_MESSAGE",
	ReqChangeMessageInvisibleTime: "CHANGE_MESSAGE_INVISIBLETIME", ReqNotification: "NOTIFICATION",
	ReqPollingInfo: "POLLING_INFO", ReqBatchAckMessage: "BATCH_ACK_MESSAGE", ReqRecallMessage: "RECALL_MESSAGE",
}

var responseCodeNames = map[int32]string{
	RespSuccess: "SUCCESS", RespSystemError: "SYSTEM_ERROR", RespSystemBusy: "SYSTEM_BUSY",
	RespRequestCodeNotSupported: "REQUEST_CODE_NOT_SUPPORTED", RespTransactionFailed: "TRANSACTION_FAILED",
	RespFlushDiskTimeout: "FLUSH_DISK_TIMEOUT", RespSlaveNotAvailable: "SLAVE_NOT_AVAILABLE",
	RespFlushSlaveTimeout: "FLUSH_SLAVE_TIMEOUT", RespMessageIllegal: "MESSAGE_ILLEGAL",
	RespServiceNotAvailable: "SERVICE_NOT_AVAILABLE", RespVersionNotSupported: "VERSION_NOT_SUPPORTED",
	RespNoPermission: "NO_PERMISSION", RespTopicNotExist: "TOPIC_NOT_EXIST", RespTopicExistAlready: "TOPIC_EXIST_ALREADY",
	RespPullNotFound: "PULL_NOT_FOUND", RespPullRetryImmediately: "PULL_RETRY_IMMEDIATELY",
	RespPullOffsetMoved: "PULL_OFFSET_MOVED", RespQueryNotFound: "QUERY_NOT_FOUND",
	RespSubscriptionParseFailed: "SUBSCRIPTION_PARSE_FAILED", RespSubscriptionNotExist: "SUBSCRIPTION_NOT_EXIST",
	RespSubscriptionNotLatest: "SUBSCRIPTION_NOT_LATEST", RespSubscriptionGroupNotExist: "SUBSCRIPTION_GROUP_NOT_EXIST",
	RespFilterDataNotExist: "FILTER_DATA_NOT_EXIST", RespFilterDataNotLatest: "FILTER_DATA_NOT_LATEST",
	RespInvalidParameter: "INVALID_PARAMETER", RespTransactionShouldCommit: "TRANSACTION_SHOULD_COMMIT",
	RespTransactionShouldRollback: "TRANSACTION_SHOULD_ROLLBACK", RespTransactionStateUnknown: "TRANSACTION_STATE_UNKNOW",
	RespTransactionStateGroupWrong: "TRANSACTION_STATE_GROUP_WRONG", RespNoBuyerID: "NO_BUYER_ID",
	RespNotInCurrentUnit: "NOT_IN_CURRENT_UNIT", RespConsumerNotOnline: "CONSUMER_NOT_ONLINE",
	RespConsumeMsgTimeout: "CONSUME_MSG_TIMEOUT", RespNoMessage: "NO_MESSAGE", RespPollingFull: "POLLING_FULL",
	RespPollingTimeout: "POLLING_TIMEOUT", RespBrokerNotExist: "BROKER_NOT_EXIST",
	RespBrokerDispatchNotComplete: "BROKER_DISPATCH_NOT_COMPLETE", RespBroadcastConsumption: "BROADCAST_CONSUMPTION",
	RespFlowControl: "FLOW_CONTROL", RespNotLeaderForQueue: "NOT_LEADER_FOR_QUEUE",
	RespIllegalOperation: "ILLEGAL_OPERATION", RespGoAway: "GO_AWAY",
}

// RequestCodeName returns the Java name of a request code ("SEND_MESSAGE"), or "" if unknown.
func RequestCodeName(code int32) string { return requestCodeNames[code] }

// ResponseCodeName returns the Java name of a response code ("PULL_NOT_FOUND"), or "" if unknown.
func ResponseCodeName(code int32) string { return responseCodeNames[code] }

// Topic and queue permission bits (PermName).
const (
	PermPriority int32 = 1 << 3
	PermRead     int32 = 1 << 2
	PermWrite    int32 = 1 << 1
	PermInherit  int32 = 1 << 0
)

// Pull request sysFlag bits (PullSysFlag).
const (
	PullFlagCommitOffset int32 = 1 << 0 // store commitOffset for the group before reading
	PullFlagSuspend      int32 = 1 << 1 // long polling allowed
	PullFlagSubscription int32 = 1 << 2 // the request carries its subscription
	PullFlagClassFilter  int32 = 1 << 3 // legacy class filter
	PullFlagLitePull     int32 = 1 << 4 // 5.x lite pull
)

// EndTransactionRequest.CommitOrRollback values (the message sysFlag transaction types).
const (
	TransactionNotType      int32 = 0  // unknown: leave it to the checker
	TransactionPreparedType int32 = 4  // half message
	TransactionCommitType   int32 = 8  // commit
	TransactionRollbackType int32 = 12 // rollback
)
