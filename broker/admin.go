package broker

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// maxQueryMessages caps QUERY_MESSAGE's maxNum (the Java broker's maxMsgsNumBatch).
const maxQueryMessages = 64

// ---- clients ----

// handleHeartbeat serves HEART_BEAT (34): it registers the client's groups
// and subscriptions, creates the subscription groups and their %RETRY%
// topics, and notifies the members of groups that changed.
func (b *Broker) handleHeartbeat(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var hb protocol.HeartbeatData
	if err := hb.Decode(req.Body); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if hb.ClientID == "" {
		return fail(resp, protocol.RespSystemError, "the heartbeat carries no clientID")
	}
	groupsCreated := false
	var topicsCreated []string
	for i := range hb.ConsumerDataSet {
		name := hb.ConsumerDataSet[i].GroupName
		if !validGroupName([]byte(name)) {
			b.opts.Logger.Warn("broker: heartbeat names an illegal consumer group; not creating it", "group", name)
			continue
		}
		if _, created := b.groups.ensure([]byte(name)); created {
			groupsCreated = true
		}
		retry := retryTopicPrefix + name
		if _, ok := checkTopicName([]byte(retry)); !ok {
			b.opts.Logger.Warn("broker: consumer group name cannot make a retry topic", "group", name)
			continue
		}
		if _, created := b.topics.createIfAbsent(newTopicConfig(retry, 1, protocol.PermRead|protocol.PermWrite)); created {
			topicsCreated = append(topicsCreated, retry)
		}
	}
	if groupsCreated {
		b.groupsChanged(false)
	}
	for _, t := range topicsCreated {
		b.topicChanged(t, false)
	}
	changed, joined := b.clients.heartbeat(c, &hb, req.Language.String(), req.Version, time.Now())
	b.notify(changed)
	for _, g := range joined {
		b.tx.ProducerJoined(g)
	}
	return remoting.Reply
}

// handleUnregisterClient serves UNREGISTER_CLIENT (35, Java clients).
func (b *Broker) handleUnregisterClient(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.UnregisterClientRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	b.notify(b.clients.unregister(c, h.ProducerGroup, h.ConsumerGroup))
	return remoting.Reply
}

// handleConsumerList serves GET_CONSUMER_LIST_BY_GROUP (38).
func (b *Broker) handleConsumerList(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumerListByGroupRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	ids := b.clients.consumerIDs(h.ConsumerGroup)
	if len(ids) == 0 {
		return fail(resp, protocol.RespSystemError, "no consumer for this group, "+h.ConsumerGroup)
	}
	body, err := (&protocol.ConsumerListBody{ConsumerIDList: ids}).Encode()
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = body
	return remoting.Reply
}

// ---- offsets ----

// handleQueryConsumerOffset serves QUERY_CONSUMER_OFFSET (14). With no
// committed offset it follows the Java broker: offset 0 when the queue's min
// offset is 0 and its first message is still in memory (or the queue is
// empty), so that a new group reads a young queue from its start whatever
// its consume-from-where; QUERY_NOT_FOUND (22) otherwise.
func (b *Broker) handleQueryConsumerOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueryConsumerOffsetRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if off, ok := b.offsets.query(h.Topic, h.ConsumerGroup, h.QueueID); ok {
		(&protocol.OffsetResponse{Offset: off}).Encode(&resp.Cmd.Ext)
		return remoting.Reply
	}
	topic := string(h.Topic)
	if b.store.MinOffset(topic, h.QueueID) <= 0 && !b.firstMessageOnDisk(topic, h.QueueID) {
		(&protocol.OffsetResponse{Offset: 0}).Encode(&resp.Cmd.Ext)
		return remoting.Reply
	}
	return fail(resp, protocol.RespQueryNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
}

