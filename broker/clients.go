package broker

import (
	"encoding/json"
	"fmt"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The client registry's and the queue locks' requests: each decodes its
// header or body, calls the core, and encodes the answer.

// handleHeartbeat serves HEART_BEAT (34) (core.Heartbeat: groups,
// subscriptions, %RETRY% topics, notifications).
func (b *Broker) handleHeartbeat(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var hb protocol.HeartbeatData
	if err := hb.Decode(req.Body); err != nil {
		return fail(resp, err)
	}
	if err := b.core.Heartbeat(clientOf(b, c), &hb, req.Language.String(), req.Version); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleUnregisterClient serves UNREGISTER_CLIENT (35, Java clients).
func (b *Broker) handleUnregisterClient(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.UnregisterClientRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	b.core.UnregisterClient(clientOf(b, c), h.ProducerGroup, h.ConsumerGroup)
	return remoting.Reply
}

// handleConsumerList serves GET_CONSUMER_LIST_BY_GROUP (38).
func (b *Broker) handleConsumerList(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumerListByGroupRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	ids, err := b.core.ConsumerIDs(h.ConsumerGroup)
	if err != nil {
		return fail(resp, err)
	}
	body, err := (&protocol.ConsumerListBody{ConsumerIDList: ids}).Encode()
	return replyBody(resp, body, err)
}

// handleConsumerConnections serves GET_CONSUMER_CONNECTION_LIST (203): ext
// consumerGroup; the body is Java's ConsumerConnection (connectionSet,
// subscriptionTable, consumeType, messageModel, consumeFromWhere) plus
// Apogee's consistent / inconsistency and each member's subscriptions.
// CONSUMER_NOT_ONLINE (206) when the group has no member.
func (b *Broker) handleConsumerConnections(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumerConnectionListRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	info, err := b.core.Admin().ConsumerGroupInfo(h.ConsumerGroup)
	if err != nil {
		return fail(resp, err)
	}
	body, err := json.Marshal(info)
	return replyBody(resp, body, err)
}

// checkClientBody is CHECK_CLIENT_CONFIG's body (Java's CheckClientRequestBody).
type checkClientBody struct {
	ClientID         string                    `json:"clientId"`
	Group            string                    `json:"group"`
	SubscriptionData protocol.SubscriptionData `json:"subscriptionData"`
}

// handleCheckClientConfig serves CHECK_CLIENT_CONFIG (46), which Java
// clients send when they subscribe with SQL92 (core.CheckSubscription).
func (b *Broker) handleCheckClientConfig(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var body checkClientBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return fail(resp, fmt.Errorf("decode the check-client body: %w", err))
	}
	sd := &body.SubscriptionData
	if err := b.core.CheckSubscription(sd.ExpressionType, sd.SubString); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleLock serves LOCK_BATCH_MQ (41).
func (b *Broker) handleLock(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var body protocol.LockBatchRequestBody
	if err := body.Decode(req.Body); err != nil {
		return fail(resp, err)
	}
	ok := b.core.LockQueues(body.ConsumerGroup, body.ClientID, body.MQSet)
	out, err := (&protocol.LockBatchResponseBody{LockOKMQSet: ok}).Encode()
	return replyBody(resp, out, err)
}

// handleUnlock serves UNLOCK_BATCH_MQ (42).
func (b *Broker) handleUnlock(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var body protocol.UnlockBatchRequestBody
	if err := body.Decode(req.Body); err != nil {
		return fail(resp, err)
	}
	b.core.UnlockQueues(body.ConsumerGroup, body.ClientID, body.MQSet)
	return remoting.Reply
}

// registerClients registers the client registry's codes.
func (b *Broker) registerClients(t *handlerTable) {
	t.add(b.handleHeartbeat, protocol.ReqHeartBeat)
	t.add(b.handleUnregisterClient, protocol.ReqUnregisterClient)
	t.add(noConn(b.handleConsumerList), protocol.ReqGetConsumerListByGroup)
	t.add(noConn(b.handleConsumerConnections), protocol.ReqGetConsumerConnectionList)
	t.add(noConn(b.handleCheckClientConfig), protocol.ReqCheckClientConfig)
}

// registerLocks registers the queue-lock codes.
func (b *Broker) registerLocks(t *handlerTable) {
	t.add(noConn(b.handleLock), protocol.ReqLockBatchMQ)
	t.add(noConn(b.handleUnlock), protocol.ReqUnlockBatchMQ)
}
