package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// The admin protocol of mqadmin, the RocketMQ dashboard and
// rocketmq-exporter, request by request: what cmd/apogee-admin is built
// on. Each method sends one request to the broker (or name server) address
// it is given and decodes the Java body; a refusal is a *BrokerError with
// the broker's code and remark. Name-server requests go to the admin's name
// servers (the first that answers), except WipeWritePerm and AddWritePerm,
// which go to every one of them, as mqadmin does.

// call sends a request to addr; a response code other than SUCCESS is a
// *BrokerError.
func (a *Admin) call(ctx context.Context, addr string, code int32, header interface {
	Encode(*protocol.ExtFields)
}, body []byte) (*protocol.Command, error) {
	if a.closed.Load() {
		return nil, ErrClosed
	}
	req := a.in.newRequest(code)
	if header != nil {
		header.Encode(&req.Ext)
	}
	req.Body = body
	resp, err := a.in.invoke(ctx, addr, req, a.cfg.requestTimeout)
	if err != nil {
		return nil, fmt.Errorf("client: request %d to %s: %w", code, addr, err)
	}
	if resp.Code != protocol.RespSuccess {
		return resp, fmt.Errorf("client: request %d to %s: %w", code, addr, brokerError(addr, resp))
	}
	return resp, nil
}

// callNameServer sends a request to the name servers (the first that answers).
func (a *Admin) callNameServer(ctx context.Context, code int32, header interface {
	Encode(*protocol.ExtFields)
}) (*protocol.Command, string, error) {
	if a.closed.Load() {
		return nil, "", ErrClosed
	}
	req := a.in.newRequest(code)
	if header != nil {
		header.Encode(&req.Ext)
	}
	resp, addr, err := a.in.invokeNameServer(ctx, req)
	if err != nil {
		return nil, "", err
	}
	if resp.Code != protocol.RespSuccess {
		return resp, addr, fmt.Errorf("client: request %d to %s: %w", code, addr, brokerError(addr, resp))
	}
	return resp, addr, nil
}

// NameServers returns the admin's name-server addresses.
func (a *Admin) NameServers() []string { return append([]string(nil), a.cfg.nameServers...) }

// ClusterInfo fetches the clusters and their brokers (GET_BROKER_CLUSTER_INFO, 106).
func (a *Admin) ClusterInfo(ctx context.Context) (*protocol.ClusterInfo, error) {
	resp, _, err := a.callNameServer(ctx, protocol.ReqGetBrokerClusterInfo, nil)
	if err != nil {
		return nil, err
	}
	var ci protocol.ClusterInfo
	if err := ci.Decode(resp.Body); err != nil {
		return nil, err
	}
	return &ci, nil
}

// TopicList fetches every topic the name servers know
// (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206), sorted.
func (a *Admin) TopicList(ctx context.Context) ([]string, error) {
	resp, _, err := a.callNameServer(ctx, protocol.ReqGetAllTopicListFromNameSrv, nil)
	if err != nil {
		return nil, err
	}
	var tl protocol.TopicList
	if err := tl.Decode(resp.Body); err != nil {
		return nil, err
	}
	sort.Strings(tl.TopicList)
	return tl.TopicList, nil
}

// TopicRoute fetches a topic's route (GET_ROUTEINFO_BY_TOPIC, 105).
func (a *Admin) TopicRoute(ctx context.Context, topic string) (*protocol.TopicRouteData, error) {
	if a.closed.Load() {
		return nil, ErrClosed
	}
	return a.in.fetchRouteData(ctx, topic)
}

