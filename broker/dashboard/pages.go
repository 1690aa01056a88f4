package dashboard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/core/stats"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// kv is one row of a two-column table.
type kv struct{ K, V string }

type brokerRow struct {
	Cluster, Name string
	Addrs         []string
	Self          bool
}

type overviewData struct {
	Info    []kv
	Engine  []kv
	Brokers []brokerRow
}

func (d *Dashboard) overview(*http.Request) (any, error) {
	c := d.b.Core()
	ri := d.b.RuntimeInfo()
	var out overviewData
	for _, k := range []string{"brokerVersionDesc", "brokerAddr", "runtime", "putTps", "getTransferredTps",
		"msgPutTotalTodayNow", "msgGetTotalTodayNow", "msgPutTotalTodayMorning", "msgGetTotalTodayMorning",
		"commitLogDiskRatio", "commitLogDirCapacity", "topics", "consumerGroups", "producerGroups", "clientConnections"} {
		out.Info = append(out.Info, kv{k, ri[k]})
	}
	e := c.Admin().EngineStats()
	st := e.Store
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	out.Engine = []kv{
		{"brokerPermission", strconv.Itoa(int(e.BrokerPermission))},
		{"commit log bytes", i(st.Log.WrittenOffset - st.Log.MinOffset)},
		{"commit log segments", strconv.Itoa(st.Log.Segments)},
		{"unflushed bytes", i(max(st.Log.WrittenOffset-st.Log.FlushedOffset, 0))},
		{"flush syncs", i(st.Log.SyncRounds)},
		{"flush average", avgDuration(st.Log.SyncTime, st.Log.SyncRounds)},
		{"flush slowest", st.Log.MaxSyncTime.String()},
		{"dispatch lag bytes", i(st.DispatchLag)},
		{"disk usage", fmt.Sprintf("%.1f%%", e.DiskRatio*100)},
		{"send requests", i(e.SendRequests)},
		{"busy rejects", i(e.BusyRejects)},
		{"delayed pending", i(e.DelayedPending)},
		{"timers pending", i(e.TimersPending)},
		{"half messages pending", i(e.HalfPending)},
		{"POP in flight", i(e.PopInFlight)},
		{"dead letters", i(e.DeadLetters)},
	}
	ci := d.b.ClusterInfo()
	self := c.Options().BrokerName
	for name, bd := range ci.BrokerAddrTable {
		row := brokerRow{Cluster: bd.Cluster, Name: name, Self: name == self}
		ids := make([]int64, 0, len(bd.BrokerAddrs))
		for id := range bd.BrokerAddrs {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			row.Addrs = append(row.Addrs, fmt.Sprintf("%d: %s", id, bd.BrokerAddrs[id]))
		}
		out.Brokers = append(out.Brokers, row)
	}
	if len(out.Brokers) == 0 {
		o := c.Options()
		out.Brokers = []brokerRow{{Cluster: o.ClusterName, Name: o.BrokerName, Addrs: []string{"0: " + o.AdvertiseAddr}, Self: true}}
	}
	sort.Slice(out.Brokers, func(i, j int) bool {
		if out.Brokers[i].Cluster != out.Brokers[j].Cluster {
			return out.Brokers[i].Cluster < out.Brokers[j].Cluster
		}
		return out.Brokers[i].Name < out.Brokers[j].Name
	})
	return out, nil
}

func avgDuration(total time.Duration, n int64) string {
	if n <= 0 {
		return "0s"
	}
	return (total / time.Duration(n)).String()
}

// isSystemTopic reports the topics a topic list hides unless asked.
func isSystemTopic(c *core.Core, t string) bool {
	if strings.HasPrefix(t, "%RETRY%") || strings.HasPrefix(t, "%DLQ%") || strings.HasPrefix(t, "rmq_sys_") ||
		strings.HasPrefix(t, "RMQ_SYS_") || t == "TBW102" {
		return true
	}
	for _, s := range c.Admin().SystemTopics() {
		if s == t {
			return true
		}
	}
	return false
}

type topicRow struct {
	Name                string
	Read, Write, Perm   int32
	Messages, Backlog   int64
	Groups              int
	PutTps1m, PutTps10s string
	Order               bool
}

type topicsData struct {
	Topics     []topicRow
	ShowSystem bool
	Token      string
}

