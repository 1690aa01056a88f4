package core

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/core/stats"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// The admin operations that mqadmin, the RocketMQ dashboard and
// rocketmq-exporter use (GET_CONSUME_STATS, GET_TOPIC_STATS_INFO, ...),
// answered as the Java broker's AdminBrokerProcessor answers them, on the
// core's tables, the store and broker/core/stats. None of them is on a hot
// path: each reads the tables it needs under their own locks, one at a time.

// adminState is what the admin operations change at run time.
type adminState struct {
	perm atomic.Int32 // brokerPermission; 0 until set: PermRead|PermWrite

	mu        sync.Mutex
	overrides map[string]string // keys changed by UPDATE_BROKER_CONFIG
	version   protocol.DataVersion
}

// Stats returns the runtime statistics (per topic and group rates, today's
// totals): the read API a metrics exporter builds on.
func (a Admin) Stats() *stats.Stats { return a.c.rstats }

// BrokerPermission is the broker's permission (brokerPermission: PermRead
// and PermWrite bits, 6 by default); without PermWrite, sends are refused
// and routes advertise every topic read-only.
func (c *Core) BrokerPermission() int32 {
	if p := c.admin.perm.Load(); p != 0 {
		return p &^ (1 << 30)
	}
	return protocol.PermRead | protocol.PermWrite
}

// brokerWritable reports whether the broker accepts sends.
func (c *Core) brokerWritable() bool {
	return c.BrokerPermission()&protocol.PermWrite != 0
}

// committed reads a group's committed offset of a queue, or -1.
func (c *Core) committed(topic, group string, q int32) int64 {
	off, ok := c.offsets.query([]byte(topic), []byte(group), q)
	if !ok {
		return -1
	}
	return off
}

// storeTimeAt is the store time (ms) of a queue's message at offset, or 0
// when there is none.
func (c *Core) storeTimeAt(topic string, q int32, offset int64) int64 {
	if offset < 0 {
		return 0
	}
	var buf [1]store.QueueEntry
	es, err := c.store.ReadEntries(topic, q, offset, buf[:0])
	if err != nil || len(es) == 0 || es[0].Size <= 0 || es[0].Size == 0x7FFFFFFF {
		return 0
	}
	v, err := c.store.ReadMessage(es[0].CommitLogOffset)
	if err != nil {
		return 0
	}
	defer v.Release()
	mv, err := message.Decode(v.Bytes(), false)
	if err != nil {
		return 0
	}
	return mv.StoreTimestamp()
}

// topicsOfGroup is the topics a group has committed offsets of
// (ConsumerOffsetManager.whichTopicByConsumer), sorted.
func (c *Core) topicsOfGroup(group string) []string {
	c.offsets.mu.Lock()
	var out []string
	for topic, groups := range c.offsets.m {
		if _, ok := groups[group]; ok {
			out = append(out, topic)
		}
	}
	c.offsets.mu.Unlock()
	sort.Strings(out)
	return out
}

// groupsOfTopic is the groups with committed offsets of a topic
// (ConsumerOffsetManager.whichGroupByTopic), sorted.
func (c *Core) groupsOfTopic(topic string) []string {
	c.offsets.mu.Lock()
	out := make([]string, 0, len(c.offsets.m[topic]))
	for g := range c.offsets.m[topic] {
		out = append(out, g)
	}
	c.offsets.mu.Unlock()
	sort.Strings(out)
	return out
}

// subscribed reports whether a group's live members subscribe topic, and
// whether the group has live subscriptions at all (the Java broker skips a
// topic of the offset table that a group with subscriptions no longer
// subscribes).
func (c *Core) subscribed(group, topic string) (sub, any bool) {
	c.clients.mu.RLock()
	defer c.clients.mu.RUnlock()
	g := c.clients.consumers[group]
	if g == nil || len(g.subs) == 0 {
		return false, false
	}
	_, sub = g.subs[topic]
	return sub, true
}

// ConsumeStats is GET_CONSUME_STATS (208): a group's offsets per queue of
// topic (or of every topic it has offsets of, when topic is ""; of topics,
// when given, without the subscription check), with its consume TPS (the
// messages it pulled per second over the last minute). A topic the group's
// live members do not subscribe is left out, as the Java broker does.
func (a Admin) ConsumeStats(group, topic string, topics []string) GroupStats {
	c := a.c
	cs := GroupStats{Queues: map[protocol.MessageQueue]protocol.OffsetWrapper{}}
	check := len(topics) == 0
	if check {
		if topic != "" {
			topics = []string{topic}
		} else {
			topics = c.topicsOfGroup(group)
		}
	}
	for _, t := range topics {
		if check {
			if sub, any := c.subscribed(group, t); any && !sub {
				continue
			}
		}
		c.addConsumeStats(&cs, group, t, false)
	}
	return cs
}