// DeleteTopicInNameServers removes a topic's route from every name server
// (DELETE_TOPIC_IN_NAMESRV, 216).
func (a *Admin) DeleteTopicInNameServers(ctx context.Context, topic string) error {
	if len(a.cfg.nameServers) == 0 {
		return ErrNoNameServer // DirectOnly
	}
	var errs []error
	for _, ns := range a.cfg.nameServers {
		if _, err := a.call(ctx, ns, protocol.ReqDeleteTopicInNameSrv, &protocol.DeleteTopicRequest{Topic: topic}, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setWritePerm sends WIPE_ or ADD_WRITE_PERM_OF_BROKER to every name server
// and returns the topics changed per name server.
func (a *Admin) setWritePerm(ctx context.Context, brokerName string, code int32) (map[string]int32, error) {
	if len(a.cfg.nameServers) == 0 {
		return nil, ErrNoNameServer // DirectOnly
	}
	out := map[string]int32{}
	var errs []error
	for _, ns := range a.cfg.nameServers {
		resp, err := a.call(ctx, ns, code, &protocol.BrokerNameRequest{BrokerName: brokerName}, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if code == protocol.ReqWipeWritePermOfBroker {
			var h protocol.WipeWritePermResponse
			if err := h.Decode(&resp.Ext); err != nil {
				errs = append(errs, err)
				continue
			}
			out[ns] = h.WipeTopicCount
		} else {
			var h protocol.AddWritePermResponse
			if err := h.Decode(&resp.Ext); err != nil {
				errs = append(errs, err)
				continue
			}
			out[ns] = h.AddTopicCount
		}
	}
	return out, errors.Join(errs...)
}

// WipeWritePerm removes the write permission of a broker's topics on every
// name server (WIPE_WRITE_PERM_OF_BROKER, 205): topics changed per name server.
func (a *Admin) WipeWritePerm(ctx context.Context, brokerName string) (map[string]int32, error) {
	return a.setWritePerm(ctx, brokerName, protocol.ReqWipeWritePermOfBroker)
}

// AddWritePerm gives a broker's topics read and write permission again on
// every name server (ADD_WRITE_PERM_OF_BROKER, 327).
func (a *Admin) AddWritePerm(ctx context.Context, brokerName string) (map[string]int32, error) {
	return a.setWritePerm(ctx, brokerName, protocol.ReqAddWritePermOfBroker)
}

// BrokerRuntimeInfo fetches a broker's runtime numbers (GET_BROKER_RUNTIME_INFO, 28).
func (a *Admin) BrokerRuntimeInfo(ctx context.Context, addr string) (map[string]string, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetBrokerRuntimeInfo, nil, nil)
	if err != nil {
		return nil, err
	}
	var kv protocol.KVTable
	if err := kv.Decode(resp.Body); err != nil {
		return nil, err
	}
	return kv.Table, nil
}

// BrokerConfig fetches a broker's configuration (GET_BROKER_CONFIG, 26) and
// its data version (JSON).
func (a *Admin) BrokerConfig(ctx context.Context, addr string) (map[string]string, string, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetBrokerConfig, nil, nil)
	if err != nil {
		return nil, "", err
	}
	var h protocol.GetBrokerConfigResponse
	_ = h.Decode(&resp.Ext)
	out := map[string]string{}
	for _, line := range strings.Split(string(resp.Body), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, h.Version, nil
}

// UpdateBrokerConfig changes broker configuration keys (UPDATE_BROKER_CONFIG, 25).
func (a *Admin) UpdateBrokerConfig(ctx context.Context, addr string, kv map[string]string) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + kv[k] + "\n")
	}
	_, err := a.call(ctx, addr, protocol.ReqUpdateBrokerConfig, nil, []byte(b.String()))
	return err
}

// CreateTopicAt creates or updates a topic on one broker (UPDATE_AND_CREATE_TOPIC, 17).
func (a *Admin) CreateTopicAt(ctx context.Context, addr string, h protocol.CreateTopicRequest) error {
	if h.DefaultTopic == "" {
		h.DefaultTopic = "TBW102"
	}
	if h.TopicFilterType == "" {
		h.TopicFilterType = "SINGLE_TAG"
	}
	_, err := a.call(ctx, addr, protocol.ReqUpdateAndCreateTopic, &h, nil)
	return err
}