// queueSpan is the messages a topic's queues hold (max less min offsets).
func queueSpan(c *core.Core, cfg protocol.TopicConfig) int64 {
	var n int64
	for q := int32(0); q < max(cfg.ReadQueueNums, cfg.WriteQueueNums); q++ {
		n += max(c.MaxOffset(cfg.TopicName, q), 0) - max(c.MinOffset(cfg.TopicName, q), 0)
	}
	return n
}

func (d *Dashboard) topics(r *http.Request) (any, error) {
	c := d.b.Core()
	out := topicsData{ShowSystem: r.URL.Query().Get("system") == "1"}
	backlog := map[string]int64{}
	groups := map[string]int{}
	for _, l := range c.Admin().ConsumerLags(core.LagOptions{}) {
		backlog[l.Topic] += l.Messages
		groups[l.Topic]++
	}
	cfgs, _ := c.Admin().Topics()
	rs := c.Admin().Stats()
	for _, t := range cfgs {
		if !out.ShowSystem && isSystemTopic(c, t.TopicName) {
			continue
		}
		k := stats.Key{Topic: t.TopicName}
		out.Topics = append(out.Topics, topicRow{
			Name: t.TopicName, Read: t.ReadQueueNums, Write: t.WriteQueueNums, Perm: t.Perm, Order: t.Order,
			Messages: queueSpan(c, t), Backlog: backlog[t.TopicName], Groups: groups[t.TopicName],
			PutTps1m:  fmt.Sprintf("%.2f", rs.TopicPut.Window(k, stats.Window1m).TPS),
			PutTps10s: fmt.Sprintf("%.2f", rs.TopicPut.Window(k, stats.Window10s).TPS),
		})
	}
	sort.Slice(out.Topics, func(i, j int) bool { return out.Topics[i].Name < out.Topics[j].Name })
	return out, nil
}

type queueRow struct {
	Queue                  int32
	Min, Max               int64
	LastUpdate             string
	BrokerOffset, Consumer int64
	Lag                    int64
	Holder                 string // the member holding the queue (group page)
}

type groupLagRow struct {
	Group string
	Lag   int64
}

type topicData struct {
	Name     string
	Config   protocol.TopicConfig
	Queues   []queueRow
	Total    int64
	PutTps   string
	Groups   []groupLagRow
	Messages int64
}

func (d *Dashboard) topic(r *http.Request) (any, error) {
	c := d.b.Core()
	name := r.URL.Query().Get("t")
	cfg, ok := c.TopicConfig(name)
	if !ok {
		return nil, fmt.Errorf("topic %q does not exist", name)
	}
	ts, err := c.Admin().TopicStats(name)
	if err != nil {
		return nil, err
	}
	out := topicData{Name: name, Config: cfg, PutTps: fmt.Sprintf("%.2f", ts.PutTPS)}
	for mq, o := range ts.Queues {
		out.Queues = append(out.Queues, queueRow{Queue: mq.QueueID, Min: o.MinOffset, Max: o.MaxOffset, LastUpdate: formatMs(o.LastUpdateTimestamp)})
		out.Messages += o.MaxOffset - o.MinOffset
	}
	sort.Slice(out.Queues, func(i, j int) bool { return out.Queues[i].Queue < out.Queues[j].Queue })
	for _, g := range c.Admin().TopicConsumeByWho(name) {
		cs := c.Admin().ConsumeStats(g, name, nil)
		out.Groups = append(out.Groups, groupLagRow{Group: g, Lag: cs.Lag()})
	}
	return out, nil
}

type groupRow struct {
	Name                 string
	Members              int
	ConsumeType, Model   string
	Topics               int
	Lag                  int64
	ConsumeTps           string
	Subscribed, HasState bool
}

type groupsData struct {
	Groups []groupRow
}

