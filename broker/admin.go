package broker

import (
	"encoding/json"
	"fmt"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Administration: topics, subscription groups, runtime numbers and the
// delay scanners' progress. Each handler decodes, calls the core and
// encodes.

// handleCreateTopic serves UPDATE_AND_CREATE_TOPIC (17).
func (b *Broker) handleCreateTopic(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.CreateTopicRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	if err := b.core.Admin().CreateTopic(&core.TopicRequest{Topic: h.Topic, ReadQueueNums: h.ReadQueueNums,
		WriteQueueNums: h.WriteQueueNums, Perm: h.Perm, TopicFilterType: h.TopicFilterType,
		TopicSysFlag: h.TopicSysFlag, Order: h.Order, Attributes: h.Attributes}); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleDeleteTopic serves DELETE_TOPIC_IN_BROKER (215): the topic's
// configuration, consume queues and committed offsets go (its records stay
// in the commit log until retention removes them).
func (b *Broker) handleDeleteTopic(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.DeleteTopicRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	if err := b.core.Admin().DeleteTopic(h.Topic); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleAllTopicConfig serves GET_ALL_TOPIC_CONFIG (21).
func (b *Broker) handleAllTopicConfig(resp *remoting.Response) remoting.Action {
	t := b.core.Replication().TopicTable()
	w := protocol.TopicConfigSerializeWrapper{TopicConfigTable: t.Topics, DataVersion: t.Version}
	body, err := w.Encode()
	return replyBody(resp, body, err)
}

// handleAllGroups serves GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201).
func (b *Broker) handleAllGroups(resp *remoting.Response) remoting.Action {
	t := b.core.Replication().SubscriptionGroupTable()
	w := protocol.SubscriptionGroupWrapper{SubscriptionGroupTable: t.Groups, DataVersion: t.Version}
	body, err := w.Encode()
	return replyBody(resp, body, err)
}

// handleUpdateGroup serves UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): the
// body is a SubscriptionGroupConfig (consume enabled, retryMaxTimes, the 5.x
// groupRetryPolicy, consumeMessageOrderly, ...), stored and persisted.
func (b *Broker) handleUpdateGroup(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var cfg protocol.SubscriptionGroupConfig
	if err := json.Unmarshal(req.Body, &cfg); err != nil {
		return fail(resp, fmt.Errorf("decode the subscription group config: %w", err))
	}
	if err := b.core.Admin().UpdateSubscriptionGroup(cfg); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleGetGroup serves GET_SUBSCRIPTIONGROUP_CONFIG (352): ext group.
func (b *Broker) handleGetGroup(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetSubscriptionGroupConfigRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	g, err := b.core.SubscriptionGroup(h.Group)
	if err != nil {
		return fail(resp, err)
	}
	body, err := json.Marshal(&g)
	return replyBody(resp, body, err)
}

// handleDeleteGroup serves DELETE_SUBSCRIPTIONGROUP (207): ext groupName
// (and cleanOffset, which also drops the group's committed offsets).
func (b *Broker) handleDeleteGroup(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.DeleteSubscriptionGroupRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	if err := b.core.Admin().DeleteSubscriptionGroup(h.GroupName, h.CleanOffset); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleRuntimeInfo serves GET_BROKER_RUNTIME_INFO (28): a KVTable of
// counters (RuntimeInfo), with the Java broker's key names where one exists.
func (b *Broker) handleRuntimeInfo(resp *remoting.Response) remoting.Action {
	body, err := (&protocol.KVTable{Table: b.RuntimeInfo()}).Encode()
	return replyBody(resp, body, err)
}

// handleAllDelayOffsets serves GET_ALL_DELAY_OFFSET (45): the delay
// scanners' progress, as config/delayOffset.json holds it.
func (b *Broker) handleAllDelayOffsets(resp *remoting.Response) remoting.Action {
	w := protocol.DelayOffsetSerializeWrapper{OffsetTable: b.core.Admin().DelayOffsets()}
	body, err := w.Encode()
	return replyBody(resp, body, err)
}

// registerTopicsAndGroups registers topic and subscription-group administration.
func (b *Broker) registerTopicsAndGroups(t *handlerTable) {
	t.add(noConn(b.handleCreateTopic), protocol.ReqUpdateAndCreateTopic)
	t.add(noConn(b.handleDeleteTopic), protocol.ReqDeleteTopicInBroker)
	t.add(respOnly(b.handleAllTopicConfig), protocol.ReqGetAllTopicConfig)
	t.add(respOnly(b.handleAllGroups), protocol.ReqGetAllSubscriptionGroup)
	t.add(noConn(b.handleUpdateGroup), protocol.ReqUpdateAndCreateSubscription)
	t.add(noConn(b.handleGetGroup), protocol.ReqGetSubscriptionGroupConfig)
	t.add(noConn(b.handleDeleteGroup), protocol.ReqDeleteSubscriptionGroup)
}

// registerRuntimeInfo registers GET_BROKER_RUNTIME_INFO.
func (b *Broker) registerRuntimeInfo(t *handlerTable) {
	t.add(respOnly(b.handleRuntimeInfo), protocol.ReqGetBrokerRuntimeInfo)
}

// registerDelay registers GET_ALL_DELAY_OFFSET.
func (b *Broker) registerDelay(t *handlerTable) {
	t.add(respOnly(b.handleAllDelayOffsets), protocol.ReqGetAllDelayOffset)
}