// DeleteTopicAt deletes a topic on one broker (DELETE_TOPIC_IN_BROKER, 215).
func (a *Admin) DeleteTopicAt(ctx context.Context, addr, topic string) error {
	_, err := a.call(ctx, addr, protocol.ReqDeleteTopicInBroker, &protocol.DeleteTopicRequest{Topic: topic}, nil)
	return err
}

// UpdateSubscriptionGroupAt creates or updates a subscription group on one
// broker (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 200).
func (a *Admin) UpdateSubscriptionGroupAt(ctx context.Context, addr string, cfg protocol.SubscriptionGroupConfig) error {
	body, err := json.Marshal(&cfg)
	if err != nil {
		return err
	}
	_, err = a.call(ctx, addr, protocol.ReqUpdateAndCreateSubscription, nil, body)
	return err
}

// DeleteSubscriptionGroupAt deletes a subscription group on one broker
// (DELETE_SUBSCRIPTIONGROUP, 207), and its offsets with cleanOffset.
func (a *Admin) DeleteSubscriptionGroupAt(ctx context.Context, addr, group string, cleanOffset bool) error {
	_, err := a.call(ctx, addr, protocol.ReqDeleteSubscriptionGroup,
		&protocol.DeleteSubscriptionGroupRequest{GroupName: group, CleanOffset: cleanOffset}, nil)
	return err
}

// AllTopicConfig fetches a broker's topic table (GET_ALL_TOPIC_CONFIG, 21).
func (a *Admin) AllTopicConfig(ctx context.Context, addr string) (*protocol.TopicConfigSerializeWrapper, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetAllTopicConfig, nil, nil)
	if err != nil {
		return nil, err
	}
	var w protocol.TopicConfigSerializeWrapper
	if err := w.Decode(resp.Body); err != nil {
		return nil, err
	}
	return &w, nil
}

// AllSubscriptionGroups fetches a broker's subscription groups
// (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201).
func (a *Admin) AllSubscriptionGroups(ctx context.Context, addr string) (*protocol.SubscriptionGroupWrapper, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetAllSubscriptionGroup, nil, nil)
	if err != nil {
		return nil, err
	}
	var w protocol.SubscriptionGroupWrapper
	if err := w.Decode(resp.Body); err != nil {
		return nil, err
	}
	return &w, nil
}

// AllConsumerOffsets fetches a broker's committed offsets (GET_ALL_CONSUMER_OFFSET, 43).
func (a *Admin) AllConsumerOffsets(ctx context.Context, addr string) (*protocol.ConsumerOffsetSerializeWrapper, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetAllConsumerOffset, nil, nil)
	if err != nil {
		return nil, err
	}
	var w protocol.ConsumerOffsetSerializeWrapper
	if err := w.Decode(resp.Body); err != nil {
		return nil, err
	}
	return &w, nil
}

// TopicStats fetches a topic's queues on one broker (GET_TOPIC_STATS_INFO, 202).
func (a *Admin) TopicStats(ctx context.Context, addr, topic string) (*protocol.TopicStatsTable, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetTopicStatsInfo, &protocol.GetTopicStatsInfoRequest{Topic: topic}, nil)
	if err != nil {
		return nil, err
	}
	var t protocol.TopicStatsTable
	if err := t.Decode(resp.Body); err != nil {
		return nil, err
	}
	return &t, nil
}

// ConsumeStats fetches a group's offsets and consume TPS on one broker
// (GET_CONSUME_STATS, 208); topic "" means every topic it consumes.
func (a *Admin) ConsumeStats(ctx context.Context, addr, group, topic string) (*protocol.ConsumeStats, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetConsumeStats, &protocol.GetConsumeStatsRequest{ConsumerGroup: group, Topic: topic}, nil)
	if err != nil {
		return nil, err
	}
	var s protocol.ConsumeStats
	if err := s.Decode(resp.Body); err != nil {
		return nil, err
	}
	return &s, nil
}