// addConsumeStats adds one topic's queues to cs; writeQueues selects the
// write queue count (GET_BROKER_CONSUME_STATS) instead of the read one.
func (c *Core) addConsumeStats(cs *GroupStats, group, topic string, writeQueues bool) bool {
	e := c.topics.lookup(topic)
	if e == nil {
		return false
	}
	n := e.cfg.ReadQueueNums
	if writeQueues {
		n = e.cfg.WriteQueueNums
	}
	for q := int32(0); q < n; q++ {
		w := protocol.OffsetWrapper{BrokerOffset: max(c.store.MaxOffset(topic, q), 0)}
		w.ConsumerOffset = max(c.committed(topic, group, q), 0)
		w.PullOffset = w.ConsumerOffset
		if w.ConsumerOffset > 0 {
			w.LastTimestamp = c.storeTimeAt(topic, q, w.ConsumerOffset-1)
		}
		cs.Queues[protocol.MessageQueue{Topic: topic, BrokerName: c.opts.BrokerName, QueueID: q}] = w
	}
	cs.TPS += c.rstats.GroupGet.Window(stats.Key{Topic: topic, Group: group}, stats.Window1m).TPS
	return true
}

// BrokerConsumeStats is GET_BROKER_CONSUME_STATS (317): every subscription
// group's ConsumeStats per topic it has offsets of (over write queues, as
// the Java broker counts them), only ordered topics with isOrder, and the
// lag summed over all of them.
func (a Admin) BrokerConsumeStats(isOrder bool) BrokerGroupStats {
	c := a.c
	l := BrokerGroupStats{BrokerAddr: c.opts.AdvertiseAddr}
	for _, g := range c.groups.names() {
		var list []GroupStats
		for _, t := range c.topicsOfGroup(g) {
			e := c.topics.lookup(t)
			if e == nil || (isOrder && !e.cfg.Order) {
				continue
			}
			if sub, any := c.subscribed(g, t); any && !sub {
				continue
			}
			cs := GroupStats{Queues: map[protocol.MessageQueue]protocol.OffsetWrapper{}}
			c.addConsumeStats(&cs, g, t, true)
			l.TotalLag += cs.Lag()
			list = append(list, cs)
		}
		if list == nil {
			list = []GroupStats{}
		}
		l.Groups = append(l.Groups, GroupTopicStats{Group: g, Topics: list})
	}
	return l
}

// TopicStats is GET_TOPIC_STATS_INFO (202): every queue's min and max offset
// and the store time of its last message, and the topic's put TPS over the
// last minute.
func (a Admin) TopicStats(topic string) (TopicQueueStats, error) {
	c := a.c
	e := c.topics.lookup(topic)
	if e == nil {
		return TopicQueueStats{}, newError(ReasonTopicNotExist, "topic["+topic+"] not exist")
	}
	ts := TopicQueueStats{Queues: map[protocol.MessageQueue]protocol.TopicOffset{}}
	for q := int32(0); q < max(e.cfg.WriteQueueNums, e.cfg.ReadQueueNums); q++ {
		o := protocol.TopicOffset{MinOffset: max(c.store.MinOffset(topic, q), 0), MaxOffset: max(c.store.MaxOffset(topic, q), 0)}
		if o.MaxOffset > 0 {
			o.LastUpdateTimestamp = c.storeTimeAt(topic, q, o.MaxOffset-1)
		}
		ts.Queues[protocol.MessageQueue{Topic: topic, BrokerName: c.opts.BrokerName, QueueID: q}] = o
	}
	ts.PutTPS = c.rstats.TopicPut.Window(stats.Key{Topic: topic}, stats.Window1m).TPS
	return ts, nil
}

