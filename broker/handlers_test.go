package broker

import (
	"slices"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// The request-code table is built from the units' registrations: every code
// the broker serves is in it exactly once (add panics on a second
// registration), and nothing else is.
func TestHandlerTableCodes(t *testing.T) {
	h := newHarness(t, nil)
	got := h.b.handlers.codes()
	slices.Sort(got)
	want := []int32{
		protocol.ReqSendMessage, protocol.ReqPullMessage, protocol.ReqQueryMessage, protocol.ReqQueryConsumerOffset,
		protocol.ReqUpdateConsumerOffset, protocol.ReqUpdateAndCreateTopic, protocol.ReqGetAllTopicConfig,
		protocol.ReqGetBrokerRuntimeInfo, protocol.ReqSearchOffsetByTimestamp, protocol.ReqGetMaxOffset,
		protocol.ReqGetMinOffset, protocol.ReqGetEarliestMsgStoretime, protocol.ReqViewMessageByID,
		protocol.ReqHeartBeat, protocol.ReqUnregisterClient, protocol.ReqConsumerSendMsgBack,
		protocol.ReqEndTransaction, protocol.ReqGetConsumerListByGroup, protocol.ReqLockBatchMQ,
		protocol.ReqUnlockBatchMQ, protocol.ReqGetAllDelayOffset, protocol.ReqGetAllConsumerOffset, protocol.ReqCheckClientConfig,
		protocol.ReqApogeeGetLiteConsumerOffsets, // replica.go: a slave's sync of lite offsets
		protocol.ReqUpdateAndCreateSubscription, protocol.ReqGetAllSubscriptionGroup,
		protocol.ReqGetConsumerConnectionList, protocol.ReqDeleteTopicInBroker,
		protocol.ReqDeleteSubscriptionGroup, protocol.ReqInvokeBrokerToResetOffset,
		protocol.ReqSendMessageV2, protocol.ReqSendBatchMessage, protocol.ReqGetSubscriptionGroupConfig,
		protocol.ReqSendReplyMessage, protocol.ReqSendReplyMessageV2, // reply.go
		protocol.ReqPopMessage, protocol.ReqAckMessage, protocol.ReqChangeMessageInvisibleTime,
		protocol.ReqPeekMessage, protocol.ReqNotification, protocol.ReqPollingInfo, protocol.ReqBatchAckMessage,
		protocol.ReqRecallMessage,
		// The admin protocol (adminops.go).
		protocol.ReqUpdateBrokerConfig, protocol.ReqGetBrokerConfig,
		protocol.ReqGetTopicStatsInfo, protocol.ReqGetProducerConnectionList, protocol.ReqGetConsumeStats,
		protocol.ReqQueryTopicConsumeByWho, protocol.ReqQueryConsumeTimeSpan, protocol.ReqGetSystemTopicListFromBroker,
		protocol.ReqGetConsumerRunningInfo, protocol.ReqConsumeMessageDirectly, protocol.ReqCloneGroupOffset,
		protocol.ReqViewBrokerStatsData, protocol.ReqGetBrokerConsumeStats, protocol.ReqQueryConsumeQueue,
		protocol.ReqQueryTopicsByConsumer, protocol.ReqQuerySubscriptionByConsumer, protocol.ReqGetTopicConfig,
		protocol.ReqGetAllProducerInfo, protocol.ReqInvokeBrokerToGetConsumerSts, protocol.ReqCleanExpiredConsumeQueue,
		protocol.ReqCleanUnusedTopic, protocol.ReqDeleteExpiredCommitLog,
		protocol.ReqAuthCreateUser, protocol.ReqAuthUpdateUser, protocol.ReqAuthDeleteUser, protocol.ReqAuthGetUser,
		protocol.ReqAuthListUser, protocol.ReqAuthCreateACL, protocol.ReqAuthUpdateACL, protocol.ReqAuthDeleteACL,
		protocol.ReqAuthGetACL, protocol.ReqAuthListACL,
		1007, // GET_BROKER_EPOCH_CACHE (controller.go): "not in controller mode" outside it
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("registered codes\n got %v\nwant %v", got, want)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a code twice did not panic")
		}
	}()
	h.b.handlers.add(nil, protocol.ReqPullMessage)
}