// BrokerConsumeStats fetches every group's consume stats on one broker
// (GET_BROKER_CONSUME_STATS, 317).
func (a *Admin) BrokerConsumeStats(ctx context.Context, addr string, isOrder bool) (*protocol.ConsumeStatsList, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetBrokerConsumeStats, &protocol.GetConsumeStatsInBrokerRequest{IsOrder: isOrder}, nil)
	if err != nil {
		return nil, err
	}
	var l protocol.ConsumeStatsList
	if err := l.Decode(resp.Body); err != nil {
		return nil, err
	}
	return &l, nil
}

// ConsumerConnection is GET_CONSUMER_CONNECTION_LIST's (203) body as the Java
// tools read it.
type ConsumerConnection struct {
	ConnectionSet     []protocol.Connection                `json:"connectionSet"`
	ConsumeType       string                               `json:"consumeType"`
	MessageModel      string                               `json:"messageModel"`
	ConsumeFromWhere  string                               `json:"consumeFromWhere"`
	SubscriptionTable map[string]protocol.SubscriptionData `json:"subscriptionTable"`
}

// MinVersion is the lowest client version of the connections
// (ConsumerConnection.computeMinVersion).
func (c *ConsumerConnection) MinVersion() int32 {
	v := int32(1<<31 - 1)
	for _, cn := range c.ConnectionSet {
		v = min(v, cn.Version)
	}
	return v
}

// ConsumerConnectionAt fetches a group's live members on one broker
// (GET_CONSUMER_CONNECTION_LIST, 203).
func (a *Admin) ConsumerConnectionAt(ctx context.Context, addr, group string) (*ConsumerConnection, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetConsumerConnectionList, &protocol.GetConsumerConnectionListRequest{ConsumerGroup: group}, nil)
	if err != nil {
		return nil, err
	}
	var cc ConsumerConnection
	if err := json.Unmarshal(resp.Body, &cc); err != nil {
		return nil, fmt.Errorf("client: decode ConsumerConnection: %w", err)
	}
	return &cc, nil
}

// ProducerConnectionAt fetches a producer group's live connections on one
// broker (GET_PRODUCER_CONNECTION_LIST, 204).
func (a *Admin) ProducerConnectionAt(ctx context.Context, addr, group string) (*protocol.ProducerConnection, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetProducerConnectionList, &protocol.GetProducerConnectionListRequest{ProducerGroup: group}, nil)
	if err != nil {
		return nil, err
	}
	var pc protocol.ProducerConnection
	if err := json.Unmarshal(resp.Body, &pc); err != nil {
		return nil, fmt.Errorf("client: decode ProducerConnection: %w", err)
	}
	return &pc, nil
}

// TopicConsumeByWho fetches the groups consuming a topic on one broker
// (QUERY_TOPIC_CONSUME_BY_WHO, 300).
func (a *Admin) TopicConsumeByWho(ctx context.Context, addr, topic string) ([]string, error) {
	resp, err := a.call(ctx, addr, protocol.ReqQueryTopicConsumeByWho, &protocol.GetTopicStatsInfoRequest{Topic: topic}, nil)
	if err != nil {
		return nil, err
	}
	var gl protocol.GroupList
	if err := json.Unmarshal(resp.Body, &gl); err != nil {
		return nil, fmt.Errorf("client: decode GroupList: %w", err)
	}
	return gl.GroupList, nil
}

// ConsumeTimeSpan fetches a group's time spans per queue of a topic on one
// broker (QUERY_CONSUME_TIME_SPAN, 303).
func (a *Admin) ConsumeTimeSpan(ctx context.Context, addr, topic, group string) ([]protocol.QueueTimeSpan, error) {
	resp, err := a.call(ctx, addr, protocol.ReqQueryConsumeTimeSpan, &protocol.QueryConsumeTimeSpanRequest{Topic: topic, Group: group}, nil)
	if err != nil {
		return nil, err
	}
	var b protocol.QueryConsumeTimeSpanBody
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return nil, fmt.Errorf("client: decode QueryConsumeTimeSpanBody: %w", err)
	}
	return b.ConsumeTimeSpanSet, nil
}

