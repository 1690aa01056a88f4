package client

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// What a consumer tells an admin tool through its broker:
// GET_CONSUMER_RUNNING_INFO (307: its properties, subscriptions, process
// queues and rates) and CONSUME_MESSAGE_DIRECTLY (309: the listener run on
// one given message). The instance's ServeRemoting answers both on a
// goroutine of their own (a listener may take long), as the Java client's
// ClientRemotingProcessor does.

// runningInfoer is a member that reports its running state.
type runningInfoer interface {
	runningInfo(jstack bool) protocol.ConsumerRunningInfo
}

// directConsumer is a member that can consume one given message on request.
type directConsumer interface {
	consumeDirectly(m *MessageExt, brokerName string) protocol.ConsumeMessageDirectlyResult
}

// runningInfo reports the consumer's configuration, subscriptions, process
// queues and rates. The rates (pull TPS, consume OK/failed TPS) are averages
// since the consumer started; consumeRT and pullRT are not measured (0).
func (c *consumer) runningInfo(jstack bool) protocol.ConsumerRunningInfo {
	info := protocol.ConsumerRunningInfo{
		Properties: map[string]string{
			protocol.PropConsumeType:            c.consumeType,
			protocol.PropConsumeOrderly:         strconv.FormatBool(c.orderly),
			protocol.PropNamesrvAddr:            strings.Join(c.in.cfg.nameServers, ";"),
			protocol.PropClientVersion:          protocol.VersionDesc(protocol.DefaultVersion),
			protocol.PropConsumerStartTimestamp: strconv.FormatInt(c.startedAt.UnixMilli(), 10),
			"consumerGroup":                     c.cfg.group,
			"messageModel":                      c.cfg.model.String(),
			"consumeFromWhere":                  c.cfg.from.String(),
			"clientId":                          c.in.id,
			"language":                          "GO",
		},
		MQTable:     map[protocol.MessageQueue]protocol.ProcessQueueInfo{},
		StatusTable: map[string]protocol.ConsumeStatus{},
	}
	info.SubscriptionSet = c.consumerData().SubscriptionDataSet
	now := time.Now()
	for _, pq := range c.pqsSnapshot() {
		cached, bytes, _, _ := pq.stats()
		pq.mu.Lock()
		pi := protocol.ProcessQueueInfo{
			CommitOffset:   pq.commitLocked(),
			CachedMsgCount: int32(cached), CachedMsgSizeInMiB: int32(bytes >> 20),
			Droped: pq.dropped.Load(), Locked: pq.locked, LastPullTimestamp: now.UnixMilli(),
		}
		if !pq.lockedAt.IsZero() {
			pi.LastLockTimestamp = pq.lockedAt.UnixMilli()
		}
		for _, e := range pq.ents[pq.head:] {
			if e.m == nil {
				continue
			}
			if pi.CachedMsgMinOffset == 0 || e.m.QueueOffset < pi.CachedMsgMinOffset {
				pi.CachedMsgMinOffset = e.m.QueueOffset
			}
			pi.CachedMsgMaxOffset = max(pi.CachedMsgMaxOffset, e.m.QueueOffset)
		}
		pq.mu.Unlock()
		mq := protocol.MessageQueue{Topic: pq.mq.Topic, BrokerName: pq.mq.BrokerName, QueueID: pq.mq.QueueID}
		info.MQTable[mq] = pi
	}
	secs := max(now.Sub(c.startedAt).Seconds(), 1)
	st := c.statsSnapshot()
	for _, s := range c.subList {
		info.StatusTable[s.topic] = protocol.ConsumeStatus{
			PullTPS: float64(st.Pulls) / secs, ConsumeOKTPS: float64(st.Consumed) / secs,
			ConsumeFailedTPS: float64(st.Failed) / secs, ConsumeFailedMsgs: st.Failed,
		}
	}
	if jstack {
		buf := make([]byte, 1<<20)
		info.Jstack = string(buf[:runtime.Stack(buf, true)])
	}
	return info
}

// serveRunningInfo answers GET_CONSUMER_RUNNING_INFO (307) for the group's
// consumer, or SYSTEM_ERROR when this client has none (or another client id
// is asked for).
func (in *instance) serveRunningInfo(c *remoting.Conn, req *protocol.Command) remoting.Action {
	var h protocol.GetConsumerRunningInfoRequest
	err := h.Decode(&req.Ext)
	r := c.Defer(req)
	go func() {
		var ans protocol.Command
		in.mu.Lock()
		m := in.consumers[h.ConsumerGroup]
		in.mu.Unlock()
		ri, ok := m.(runningInfoer)
		switch {
		case err != nil:
			r.InitResponse(&ans, protocol.RespSystemError)
			ans.SetRemark(err.Error())
		case h.ClientID != in.id || !ok:
			r.InitResponse(&ans, protocol.RespSystemError)
			ans.SetRemark("Can't find specified client instance of: " + h.ClientID + " for group " + h.ConsumerGroup)
		default:
			info := ri.runningInfo(h.JstackEnable)
			body, encErr := info.Encode()
			if encErr != nil {
				r.InitResponse(&ans, protocol.RespSystemError)
				ans.SetRemark(encErr.Error())
				break
			}
			r.InitResponse(&ans, protocol.RespSuccess)
			ans.Body = body
		}
		r.Reply(&remoting.Response{Cmd: &ans})
	}()
	return remoting.Deferred
}

