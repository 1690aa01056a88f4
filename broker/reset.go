package broker

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// ErrNoTopic is returned by ResetConsumerOffset for a topic the broker does
// not have.
var ErrNoTopic = errors.New("broker: no such topic")

// QueueOffset is a queue id and an offset in it.
type QueueOffset struct {
	QueueID int32
	Offset  int64
}

// ResetConsumerOffset moves a consumer group's committed offsets of a topic
// to the first message stored at or after timestampMs (-1: the end of each
// queue), as RocketMQ's admin resetOffsetByTime does: without force an
// offset only moves backwards. The new offsets are committed at once and
// pushed with RESET_CONSUMER_CLIENT_OFFSET (220) to the group's live
// members, which drop what they hold of those queues and resume from there.
// queueID < 0 means every queue; offset >= 0 sets that offset instead of
// searching by time (RocketMQ 5's per-queue reset).
func (b *Broker) ResetConsumerOffset(topic, group string, timestampMs int64, force bool, queueID int32, offset int64) ([]QueueOffset, int, error) {
	t := b.topics.lookup(topic)
	if t == nil {
		return nil, 0, fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	var table []QueueOffset
	for q := int32(0); q < max(t.cfg.WriteQueueNums, t.cfg.ReadQueueNums); q++ {
		if queueID >= 0 && q != queueID {
			continue
		}
		target := offset
		switch {
		case offset >= 0:
		case timestampMs == -1:
			target = b.store.MaxOffset(topic, q)
		default:
			var err error
			if target, err = b.store.OffsetByTime(topic, q, timestampMs); err != nil {
				return nil, 0, fmt.Errorf("broker: search offset of %s/%d by time: %w", topic, q, err)
			}
		}
		target = max(target, 0)
		cur, committed := b.offsets.query([]byte(topic), []byte(group), q)
		if committed && !force && target >= cur {
			target = cur
		}
		b.offsets.commit([]byte(topic), []byte(group), q, target)
		table = append(table, QueueOffset{QueueID: q, Offset: target})
	}
	if err := b.offsets.persist(false); err != nil {
		b.stats.persistErrors.Add(1)
		b.opts.Logger.Error("broker: persist consumer offsets failed", "err", err)
	}
	body := b.resetOffsetBody(topic, table)
	var cmd protocol.Command
	notified := 0
	for _, c := range b.clients.memberConns(group) {
		if c == nil {
			continue
		}
		cmd.InitRequest(protocol.ReqResetConsumerClientOffset, 0)
		(&protocol.ResetOffsetRequest{Topic: topic, Group: group, Timestamp: timestampMs, IsForce: force, QueueID: -1, Offset: -1}).Encode(&cmd.Ext)
		cmd.Body = body
		if err := c.InvokeOneway(&cmd); err == nil {
			notified++
		}
	}
	b.opts.Logger.Info("broker: consumer offsets reset", "topic", topic, "group", group, "timestamp", timestampMs,
		"force", force, "offsets", table, "clientsNotified", notified)
	return table, notified, nil
}

// resetOffsetBody is ResetOffsetBody as the Java broker (fastjson) writes
// it, with MessageQueue objects as keys:
// {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5,...}}. The Go
// client parses exactly this shape.
func (b *Broker) resetOffsetBody(topic string, table []QueueOffset) []byte {
	sort.Slice(table, func(i, j int) bool { return table[i].QueueID < table[j].QueueID })
	out := []byte(`{"offsetTable":{`)
	for i, e := range table {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"brokerName":`...)
		out = strconv.AppendQuote(out, b.opts.BrokerName)
		out = append(out, `,"queueId":`...)
		out = strconv.AppendInt(out, int64(e.QueueID), 10)
		out = append(out, `,"topic":`...)
		out = strconv.AppendQuote(out, topic)
		out = append(out, "}:"...)
		out = strconv.AppendInt(out, e.Offset, 10)
	}
	return append(out, "}}"...)
}

// handleResetOffset serves INVOKE_BROKER_TO_RESET_OFFSET (222), the admin
// reset-offset request: ext topic, group, timestamp (ms; -1 for the end),
// isForce, and RocketMQ 5's queueId and offset. The body of the answer is
// the new offset table.
func (b *Broker) handleResetOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ResetOffsetRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	table, _, err := b.ResetConsumerOffset(h.Topic, h.Group, h.Timestamp, h.IsForce, h.QueueID, h.Offset)
	if err != nil {
		if errors.Is(err, ErrNoTopic) {
			return fail(resp, protocol.RespSystemError, "[reset-offset] reset offset failed, no topic in this broker. topic="+h.Topic)
		}
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = b.resetOffsetBody(h.Topic, table)
	return remoting.Reply
}