// SystemTopics fetches a broker's system topics (GET_SYSTEM_TOPIC_LIST_FROM_BROKER, 305).
func (a *Admin) SystemTopics(ctx context.Context, addr string) ([]string, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetSystemTopicListFromBroker, nil, nil)
	if err != nil {
		return nil, err
	}
	var tl protocol.TopicList
	if err := tl.Decode(resp.Body); err != nil {
		return nil, err
	}
	return tl.TopicList, nil
}

// CloneGroupOffset copies src's committed offsets (of topic, or of all its
// topics when "") to dst on one broker (CLONE_GROUP_OFFSET, 314).
func (a *Admin) CloneGroupOffset(ctx context.Context, addr, src, dst, topic string, offline bool) error {
	_, err := a.call(ctx, addr, protocol.ReqCloneGroupOffset,
		&protocol.CloneGroupOffsetRequest{SrcGroup: src, DestGroup: dst, Topic: topic, Offline: offline}, nil)
	return err
}

// ViewStats fetches a statistic over the last minute, hour and day
// (VIEW_BROKER_STATS_DATA, 315): name as RocketMQ's BrokerStatsManager
// (TOPIC_PUT_NUMS, GROUP_GET_NUMS, ...), key "topic" or "topic@group".
func (a *Admin) ViewStats(ctx context.Context, addr, name, key string) (*protocol.BrokerStatsData, error) {
	resp, err := a.call(ctx, addr, protocol.ReqViewBrokerStatsData, &protocol.ViewBrokerStatsDataRequest{StatsName: name, StatsKey: key}, nil)
	if err != nil {
		return nil, err
	}
	var d protocol.BrokerStatsData
	if err := json.Unmarshal(resp.Body, &d); err != nil {
		return nil, fmt.Errorf("client: decode BrokerStatsData: %w", err)
	}
	return &d, nil
}

// QueryConsumeQueue reads count entries of a consume queue from index on
// (QUERY_CONSUME_QUEUE, 321).
func (a *Admin) QueryConsumeQueue(ctx context.Context, addr, topic string, queueID int32, index int64, count int32, group string) (*protocol.QueryConsumeQueueResponseBody, error) {
	resp, err := a.call(ctx, addr, protocol.ReqQueryConsumeQueue, &protocol.QueryConsumeQueueRequest{Topic: topic, QueueID: queueID,
		Index: index, Count: count, ConsumerGroup: group}, nil)
	if err != nil {
		return nil, err
	}
	var b protocol.QueryConsumeQueueResponseBody
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return nil, fmt.Errorf("client: decode QueryConsumeQueueResponseBody: %w", err)
	}
	return &b, nil
}

// ConsumerRunningInfo asks a consumer, through its broker, for its running
// state (GET_CONSUMER_RUNNING_INFO, 307).
func (a *Admin) ConsumerRunningInfo(ctx context.Context, addr, group, clientID string, jstack bool) (*protocol.ConsumerRunningInfo, error) {
	resp, err := a.call(ctx, addr, protocol.ReqGetConsumerRunningInfo,
		&protocol.GetConsumerRunningInfoRequest{ConsumerGroup: group, ClientID: clientID, JstackEnable: jstack}, nil)
	if err != nil {
		return nil, err
	}
	var ri protocol.ConsumerRunningInfo
	if err := ri.Decode(resp.Body); err != nil {
		return nil, err
	}
	return &ri, nil
}

// ConsumeMessageDirectly has a consumer, through its broker, consume one
// message given by its offset message id (CONSUME_MESSAGE_DIRECTLY, 309).
func (a *Admin) ConsumeMessageDirectly(ctx context.Context, addr, group, clientID, offsetMsgID, topic string) (*protocol.ConsumeMessageDirectlyResult, error) {
	h := &consumeDirectlyHeader{ConsumeMessageDirectlyRequest: protocol.ConsumeMessageDirectlyRequest{ConsumerGroup: group,
		ClientID: clientID, MsgID: offsetMsgID}, topic: topic}
	resp, err := a.call(ctx, addr, protocol.ReqConsumeMessageDirectly, h, nil)
	if err != nil {
		return nil, err
	}
	var r protocol.ConsumeMessageDirectlyResult
	if err := json.Unmarshal(resp.Body, &r); err != nil {
		return nil, fmt.Errorf("client: decode ConsumeMessageDirectlyResult: %w", err)
	}
	return &r, nil
}

