package broker

import (
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The consumer-offset and queue-offset requests.

// handleQueryConsumerOffset serves QUERY_CONSUMER_OFFSET (14)
// (core.QueryConsumerOffset: the Java broker's answer for a group without
// a committed offset).
func (b *Broker) handleQueryConsumerOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueryConsumerOffsetRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	off, err := b.core.QueryConsumerOffset(h.Topic, h.ConsumerGroup, h.QueueID)
	if err != nil {
		return fail(resp, err)
	}
	(&protocol.OffsetResponse{Offset: off}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// handleUpdateConsumerOffset serves UPDATE_CONSUMER_OFFSET (15).
func (b *Broker) handleUpdateConsumerOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.UpdateConsumerOffsetRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	if err := b.core.UpdateConsumerOffset(h.Topic, h.ConsumerGroup, h.QueueID, h.CommitOffset); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleQueueOffset serves GET_MAX_OFFSET (30) and GET_MIN_OFFSET (31).
func (b *Broker) handleQueueOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueueRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	topic := string(h.Topic)
	off := b.core.MaxOffset(topic, h.QueueID)
	if req.Code == protocol.ReqGetMinOffset {
		off = b.core.MinOffset(topic, h.QueueID)
	}
	(&protocol.OffsetResponse{Offset: off}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// handleSearchOffset serves SEARCH_OFFSET_BY_TIMESTAMP (29): the first
// offset stored at or after the timestamp. The Go client reads "offset"
// whatever the code, so a failure carries one too (the queue's end).
func (b *Broker) handleSearchOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.SearchOffsetByTimestampRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	off, err := b.core.SearchOffset(string(h.Topic), h.QueueID, h.Timestamp)
	(&protocol.OffsetResponse{Offset: off}).Encode(&resp.Cmd.Ext)
	if err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleEarliestStoreTime serves GET_EARLIEST_MSG_STORETIME (32); -1 when the
// queue holds no message.
func (b *Broker) handleEarliestStoreTime(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueueRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	ts := b.core.EarliestStoreTime(string(h.Topic), h.QueueID)
	(&protocol.GetEarliestMsgStoretimeResponse{Timestamp: ts}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// handleResetOffset serves INVOKE_BROKER_TO_RESET_OFFSET (222), the admin
// reset-offset request: ext topic, group, timestamp (ms; -1 for the end),
// isForce, and RocketMQ 5's queueId and offset. The group's members are
// pushed RESET_CONSUMER_CLIENT_OFFSET (220, clientConn.ResetOffset); the
// body of the answer is the new offset table.
func (b *Broker) handleResetOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ResetOffsetRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	table, _, err := b.core.Admin().ResetConsumerOffset(h.Topic, h.Group, h.Timestamp, h.IsForce, h.QueueID, h.Offset)
	if err != nil {
		return fail(resp, err) // core.ErrNoTopic's remark is the Java broker's
	}
	resp.Cmd.Body = resetOffsetBody(b.copts.BrokerName, h.Topic, table)
	return remoting.Reply
}

// registerOffsets registers the consumer-offset and queue-offset codes.
func (b *Broker) registerOffsets(t *handlerTable) {
	t.add(noConn(b.handleQueryConsumerOffset), protocol.ReqQueryConsumerOffset)
	t.add(noConn(b.handleUpdateConsumerOffset), protocol.ReqUpdateConsumerOffset)
	t.add(noConn(b.handleQueueOffset), protocol.ReqGetMaxOffset, protocol.ReqGetMinOffset)
	t.add(noConn(b.handleSearchOffset), protocol.ReqSearchOffsetByTimestamp)
	t.add(noConn(b.handleEarliestStoreTime), protocol.ReqGetEarliestMsgStoretime)
	t.add(noConn(b.handleResetOffset), protocol.ReqInvokeBrokerToResetOffset)
}