func (d *Dashboard) groups(*http.Request) (any, error) {
	c := d.b.Core()
	rows := map[string]*groupRow{}
	get := func(g string) *groupRow {
		if r := rows[g]; r != nil {
			return r
		}
		r := &groupRow{Name: g}
		rows[g] = r
		return r
	}
	for _, g := range c.Admin().SubscriptionGroupNames() {
		get(g).HasState = true
	}
	for _, g := range c.Admin().ConsumerGroupNames() {
		r := get(g)
		if info, err := c.Admin().ConsumerGroupInfo(g); err == nil {
			r.Members, r.ConsumeType, r.Model = len(info.Connections), info.ConsumeType, info.MessageModel
		}
	}
	rs := c.Admin().Stats()
	tps := map[string]float64{}
	for _, l := range c.Admin().ConsumerLags(core.LagOptions{}) {
		r := get(l.Group)
		r.Lag += l.Messages
		r.Topics++
		tps[l.Group] += rs.GroupGet.Window(stats.Key{Topic: l.Topic, Group: l.Group}, stats.Window1m).TPS
	}
	out := groupsData{}
	for _, r := range rows {
		if !r.HasState && r.Members == 0 && r.Topics == 0 {
			continue
		}
		// The broker's own groups (CID_RMQ_SYS_*, TOOLS_CONSUMER, ...) only
		// clutter the list when nothing consumes with them.
		if r.Members == 0 && r.Topics == 0 && isInnerGroup(r.Name) {
			continue
		}
		r.ConsumeTps = fmt.Sprintf("%.2f", tps[r.Name])
		out.Groups = append(out.Groups, *r)
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Name < out.Groups[j].Name })
	return out, nil
}

func isInnerGroup(g string) bool {
	return strings.HasPrefix(g, "CID_RMQ_SYS_") || strings.HasPrefix(g, "CID_SYS_") ||
		strings.HasPrefix(g, "CID_ONSAPI_") || strings.HasPrefix(g, "CID_ONS-HTTP-PROXY") ||
		g == "TOOLS_CONSUMER" || g == "FILTERSRV_CONSUMER" || g == "SELF_TEST_C_GROUP" || g == "CID_HEALTH_CHECK"
}

type memberRow struct {
	ClientID, Addr, Language, Version string
	Subscriptions                     string
}

type groupTopic struct {
	Topic  string
	Queues []queueRow
	Lag    int64
	Tps    string
}

type groupData struct {
	Name          string
	Members       []memberRow
	ConsumeType   string
	Model         string
	Consistent    bool
	Inconsistency string
	Topics        []groupTopic
	Lag           int64
	ClientIDs     []string
	MsgID         string // prefills the resend form (a link from /messages)
	// Unanswered lists the members that did not say which queues they
	// hold, with why.
	Unanswered []string
}

func (d *Dashboard) group(r *http.Request) (any, error) {
	c := d.b.Core()
	g := r.URL.Query().Get("g")
	if g == "" {
		return nil, errors.New("no group given")
	}
	out := groupData{Name: g, Consistent: true, MsgID: r.URL.Query().Get("msgid")}
	if info, err := c.Admin().ConsumerGroupInfo(g); err == nil {
		out.ConsumeType, out.Model = info.ConsumeType, info.MessageModel
		out.Consistent, out.Inconsistency = info.Consistent, info.Inconsistency
		for _, m := range info.Connections {
			var subs []string
			for _, s := range m.Subscriptions {
				subs = append(subs, s.Topic+" ("+s.SubString+")")
			}
			sort.Strings(subs)
			out.Members = append(out.Members, memberRow{ClientID: m.ClientID, Addr: m.ClientAddr, Language: m.Language,
				Version: protocol.VersionDesc(m.Version), Subscriptions: strings.Join(subs, ", ")})
			out.ClientIDs = append(out.ClientIDs, m.ClientID)
		}
	}
	holders := d.holders(g, &out)
	cs := c.Admin().ConsumeStats(g, "", nil)
	byTopic := map[string]*groupTopic{}
	for mq, w := range cs.Queues {
		gt := byTopic[mq.Topic]
		if gt == nil {
			gt = &groupTopic{Topic: mq.Topic}
			byTopic[mq.Topic] = gt
		}
		lag := w.BrokerOffset - w.ConsumerOffset
		gt.Queues = append(gt.Queues, queueRow{Queue: mq.QueueID, BrokerOffset: w.BrokerOffset, Consumer: w.ConsumerOffset,
			Lag: lag, LastUpdate: formatMs(w.LastTimestamp), Holder: holders[queueKey{mq.Topic, mq.QueueID}]})
		gt.Lag += lag
		out.Lag += lag
	}
	rs := c.Admin().Stats()
	for _, gt := range byTopic {
		sort.Slice(gt.Queues, func(i, j int) bool { return gt.Queues[i].Queue < gt.Queues[j].Queue })
		gt.Tps = fmt.Sprintf("%.2f", rs.GroupGet.Window(stats.Key{Topic: gt.Topic, Group: g}, stats.Window1m).TPS)
		out.Topics = append(out.Topics, *gt)
	}
	sort.Slice(out.Topics, func(i, j int) bool { return out.Topics[i].Topic < out.Topics[j].Topic })
	if len(out.Members) == 0 && len(out.Topics) == 0 {
		if _, err := c.SubscriptionGroup([]byte(g)); err != nil {
			return out, fmt.Errorf("group %q is unknown: no members, no offsets, no subscription group", g)
		}
	}
	return out, nil
}

