package broker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The admin protocol of mqadmin, the RocketMQ dashboard and
// rocketmq-exporter: each handler decodes the Java header
// (protocol/header_admin.go), calls one core method (broker/core/admin.go)
// and encodes the Java body (protocol/bodies_admin.go). GET_CONSUMER_RUNNING_INFO
// and CONSUME_MESSAGE_DIRECTLY are forwarded to the consumer named in the
// request, without blocking the admin tool's connection.

// ForwardTimeout bounds how long a request forwarded to a client
// (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY) waits for its answer;
// past it the tool gets CONSUME_MSG_TIMEOUT (207), as from a Java broker.
const ForwardTimeout = 10 * time.Second

// registerAdminOps registers the admin protocol's codes.
func (b *Broker) registerAdminOps(t *handlerTable) {
	t.add(noConn(b.handleUpdateBrokerConfig), protocol.ReqUpdateBrokerConfig)
	t.add(respOnly(b.handleGetBrokerConfig), protocol.ReqGetBrokerConfig)
	t.add(noConn(b.handleTopicStats), protocol.ReqGetTopicStatsInfo)
	t.add(noConn(b.handleProducerConnections), protocol.ReqGetProducerConnectionList)
	t.add(noConn(b.handleConsumeStats), protocol.ReqGetConsumeStats)
	t.add(noConn(b.handleTopicConsumeByWho), protocol.ReqQueryTopicConsumeByWho)
	t.add(noConn(b.handleConsumeTimeSpan), protocol.ReqQueryConsumeTimeSpan)
	t.add(respOnly(b.handleSystemTopics), protocol.ReqGetSystemTopicListFromBroker)
	t.add(b.handleConsumerRunningInfo, protocol.ReqGetConsumerRunningInfo)
	t.add(b.handleConsumeMessageDirectly, protocol.ReqConsumeMessageDirectly)
	t.add(noConn(b.handleCloneGroupOffset), protocol.ReqCloneGroupOffset)
	t.add(noConn(b.handleViewStats), protocol.ReqViewBrokerStatsData)
	t.add(noConn(b.handleBrokerConsumeStats), protocol.ReqGetBrokerConsumeStats)
	t.add(noConn(b.handleQueryConsumeQueue), protocol.ReqQueryConsumeQueue)
	t.add(noConn(b.handleTopicsByConsumer), protocol.ReqQueryTopicsByConsumer)
	t.add(noConn(b.handleSubscriptionByConsumer), protocol.ReqQuerySubscriptionByConsumer)
	t.add(noConn(b.handleGetTopicConfig), protocol.ReqGetTopicConfig)
	t.add(respOnly(b.handleAllProducers), protocol.ReqGetAllProducerInfo)
	b.registerConsumerStatus(t)
	t.add(respOnly(b.handleClean), protocol.ReqCleanExpiredConsumeQueue, protocol.ReqCleanUnusedTopic,
		protocol.ReqDeleteExpiredCommitLog)
}

func jsonBody(resp *remoting.Response, v any) remoting.Action {
	body, err := json.Marshal(v)
	return replyBody(resp, body, err)
}

// handleGetBrokerConfig serves GET_BROKER_CONFIG (26): the configuration as
// Java properties text (key=value lines, sorted), its data version in the
// header's version.
func (b *Broker) handleGetBrokerConfig(resp *remoting.Response) remoting.Action {
	m, v := b.BrokerConfig()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	for _, k := range keys {
		buf.WriteString(k)
		buf.WriteByte('=')
		buf.WriteString(m[k])
		buf.WriteByte('\n')
	}
	(&protocol.GetBrokerConfigResponse{Version: core.DataVersionJSON(v)}).Encode(&resp.Cmd.Ext)
	resp.Cmd.Body = buf.Bytes()
	return remoting.Reply
}

