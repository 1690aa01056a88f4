package acl

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/apogeemq/apogee/protocol"
)

// Check is one permission a request needs: one of Actions on Resource.
type Check struct {
	Resource Resource
	Actions  Action
}

func (c Check) String() string { return c.Actions.String() + " on " + c.Resource.String() }

// ruleKind is how a request code's checks are found.
type ruleKind uint8

const (
	kindFields     ruleKind = iota + 1 // resources named by header fields
	kindCluster                        // the cluster (admin rights)
	kindOpen                           // authentication only
	kindSend                           // SEND_MESSAGE and friends: the topic, or a retry topic's group
	kindPull                           // PULL_MESSAGE: the topic (unless a retry topic) and the group
	kindHeartbeat                      // each consumer group and subscribed topic of the body
	kindLock                           // LOCK/UNLOCK_BATCH_MQ: the body's group and topics
	kindGroupBody                      // UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body's groupName
	kindEndTx                          // END_TRANSACTION: the topic when the client sends it
	kindView                           // VIEW_MESSAGE_BY_ID: the topic when sent, else the cluster
	kindUnregister                     // UNREGISTER_CLIENT: the consumer or producer group
	kindRoute                          // GET_ROUTEINFO_BY_TOPIC: the topic, but TBW102's route is open
	kindBatchAck                       // BATCH_ACK_MESSAGE: each ack's group and topic (of the body)
)

// autoCreateKey is the template topic a producer reads the route of before
// its first send to a topic that does not exist yet (the broker creates
// the topic from it; the send itself needs Pub on the new topic).
const autoCreateKey = "TBW102"

// field names a resource in a header field. split, when set, separates
// several names in one value. skipRetry leaves a retry topic out (its
// group is checked by another field).
type field struct {
	key       string
	typ       ResourceType
	split     string
	skipRetry bool
}

type rule struct {
	kind    ruleKind
	actions Action
	fields  []field
	note    string // for the documentation table
}

// all is the request about every resource of a type (listing them).
func all(t ResourceType) field { return field{typ: t} }

func topic(key string) field        { return field{key: key, typ: TypeTopic} }
func group(key string) field        { return field{key: key, typ: TypeGroup} }
func topicNoRetry(key string) field { return field{key: key, typ: TypeTopic, skipRetry: true} }

func fields(a Action, fs ...field) rule { return rule{kind: kindFields, actions: a, fields: fs} }
func cluster(a Action) rule             { return rule{kind: kindCluster, actions: a} }