type queueKey struct {
	topic string
	queue int32
}

// holders asks each live member of group, at once, which queues of this
// broker it holds (its running info's process queues), within
// MemberTimeout; members that do not answer are listed in out.
func (d *Dashboard) holders(group string, out *groupData) map[queueKey]string {
	ctx, cancel := context.WithTimeout(context.Background(), d.o.MemberTimeout)
	defer cancel()
	type answer struct {
		id  string
		ri  protocol.ConsumerRunningInfo
		err error
	}
	ch := make(chan answer, len(out.ClientIDs))
	for _, id := range out.ClientIDs {
		go func() {
			ri, err := d.b.ConsumerRunningInfo(ctx, group, id)
			ch <- answer{id, ri, err}
		}()
	}
	self := d.b.Core().Options().BrokerName
	held := map[queueKey]string{}
	for range out.ClientIDs {
		a := <-ch
		if a.err != nil {
			out.Unanswered = append(out.Unanswered, a.id+": "+errText(a.err))
			continue
		}
		for mq := range a.ri.MQTable {
			if mq.BrokerName != self {
				continue
			}
			k := queueKey{mq.Topic, mq.QueueID}
			if held[k] != "" {
				held[k] += ", " // two members hold it: a rebalance under way
			}
			held[k] += a.id
		}
	}
	sort.Strings(out.Unanswered)
	return held
}

type msgProp struct{ K, V string }

type msgRow struct {
	Topic                 string
	Queue                 int32
	QueueOffset           int64
	CommitLogOffset       int64
	MsgID, UniqKey        string
	Tags, Keys            string
	Born, Stored          string
	StoreMs               int64
	Reconsume             int32
	BodySize              int
	Body                  string
	Props                 []msgProp
	Trace                 []msgRow
	ConsumerGroups        []string
	StoreHost, BornHost   string
	Retry, DeadLetter     bool
	TraceNote             string
	ResendGroup, ResendID string
}

type messagesData struct {
	Topic, Key, ID string
	Searched       bool
	Messages       []msgRow
}

const maxBodyPreview = 1024

// scheduleTopic is RocketMQ's topic of messages waiting for a delay level
// (retries among them).
const scheduleTopic = "SCHEDULE_TOPIC_XXXX"

func (d *Dashboard) messages(r *http.Request) (any, error) {
	c := d.b.Core()
	q := r.URL.Query()
	out := messagesData{Topic: strings.TrimSpace(q.Get("topic")), Key: strings.TrimSpace(q.Get("key")), ID: strings.TrimSpace(q.Get("id"))}
	switch {
	case out.ID != "":
		out.Searched = true
		if _, _, err := message.ParseOffsetMsgID(out.ID); err == nil {
			v, err := c.ViewMessageByOffsetID(out.ID)
			if err != nil {
				return out, fmt.Errorf("message %s: %v", out.ID, core.Remark(err))
			}
			row, ok := describe(v.Bytes())
			v.Release()
			if ok {
				out.Messages = append(out.Messages, row)
			}
			break
		}
		// Not an offset id: a unique key (the client's message id), which
		// the index holds per topic.
		if out.Topic == "" {
			return out, errors.New("an id that is not an offset message id is a unique key: give its topic too")
		}
		rows, err := query(c, out.Topic, out.ID, 32)
		if err != nil {
			return out, err
		}
		out.Messages = rows
	case out.Key != "":
		out.Searched = true
		if out.Topic == "" {
			return out, errors.New("a key search needs the topic")
		}
		rows, err := query(c, out.Topic, out.Key, 32)
		if err != nil {
			return out, err
		}
		out.Messages = rows
	default:
		return out, nil
	}
	for i := range out.Messages {
		d.trace(c, &out.Messages[i])
	}
	return out, nil
}