// ProducerConnections is GET_PRODUCER_CONNECTION_LIST (204): the live
// connections of a producer group; SYSTEM_ERROR when the group has none (as
// the Java broker answers).
func (a Admin) ProducerConnections(group string) ([]protocol.Connection, error) {
	c := a.c
	m := c.clients
	m.mu.RLock()
	g, ok := m.producers[group]
	var out []protocol.Connection
	for conn, mb := range g {
		cn := protocol.Connection{ClientID: mb.clientID}
		if conn != nil {
			cn.ClientAddr = conn.RemoteAddr()
		}
		if cc := m.conns[conn]; cc != nil {
			cn.Language, cn.Version = cc.language, cc.version
		}
		out = append(out, cn)
	}
	m.mu.RUnlock()
	if !ok || len(out) == 0 {
		return out, newError(ReasonProducerGroupNotExist, "the producer group["+group+"] not exist")
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].ClientID+out[i].ClientAddr < out[j].ClientID+out[j].ClientAddr
	})
	return out, nil
}

// TopicConsumeByWho is QUERY_TOPIC_CONSUME_BY_WHO (300): the groups whose
// live members subscribe topic, and those with committed offsets of it.
func (a Admin) TopicConsumeByWho(topic string) []string {
	c := a.c
	set := map[string]bool{}
	c.clients.mu.RLock()
	for name, g := range c.clients.consumers {
		if _, ok := g.subs[topic]; ok {
			set[name] = true
		}
	}
	c.clients.mu.RUnlock()
	for _, g := range c.groupsOfTopic(topic) {
		set[g] = true
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// TopicsByConsumer is QUERY_TOPICS_BY_CONSUMER (343): the topics a group has
// committed offsets of.
func (a Admin) TopicsByConsumer(group string) []string { return a.c.topicsOfGroup(group) }

// Subscription is QUERY_SUBSCRIPTION_BY_CONSUMER (345): what a group's live
// members subscribe of topic (ok false when nothing).
func (a Admin) Subscription(group, topic string) (protocol.SubscriptionData, bool) {
	c := a.c
	info, ok := c.clients.groupInfo(group)
	if !ok {
		return protocol.SubscriptionData{}, false
	}
	sd, ok := info.Subscriptions[topic]
	return sd, ok
}

// ConsumeTimeSpan is QUERY_CONSUME_TIME_SPAN (303): per write queue, the
// store times of its first and last message and of the group's last
// consumed one, and how long the next unconsumed one has waited.
func (a Admin) ConsumeTimeSpan(topic, group string) ([]protocol.QueueTimeSpan, error) {
	c := a.c
	e := c.topics.lookup(topic)
	if e == nil {
		return nil, newError(ReasonTopicNotExist, "topic["+topic+"] not exist")
	}
	out := []protocol.QueueTimeSpan{}
	now := time.Now().UnixMilli()
	for q := int32(0); q < e.cfg.WriteQueueNums; q++ {
		ts := protocol.QueueTimeSpan{MessageQueue: protocol.MessageQueue{Topic: topic, BrokerName: c.opts.BrokerName, QueueID: q}}
		ts.MinTimeStamp = max(c.EarliestStoreTime(topic, q), 0)
		maxOff := c.store.MaxOffset(topic, q)
		ts.MaxTimeStamp = c.storeTimeAt(topic, q, maxOff-1)
		consumed := c.committed(topic, group, q)
		if consumed > 0 {
			ts.ConsumeTimeStamp = c.storeTimeAt(topic, q, consumed-1)
		} else {
			ts.ConsumeTimeStamp = ts.MinTimeStamp
		}
		if consumed < maxOff {
			if next := c.storeTimeAt(topic, q, max(consumed, 0)); next > 0 {
				ts.DelayTime = now - next
			}
		}
		out = append(out, ts)
	}
	return out, nil
}

// CloneGroupOffset is CLONE_GROUP_OFFSET (314): dst gets src's committed
// offsets of topic (of every topic src has offsets of, when topic is "");
// unless offline, a topic src's live members no longer subscribe is skipped.
func (a Admin) CloneGroupOffset(src, dst, topic string, offline bool) error {
	c := a.c
	if !validGroupName([]byte(dst)) {
		return newError(ReasonGroupIllegal, "the destination group name ["+dst+"] is illegal")
	}
	topics := []string{topic}
	if topic == "" {
		topics = c.topicsOfGroup(src)
	}
	changed := 0
	for _, t := range topics {
		if c.topics.lookup(t) == nil {
			continue
		}
		if !offline {
			if sub, any := c.subscribed(src, t); any && !sub {
				continue
			}
		}
		c.offsets.mu.Lock()
		if qs, ok := c.offsets.m[t][src]; ok {
			for q, off := range qs {
				if off >= 0 {
					c.offsets.setLocked(t, dst, int32(q), off)
					changed++
				}
			}
		}
		c.offsets.mu.Unlock()
	}
	if changed > 0 && !c.slave.Load() { // a slave creates no group: its tables follow its master's
		if _, created, err := c.setGroup(protocol.DefaultSubscriptionGroupConfig(dst), true); err != nil {
			return err
		} else if created {
			c.groupsChanged(false)
		}
	}
	return nil
}

// StatsData is VIEW_BROKER_STATS_DATA (315): a statistic (stats.Names) of a
// key over the last minute, hour and day. The key is written as RocketMQ
// writes it: "topic", "topic@group", or the cluster name for BROKER_*.
func (a Admin) StatsData(name, key string) (StatsWindows, error) {
	c := a.c
	set := c.rstats.Set(name)
	if set == nil {
		return StatsWindows{}, newError(ReasonStatsNotFound, fmt.Sprintf("The stats <%s> <%s> not exist", name, key))
	}
	k := stats.ParseKey(key)
	if name == stats.GroupGetLatency {
		// Java keys the latency per queue (queueId@topic@group) when its
		// queue statistics are on; Apogee keeps topic@group.
		if parts := strings.SplitN(key, "@", 3); len(parts) == 3 {
			if _, err := strconv.Atoi(parts[0]); err == nil {
				k = stats.Key{Topic: parts[1], Group: parts[2]}
			}
		}
	}
	if _, ok := set.Lookup(k); !ok {
		return StatsWindows{}, newError(ReasonStatsNotFound, fmt.Sprintf("The stats <%s> <%s> not exist", name, key))
	}
	item := func(w stats.Window) protocol.BrokerStatsItem {
		s := set.Window(k, w)
		return protocol.BrokerStatsItem{Sum: s.Sum, Tps: s.TPS, Avgpt: s.AvgPT}
	}
	return StatsWindows{Minute: item(stats.Window1m), Hour: item(stats.Window1h), Day: item(stats.Window1d)}, nil
}

// QueryConsumeQueue is QUERY_CONSUME_QUEUE (321): count entries of a queue
// from index on, with the group's subscription of the topic when it has one.
func (a Admin) QueryConsumeQueue(topic string, q int32, index int64, count int32, group string) (ConsumeQueueEntries, error) {
	c := a.c
	e := c.topics.lookup(topic)
	if e == nil || q < 0 || q >= max(e.cfg.ReadQueueNums, e.cfg.WriteQueueNums) {
		return ConsumeQueueEntries{}, newError(ReasonStatsNotFound,
			fmt.Sprintf("%d of %s is not exist!", q, topic))
	}
	body := ConsumeQueueEntries{MinIndex: c.store.MinOffset(topic, q), MaxIndex: c.store.MaxOffset(topic, q),
		Entries: []protocol.ConsumeQueueData{}}
	if group != "" {
		if sd, ok := a.Subscription(group, topic); ok {
			body.Subscription = &sd
		}
	}
	count = min(max(count, 0), 1000)
	if count == 0 {
		return body, nil
	}
	es, err := c.store.ReadEntries(topic, q, max(index, body.MinIndex), make([]store.QueueEntry, 0, count))
	if err != nil {
		return body, wrapError(ReasonSystemError, err.Error(), err)
	}
	for _, en := range es {
		body.Entries = append(body.Entries, protocol.ConsumeQueueData{PhysicOffset: en.CommitLogOffset,
			PhysicSize: en.Size, TagsCode: en.TagCode})
	}
	return body, nil
}

// SystemTopics is GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305): the topics the
// broker keeps for itself and its features.
func (a Admin) SystemTopics() []string {
	c := a.c
	out := []string{scheduleTopic, timerTopic, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
		"TRANS_CHECK_MAX_TIME_TOPIC", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", topicAutoCreateKey,
		c.opts.ClusterName, c.opts.BrokerName, c.ReplyTopic()}
	sort.Strings(out)
	return out
}

// CleanExpired runs the store's retention now (DELETE_EXPIRED_COMMITLOG,
// CLEAN_EXPIRED_CONSUMEQUEUE and CLEAN_UNUSED_TOPIC, 329, 306, 316: the
// store removes expired segments, and consume-queue and index files below
// the log's new minimum, in one pass; a deleted topic's queues go with
// DELETE_TOPIC_IN_BROKER already). It returns the segments removed.
func (a Admin) CleanExpired() (int, error) {
	c := a.c
	n, err := c.store.Clean()
	if err != nil {
		return n, wrapError(ReasonSystemError, err.Error(), err)
	}
	return n, nil
}

// ConsumerConn finds the live connection of a consumer group's member by
// client id, for the requests a front end forwards to a client
// (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY, 307, 309). The
// error is the Java broker's: SYSTEM_ERROR "The Consumer <g> <id> not
// online".
func (a Admin) ConsumerConn(group, clientID string) (ClientConn, error) {
	c := a.c
	c.clients.mu.RLock()
	defer c.clients.mu.RUnlock()
	if g := c.clients.consumers[group]; g != nil {
		for conn, mb := range g.members {
			if mb.clientID == clientID && conn != nil {
				return conn, nil
			}
		}
	}
	return nil, newError(ReasonNoConsumer, fmt.Sprintf("The Consumer <%s> <%s> not online", group, clientID))
}

// GroupSysFlag is a group's groupSysFlag (0 for an unknown group), which the
// Java broker adds to a CONSUME_MESSAGE_DIRECTLY it forwards.
func (a Admin) GroupSysFlag(group string) (int32, bool) {
	c := a.c
	g := c.groups.get([]byte(group))
	if g == nil {
		return 0, false
	}
	return g.GroupSysFlag, true
}

// liveConfigKeys are the broker.conf keys UPDATE_BROKER_CONFIG may change
// while the broker runs, each with what applies it.
var liveConfigKeys = map[string]func(c *Core, v string) error{
	"brokerPermission": func(c *Core, v string) error {
		p, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil || p < 0 || p&^int64(protocol.PermRead|protocol.PermWrite|protocol.PermInherit) != 0 {
			return fmt.Errorf("brokerPermission %q: want a permission number (6 read-write, 4 read-only, 2 write-only)", v)
		}
		c.admin.perm.Store(int32(p) | 1<<30) // marked set, even at 0
		return nil
	},
}

// BrokerConfig is GET_BROKER_CONFIG (26): the broker's configuration under
// the Java broker's key names (those Apogee has a value for), the changes
// UPDATE_BROKER_CONFIG made, and the configuration's data version.
func (a Admin) BrokerConfig() (map[string]string, protocol.DataVersion) {
	c := a.c
	o := c.opts
	b := strconv.FormatBool
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	flush := "ASYNC_FLUSH"
	if o.Store.FlushMode == store.FlushSync {
		flush = "SYNC_FLUSH"
	}
	host, port := o.AdvertiseAddr, ""
	if k := strings.LastIndexByte(host, ':'); k >= 0 {
		host, port = host[:k], host[k+1:]
	}
	m := map[string]string{
		"brokerName":                  o.BrokerName,
		"brokerClusterName":           o.ClusterName,
		"brokerId":                    i(o.BrokerID),
		"brokerRole":                  c.Role().String(),
		"brokerIP1":                   strings.Trim(host, "[]"),
		"listenPort":                  port,
		"storePathRootDir":            o.DataDir,
		"storePathCommitLog":          o.DataDir + "/commitlog",
		"flushDiskType":               flush,
		"autoCreateTopicEnable":       b(!o.DisableAutoCreateTopic),
		"defaultTopicQueueNums":       strconv.Itoa(o.DefaultTopicQueues),
		"maxMessageSize":              strconv.Itoa(o.MaxMessageSize),
		"messageDelayLevel":           o.DelayLevels,
		"flushConsumerOffsetInterval": i(o.OffsetFlushInterval.Milliseconds()),
		"transactionTimeOut":          i(o.TransactionTimeout.Milliseconds()),
		"transactionCheckInterval":    i(o.TransactionCheckInterval.Milliseconds()),
		"transactionCheckMax":         strconv.Itoa(o.TransactionCheckMax),
		"enablePropertyFilter":        b(!o.DisablePropertyFilter),
		"longPollingEnable":           "true",
		"brokerPermission":            strconv.Itoa(int(c.BrokerPermission())),
		"timerMaxDelaySec":            i(int64(o.TimerMaxDelay / time.Second)),
	}
	c.admin.mu.Lock()
	for k, v := range c.admin.overrides {
		m[k] = v
	}
	v := c.admin.version
	c.admin.mu.Unlock()
	return m, v
}

// UpdateBrokerConfig is UPDATE_BROKER_CONFIG (25): it applies the keys that
// can change while the broker runs (brokerPermission) and refuses the whole
// update, changing nothing, when any key cannot (INVALID_PARAMETER naming
// it: set it in broker.conf and restart). A changed brokerPermission is
// published to the name servers at once (Options.TopicChanged for every
// topic, through the front end's registration).
func (a Admin) UpdateBrokerConfig(kv map[string]string) error {
	c := a.c
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := liveConfigKeys[k]; !ok {
			return newError(ReasonInvalidParameter, fmt.Sprintf("the key %q cannot be changed while the broker runs: set it in broker.conf and restart (keys changed at run time: brokerPermission)", k))
		}
	}
	old := c.admin.perm.Load()
	for _, k := range keys {
		if err := liveConfigKeys[k](c, kv[k]); err != nil {
			c.admin.perm.Store(old)
			return wrapError(ReasonInvalidParameter, err.Error(), err)
		}
	}
	c.admin.mu.Lock()
	if c.admin.overrides == nil {
		c.admin.overrides = map[string]string{}
	}
	for _, k := range keys {
		c.admin.overrides[k] = kv[k]
	}
	c.admin.version.Timestamp = time.Now().UnixMilli()
	c.admin.version.Counter++
	c.admin.mu.Unlock()
	c.opts.Logger.Info("broker: configuration updated", "keys", strings.Join(keys, ","))
	if _, ok := kv["brokerPermission"]; ok {
		c.topics.bump()
		if fn := c.opts.TopicChanged; fn != nil {
			cfgs, _ := c.topics.snapshot()
			for _, t := range cfgs {
				fn(t.TopicName)
			}
		}
	}
	return nil
}

// DataVersionJSON is a DataVersion as the Java broker writes it in headers.
func DataVersionJSON(v protocol.DataVersion) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// ProducerInfo is one producer connection of GET_ALL_PRODUCER_INFO (328),
// Java's ProducerInfo.
type ProducerInfo struct {
	ClientID            string `json:"clientId"`
	LastUpdateTimestamp int64  `json:"lastUpdateTimestamp"`
	Language            string `json:"language"`
	RemoteIP            string `json:"remoteIP"`
	Version             int32  `json:"version"`
}

// AllProducers is GET_ALL_PRODUCER_INFO (328): every producer group's live
// connections (Java's ProducerTableInfo's data), each with its last
// heartbeat.
func (a Admin) AllProducers() map[string][]ProducerInfo {
	c := a.c
	m := c.clients
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string][]ProducerInfo, len(m.producers))
	for group, members := range m.producers {
		list := make([]ProducerInfo, 0, len(members))
		for conn, mb := range members {
			pi := ProducerInfo{ClientID: mb.clientID}
			if conn != nil {
				pi.RemoteIP = conn.RemoteAddr()
			}
			if cc := m.conns[conn]; cc != nil {
				pi.Language, pi.Version, pi.LastUpdateTimestamp = cc.language, cc.version, cc.lastSeen.UnixMilli()
			}
			list = append(list, pi)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].ClientID+list[i].RemoteIP < list[j].ClientID+list[j].RemoteIP })
		out[group] = list
	}
	return out
}