// rules is the permission each request code needs: RocketMQ 5.3's
// (DefaultAuthorizationContextBuilder and the @RocketMQAction annotations
// of the request headers), with the differences listed in
// docs/security.md. A code not listed needs Update on the cluster: admin
// rights.
var rules = map[int32]rule{
	protocol.ReqSendMessage:        {kind: kindSend, actions: Pub, note: "Pub on Topic:topic; a %RETRY% topic: Sub on its group"},
	protocol.ReqSendMessageV2:      {kind: kindSend, actions: Pub, note: "as SEND_MESSAGE (fields b and a)"},
	protocol.ReqSendBatchMessage:   {kind: kindSend, actions: Pub, note: "as SEND_MESSAGE (fields b and a)"},
	protocol.ReqSendReplyMessage:   {kind: kindSend, actions: Pub, note: "as SEND_MESSAGE (RocketMQ 5.3: authentication only; see below)"},
	protocol.ReqSendReplyMessageV2: {kind: kindSend, actions: Pub, note: "as SEND_MESSAGE_V2 (RocketMQ 5.3: authentication only; see below)"},
	protocol.ReqPullMessage:        {kind: kindPull, actions: Sub, note: "Sub on Topic:topic (unless a %RETRY% topic) and Sub on Group:consumerGroup"},
	protocol.ReqLitePullMessage:    {kind: kindPull, actions: Sub, note: "as PULL_MESSAGE"},
	protocol.ReqHeartBeat:          {kind: kindHeartbeat, actions: Sub, note: "Sub on each consumer group of the body and on each topic they subscribe (producers: authentication only)"},
	protocol.ReqLockBatchMQ:        {kind: kindLock, actions: Sub, note: "Sub on the body's consumerGroup and on each queue's topic"},
	protocol.ReqUnlockBatchMQ:      {kind: kindLock, actions: Sub, note: "as LOCK_BATCH_MQ"},
	protocol.ReqEndTransaction:     {kind: kindEndTx, actions: Pub, note: "Pub on Topic:topic when the client sends it (Java 5.x clients); authentication only otherwise (rocketmq-client-go sends no topic)"},
	protocol.ReqViewMessageByID:    {kind: kindView, actions: Sub | Get, note: "Sub or Get on Topic:topic when sent; otherwise Get on the cluster (the offset alone names no topic)"},
	protocol.ReqUnregisterClient:   {kind: kindUnregister, actions: Pub | Sub, note: "Pub or Sub on Group:consumerGroup, else Group:producerGroup; authentication only without either"},

	protocol.ReqUpdateAndCreateSubscription: {kind: kindGroupBody, actions: Create | Update, note: "Create or Update on Group:groupName (of the body)"},

	protocol.ReqQueryMessage: fields(Sub|Get, topic("topic")),
	// Pushed by brokers to clients, never served by a broker: as
	// ReplyMessageRequestHeader's annotation says.
	protocol.ReqPushReplyMessageToClient:     fields(Sub, group("producerGroup"), topic("topic")),
	protocol.ReqQueryConsumerOffset:          fields(Sub|Get, topicNoRetry("topic"), group("consumerGroup")),
	protocol.ReqUpdateConsumerOffset:         fields(Sub|Update, topicNoRetry("topic"), group("consumerGroup")),
	protocol.ReqSearchOffsetByTimestamp:      fields(Sub|Get, topic("topic")),
	protocol.ReqGetMaxOffset:                 fields(Sub|Get, topic("topic")),
	protocol.ReqGetMinOffset:                 fields(Sub|Get, topic("topic")),
	protocol.ReqGetEarliestMsgStoretime:      fields(Sub|Get, topic("topic")),
	protocol.ReqConsumerSendMsgBack:          fields(Sub, group("group")),
	protocol.ReqGetConsumerListByGroup:       fields(Sub|Get, group("consumerGroup")),
	protocol.ReqCheckClientConfig:            fields(Sub, group("group")),
	protocol.ReqGetRouteInfoByTopic:          {kind: kindRoute, actions: Pub | Sub | Get, note: "Pub, Sub or Get on Topic:topic; the route of TBW102 (the auto-create template a producer reads before its first send to a new topic): authentication only"},
	protocol.ReqUpdateAndCreateTopic:         fields(Create, topic("topic")),
	protocol.ReqDeleteTopicInBroker:          fields(Delete, topic("topic")),
	protocol.ReqGetTopicConfig:               fields(Get, topic("topic")),
	protocol.ReqGetTopicStatsInfo:            fields(Get, topic("topic")),
	protocol.ReqQueryTopicConsumeByWho:       fields(Get, topic("topic")),
	protocol.ReqResumeCheckHalfMessage:       fields(Update, topic("topic")),
	protocol.ReqDeleteSubscriptionGroup:      fields(Delete, group("groupName")),
	protocol.ReqGetSubscriptionGroupConfig:   fields(Get, group("group")),
	protocol.ReqGetConsumerConnectionList:    fields(Get, group("consumerGroup")),
	protocol.ReqGetConsumeStats:              fields(Get, group("consumerGroup"), topic("topic"), field{key: "topicList", typ: TypeTopic, split: ";"}),
	protocol.ReqInvokeBrokerToResetOffset:    fields(Update, group("group"), topic("topic")),
	protocol.ReqInvokeBrokerToGetConsumerSts: fields(Get, topic("topic"), group("group")),
	protocol.ReqQueryConsumeTimeSpan:         fields(Get, topic("topic"), group("group")),
	protocol.ReqQueryConsumeQueue:            fields(Get, topic("topic"), group("consumerGroup")),
	protocol.ReqCloneGroupOffset:             fields(Update, group("destGroup"), topic("topic")),
	protocol.ReqQueryAssignment:              fields(Sub, group("consumerGroup"), topic("topic")),
	protocol.ReqSetMessageRequestMode:        fields(Sub, group("consumerGroup"), topic("topic")),
	protocol.ReqPopMessage:                   fields(Sub, group("consumerGroup"), topic("topic")),
	protocol.ReqAckMessage:                   fields(Sub, group("consumerGroup"), topic("topic")),
	protocol.ReqPeekMessage:                  fields(Sub, group("consumerGroup"), topic("topic")),
	protocol.ReqChangeMessageInvisibleTime:   fields(Sub, group("consumerGroup"), topic("topic")),
	protocol.ReqNotification:                 fields(Sub, group("consumerGroup"), topic("topic")),
	protocol.ReqPollingInfo:                  fields(Get, group("consumerGroup"), topic("topic")),
	protocol.ReqRecallMessage:                fields(Pub, topic("topic")),
	protocol.ReqBatchAckMessage:              {kind: kindBatchAck, actions: Sub, note: "Sub on each ack's group (c) and topic (t) of the body; RocketMQ 5.3 checks nothing (no header class): stricter"},

	// Lists of every topic or group: List (or Get) on Type:*.
	protocol.ReqGetAllTopicConfig:            fields(Get|List, all(TypeTopic)),
	protocol.ReqGetTopicConfigList:           fields(Get|List, all(TypeTopic)),
	protocol.ReqGetTopicNameList:             fields(Get|List, all(TypeTopic)),
	protocol.ReqGetAllTopicListFromNameSrv:   fields(Get|List, all(TypeTopic)),
	protocol.ReqGetTopicsByCluster:           fields(Get|List, all(TypeTopic)),
	protocol.ReqGetSystemTopicListFromNS:     fields(Get|List, all(TypeTopic)),
	protocol.ReqGetSystemTopicListFromBroker: fields(Get|List, all(TypeTopic)),
	protocol.ReqGetUnitTopicList:             fields(Get|List, all(TypeTopic)),
	protocol.ReqGetAllSubscriptionGroup:      fields(Get|List, all(TypeGroup)),

	// The cluster: reading its state (Get) or changing it (Update).
	protocol.ReqQueryBrokerOffset:            cluster(Get),
	protocol.ReqGetBrokerConfig:              cluster(Get),
	protocol.ReqGetBrokerRuntimeInfo:         cluster(Get),
	protocol.ReqGetAllConsumerOffset:         cluster(Get),
	protocol.ReqGetAllDelayOffset:            cluster(Get),
	protocol.ReqApogeeGetLiteConsumerOffsets: cluster(Get),
	protocol.ReqGetClientConfig:              cluster(Get),
	protocol.ReqGetTimerCheckPoint:           cluster(Get),
	protocol.ReqGetTimerMetrics:              cluster(Get),
	protocol.ReqGetKVConfig:                  cluster(Get),
	protocol.ReqGetKVListByNamespace:         cluster(Get),
	protocol.ReqGetBrokerClusterInfo:         cluster(Get),
	protocol.ReqGetProducerConnectionList:    cluster(Get),
	protocol.ReqWhoConsumeTheMessage:         cluster(Get),
	protocol.ReqQueryCorrectionOffset:        cluster(Get),
	protocol.ReqViewBrokerStatsData:          cluster(Get),
	protocol.ReqGetBrokerConsumeStats:        cluster(Get),
	protocol.ReqGetNamesrvConfig:             cluster(Get),
	protocol.ReqQueryDataVersion:             cluster(Get),
	protocol.ReqGetAllProducerInfo:           cluster(Get),
	protocol.ReqGetAllMessageRequestMode:     cluster(Get),
	protocol.ReqUpdateBrokerConfig:           cluster(Update),
	protocol.ReqTriggerDeleteFiles:           cluster(Update),
	protocol.ReqPutKVConfig:                  cluster(Update),
	protocol.ReqDeleteKVConfig:               cluster(Update),
	protocol.ReqRegisterBroker:               cluster(Update),
	protocol.ReqUnregisterBroker:             cluster(Update),
	protocol.ReqWipeWritePermOfBroker:        cluster(Update),
	protocol.ReqAddWritePermOfBroker:         cluster(Update),
	protocol.ReqDeleteTopicInNameSrv:         cluster(Update),
	protocol.ReqRegisterTopicInNameSrv:       cluster(Update),
	protocol.ReqUpdateNamesrvConfig:          cluster(Update),
	protocol.ReqBrokerHeartbeat:              cluster(Update),
	protocol.ReqUpdateAndCreateTopicList:     cluster(Update),

	// RocketMQ 5.3's user and ACL management (also: only a super user may
	// create, change or delete a super user).
	protocol.ReqAuthCreateUser: cluster(Update),
	protocol.ReqAuthUpdateUser: cluster(Update),
	protocol.ReqAuthDeleteUser: cluster(Update),
	protocol.ReqAuthGetUser:    cluster(Get),
	protocol.ReqAuthListUser:   cluster(Get),
	protocol.ReqAuthCreateACL:  cluster(Update),
	protocol.ReqAuthUpdateACL:  cluster(Update),
	protocol.ReqAuthDeleteACL:  cluster(Update),
	protocol.ReqAuthGetACL:     cluster(Get),
	protocol.ReqAuthListACL:    cluster(Get),
}