// serveConsumeDirectly answers CONSUME_MESSAGE_DIRECTLY (309): the group's
// push consumer runs its listener on the message in the body.
func (in *instance) serveConsumeDirectly(c *remoting.Conn, req *protocol.Command) remoting.Action {
	var h protocol.ConsumeMessageDirectlyRequest
	err := h.Decode(&req.Ext)
	var m *MessageExt
	if err == nil {
		var v message.View
		// The message outlives the handler (the listener runs on its own
		// goroutine): decode a copy, not the connection's read buffer.
		if v, err = message.Decode(bytes.Clone(req.Body), false); err == nil {
			m, err = decodeMessage(v, MessageQueue{Topic: string(v.Topic()), BrokerName: h.BrokerName, QueueID: v.QueueID()})
		}
	}
	r := c.Defer(req)
	go func() {
		var ans protocol.Command
		in.mu.Lock()
		mem := in.consumers[h.ConsumerGroup]
		in.mu.Unlock()
		dc, ok := mem.(directConsumer)
		switch {
		case err != nil:
			r.InitResponse(&ans, protocol.RespSystemError)
			ans.SetRemark("decode the message: " + err.Error())
		case !ok:
			r.InitResponse(&ans, protocol.RespSystemError)
			ans.SetRemark("no push consumer of group " + h.ConsumerGroup + " in client " + in.id)
		default:
			res := dc.consumeDirectly(m, h.BrokerName)
			body, _ := json.Marshal(&res)
			r.InitResponse(&ans, protocol.RespSuccess)
			ans.Body = body
		}
		r.Reply(&remoting.Response{Cmd: &ans})
	}()
	return remoting.Deferred
}

// consumeDirectly runs the push consumer's listener on m alone (outside any
// process queue: nothing is acknowledged or sent back), as the Java client
// does for CONSUME_MESSAGE_DIRECTLY.
func (c *consumer) consumeDirectly(m *MessageExt, brokerName string) protocol.ConsumeMessageDirectlyResult {
	res := protocol.ConsumeMessageDirectlyResult{Order: c.orderly, AutoCommit: true}
	if c.direct == nil {
		res.ConsumeResult = "CR_THROW_EXCEPTION"
		res.Remark = "the consumer has no listener (a pull consumer)"
		return res
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r, panicked := c.direct(ctx, m)
	res.SpentTimeMills = time.Since(start).Milliseconds()
	switch {
	case panicked != "":
		res.ConsumeResult = "CR_THROW_EXCEPTION"
		res.Remark = panicked
	case r == ConsumeSuccess:
		res.ConsumeResult = "CR_SUCCESS"
	default:
		res.ConsumeResult = "CR_LATER"
	}
	return res
}

// queueOffsets is a member that reports its offsets of a topic's queues.
type queueOffsets interface {
	topicOffsets(topic string) map[protocol.MessageQueue]int64
}

// topicOffsets returns the commit offsets of the topic's queues the
// consumer holds (GET_CONSUMER_STATUS_FROM_CLIENT).
func (c *consumer) topicOffsets(topic string) map[protocol.MessageQueue]int64 {
	out := map[protocol.MessageQueue]int64{}
	for _, pq := range c.pqsSnapshot() {
		if pq.mq.Topic != topic {
			continue
		}
		pq.mu.Lock()
		off := pq.commitLocked()
		pq.mu.Unlock()
		out[protocol.MessageQueue{Topic: pq.mq.Topic, BrokerName: pq.mq.BrokerName, QueueID: pq.mq.QueueID}] = off
	}
	return out
}

// serveConsumerStatus answers GET_CONSUMER_STATUS_FROM_CLIENT (221) with
// GetConsumerStatusBody {messageQueueTable{MQ:offset}}, as the Java client
// does.
func (in *instance) serveConsumerStatus(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumerStatusRequest
	if err := h.Decode(&req.Ext); err != nil {
		resp.Cmd.Code = protocol.RespSystemError
		resp.Cmd.SetRemark(err.Error())
		return remoting.Reply
	}
	in.mu.Lock()
	m := in.consumers[h.Group]
	in.mu.Unlock()
	qo, ok := m.(queueOffsets)
	if !ok {
		resp.Cmd.Code = protocol.RespSystemError
		resp.Cmd.SetRemark("no consumer of group " + h.Group + " in client " + in.id)
		return remoting.Reply
	}
	t := qo.topicOffsets(h.Topic)
	qs := make([]protocol.MessageQueue, 0, len(t))
	for mq := range t {
		qs = append(qs, mq)
	}
	protocol.SortQueues(qs)
	body := []byte(`{"messageQueueTable":{`)
	for i, mq := range qs {
		if i > 0 {
			body = append(body, ',')
		}
		body = protocol.AppendMQKey(body, mq)
		body = append(body, ':')
		body = strconv.AppendInt(body, t[mq], 10)
	}
	resp.Cmd.Code = protocol.RespSuccess
	resp.Cmd.Body = append(body, '}', '}')
	return remoting.Reply
}