// BrokerConfig is the configuration GET_BROKER_CONFIG reports: the core's
// and the front end's (namesrvAddr, the remoting limits).
func (b *Broker) BrokerConfig() (map[string]string, protocol.DataVersion) {
	m, v := b.core.Admin().BrokerConfig()
	m["namesrvAddr"] = strings.Join(b.opts.NamesrvAddrs, ";")
	m["registerNameServerPeriod"] = fmt.Sprint(b.opts.RegisterInterval.Milliseconds())
	b.haConfig(m)
	if b.opts.GRPCAdvertiseAddr != "" {
		m["grpcAdvertiseAddr"] = b.opts.GRPCAdvertiseAddr
	}
	return m, v
}

// parseProperties reads Java properties text (key=value, key: value, # and !
// comments; continuation lines are not used by the tools' bodies).
func parseProperties(body []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		i := strings.IndexAny(line, "=:")
		if i < 0 {
			out[line] = ""
			continue
		}
		out[strings.TrimSpace(line[:i])] = strings.TrimSpace(line[i+1:])
	}
	return out
}

// handleUpdateBrokerConfig serves UPDATE_BROKER_CONFIG (25): the body is
// Java properties text.
func (b *Broker) handleUpdateBrokerConfig(req *protocol.Command, resp *remoting.Response) remoting.Action {
	if len(req.Body) == 0 {
		return remoting.Reply
	}
	if err := b.core.Admin().UpdateBrokerConfig(parseProperties(req.Body)); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleTopicStats serves GET_TOPIC_STATS_INFO (202).
func (b *Broker) handleTopicStats(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetTopicStatsInfoRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	s, err := b.core.Admin().TopicStats(h.Topic)
	if err != nil {
		return fail(resp, err)
	}
	ts := protocol.TopicStatsTable{OffsetTable: s.Queues, TopicPutTps: s.PutTPS}
	body, err := ts.Encode()
	return replyBody(resp, body, err)
}

// handleProducerConnections serves GET_PRODUCER_CONNECTION_LIST (204).
func (b *Broker) handleProducerConnections(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetProducerConnectionListRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	conns, err := b.core.Admin().ProducerConnections(h.ProducerGroup)
	if err != nil {
		return fail(resp, err)
	}
	pc := protocol.ProducerConnection{ConnectionSet: conns}
	return jsonBody(resp, &pc)
}

// handleConsumeStats serves GET_CONSUME_STATS (208).
func (b *Broker) handleConsumeStats(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumeStatsRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	var topics []string
	for _, t := range strings.Split(h.TopicList, ";") {
		if t = strings.TrimSpace(t); t != "" {
			topics = append(topics, t)
		}
	}
	s := b.core.Admin().ConsumeStats(h.ConsumerGroup, h.Topic, topics)
	cs := consumeStatsBody(s)
	body, err := cs.Encode()
	return replyBody(resp, body, err)
}

// handleTopicConsumeByWho serves QUERY_TOPIC_CONSUME_BY_WHO (300).
func (b *Broker) handleTopicConsumeByWho(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetTopicStatsInfoRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	return jsonBody(resp, &protocol.GroupList{GroupList: b.core.Admin().TopicConsumeByWho(h.Topic)})
}

// handleConsumeTimeSpan serves QUERY_CONSUME_TIME_SPAN (303).
func (b *Broker) handleConsumeTimeSpan(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueryConsumeTimeSpanRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	spans, err := b.core.Admin().ConsumeTimeSpan(h.Topic, h.Group)
	if err != nil {
		return fail(resp, err)
	}
	return jsonBody(resp, &protocol.QueryConsumeTimeSpanBody{ConsumeTimeSpanSet: spans})
}

// handleSystemTopics serves GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305).
func (b *Broker) handleSystemTopics(resp *remoting.Response) remoting.Action {
	body, err := (&protocol.TopicList{TopicList: b.core.Admin().SystemTopics()}).Encode()
	return replyBody(resp, body, err)
}

// handleCloneGroupOffset serves CLONE_GROUP_OFFSET (314).
func (b *Broker) handleCloneGroupOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.CloneGroupOffsetRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	if err := b.core.Admin().CloneGroupOffset(h.SrcGroup, h.DestGroup, h.Topic, h.Offline); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// handleViewStats serves VIEW_BROKER_STATS_DATA (315).
func (b *Broker) handleViewStats(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ViewBrokerStatsDataRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	w, err := b.core.Admin().StatsData(h.StatsName, h.StatsKey)
	if err != nil {
		return fail(resp, err)
	}
	d := protocol.BrokerStatsData{StatsMinute: w.Minute, StatsHour: w.Hour, StatsDay: w.Day}
	return jsonBody(resp, &d)
}

// handleBrokerConsumeStats serves GET_BROKER_CONSUME_STATS (317).
func (b *Broker) handleBrokerConsumeStats(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumeStatsInBrokerRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	s := b.core.Admin().BrokerConsumeStats(h.IsOrder)
	l := protocol.ConsumeStatsList{BrokerAddr: s.BrokerAddr, TotalDiff: s.TotalLag}
	for _, g := range s.Groups {
		list := make([]protocol.ConsumeStats, 0, len(g.Topics))
		for _, t := range g.Topics {
			list = append(list, consumeStatsBody(t))
		}
		l.ConsumeStatsList = append(l.ConsumeStatsList, map[string][]protocol.ConsumeStats{g.Group: list})
	}
	body, err := l.Encode()
	return replyBody(resp, body, err)
}

// consumeStatsBody is GET_CONSUME_STATS's body of a group's statistics.
func consumeStatsBody(s core.GroupStats) protocol.ConsumeStats {
	return protocol.ConsumeStats{ConsumeTps: s.TPS, OffsetTable: s.Queues}
}

// handleQueryConsumeQueue serves QUERY_CONSUME_QUEUE (321).
func (b *Broker) handleQueryConsumeQueue(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueryConsumeQueueRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	v, err := b.core.Admin().QueryConsumeQueue(h.Topic, h.QueueID, h.Index, h.Count, h.ConsumerGroup)
	if err != nil {
		return fail(resp, err)
	}
	body := protocol.QueryConsumeQueueResponseBody{MinQueueIndex: v.MinIndex, MaxQueueIndex: v.MaxIndex,
		QueueData: v.Entries, SubscriptionData: v.Subscription}
	if body.QueueData == nil {
		body.QueueData = []protocol.ConsumeQueueData{}
	}
	return jsonBody(resp, &body)
}

// handleTopicsByConsumer serves QUERY_TOPICS_BY_CONSUMER (343).
func (b *Broker) handleTopicsByConsumer(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueryTopicsByConsumerRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	body, err := (&protocol.TopicList{TopicList: b.core.Admin().TopicsByConsumer(h.Group), BrokerAddr: b.copts.AdvertiseAddr}).Encode()
	return replyBody(resp, body, err)
}

// handleSubscriptionByConsumer serves QUERY_SUBSCRIPTION_BY_CONSUMER (345):
// body QuerySubscriptionResponseBody {group, subscriptionData, topic}.
func (b *Broker) handleSubscriptionByConsumer(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QuerySubscriptionByConsumerRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	out := struct {
		Group            string                     `json:"group"`
		SubscriptionData *protocol.SubscriptionData `json:"subscriptionData"`
		Topic            string                     `json:"topic"`
	}{Group: h.Group, Topic: h.Topic}
	if sd, ok := b.core.Admin().Subscription(h.Group, h.Topic); ok {
		out.SubscriptionData = &sd
	}
	return jsonBody(resp, &out)
}

// handleGetTopicConfig serves GET_TOPIC_CONFIG (351): the topic's
// configuration (Java 5's TopicConfigAndQueueMapping, without a mapping).
func (b *Broker) handleGetTopicConfig(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetTopicStatsInfoRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	cfg, ok := b.core.TopicConfig(h.Topic)
	if !ok {
		return fail(resp, &core.Error{Code: protocol.RespTopicNotExist, Remark: "No topic in this broker. topic: " + h.Topic})
	}
	return jsonBody(resp, &cfg)
}

// handleAllProducers serves GET_ALL_PRODUCER_INFO (328): ProducerTableInfo
// {data{group:[ProducerInfo{clientId, lastUpdateTimestamp, language,
// remoteIP, version}]}}.
func (b *Broker) handleAllProducers(resp *remoting.Response) remoting.Action {
	return jsonBody(resp, &struct {
		Data map[string][]core.ProducerInfo `json:"data"`
	}{b.core.Admin().AllProducers()})
}

// handleClean serves CLEAN_EXPIRED_CONSUMEQUEUE (306), CLEAN_UNUSED_TOPIC
// (316) and DELETE_EXPIRED_COMMITLOG (329): one pass of the store's
// retention.
func (b *Broker) handleClean(resp *remoting.Response) remoting.Action {
	if _, err := b.core.Admin().CleanExpired(); err != nil {
		return fail(resp, err)
	}
	return remoting.Reply
}

// forward sends a request to a consumer's connection and answers the admin
// tool with the consumer's answer once it comes (the tool's connection is
// not held meanwhile), or CONSUME_MSG_TIMEOUT after ForwardTimeout, or
// SYSTEM_ERROR when the consumer is gone (the Java broker's callConsumer).
func (b *Broker) forward(c *remoting.Conn, req *protocol.Command, resp *remoting.Response, code int32, group, clientID string, body []byte) remoting.Action {
	cc, err := b.core.Admin().ConsumerConn(group, clientID)
	if err != nil {
		return fail(resp, err)
	}
	target, ok := cc.(clientConn)
	if !ok || c == nil {
		return fail(resp, &core.Error{Code: protocol.RespSystemError, Remark: fmt.Sprintf("The Consumer <%s> <%s> is not on this front end", group, clientID)})
	}
	var out protocol.Command
	out.InitRequest(code, 0)
	out.Ext.CopyFrom(&req.Ext)
	out.Body = body
	r := c.Defer(req)
	err = target.c.InvokeAsync(&out, ForwardTimeout, func(cr *protocol.Command, err error) {
		var ans protocol.Command
		switch {
		case errors.Is(err, remoting.ErrTimeout):
			r.InitResponse(&ans, protocol.RespConsumeMsgTimeout)
			ans.SetRemark(fmt.Sprintf("consumer <%s> <%s> Timeout: %v", group, clientID, err))
		case err != nil:
			r.InitResponse(&ans, protocol.RespSystemError)
			ans.SetRemark(fmt.Sprintf("invoke consumer <%s> <%s> Exception: %v", group, clientID, err))
		default:
			r.InitResponse(&ans, cr.Code)
			ans.SetRemark(string(cr.Remark))
			ans.Ext.CopyFrom(&cr.Ext)
			ans.Body = bytes.Clone(cr.Body) // cr aliases the client connection's read buffer
		}
		r.Reply(&remoting.Response{Cmd: &ans})
	})
	if err != nil {
		var ans protocol.Command
		r.InitResponse(&ans, protocol.RespSystemError)
		ans.SetRemark(fmt.Sprintf("invoke consumer <%s> <%s> Exception: %v", group, clientID, err))
		r.Reply(&remoting.Response{Cmd: &ans})
	}
	return remoting.Deferred
}

// handleConsumerRunningInfo serves GET_CONSUMER_RUNNING_INFO (307): forwarded
// to the consumer, whose answer (a ConsumerRunningInfo) goes back as it is.
func (b *Broker) handleConsumerRunningInfo(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumerRunningInfoRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	return b.forward(c, req, resp, protocol.ReqGetConsumerRunningInfo, h.ConsumerGroup, h.ClientID, req.Body)
}

// handleConsumeMessageDirectly serves CONSUME_MESSAGE_DIRECTLY (309): the
// message (by its offset msgId) is read from the store and forwarded with
// the request to the consumer, with brokerName, topicSysFlag and
// groupSysFlag added as the Java broker adds them.
func (b *Broker) handleConsumeMessageDirectly(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ConsumeMessageDirectlyRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	v, err := b.core.ViewMessageByOffsetID(h.MsgID)
	if err != nil {
		return fail(resp, err)
	}
	body := bytes.Clone(v.Bytes())
	v.Release()
	req.Ext.SetString("brokerName", b.copts.BrokerName)
	if t, ok := req.Ext.GetString("topic"); ok && t != "" {
		if cfg, ok := b.core.TopicConfig(t); ok {
			req.Ext.SetInt("topicSysFlag", int64(cfg.TopicSysFlag))
		}
	}
	if f, ok := b.core.Admin().GroupSysFlag(h.ConsumerGroup); ok {
		req.Ext.SetInt("groupSysFlag", int64(f))
	}
	return b.forward(c, req, resp, protocol.ReqConsumeMessageDirectly, h.ConsumerGroup, h.ClientID, body)
}

// registerConsumerStatus registers INVOKE_BROKER_TO_GET_CONSUMER_STATUS.
func (b *Broker) registerConsumerStatus(t *handlerTable) {
	t.add(b.handleConsumerStatus, protocol.ReqInvokeBrokerToGetConsumerSts)
}

// handleConsumerStatus serves INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223), as
// the Java broker's Broker2Client.getConsumeStatus: GET_CONSUMER_STATUS_FROM_CLIENT
// (221) goes to every live member of the group (or the one whose client id
// is clientAddr), and the answer is GetConsumerStatusBody
// {consumerTable{clientId:{MQ:offset}}, messageQueueTable{}}: each member's
// offsets of the topic's queues it holds. A member that fails or does not
// answer within 5 s is left out; a group without members is SYSTEM_ERROR.
func (b *Broker) handleConsumerStatus(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumerStatusRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	var members []core.MemberConn
	for _, m := range b.core.Admin().ConsumerMembers(h.Group) {
		if _, ok := m.Conn.(clientConn); ok && (h.ClientAddr == "" || h.ClientAddr == m.ClientID) {
			members = append(members, m)
		}
	}
	if len(members) == 0 || c == nil {
		return fail(resp, &core.Error{Code: protocol.RespSystemError, Remark: fmt.Sprintf("No Any Consumer online in the consumer group: [%s]", h.Group)})
	}
	r := c.Defer(req)
	var mu sync.Mutex
	tables := map[string]map[protocol.MessageQueue]int64{}
	left := len(members)
	done := func() {
		body := []byte(`{"consumerTable":{`)
		ids := make([]string, 0, len(tables))
		for id := range tables {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for i, id := range ids {
			if i > 0 {
				body = append(body, ',')
			}
			body = strconv.AppendQuote(body, id)
			body = append(body, ':', '{')
			qs := make([]protocol.MessageQueue, 0, len(tables[id]))
			for mq := range tables[id] {
				qs = append(qs, mq)
			}
			protocol.SortQueues(qs)
			for j, mq := range qs {
				if j > 0 {
					body = append(body, ',')
				}
				body = protocol.AppendMQKey(body, mq)
				body = append(body, ':')
				body = strconv.AppendInt(body, tables[id][mq], 10)
			}
			body = append(body, '}')
		}
		body = append(body, `},"messageQueueTable":{}}`...)
		var ans protocol.Command
		r.InitResponse(&ans, protocol.RespSuccess)
		ans.Body = body
		r.Reply(&remoting.Response{Cmd: &ans})
	}
	for _, m := range members {
		var out protocol.Command
		out.InitRequest(protocol.ReqGetConsumerStatusFromClient, 0)
		(&protocol.GetConsumerStatusRequest{Topic: h.Topic, Group: h.Group}).Encode(&out.Ext)
		id := m.ClientID
		finish := func(t map[protocol.MessageQueue]int64) {
			mu.Lock()
			if t != nil {
				tables[id] = t
			}
			left--
			last := left == 0
			mu.Unlock()
			if last {
				done()
			}
		}
		err := m.Conn.(clientConn).c.InvokeAsync(&out, 5*time.Second, func(cr *protocol.Command, err error) {
			if err != nil || cr.Code != protocol.RespSuccess {
				finish(nil)
				return
			}
			var raw struct {
				MessageQueueTable map[string]int64 `json:"messageQueueTable"`
			}
			j, jerr := protocol.FastjsonToJSON(cr.Body)
			if jerr != nil || json.Unmarshal(j, &raw) != nil {
				finish(nil)
				return
			}
			t := map[protocol.MessageQueue]int64{}
			for k, off := range raw.MessageQueueTable {
				var mq protocol.MessageQueue
				if json.Unmarshal([]byte(k), &mq) == nil {
					t[mq] = off
				}
			}
			finish(t)
		})
		if err != nil {
			finish(nil)
		}
	}
	return remoting.Deferred
}