// firstMessageOnDisk reports whether the queue's message at offset 0 is
// further behind the commit log's end than RocketMQ keeps in memory (40% of
// RAM); an empty or unknown queue has none, so it is not.
func (b *Broker) firstMessageOnDisk(topic string, queueID int32) bool {
	if b.store.MaxOffset(topic, queueID) == 0 {
		return false
	}
	var res store.GetResult
	if err := b.store.Get(topic, queueID, 0, 1, 0, nil, &res); err != nil || res.Status != store.Found {
		res.Release()
		return false
	}
	defer res.Release()
	v, err := message.Decode(res.Messages[0].Bytes(), false)
	if err != nil {
		return false
	}
	return b.store.WrittenOffset()-v.PhysicalOffset() > b.memWindow
}

// handleUpdateConsumerOffset serves UPDATE_CONSUMER_OFFSET (15).
func (b *Broker) handleUpdateConsumerOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.UpdateConsumerOffsetRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if !b.offsets.commit(h.Topic, h.ConsumerGroup, h.QueueID, h.CommitOffset) {
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("invalid queueId %d", h.QueueID))
	}
	return remoting.Reply
}

// handleQueueOffset serves GET_MAX_OFFSET (30) and GET_MIN_OFFSET (31).
func (b *Broker) handleQueueOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueueRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	topic := string(h.Topic)
	off := b.store.MaxOffset(topic, h.QueueID)
	if req.Code == protocol.ReqGetMinOffset {
		off = b.store.MinOffset(topic, h.QueueID)
	}
	(&protocol.OffsetResponse{Offset: off}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// handleSearchOffset serves SEARCH_OFFSET_BY_TIMESTAMP (29): the first
// offset stored at or after the timestamp.
func (b *Broker) handleSearchOffset(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.SearchOffsetByTimestampRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	topic := string(h.Topic)
	off, err := b.store.OffsetByTime(topic, h.QueueID, h.Timestamp)
	if err != nil {
		// The Go client reads "offset" whatever the code: point it at the end.
		(&protocol.OffsetResponse{Offset: b.store.MaxOffset(topic, h.QueueID)}).Encode(&resp.Cmd.Ext)
		return fail(resp, protocol.RespSystemError, "search offset by timestamp: "+err.Error())
	}
	(&protocol.OffsetResponse{Offset: off}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// handleEarliestStoreTime serves GET_EARLIEST_MSG_STORETIME (32); -1 when the
// queue holds no message.
func (b *Broker) handleEarliestStoreTime(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueueRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	topic := string(h.Topic)
	ts := int64(-1)
	if b.store.MaxOffset(topic, h.QueueID) > b.store.MinOffset(topic, h.QueueID) {
		if t, err := b.store.EarliestStoreTime(topic, h.QueueID); err == nil {
			ts = t
		}
	}
	(&protocol.GetEarliestMsgStoretimeResponse{Timestamp: ts}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// ---- messages ----

// viewsRelease releases a list of commit-log views once written.
type viewsRelease []store.View

func (v viewsRelease) Release() {
	for _, x := range v {
		x.Release()
	}
}

// handleQueryMessage serves QUERY_MESSAGE (12): the records of a topic whose
// UNIQ_KEY or KEYS hold the key, newest first, written without a copy.
func (b *Broker) handleQueryMessage(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueryMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	maxNum := int(min(max(h.MaxNum, 1), maxQueryMessages))
	views, err := b.store.QueryByKey(h.Topic, h.Key, h.BeginTimestamp, h.EndTimestamp, maxNum, nil)
	ts, phy := b.store.IndexLastUpdate()
	(&protocol.QueryMessageResponse{IndexLastUpdateTimestamp: ts, IndexLastUpdatePhyoffset: phy}).Encode(&resp.Cmd.Ext)
	if err != nil {
		viewsRelease(views).Release()
		return fail(resp, protocol.RespSystemError, "query message: "+err.Error())
	}
	if len(views) == 0 {
		return fail(resp, protocol.RespQueryNotFound, "can not find message, maybe time range not correct")
	}
	bodies := make([][]byte, len(views))
	for i := range views {
		bodies[i] = views[i].Bytes()
	}
	resp.Body, resp.Release = bodies, viewsRelease(views)
	return remoting.Reply
}

// handleViewMessage serves VIEW_MESSAGE_BY_ID (33): the record at a
// commit-log offset (decoded from an offset message id by the client).
func (b *Broker) handleViewMessage(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ViewMessageByIDRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	v, err := b.store.ReadMessage(h.Offset)
	if err != nil {
		return fail(resp, protocol.RespSystemError, "can not find message by the offset, "+strconv.FormatInt(h.Offset, 10))
	}
	resp.Body, resp.Release = [][]byte{v.Bytes()}, viewsRelease{v}
	return remoting.Reply
}

// ---- admin ----

// handleCreateTopic serves UPDATE_AND_CREATE_TOPIC (17).
func (b *Broker) handleCreateTopic(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.CreateTopicRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if remark, ok := checkTopicName([]byte(h.Topic)); !ok {
		return fail(resp, protocol.RespSystemError, remark)
	}
	if isSystemTopic(h.Topic) {
		return fail(resp, protocol.RespSystemError, "The topic["+h.Topic+"] is conflict with system topic.")
	}
	if h.Topic == b.opts.ClusterName || h.Topic == b.opts.BrokerName {
		return fail(resp, protocol.RespSystemError, "the topic["+h.Topic+"] is conflict with system reserved words.")
	}
	if h.ReadQueueNums <= 0 || h.WriteQueueNums <= 0 || h.ReadQueueNums > maxQueues || h.WriteQueueNums > maxQueues {
		return fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("queue numbers must be in 1..%d, got read %d write %d",
			maxQueues, h.ReadQueueNums, h.WriteQueueNums))
	}
	if h.Perm&^(protocol.PermRead|protocol.PermWrite|protocol.PermInherit|protocol.PermPriority) != 0 {
		return fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("invalid perm %d", h.Perm))
	}
	switch h.TopicFilterType {
	case "", filterSingleTag:
		h.TopicFilterType = filterSingleTag
	case filterMultiTag:
	default:
		return fail(resp, protocol.RespInvalidParameter, "invalid topicFilterType "+h.TopicFilterType)
	}
	cfg := protocol.TopicConfig{
		TopicName: h.Topic, ReadQueueNums: h.ReadQueueNums, WriteQueueNums: h.WriteQueueNums, Perm: h.Perm,
		TopicFilterType: h.TopicFilterType, TopicSysFlag: h.TopicSysFlag, Order: h.Order,
	}
	var old map[string]string
	if e := b.topics.lookup(h.Topic); e != nil {
		old = e.cfg.Attributes
	}
	attrs, err := applyTopicAttributes(old, h.Attributes)
	if err != nil {
		return fail(resp, protocol.RespInvalidParameter, err.Error())
	}
	cfg.Attributes = attrs
	if _, changed := b.topics.put(cfg); changed {
		if err := b.topicChanged(cfg.TopicName, true); err != nil {
			return fail(resp, protocol.RespSystemError, "the topic is created but could not be persisted: "+err.Error())
		}
	}
	return remoting.Reply
}

// handleDeleteTopic serves DELETE_TOPIC_IN_BROKER (215): the topic's
// configuration, consume queues and committed offsets go (its records stay
// in the commit log until retention removes them).
func (b *Broker) handleDeleteTopic(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.DeleteTopicRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if remark, ok := checkTopicName([]byte(h.Topic)); !ok {
		return fail(resp, protocol.RespSystemError, remark)
	}
	if isSystemTopic(h.Topic) {
		return fail(resp, protocol.RespSystemError, "The topic["+h.Topic+"] is conflict with system topic.")
	}
	removed := b.topics.remove(h.Topic)
	var errs []string
	if err := b.store.DeleteTopic(h.Topic); err != nil {
		errs = append(errs, err.Error())
	}
	b.offsets.removeTopic(h.Topic)
	if err := b.offsets.persist(false); err != nil {
		b.stats.persistErrors.Add(1)
		errs = append(errs, err.Error())
	}
	if removed {
		// The topic leaves this broker's queues in the embedded registry's
		// routes, and the registrar's next full round (which replaces the
		// broker's topic set on Apogee name servers).
		if err := b.topicChanged(h.Topic, true); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("delete topic %s: %v", h.Topic, errs))
	}
	return remoting.Reply
}

// handleAllTopicConfig serves GET_ALL_TOPIC_CONFIG (21).
func (b *Broker) handleAllTopicConfig(resp *remoting.Response) remoting.Action {
	body, err := b.topics.encode()
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = body
	return remoting.Reply
}

// handleAllGroups serves GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201).
func (b *Broker) handleAllGroups(resp *remoting.Response) remoting.Action {
	body, err := b.groups.encode()
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = body
	return remoting.Reply
}

// handleRuntimeInfo serves GET_BROKER_RUNTIME_INFO (28): a KVTable of
// counters, with the Java broker's key names where one exists.
func (b *Broker) handleRuntimeInfo(resp *remoting.Response) remoting.Action {
	body, err := (&protocol.KVTable{Table: b.RuntimeInfo()}).Encode()
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = body
	return remoting.Reply
}

// RuntimeInfo returns the broker's runtime numbers, as GET_BROKER_RUNTIME_INFO
// reports them.
func (b *Broker) RuntimeInfo() map[string]string {
	st := b.store.Stats()
	conns, cgroups, pgroups := b.clients.counts()
	up := time.Since(b.start)
	delays, timers := b.sched.Stats(), b.timers.Stats()
	txs := b.tx.Stats()
	ps := b.pops.Stats()
	rs := b.srv.Stats()
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return map[string]string{
		"brokerVersionDesc":      "V4_9_4",
		"brokerVersion":          i(int64(protocol.DefaultVersion)),
		"brokerName":             b.opts.BrokerName,
		"clusterName":            b.opts.ClusterName,
		"brokerAddr":             b.opts.AdvertiseAddr,
		"bootTimestamp":          i(b.start.UnixMilli()),
		"runtime":                up.Round(time.Second).String(),
		"msgPutTotalTodayNow":    i(st.Puts),
		"msgGetTotalTodayNow":    i(st.Gets),
		"putMessageSizeTotal":    i(st.PutBytes),
		"getMessageSizeTotal":    i(st.GetBytes),
		"putMessageErrors":       i(st.PutErrors),
		"commitLogMinOffset":     i(st.Log.MinOffset),
		"commitLogMaxOffset":     i(st.Log.WrittenOffset),
		"commitLogFlushedOffset": i(st.Log.FlushedOffset),
		"commitLogSegments":      strconv.Itoa(st.Log.Segments),
		"dispatchBehindBytes":    i(st.DispatchLag),
		"dispatchErrors":         i(st.DispatchErrors),
		"dispatchStalls":         i(st.DispatchStalls),
		"flushSyncRounds":        i(st.Log.SyncRounds),
		"flushMaxSyncTimeMs":     i(st.Log.MaxSyncTime.Milliseconds()),
		"mappedQueueFiles":       strconv.Itoa(st.MappedQueueFiles),
		"sendRequests":           i(b.stats.sendRequests.Load()),
		"sendMessages":           i(b.stats.sendMessages.Load()),
		"sendErrors":             i(b.stats.sendErrors.Load()),
		"sendBusyRejects":        i(b.stats.busyRejects.Load()),
		"sendInFlightBytes":      i(b.inflight.Load()),
		"pullRequests":           i(b.stats.pullRequests.Load()),
		"pullFound":              i(b.stats.pullFound.Load()),
		"pullMessages":           i(b.stats.pullMessages.Load()),
		"pullHeldTotal":          i(b.holds.Stats().Parked),
		"pullHeldNow":            strconv.Itoa(b.holds.Stats().Held),
		"pullHeldWoken":          i(b.holds.Stats().Woken),
		"pullHeldExpired":        i(b.holds.Stats().Expired),
		"clientConnections":      strconv.Itoa(conns),
		"consumerGroups":         strconv.Itoa(cgroups),
		"producerGroups":         strconv.Itoa(pgroups),
		"topics":                 strconv.Itoa(b.topics.count()),
		"notifiesSent":           i(b.stats.notifies.Load()),
		"configPersistErrors":    i(b.stats.persistErrors.Load()),
		"innerPuts":              i(b.stats.innerPuts.Load()),
		"sendBacks":              i(b.stats.sendBacks.Load()),
		"deadLetters":            i(b.stats.deadLetters.Load() + ps.DeadLetters),
		"delayedMessages":        i(b.stats.delayed.Load()),
		"delayedDelivered":       i(delays.Delivered),
		"timerMessages":          i(b.stats.timers.Load()),
		"timersFired":            i(timers.Fired),
		"timerRolls":             i(timers.Rolls),
		"timersPending":          strconv.Itoa(timers.Pending),
		"halfMessages":           i(txs.HalfMessages),
		"halfMessagesPending":    strconv.Itoa(txs.Pending),
		"transactionCommits":     i(txs.Commits),
		"transactionRollbacks":   i(txs.Rollbacks),
		"transactionChecks":      i(txs.Checks),
		"transactionCheckMaxed":  i(txs.CheckMaxed),
		// POP (broker/pop's Stats; held pops are the broker's).
		"popRequests":         i(ps.Pops),
		"popMessages":         i(ps.Popped),
		"popRedelivered":      i(ps.Redelivered),
		"popAcks":             i(ps.Acks),
		"popInvisibleChanges": i(ps.Changes),
		"popDeadLetters":      i(ps.DeadLetters),
		"popStaleHandles":     i(ps.StaleHandles),
		"popInFlight":         strconv.Itoa(ps.InFlight),
		"popHeldNow":          i(b.popHolds.n.Load()),
		// Integrity (store.Stats): what the last start found lost and rebuilt,
		// what reads skipped, the scrubber, disk pressure.
		"storeLostMessages":          i(st.LostMessages),
		"storeLostBytes":             i(st.LostBytes),
		"storeQueuesRebuilt":         i(st.QueuesRebuilt),
		"storeIndexFilesRebuilt":     i(st.IndexFilesRebuilt),
		"storeBadEntriesSkipped":     i(st.BadEntries),
		"storeLostEntriesSkipped":    i(st.LostEntriesSkipped),
		"scrubPasses":                i(st.ScrubPasses),
		"scrubBytes":                 i(st.ScrubBytes),
		"scrubBadRecords":            i(st.ScrubBadRecords),
		"scrubRepairedEntries":       i(st.ScrubRepairedEntries),
		"scrubMissingEntries":        i(st.ScrubMissingEntries),
		"scrubLastPass":              i(lastScrubMs(st.LastScrub)),
		"diskFull":                   strconv.FormatBool(st.DiskFull),
		"diskFullRefusals":           i(st.DiskFullRefusals),
		"diskPressureSegmentDeletes": i(st.PressureDeletes),
		"unindexedMessages":          i(st.Unindexed),
		// Receive limits (remoting.ServerStats): connections closed for each, and
		// the receive budget (process-wide by default).
		"remotingFrameTimeouts":            u(rs.FrameTimeouts),
		"remotingSlowSenders":              u(rs.SlowSenders),
		"remotingReceiveBudgetCloses":      u(rs.BudgetCloses),
		"remotingReceiveBudgetLimit":       i(rs.Budget.Limit),
		"remotingReceiveBudgetInUse":       i(rs.Budget.InUse),
		"remotingReceiveBudgetPeak":        i(rs.Budget.Peak),
		"remotingReceiveBudgetWaiting":     strconv.Itoa(rs.Budget.Waiting),
		"remotingReceiveBudgetExhausted":   strconv.FormatBool(rs.Budget.Exhausted),
		"remotingReceiveBudgetReserves":    u(rs.Budget.Reserves),
		"remotingReceiveBudgetWaits":       u(rs.Budget.Waits),
		"remotingReceiveBudgetTimeouts":    u(rs.Budget.Timeouts),
		"remotingReceiveBudgetRefused":     u(rs.Budget.Refused),
		"remotingReceiveBudgetExhaustions": u(rs.Budget.Exhaustions),
	}
}

// lastScrubMs is the end of the last scrub pass in ms since the epoch, 0 if none.
func lastScrubMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// ---- queue locks ----

// handleLock serves LOCK_BATCH_MQ (41).
func (b *Broker) handleLock(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var body protocol.LockBatchRequestBody
	if err := body.Decode(req.Body); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	ok := b.locks.tryLock(body.ConsumerGroup, body.ClientID, body.MQSet, time.Now())
	out, err := (&protocol.LockBatchResponseBody{LockOKMQSet: ok}).Encode()
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = out
	return remoting.Reply
}

// handleUnlock serves UNLOCK_BATCH_MQ (42).
func (b *Broker) handleUnlock(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var body protocol.UnlockBatchRequestBody
	if err := body.Decode(req.Body); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	b.locks.unlock(body.ConsumerGroup, body.ClientID, body.MQSet)
	return remoting.Reply
}

// checkClientBody is CHECK_CLIENT_CONFIG's body (Java's CheckClientRequestBody).
type checkClientBody struct {
	ClientID         string                    `json:"clientId"`
	Group            string                    `json:"group"`
	SubscriptionData protocol.SubscriptionData `json:"subscriptionData"`
}

// handleCheckClientConfig serves CHECK_CLIENT_CONFIG (46), which Java
// clients send when they subscribe with SQL92: SUBSCRIPTION_PARSE_FAILED
// (23, with the position) for an expression that does not compile,
// SYSTEM_ERROR (1) when SQL92 filtering is disabled.
func (b *Broker) handleCheckClientConfig(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var body checkClientBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return fail(resp, protocol.RespSystemError, "decode the check-client body: "+err.Error())
	}
	sd := &body.SubscriptionData
	typ := normType(sd.ExpressionType)
	if typ == filter.TypeTag {
		return remoting.Reply
	}
	if typ == filter.TypeSQL92 && b.opts.DisablePropertyFilter {
		return fail(resp, protocol.RespSystemError, "The broker does not support consumer to filter message by "+typ)
	}
	if _, err := compileFilter(typ, sd.SubString); err != nil {
		return fail(resp, protocol.RespSubscriptionParseFailed, err.Error())
	}
	return remoting.Reply
}

// applyTopicAttributes applies RocketMQ 5's attribute changes ("+key=value"
// adds or replaces, "-key" removes, comma-separated) to a topic's current
// attributes. The one supported key is message.type (NORMAL, FIFO, DELAY,
// TRANSACTION or MIXED).
func applyTopicAttributes(cur map[string]string, change string) (map[string]string, error) {
	out := make(map[string]string, len(cur)+1)
	for k, v := range cur {
		out[k] = v
	}
	for _, item := range strings.Split(change, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		switch item[0] {
		case '+':
			k, v, ok := strings.Cut(item[1:], "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("attribute %q: want +key=value", item)
			}
			if k != attrMessageType {
				return nil, fmt.Errorf("unsupported topic attribute %q", k)
			}
			if _, ok := parseMsgType(v); !ok && !strings.EqualFold(v, "MIXED") {
				return nil, fmt.Errorf("message.type %q: want NORMAL, FIFO, DELAY, TRANSACTION or MIXED", v)
			}
			out[k] = strings.ToUpper(v)
		case '-':
			delete(out, item[1:])
		default:
			return nil, fmt.Errorf("attribute %q: want +key=value or -key", item)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// ---- subscription groups ----

// handleUpdateGroup serves UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): the
// body is a SubscriptionGroupConfig (consume enabled, retryMaxTimes, the 5.x
// groupRetryPolicy, consumeMessageOrderly, ...), stored and persisted.
func (b *Broker) handleUpdateGroup(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var cfg protocol.SubscriptionGroupConfig
	if err := json.Unmarshal(req.Body, &cfg); err != nil {
		return fail(resp, protocol.RespSystemError, "decode the subscription group config: "+err.Error())
	}
	if !validGroupName([]byte(cfg.GroupName)) {
		return fail(resp, protocol.RespInvalidParameter, "invalid group name "+strconv.Quote(cfg.GroupName))
	}
	if len(cfg.GroupRetryPolicy) > 0 {
		if _, err := parseRetryPolicy(cfg.GroupRetryPolicy); err != nil {
			return fail(resp, protocol.RespInvalidParameter, err.Error())
		}
	}
	b.groups.put(cfg)
	if err := b.groupsChanged(true); err != nil {
		return fail(resp, protocol.RespSystemError, "the group is updated but could not be persisted: "+err.Error())
	}
	b.opts.Logger.Info("broker: subscription group updated", "group", cfg.GroupName, "consumeEnable", cfg.ConsumeEnable,
		"retryMaxTimes", cfg.RetryMaxTimes, "orderly", cfg.ConsumeMessageOrderly)
	return remoting.Reply
}

// handleGetGroup serves GET_SUBSCRIPTIONGROUP_CONFIG (352): ext group.
func (b *Broker) handleGetGroup(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetSubscriptionGroupConfigRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	g := b.groups.get(h.Group)
	if g == nil {
		return fail(resp, protocol.RespSubscriptionGroupNotExist, "subscription group not exist, "+string(h.Group))
	}
	body, err := json.Marshal(g)
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = body
	return remoting.Reply
}

// handleDeleteGroup serves DELETE_SUBSCRIPTIONGROUP (207): ext groupName
// (and cleanOffset, which also drops the group's committed offsets).
func (b *Broker) handleDeleteGroup(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.DeleteSubscriptionGroupRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if b.groups.remove(h.GroupName) {
		if err := b.groupsChanged(true); err != nil {
			return fail(resp, protocol.RespSystemError, err.Error())
		}
	}
	if h.CleanOffset {
		b.offsets.removeGroup(h.GroupName)
	}
	return remoting.Reply
}

// ConsumerGroupInfo returns the live members of a consumer group, their
// subscriptions and whether they agree; ok is false for a group without
// members.
func (b *Broker) ConsumerGroupInfo(group string) (ConsumerGroupInfo, bool) {
	return b.clients.groupInfo(group)
}

// handleConsumerConnections serves GET_CONSUMER_CONNECTION_LIST (203): ext
// consumerGroup; the body is Java's ConsumerConnection (connectionSet,
// subscriptionTable, consumeType, messageModel, consumeFromWhere) plus
// Apogee's consistent / inconsistency and each member's subscriptions.
// CONSUMER_NOT_ONLINE (206) when the group has no member.
func (b *Broker) handleConsumerConnections(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetConsumerConnectionListRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	info, ok := b.clients.groupInfo(h.ConsumerGroup)
	if !ok {
		return fail(resp, protocol.RespConsumerNotOnline, "the consumer group["+h.ConsumerGroup+"] not online")
	}
	body, err := json.Marshal(info)
	if err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	resp.Cmd.Body = body
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

// registerOffsets registers the consumer-offset and queue-offset codes.
func (b *Broker) registerOffsets(t *handlerTable) {
	t.add(noConn(b.handleQueryConsumerOffset), protocol.ReqQueryConsumerOffset)
	t.add(noConn(b.handleUpdateConsumerOffset), protocol.ReqUpdateConsumerOffset)
	t.add(noConn(b.handleQueueOffset), protocol.ReqGetMaxOffset, protocol.ReqGetMinOffset)
	t.add(noConn(b.handleSearchOffset), protocol.ReqSearchOffsetByTimestamp)
	t.add(noConn(b.handleEarliestStoreTime), protocol.ReqGetEarliestMsgStoretime)
	t.add(noConn(b.handleResetOffset), protocol.ReqInvokeBrokerToResetOffset)
}

// registerMessages registers the message query codes.
func (b *Broker) registerMessages(t *handlerTable) {
	t.add(noConn(b.handleQueryMessage), protocol.ReqQueryMessage)
	t.add(noConn(b.handleViewMessage), protocol.ReqViewMessageByID)
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

// registerLocks registers the queue-lock codes.
func (b *Broker) registerLocks(t *handlerTable) {
	t.add(noConn(b.handleLock), protocol.ReqLockBatchMQ)
	t.add(noConn(b.handleUnlock), protocol.ReqUnlockBatchMQ)
}

// registerRuntimeInfo registers GET_BROKER_RUNTIME_INFO.
func (b *Broker) registerRuntimeInfo(t *handlerTable) {
	t.add(respOnly(b.handleRuntimeInfo), protocol.ReqGetBrokerRuntimeInfo)
}