// consumeDirectlyHeader adds the 5.x topic to CONSUME_MESSAGE_DIRECTLY's header.
type consumeDirectlyHeader struct {
	protocol.ConsumeMessageDirectlyRequest
	topic string
}

func (h *consumeDirectlyHeader) Encode(e *protocol.ExtFields) {
	h.ConsumeMessageDirectlyRequest.Encode(e)
	if h.topic != "" {
		e.SetString("topic", h.topic)
	}
}

// PullOnce reads up to max messages of a queue from offset for group
// without a subscription of its own (PULL_MESSAGE with the request's own
// "*" subscription; no offset is committed): queryMsgByOffset and
// consumeMessage read this way. It returns the messages and the next offset;
// an empty slice when the queue holds nothing there.
func (a *Admin) PullOnce(ctx context.Context, addr, brokerName, group, topic string, queueID int32, offset int64, max int32) ([]*MessageExt, int64, error) {
	h := &protocol.PullMessageRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: queueID, QueueOffset: offset,
		MaxMsgNums: max, SysFlag: protocol.PullFlagSubscription, Subscription: []byte("*"), ExpressionType: []byte("TAG")}
	resp, err := a.call(ctx, addr, protocol.ReqPullMessage, h, nil)
	if err != nil {
		var be *BrokerError
		if errors.As(err, &be) && resp != nil {
			switch resp.Code {
			case protocol.RespPullNotFound, protocol.RespPullOffsetMoved, protocol.RespPullRetryImmediately:
				var ph protocol.PullMessageResponse
				_ = ph.Decode(&resp.Ext)
				return nil, ph.NextBeginOffset, nil
			}
		}
		return nil, offset, err
	}
	var ph protocol.PullMessageResponse
	if err := ph.Decode(&resp.Ext); err != nil {
		return nil, offset, err
	}
	var msgs []*MessageExt
	err = message.ForEachRecord(resp.Body, false, func(v message.View) error {
		m, derr := decodeMessage(v, MessageQueue{Topic: topic, BrokerName: brokerName, QueueID: queueID})
		if derr != nil && m == nil {
			return derr
		}
		msgs = append(msgs, m)
		return nil
	})
	return msgs, ph.NextBeginOffset, err
}

// ConsumerStatus asks, through a broker, a group's members for their offsets
// of a topic's queues (INVOKE_BROKER_TO_GET_CONSUMER_STATUS, 223; clientID
// "" for every member): client id → queue → offset.
func (a *Admin) ConsumerStatus(ctx context.Context, addr, group, topic, clientID string) (map[string]map[protocol.MessageQueue]int64, error) {
	resp, err := a.call(ctx, addr, protocol.ReqInvokeBrokerToGetConsumerSts,
		&protocol.GetConsumerStatusRequest{Topic: topic, Group: group, ClientAddr: clientID}, nil)
	if err != nil {
		return nil, err
	}
	j, err := protocol.FastjsonToJSON(resp.Body)
	if err != nil {
		return nil, err
	}
	var raw struct {
		ConsumerTable map[string]map[string]int64 `json:"consumerTable"`
	}
	if err := json.Unmarshal(j, &raw); err != nil {
		return nil, fmt.Errorf("client: decode GetConsumerStatusBody: %w", err)
	}
	out := map[string]map[protocol.MessageQueue]int64{}
	for id, t := range raw.ConsumerTable {
		m := map[protocol.MessageQueue]int64{}
		for k, off := range t {
			var mq protocol.MessageQueue
			if err := json.Unmarshal([]byte(k), &mq); err != nil {
				return nil, fmt.Errorf("client: queue key %q: %w", k, err)
			}
			m[mq] = off
		}
		out[id] = m
	}
	return out, nil
}