// defaultRule is what a code without a rule needs: admin rights.
var defaultRule = cluster(Update)

func ruleOf(code int32) rule {
	if r, ok := rules[code]; ok {
		return r
	}
	return defaultRule
}

// view is b as a string without a copy. The names of a request's checks
// are views of its extension fields: they are valid while the request is
// (during the handler call) and anything kept beyond it copies them.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// checks appends to out what req needs, with clusterName naming the
// cluster resource; the names are views of req (see view). An error means
// the request does not decode far enough to tell (it is refused).
func checks(req *protocol.Command, clusterName string, out []Check) ([]Check, error) {
	r := ruleOf(req.Code)
	ext := &req.Ext
	str := func(key string) string {
		v, _ := ext.Get(key)
		return view(v)
	}
	lit := func(t ResourceType, name string) Resource {
		if t == TypeGroup {
			name = GroupName(name)
		}
		return Resource{Type: t, Name: name, Pattern: Literal}
	}
	add := func(t ResourceType, name string, a Action) {
		if t == TypeTopic && IsRetryTopic(name) {
			t, a = TypeGroup, Sub
		}
		out = append(out, Check{Resource: lit(t, name), Actions: a})
	}
	switch r.kind {
	case kindOpen:
	case kindCluster:
		out = append(out, Check{Resource: Resource{Type: TypeCluster, Name: clusterName, Pattern: Literal}, Actions: r.actions})
	case kindSend:
		topicKey := "topic"
		if req.Code == protocol.ReqSendMessageV2 || req.Code == protocol.ReqSendBatchMessage || req.Code == protocol.ReqSendReplyMessageV2 {
			topicKey = "b"
		}
		t, _ := ext.Get(topicKey)
		// A %RETRY% topic names its group (a consumer sending a message
		// back by SEND_MESSAGE): Sub on the group, as RocketMQ 5.
		add(TypeTopic, view(t), Pub)
	case kindPull:
		t := str("topic")
		if !IsRetryTopic(t) {
			out = append(out, Check{Resource: lit(TypeTopic, t), Actions: Sub})
		}
		out = append(out, Check{Resource: lit(TypeGroup, str("consumerGroup")), Actions: Sub})
	case kindRoute:
		if t := str("topic"); t != autoCreateKey {
			add(TypeTopic, t, r.actions)
		}
	case kindEndTx:
		if t := str("topic"); t != "" {
			add(TypeTopic, t, Pub)
		}
	case kindView:
		if t := str("topic"); t != "" {
			add(TypeTopic, t, r.actions)
		} else {
			out = append(out, Check{Resource: Resource{Type: TypeCluster, Name: clusterName, Pattern: Literal}, Actions: Get})
		}
	case kindUnregister:
		g := str("consumerGroup")
		if g == "" {
			g = str("producerGroup")
		}
		if g != "" {
			out = append(out, Check{Resource: lit(TypeGroup, g), Actions: r.actions})
		}
	case kindHeartbeat:
		var hb protocol.HeartbeatData
		if err := hb.Decode(req.Body); err != nil {
			return out, fmt.Errorf("heartbeat body: %w", err)
		}
		for _, c := range hb.ConsumerDataSet {
			out = append(out, Check{Resource: lit(TypeGroup, c.GroupName), Actions: Sub})
			for _, s := range c.SubscriptionDataSet {
				if !IsRetryTopic(s.Topic) {
					out = append(out, Check{Resource: lit(TypeTopic, s.Topic), Actions: Sub})
				}
			}
		}
	case kindLock:
		var body protocol.LockBatchRequestBody
		if err := body.Decode(req.Body); err != nil {
			return out, fmt.Errorf("lock body: %w", err)
		}
		out = append(out, Check{Resource: lit(TypeGroup, body.ConsumerGroup), Actions: Sub})
		for _, mq := range body.MQSet {
			if !IsRetryTopic(mq.Topic) && !slices.ContainsFunc(out, func(c Check) bool { return c.Resource.Type == TypeTopic && c.Resource.Name == mq.Topic }) {
				out = append(out, Check{Resource: lit(TypeTopic, mq.Topic), Actions: Sub})
			}
		}
	case kindBatchAck:
		var body protocol.BatchAckMessageRequestBody
		if err := body.Decode(req.Body); err != nil {
			return out, fmt.Errorf("batch ack body: %w", err)
		}
		for _, a := range body.Acks {
			for _, c := range []Check{{Resource: lit(TypeGroup, a.ConsumerGroup), Actions: Sub}, {Resource: lit(TypeTopic, a.Topic), Actions: Sub}} {
				if !slices.Contains(out, c) {
					out = append(out, c)
				}
			}
		}
	case kindGroupBody:
		var body struct {
			GroupName string `json:"groupName"`
		}
		if err := json.Unmarshal(req.Body, &body); err != nil {
			return out, fmt.Errorf("subscription group body: %w", err)
		}
		out = append(out, Check{Resource: lit(TypeGroup, body.GroupName), Actions: r.actions})
	case kindFields:
		for _, f := range r.fields {
			if f.key == "" {
				out = append(out, Check{Resource: Resource{Type: f.typ, Pattern: AnyName}, Actions: r.actions})
				continue
			}
			v, ok := ext.Get(f.key)
			if !ok && f.split != "" {
				continue // an optional list
			}
			if f.skipRetry && IsRetryTopic(view(v)) {
				continue
			}
			if f.split == "" {
				add(f.typ, view(v), r.actions)
				continue
			}
			for name := range strings.SplitSeq(view(v), f.split) {
				if name != "" {
					add(f.typ, name, r.actions)
				}
			}
		}
	}
	return out, nil
}