// query reads the records of topic whose keys or unique key hold key.
func query(c *core.Core, topic, key string, n int32) ([]msgRow, error) {
	res, err := c.QueryMessage(topic, key, 0, math.MaxInt64, n)
	if err != nil {
		if core.Code(err) == protocol.RespQueryNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("query %s in %s: %s", key, topic, core.Remark(err))
	}
	defer core.ReleaseViews(res.Views)
	var out []msgRow
	for _, v := range res.Views {
		if row, ok := describe(v.Bytes()); ok {
			out = append(out, row)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CommitLogOffset < out[j].CommitLogOffset })
	return out, nil
}

// describe decodes a stored record into a row (copying what it keeps).
func describe(rec []byte) (msgRow, bool) {
	v, err := message.Decode(rec, false)
	if err != nil {
		return msgRow{}, false
	}
	row := msgRow{
		Topic: string(v.Topic()), Queue: v.QueueID(), QueueOffset: v.QueueOffset(), CommitLogOffset: v.PhysicalOffset(),
		MsgID: string(v.AppendOffsetMsgID(nil)), UniqKey: string(v.UniqKey()), Tags: string(v.Tags()), Keys: string(v.Keys()),
		Born: formatMs(v.BornTimestamp()), Stored: formatMs(v.StoreTimestamp()), StoreMs: v.StoreTimestamp(),
		Reconsume: v.ReconsumeTimes(), BodySize: len(v.Body()),
		StoreHost: v.StoreHost().String(), BornHost: v.BornHost().String(),
	}
	row.Retry = strings.HasPrefix(row.Topic, "%RETRY%")
	row.DeadLetter = strings.HasPrefix(row.Topic, "%DLQ%")
	body := v.Body()
	if len(body) > maxBodyPreview {
		body = body[:maxBodyPreview]
	}
	row.Body = strings.ToValidUTF8(string(body), "\uFFFD")
	message.ForEachProperty(v.Properties(), func(k, val []byte) bool {
		row.Props = append(row.Props, msgProp{string(k), string(val)})
		return true
	})
	sort.Slice(row.Props, func(i, j int) bool { return row.Props[i].K < row.Props[j].K })
	return row, true
}

// trace fills a message's trail: the records with its unique key in the
// retry and dead-letter topics of every group that consumes its topic
// (RocketMQ keeps UNIQ_KEY on a message sent back, and the index holds it
// per topic), in store order, and the groups a resend may go to.
func (d *Dashboard) trace(c *core.Core, m *msgRow) {
	topic := m.Topic
	if rt, ok := propValue(m.Props, "RETRY_TOPIC"); ok && (m.Retry || m.DeadLetter) {
		topic = rt
	}
	groups := c.Admin().TopicConsumeByWho(topic)
	m.ConsumerGroups = groups
	if m.UniqKey == "" {
		m.TraceNote = "the message has no unique key: its retries cannot be looked up"
		return
	}
	seen := map[int64]bool{m.CommitLogOffset: true}
	for _, g := range groups {
		for _, t := range []string{"%RETRY%" + g, "%DLQ%" + g} {
			if _, ok := c.TopicConfig(t); !ok {
				continue
			}
			rows, err := query(c, t, m.UniqKey, 32)
			if err != nil {
				continue
			}
			for _, r := range rows {
				if !seen[r.CommitLogOffset] {
					seen[r.CommitLogOffset] = true
					m.Trace = append(m.Trace, r)
				}
			}
		}
	}
	// Retries waiting for their delay level sit in the schedule topic, with
	// their retry topic as REAL_TOPIC.
	retryOf := map[string]bool{}
	for _, g := range groups {
		retryOf["%RETRY%"+g] = true
	}
	if rows, err := query(c, scheduleTopic, m.UniqKey, 32); err == nil {
		for _, r := range rows {
			if rt, ok := propValue(r.Props, "REAL_TOPIC"); ok && retryOf[rt] && !seen[r.CommitLogOffset] {
				seen[r.CommitLogOffset] = true
				r.Topic = scheduleTopic + " → " + rt
				m.Trace = append(m.Trace, r)
			}
		}
	}
	sort.Slice(m.Trace, func(i, j int) bool { return m.Trace[i].CommitLogOffset < m.Trace[j].CommitLogOffset })
	if len(m.Trace) == 0 {
		m.TraceNote = "no retries: the message is in no retry or dead-letter topic of the groups that consume its topic"
	}
}

func propValue(props []msgProp, k string) (string, bool) {
	for _, p := range props {
		if p.K == k {
			return p.V, true
		}
	}
	return "", false
}