// MemberConn is a live member of a consumer group: its client id and
// connection.
type MemberConn struct {
	ClientID string
	Conn     ClientConn
}

// ConsumerMembers lists a consumer group's live members (for a front end
// that asks each of them something: INVOKE_BROKER_TO_GET_CONSUMER_STATUS),
// sorted by client id.
func (a Admin) ConsumerMembers(group string) []MemberConn {
	c := a.c
	c.clients.mu.RLock()
	defer c.clients.mu.RUnlock()
	g := c.clients.consumers[group]
	if g == nil {
		return nil
	}
	out := make([]MemberConn, 0, len(g.members))
	for conn, mb := range g.members {
		if conn != nil {
			out = append(out, MemberConn{ClientID: mb.clientID, Conn: conn})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClientID < out[j].ClientID })
	return out
}

// ViewMessageByOffsetID reads the record an offset message id names (its
// commit-log offset; the store host part is not checked): what
// CONSUME_MESSAGE_DIRECTLY forwards. SYSTEM_ERROR for an id that does not
// parse or an offset with no record.
func (c *Core) ViewMessageByOffsetID(id string) (store.View, error) {
	_, off, err := message.ParseOffsetMsgID(id)
	if err != nil {
		return store.View{}, wrapError(ReasonMessageIDIllegal, "bad msgId "+id+": "+err.Error(), err)
	}
	return c.ViewMessage(off)
}
