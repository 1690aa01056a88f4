package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/protocol"
)

// The commands, with mqadmin's names, one-letter flags and long names (its
// tools/command/*SubCommand.java buildCommandlineOptions).

func init() {
	register(&command{name: "clusterList", summary: "list the clusters' brokers with their TPS and totals",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("clusterName", "c", "", "only this cluster")
			fs.BoolP("moreStats", "m", false, "also the messages put and got yesterday and today")
			fs.StringP("interval", "i", "", "accepted for mqadmin's scripts; the list is printed once")
		}, run: clusterList})
	register(&command{name: "topicList", summary: "list every topic the name server knows",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolP("clusterModel", "c", false, "also each topic's cluster and consumer groups")
		},
		run: topicList})
	register(&command{name: "topicRoute", summary: "print a topic's route",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("topic", "t", "", "topic name")
			fs.BoolP("list", "l", false, "as a table")
		}, run: topicRoute})
	register(&command{name: "topicStatus", summary: "each queue's min and max offset and last update time",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("topic", "t", "", "topic name")
			fs.StringP("cluster", "c", "", "accepted; the topic's route decides the brokers")
		}, run: topicStatus})
	register(&command{name: "updateTopic", summary: "create or update a topic",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("brokerAddr", "b", "", "create on this broker")
			fs.StringP("clusterName", "c", "", "create on every master of this cluster")
			fs.StringP("topic", "t", "", "topic name")
			fs.StringP("readQueueNums", "r", "8", "read queues")
			fs.StringP("writeQueueNums", "w", "8", "write queues")
			fs.StringP("perm", "p", "6", "permission: 2 write, 4 read, 6 read-write")
			fs.StringP("order", "o", "false", "ordered topic")
			fs.StringP("unit", "u", "false", "unit topic (accepted, ignored)")
			fs.StringP("hasUnitSub", "s", "false", "unit subscription (accepted, ignored)")
			fs.StringP("attributes", "a", "", "5.x attributes, e.g. +message.type=FIFO")
		}, run: updateTopic})
	register(&command{name: "deleteTopic", summary: "delete a topic from a cluster's brokers and the name servers",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("topic", "t", "", "topic name")
			fs.StringP("clusterName", "c", "", "cluster")
		}, run: deleteTopic})
	register(&command{name: "updateSubGroup", summary: "create or update a subscription group",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("brokerAddr", "b", "", "on this broker")
			fs.StringP("clusterName", "c", "", "on every master of this cluster")
			fs.StringP("groupName", "g", "", "group name")
			fs.StringP("consumeEnable", "s", "true", "consumption enabled")
			fs.StringP("consumeFromMinEnable", "m", "false", "consume from the min offset")
			fs.StringP("consumeBroadcastEnable", "d", "false", "broadcast consumption")
			fs.StringP("consumeMessageOrderly", "o", "false", "orderly: failures go to the DLQ")
			fs.StringP("retryQueueNums", "q", "1", "retry queues")
			fs.StringP("retryMaxTimes", "r", "16", "retries before the DLQ")
			fs.StringP("groupRetryPolicy", "p", "", "5.x retry policy JSON")
			fs.StringP("brokerId", "i", "0", "broker to consume from")
			fs.StringP("whichBrokerWhenConsumeSlowly", "w", "1", "broker when consuming slowly")
			fs.StringP("notifyConsumerIdsChanged", "a", "true", "notify members of membership changes")
			fs.String("attributes", "", "5.x group attribute changes, +key=value,-key (e.g. +lite.bind.topic=Parent)")
		}, run: updateSubGroup})
	register(&command{name: "deleteSubGroup", summary: "delete a subscription group",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("brokerAddr", "b", "", "on this broker")
			fs.StringP("clusterName", "c", "", "on every master of this cluster")
			fs.StringP("groupName", "g", "", "group name")
			fs.StringP("removeOffset", "r", "false", "drop the group's committed offsets too")
		}, run: deleteSubGroup})
	register(&command{name: "consumerProgress", summary: "a group's lag per queue and in total, or every group's",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("groupName", "g", "", "consumer group (none: every group)")
			fs.StringP("topicName", "t", "", "only this topic")
			fs.StringP("showClientIP", "s", "false", "show the client of each queue")
			fs.StringP("cluster", "c", "", "accepted; routes decide the brokers")
		}, run: consumerProgress})
	register(&command{name: "consumerConnection", summary: "a consumer group's live members and subscriptions",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("consumerGroup", "g", "", "consumer group")
			fs.StringP("brokerAddr", "b", "", "ask this broker (default: the group's retry topic's)")
		}, run: consumerConnection})
	register(&command{name: "producerConnection", summary: "a producer group's live connections",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("producerGroup", "g", "", "producer group")
			fs.StringP("topic", "t", "", "a topic the group sends to (its brokers are asked)")
		}, run: producerConnection})
	register(&command{name: "consumerStatus", summary: "the running state of a group's consumers (asked through the broker)",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("consumerGroup", "g", "", "consumer group")
			fs.StringP("clientId", "i", "", "only this client")
			fs.StringP("brokerAddr", "b", "", "ask through this broker")
			fs.BoolP("jstack", "s", false, "include the client's goroutine stacks")
		}, run: consumerStatus})
	register(&command{name: "getConsumerStatus", summary: "each member's offsets of a topic's queues (asked through the broker)",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("group", "g", "", "consumer group")
			fs.StringP("topic", "t", "", "topic")
			fs.StringP("originClientId", "i", "", "only this client")
		}, run: getConsumerStatus})
	register(&command{name: "queryMsgById", summary: "a message by its offset message id",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("topic", "t", "", "topic (5.x)")
			fs.StringP("msgId", "i", "", "offset message id(s), comma-separated")
			fs.StringP("consumerGroup", "g", "", "with -d: have this group's client consume it")
			fs.StringP("clientId", "d", "", "the client to consume it")
			fs.StringP("sendMessage", "s", "", "accepted, ignored")
			fs.StringP("unitName", "u", "", "accepted, ignored")
			fs.StringP("bodyFormat", "f", "", "accepted, ignored")
			fs.StringP("cluster", "c", "", "accepted, ignored")
		}, run: queryMsgByID})
	register(&command{name: "queryMsgByKey", summary: "messages by key",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("topic", "t", "", "topic")
			fs.StringP("msgKey", "k", "", "key")
			fs.StringP("beginTimestamp", "b", "0", "from (ms)")
			fs.StringP("endTimestamp", "e", "", "to (ms; default now)")
			fs.StringP("maxNum", "m", "64", "at most")
			fs.StringP("cluster", "c", "", "accepted, ignored")
		}, run: queryMsgByKey})
	register(&command{name: "queryMsgByUniqueKey", summary: "a message by its unique key (the producer's msgId)",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("msgId", "i", "", "unique key")
			fs.StringP("topic", "t", "", "topic")
			fs.StringP("consumerGroup", "g", "", "with -d: have this group's client consume it")
			fs.StringP("clientId", "d", "", "the client to consume it")
			fs.BoolP("showAll", "a", false, "accepted; the earliest stored copy is shown")
			fs.StringP("cluster", "c", "", "accepted, ignored")
		}, run: queryMsgByUniqueKey})
	register(&command{name: "queryMsgByOffset", summary: "the message at a queue offset",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("topic", "t", "", "topic")
			fs.StringP("brokerName", "b", "", "broker name")
			fs.StringP("queueId", "i", "", "queue id")
			fs.StringP("offset", "o", "", "queue offset")
			fs.StringP("bodyFormat", "f", "", "accepted, ignored")
		}, run: queryMsgByOffset})
	register(&command{name: "resetOffsetByTime", summary: "move a group's offsets of a topic to a time",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("group", "g", "", "consumer group")
			fs.StringP("topic", "t", "", "topic")
			fs.StringP("timestamp", "s", "", "ms since the epoch, 'now', or yyyy-MM-dd#HH:mm:ss:SSS")
			fs.StringP("force", "f", "true", "also move offsets forward")
			fs.StringP("broker", "b", "", "accepted, ignored")
			fs.StringP("queue", "q", "", "accepted, ignored")
			fs.StringP("offset", "o", "", "accepted, ignored")
		}, run: resetOffsetByTime})
	register(&command{name: "cloneGroupOffset", summary: "copy a group's committed offsets to another group",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("srcGroup", "s", "", "source group")
			fs.StringP("destGroup", "d", "", "destination group")
			fs.StringP("topic", "t", "", "topic")
			fs.StringP("offline", "o", "false", "copy even topics the source's members no longer subscribe")
		}, run: cloneGroupOffset})
	register(&command{name: "brokerStatus", summary: "a broker's runtime numbers",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("brokerAddr", "b", "", "broker address")
			fs.StringP("clusterName", "c", "", "every master of this cluster")
		}, run: brokerStatus})
	register(&command{name: "getBrokerConfig", summary: "a broker's configuration",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("brokerAddr", "b", "", "broker address")
			fs.StringP("clusterName", "c", "", "every master of this cluster")
		}, run: getBrokerConfig})
	register(&command{name: "updateBrokerConfig", summary: "change a broker configuration key at run time",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("brokerAddr", "b", "", "broker address")
			fs.StringP("clusterName", "c", "", "every master of this cluster")
			fs.StringP("updateAllBroker", "a", "", "accepted; -c updates every master")
			fs.StringP("key", "k", "", "key")
			fs.StringP("value", "v", "", "value")
		}, run: updateBrokerConfig})
	register(&command{name: "wipeWritePerm", summary: "remove a broker's write permission on the name servers",
		flags: func(fs *pflag.FlagSet) { fs.StringP("brokerName", "b", "", "broker name") },
		run:   func(x *cmdCtx) error { return writePerm(x, false) }})
	register(&command{name: "addWritePerm", summary: "give a broker's topics write permission again on the name servers",
		flags: func(fs *pflag.FlagSet) { fs.StringP("brokerName", "b", "", "broker name") },
		run:   func(x *cmdCtx) error { return writePerm(x, true) }})
	register(&command{name: "sendMessage", summary: "send one message",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("topic", "t", "", "topic")
			fs.StringP("body", "p", "", "body")
			fs.StringP("key", "k", "", "key")
			fs.StringP("tags", "c", "", "tag")
			fs.StringP("broker", "b", "", "send to this broker name")
			fs.StringP("qid", "i", "", "send to this queue id (with -b)")
			fs.StringP("msgTraceEnable", "m", "false", "accepted, ignored")
		}, run: sendMessage})
	register(&command{name: "consumeMessage", summary: "read messages of a topic's queues",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("topic", "t", "", "topic")
			fs.StringP("brokerName", "b", "", "only this broker")
			fs.StringP("queueId", "i", "", "only this queue (with -b)")
			fs.StringP("offset", "o", "", "from this offset (with -b and -i)")
			fs.StringP("consumerGroup", "g", "", "group the reads are made as (default TOOLS_CONSUMER)")
			fs.StringP("beginTimestamp", "s", "", "from this time (ms)")
			fs.StringP("endTimestamp", "e", "", "up to this time (ms)")
			fs.StringP("MessageNumber", "c", "128", "at most this many messages")
		}, run: consumeMessage})
	register(&command{name: "statsAll", summary: "every topic's put and every group's get TPS and today's totals",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolP("activeTopic", "a", false, "only topics with traffic")
			fs.StringP("topic", "t", "", "only this topic")
		}, run: statsAll})
}

// clusterList: ClusterListSubCommand's columns (#Cluster Name, #Broker
// Name, #BID, #Addr, #Version, #InTPS(LOAD), #OutTPS(LOAD), ...).
func clusterList(x *cmdCtx) error {
	bs, err := x.brokers(true)
	if err != nil {
		return err
	}
	type row struct {
		broker
		Version                              string  `json:"version"`
		InTPS                                float64 `json:"inTps"`
		OutTPS                               float64 `json:"outTps"`
		PutYesterday, PutToday, GetYesterday int64
		GetToday                             int64
		Runtime                              map[string]string `json:"-"`
	}
	var rows []row
	var tab [][]string
	for _, b := range bs {
		rt, err := x.admin.BrokerRuntimeInfo(x.ctx, b.Addr)
		if err != nil {
			return err
		}
		r := row{broker: b, Version: rt["brokerVersionDesc"], InTPS: firstTps(rt["putTps"]), OutTPS: firstTps(rt["getTransferredTps"])}
		n := func(k string) int64 { v, _ := strconv.ParseInt(rt[k], 10, 64); return v }
		r.PutYesterday = n("msgPutTotalTodayMorning") - n("msgPutTotalYesterdayMorning")
		r.PutToday = n("msgPutTotalTodayNow") - n("msgPutTotalTodayMorning")
		r.GetYesterday = n("msgGetTotalTodayMorning") - n("msgGetTotalYesterdayMorning")
		r.GetToday = n("msgGetTotalTodayNow") - n("msgGetTotalTodayMorning")
		rows = append(rows, r)
		line := []string{b.Cluster, b.Name, "0", b.Addr, r.Version, fmt.Sprintf("%.2f", r.InTPS), fmt.Sprintf("%.2f", r.OutTPS)}
		if m, _ := x.fs.GetBool("moreStats"); m {
			line = append(line, itoa(r.PutYesterday), itoa(r.GetYesterday), itoa(r.PutToday), itoa(r.GetToday))
		} else {
			line = append(line, rt["commitLogDiskRatio"], rt["dispatchBehindBytes"])
		}
		tab = append(tab, line)
	}
	h := []string{"Cluster Name", "Broker Name", "BID", "Addr", "Version", "InTPS", "OutTPS"}
	if m, _ := x.fs.GetBool("moreStats"); m {
		h = append(h, "InTotalYest", "OutTotalYest", "InTotalToday", "OutTotalToday")
	} else {
		h = append(h, "DiskRatio", "DispatchBehind")
	}
	x.table(h, tab)
	x.doc = map[string]any{"brokers": rows}
	return nil
}

// firstTps reads the first figure of a "10s 1min 10min" TPS triple.
func firstTps(s string) float64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func topicList(x *cmdCtx) error {
	topics, err := x.admin.TopicList(x.ctx)
	if err != nil {
		return err
	}
	if m, _ := x.fs.GetBool("clusterModel"); !m {
		for _, t := range topics {
			x.say("%s", t)
		}
		x.doc = map[string]any{"topics": topics}
		return nil
	}
	type row struct {
		Cluster string   `json:"cluster"`
		Topic   string   `json:"topic"`
		Groups  []string `json:"consumerGroups"`
	}
	var rows []row
	var tab [][]string
	for _, t := range topics {
		bs, err := x.topicBrokers(t)
		if err != nil {
			continue
		}
		groups := map[string]bool{}
		for _, b := range bs {
			gs, _ := x.admin.TopicConsumeByWho(x.ctx, b.Addr, t)
			for _, g := range gs {
				groups[g] = true
			}
		}
		gl := sortedKeys(groups)
		rows = append(rows, row{Cluster: bs[0].Cluster, Topic: t, Groups: gl})
		if len(gl) == 0 {
			gl = []string{""}
		}
		for _, g := range gl {
			tab = append(tab, []string{bs[0].Cluster, t, g})
		}
	}
	x.table([]string{"Cluster Name", "Topic", "Consumer Group"}, tab)
	x.doc = map[string]any{"topics": rows}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func topicRoute(x *cmdCtx) error {
	if err := x.need("topic"); err != nil {
		return err
	}
	rd, err := x.admin.TopicRoute(x.ctx, x.str("topic"))
	if err != nil {
		return err
	}
	var tab [][]string
	for _, q := range rd.QueueDatas {
		tab = append(tab, []string{q.BrokerName, strconv.Itoa(int(q.ReadQueueNums)), strconv.Itoa(int(q.WriteQueueNums)), strconv.Itoa(int(q.Perm))})
	}
	x.table([]string{"Broker Name", "Read Queues", "Write Queues", "Perm"}, tab)
	var addrs [][]string
	for _, bd := range rd.BrokerDatas {
		for id, a := range bd.BrokerAddrs {
			addrs = append(addrs, []string{bd.Cluster, bd.BrokerName, strconv.FormatInt(id, 10), a})
		}
	}
	x.say("")
	x.table([]string{"Cluster", "Broker Name", "BID", "Addr"}, addrs)
	x.doc = json.RawMessage(rd.AppendJSON(nil, true)) // the name server's standard JSON
	return nil
}

func topicStatus(x *cmdCtx) error {
	if err := x.need("topic"); err != nil {
		return err
	}
	topic := x.str("topic")
	bs, err := x.topicBrokers(topic)
	if err != nil {
		return err
	}
	type row struct {
		protocol.MessageQueue
		protocol.TopicOffset
	}
	var rows []row
	for _, b := range bs {
		ts, err := x.admin.TopicStats(x.ctx, b.Addr, topic)
		if err != nil {
			return err
		}
		for mq, o := range ts.OffsetTable {
			rows = append(rows, row{mq, o})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].BrokerName != rows[j].BrokerName {
			return rows[i].BrokerName < rows[j].BrokerName
		}
		return rows[i].QueueID < rows[j].QueueID
	})
	var tab [][]string
	for _, r := range rows {
		tab = append(tab, []string{r.BrokerName, strconv.Itoa(int(r.QueueID)), itoa(r.MinOffset), itoa(r.MaxOffset), fmtTime(r.LastUpdateTimestamp)})
	}
	x.table([]string{"Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"}, tab)
	x.doc = map[string]any{"topic": topic, "queues": rows}
	return nil
}

func updateTopic(x *cmdCtx) error {
	if err := x.need("topic"); err != nil {
		return err
	}
	r, err := x.int64("readQueueNums", 8)
	if err != nil {
		return err
	}
	w, err := x.int64("writeQueueNums", 8)
	if err != nil {
		return err
	}
	perm, err := parsePerm(x.str("perm"))
	if err != nil {
		return err
	}
	order, err := x.bool("order", false)
	if err != nil {
		return err
	}
	bs, err := x.brokers(false)
	if err != nil {
		return err
	}
	if _, err := parseAttributes(x.str("attributes")); err != nil {
		return err
	}
	h := protocol.CreateTopicRequest{Topic: x.str("topic"), ReadQueueNums: int32(r), WriteQueueNums: int32(w), Perm: perm,
		Order: order, Attributes: x.str("attributes")}
	for _, b := range bs {
		if err := x.admin.CreateTopicAt(x.ctx, b.Addr, h); err != nil {
			return err
		}
		x.say("create topic to %s success.", b.Addr)
	}
	x.doc = map[string]any{"topic": h.Topic, "brokers": bs, "readQueueNums": r, "writeQueueNums": w, "perm": perm, "order": order}
	return nil
}

func deleteTopic(x *cmdCtx) error {
	if err := x.need("topic", "clusterName"); err != nil {
		return err
	}
	bs, err := x.brokers(false)
	if err != nil {
		return err
	}
	topic := x.str("topic")
	for _, b := range bs {
		if err := x.admin.DeleteTopicAt(x.ctx, b.Addr, topic); err != nil {
			return err
		}
	}
	if err := x.admin.DeleteTopicInNameServers(x.ctx, topic); err != nil {
		return err
	}
	x.say("delete topic [%s] from cluster [%s] success.", topic, x.str("clusterName"))
	x.doc = map[string]any{"topic": topic, "brokers": bs}
	return nil
}

func updateSubGroup(x *cmdCtx) error {
	if err := x.need("groupName"); err != nil {
		return err
	}
	cfg := protocol.DefaultSubscriptionGroupConfig(x.str("groupName"))
	var err error
	bools := []struct {
		name string
		dst  *bool
	}{{"consumeEnable", &cfg.ConsumeEnable}, {"consumeFromMinEnable", &cfg.ConsumeFromMinEnable},
		{"consumeBroadcastEnable", &cfg.ConsumeBroadcastEnable}, {"consumeMessageOrderly", &cfg.ConsumeMessageOrderly},
		{"notifyConsumerIdsChanged", &cfg.NotifyConsumerIdsChangedEnable}}
	for _, b := range bools {
		if *b.dst, err = x.bool(b.name, *b.dst); err != nil {
			return err
		}
	}
	ints := []struct {
		name string
		dst  *int64
	}{{"brokerId", &cfg.BrokerID}, {"whichBrokerWhenConsumeSlowly", &cfg.WhichBrokerWhenConsumeSlowly}}
	for _, n := range ints {
		if *n.dst, err = x.int64(n.name, *n.dst); err != nil {
			return err
		}
	}
	q, err := x.int64("retryQueueNums", int64(cfg.RetryQueueNums))
	if err != nil {
		return err
	}
	r, err := x.int64("retryMaxTimes", int64(cfg.RetryMaxTimes))
	if err != nil {
		return err
	}
	cfg.RetryQueueNums, cfg.RetryMaxTimes = int32(q), int32(r)
	if p := x.str("groupRetryPolicy"); p != "" {
		cfg.GroupRetryPolicy = []byte(p)
	}
	if cfg.Attributes, err = parseAttributes(x.str("attributes")); err != nil {
		return err
	}
	bs, err := x.brokers(false)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if err := x.admin.UpdateSubscriptionGroupAt(x.ctx, b.Addr, cfg); err != nil {
			return err
		}
		x.say("create subscription group to %s success.", b.Addr)
	}
	x.doc = map[string]any{"group": cfg, "brokers": bs}
	return nil
}

func deleteSubGroup(x *cmdCtx) error {
	if err := x.need("groupName"); err != nil {
		return err
	}
	clean, err := x.bool("removeOffset", false)
	if err != nil {
		return err
	}
	bs, err := x.brokers(false)
	if err != nil {
		return err
	}
	g := x.str("groupName")
	for _, b := range bs {
		if err := x.admin.DeleteSubscriptionGroupAt(x.ctx, b.Addr, g, clean); err != nil {
			return err
		}
		x.say("delete subscription group [%s] from broker [%s] success.", g, b.Addr)
	}
	x.doc = map[string]any{"group": g, "brokers": bs, "removeOffset": clean}
	return nil
}

// consumerProgress: ConsumerProgressSubCommand. With -g, the group's queues
// (#Topic #Broker Name #QID #Broker Offset #Consumer Offset #Diff #LastTime)
// and its totals; without, one line per group found as a %RETRY% topic
// (#Group #Count #Version #Type #Model #TPS #Diff Total). Every broker is
// asked once for all groups (GET_BROKER_CONSUME_STATS) and the groups'
// connections are fetched concurrently.
func consumerProgress(x *cmdCtx) error {
	if g := x.str("groupName"); g != "" {
		return groupProgress(x, g)
	}
	bs, err := x.brokers(true)
	if err != nil {
		return err
	}
	type groupRow struct {
		Group   string  `json:"group"`
		Count   int     `json:"count"`
		Version string  `json:"version"`
		Type    string  `json:"type"`
		Model   string  `json:"model"`
		TPS     float64 `json:"tps"`
		Diff    int64   `json:"diffTotal"`
		addr    string
	}
	groups := map[string]*groupRow{}
	for _, b := range bs {
		l, err := x.admin.BrokerConsumeStats(x.ctx, b.Addr, false)
		if err != nil {
			return err
		}
		for _, m := range l.ConsumeStatsList {
			for g, list := range m {
				r := groups[g]
				if r == nil {
					r = &groupRow{Group: g, addr: b.Addr}
					groups[g] = r
				}
				for i := range list {
					r.TPS += list[i].ConsumeTps
					r.Diff += list[i].TotalDiff()
				}
			}
		}
	}
	// Only groups with a retry topic, as mqadmin lists them.
	topics, err := x.admin.TopicList(x.ctx)
	if err != nil {
		return err
	}
	var rows []*groupRow
	for _, t := range topics {
		g, ok := strings.CutPrefix(t, "%RETRY%")
		if !ok {
			continue
		}
		r := groups[g]
		if r == nil {
			r = &groupRow{Group: g, addr: bs[0].Addr}
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Group < rows[j].Group })
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, r := range rows {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cc, err := x.admin.ConsumerConnectionAt(x.ctx, r.addr, r.Group)
			if err != nil {
				r.Version = "OFFLINE"
				return
			}
			r.Count = len(cc.ConnectionSet)
			r.Type, r.Model = consumeTypeDesc(cc.ConsumeType), cc.MessageModel
			r.Version = protocol.VersionDesc(cc.MinVersion())
		}()
	}
	wg.Wait()
	var tab [][]string
	for _, r := range rows {
		tab = append(tab, []string{r.Group, strconv.Itoa(r.Count), r.Version, r.Type, r.Model, strconv.Itoa(int(r.TPS)), itoa(r.Diff)})
	}
	x.table([]string{"Group", "Count", "Version", "Type", "Model", "TPS", "Diff Total"}, tab)
	x.doc = map[string]any{"groups": rows}
	return nil
}

func consumeTypeDesc(t string) string {
	switch t {
	case "CONSUME_PASSIVELY":
		return "PUSH"
	case "CONSUME_ACTIVELY":
		return "PULL"
	case "CONSUME_POP":
		return "POP"
	}
	return t
}

func groupProgress(x *cmdCtx, group string) error {
	topic := x.str("topicName")
	route := topic
	if route == "" {
		route = "%RETRY%" + group
	}
	bs, err := x.topicBrokers(route)
	if err != nil {
		return err
	}
	type row struct {
		protocol.MessageQueue
		protocol.OffsetWrapper
		Diff     int64  `json:"diff"`
		ClientIP string `json:"clientIp,omitempty"`
	}
	var rows []row
	var tps float64
	for _, b := range bs {
		cs, err := x.admin.ConsumeStats(x.ctx, b.Addr, group, topic)
		if err != nil {
			return err
		}
		tps += cs.ConsumeTps
		for mq, w := range cs.OffsetTable {
			rows = append(rows, row{MessageQueue: mq, OffsetWrapper: w, Diff: w.BrokerOffset - w.ConsumerOffset})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.BrokerName != b.BrokerName {
			return a.BrokerName < b.BrokerName
		}
		return a.QueueID < b.QueueID
	})
	show, _ := x.bool("showClientIP", false)
	if show {
		owners := queueOwners(x, bs, group)
		for i := range rows {
			rows[i].ClientIP = owners[rows[i].MessageQueue]
		}
	}
	var diff int64
	var tab [][]string
	for _, r := range rows {
		diff += r.Diff
		line := []string{r.Topic, r.BrokerName, strconv.Itoa(int(r.QueueID)), itoa(r.BrokerOffset), itoa(r.ConsumerOffset)}
		if show {
			line = append(line, orNA(r.ClientIP))
		}
		tab = append(tab, append(line, itoa(r.Diff), itoa(r.PullOffset-r.ConsumerOffset), fmtTime(r.LastTimestamp)))
	}
	h := []string{"Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset"}
	if show {
		h = append(h, "Client IP")
	}
	x.table(append(h, "Diff", "Inflight", "LastTime"), tab)
	x.say("\nConsume TPS: %.2f\nConsume Diff Total: %d", tps, diff)
	x.doc = map[string]any{"group": group, "queues": rows, "consumeTps": tps, "diffTotal": diff}
	return nil
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}

// queueOwners asks each member of the group (through a broker) which queues
// it holds.
func queueOwners(x *cmdCtx, bs []broker, group string) map[protocol.MessageQueue]string {
	out := map[protocol.MessageQueue]string{}
	cc, err := x.admin.ConsumerConnectionAt(x.ctx, bs[0].Addr, group)
	if err != nil {
		return out
	}
	for _, c := range cc.ConnectionSet {
		ri, err := x.admin.ConsumerRunningInfo(x.ctx, bs[0].Addr, group, c.ClientID, false)
		if err != nil {
			continue
		}
		for mq := range ri.MQTable {
			out[mq] = c.ClientAddr
		}
	}
	return out
}

func consumerConnection(x *cmdCtx) error {
	if err := x.need("consumerGroup"); err != nil {
		return err
	}
	g := x.str("consumerGroup")
	addr := x.str("brokerAddr")
	if addr == "" {
		bs, err := x.topicBrokers("%RETRY%" + g)
		if err != nil {
			return err
		}
		addr = bs[0].Addr
	}
	cc, err := x.admin.ConsumerConnectionAt(x.ctx, addr, g)
	if err != nil {
		return err
	}
	var tab [][]string
	for i, c := range cc.ConnectionSet {
		tab = append(tab, []string{strconv.Itoa(i + 1), c.ClientID, c.ClientAddr, c.Language, protocol.VersionDesc(c.Version)})
	}
	x.table([]string{"", "ClientId", "ClientAddr", "Language", "Version"}, tab)
	var subs [][]string
	topics := make([]string, 0, len(cc.SubscriptionTable))
	for t := range cc.SubscriptionTable {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		subs = append(subs, []string{t, cc.SubscriptionTable[t].SubString})
	}
	x.say("")
	x.table([]string{"Topic", "SubExpression"}, subs)
	x.say("\nConsumeType: %s\nMessageModel: %s\nConsumeFromWhere: %s", cc.ConsumeType, cc.MessageModel, cc.ConsumeFromWhere)
	x.doc = cc
	return nil
}

func producerConnection(x *cmdCtx) error {
	if err := x.need("producerGroup", "topic"); err != nil {
		return err
	}
	bs, err := x.topicBrokers(x.str("topic"))
	if err != nil {
		return err
	}
	var all []protocol.Connection
	var errs []error
	for _, b := range bs {
		pc, err := x.admin.ProducerConnectionAt(x.ctx, b.Addr, x.str("producerGroup"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		all = append(all, pc.ConnectionSet...)
	}
	if len(all) == 0 && len(errs) > 0 {
		return errors.Join(errs...)
	}
	var tab [][]string
	for i, c := range all {
		tab = append(tab, []string{strconv.Itoa(i + 1), c.ClientID, c.ClientAddr, c.Language, protocol.VersionDesc(c.Version)})
	}
	x.table([]string{"", "ClientId", "ClientAddr", "Language", "Version"}, tab)
	x.doc = map[string]any{"connectionSet": all}
	return nil
}

func consumerStatus(x *cmdCtx) error {
	if err := x.need("consumerGroup"); err != nil {
		return err
	}
	g := x.str("consumerGroup")
	addr := x.str("brokerAddr")
	if addr == "" {
		bs, err := x.topicBrokers("%RETRY%" + g)
		if err != nil {
			return err
		}
		addr = bs[0].Addr
	}
	ids := []string{x.str("clientId")}
	if ids[0] == "" {
		cc, err := x.admin.ConsumerConnectionAt(x.ctx, addr, g)
		if err != nil {
			return err
		}
		ids = ids[:0]
		for _, c := range cc.ConnectionSet {
			ids = append(ids, c.ClientID)
		}
	}
	jstack, _ := x.fs.GetBool("jstack")
	infos := map[string]*protocol.ConsumerRunningInfo{}
	var tab [][]string
	for _, id := range ids {
		ri, err := x.admin.ConsumerRunningInfo(x.ctx, addr, g, id, jstack)
		if err != nil {
			return err
		}
		infos[id] = ri
		for mq, pq := range ri.MQTable {
			tab = append(tab, []string{id, mq.Topic, mq.BrokerName, strconv.Itoa(int(mq.QueueID)), itoa(pq.CommitOffset),
				strconv.Itoa(int(pq.CachedMsgCount)), strconv.FormatBool(pq.Locked)})
		}
	}
	sort.Slice(tab, func(i, j int) bool { return strings.Join(tab[i], "\x00") < strings.Join(tab[j], "\x00") })
	x.table([]string{"ClientId", "Topic", "Broker Name", "QID", "Commit Offset", "Cached", "Locked"}, tab)
	var st [][]string
	for _, id := range ids {
		for t, s := range infos[id].StatusTable {
			st = append(st, []string{id, t, fmt.Sprintf("%.2f", s.PullTPS), fmt.Sprintf("%.2f", s.ConsumeOKTPS),
				fmt.Sprintf("%.2f", s.ConsumeFailedTPS), itoa(s.ConsumeFailedMsgs)})
		}
	}
	sort.Slice(st, func(i, j int) bool { return st[i][0]+st[i][1] < st[j][0]+st[j][1] })
	x.say("")
	x.table([]string{"ClientId", "Topic", "Pull TPS", "Consume OK TPS", "Consume Failed TPS", "Failed Msgs"}, st)
	if jstack && !x.json {
		for _, id := range ids {
			x.say("\n%s:\n%s", id, infos[id].Jstack)
		}
	}
	docs := map[string]any{}
	for id, ri := range infos {
		type queue struct {
			protocol.MessageQueue
			protocol.ProcessQueueInfo
		}
		var qs []queue
		for mq, pq := range ri.MQTable {
			qs = append(qs, queue{mq, pq})
		}
		sort.Slice(qs, func(i, j int) bool {
			return qs[i].Topic+strconv.Itoa(int(qs[i].QueueID)) < qs[j].Topic+strconv.Itoa(int(qs[j].QueueID))
		})
		docs[id] = map[string]any{"properties": ri.Properties, "subscriptionSet": ri.SubscriptionSet, "mqTable": qs,
			"statusTable": ri.StatusTable, "jstack": ri.Jstack}
	}
	x.doc = map[string]any{"group": g, "consumers": docs}
	return nil
}

// printMessage prints one message (PrintMessageSubCommand's fields).
func printMessage(x *cmdCtx, m *client.MessageExt) map[string]any {
	d := map[string]any{"topic": m.Topic, "tags": m.Tags, "keys": m.Keys, "queueId": m.Queue.QueueID, "brokerName": m.Queue.BrokerName,
		"queueOffset": m.QueueOffset, "commitLogOffset": m.CommitLogOffset, "reconsumeTimes": m.ReconsumeTimes,
		"bornTimestamp": m.BornTimestamp.UnixMilli(), "storeTimestamp": m.StoreTimestamp.UnixMilli(), "bornHost": m.BornHost.String(),
		"storeHost": m.StoreHost.String(), "sysFlag": m.SysFlag, "properties": m.Properties, "body": string(m.Body),
		"msgId": m.MsgID, "offsetMsgId": m.OffsetMsgID, "storeSize": m.StoreSize}
	if !x.json {
		rows := [][]string{{"OffsetID:", m.OffsetMsgID}, {"Topic:", m.Topic}, {"Tags:", "[" + m.Tags + "]"},
			{"Keys:", "[" + strings.Join(m.Keys, " ") + "]"}, {"Queue ID:", strconv.Itoa(int(m.Queue.QueueID))},
			{"Queue Offset:", itoa(m.QueueOffset)}, {"CommitLog Offset:", itoa(m.CommitLogOffset)},
			{"Reconsume Times:", strconv.Itoa(int(m.ReconsumeTimes))}, {"Born Timestamp:", fmtTime(m.BornTimestamp.UnixMilli())},
			{"Store Timestamp:", fmtTime(m.StoreTimestamp.UnixMilli())}, {"Born Host:", m.BornHost.String()},
			{"Store Host:", m.StoreHost.String()}, {"System Flag:", strconv.Itoa(int(m.SysFlag))},
			{"Properties:", fmt.Sprint(m.Properties)}, {"Message Body:", string(m.Body)}}
		for _, r := range rows {
			fmt.Fprintf(x.stdout, "%-20s%s\n", r[0], r[1])
		}
		fmt.Fprintln(x.stdout)
	}
	return d
}

func queryMsgByID(x *cmdCtx) error {
	if err := x.need("msgId"); err != nil {
		return err
	}
	var docs []map[string]any
	for _, id := range strings.Split(x.str("msgId"), ",") {
		id = strings.TrimSpace(id)
		m, err := x.admin.ViewMessage(x.ctx, id)
		if err != nil {
			return err
		}
		d := printMessage(x, m)
		if g, c := x.str("consumerGroup"), x.str("clientId"); g != "" && c != "" {
			r, err := consumeDirect(x, m, g, c, id)
			if err != nil {
				return err
			}
			d["consumeResult"] = r
		}
		docs = append(docs, d)
	}
	x.doc = map[string]any{"messages": docs}
	return nil
}

// consumeDirect has a group's client consume a message (CONSUME_MESSAGE_DIRECTLY).
func consumeDirect(x *cmdCtx, m *client.MessageExt, group, clientID, offsetID string) (*protocol.ConsumeMessageDirectlyResult, error) {
	bs, err := x.topicBrokers(m.Topic)
	if err != nil {
		return nil, err
	}
	addr := bs[0].Addr
	for _, b := range bs {
		if b.Name == m.Queue.BrokerName {
			addr = b.Addr
		}
	}
	r, err := x.admin.ConsumeMessageDirectly(x.ctx, addr, group, clientID, offsetID, m.Topic)
	if err != nil {
		return nil, err
	}
	x.say("ConsumeMessageDirectlyResult: consumeResult=%s order=%t autoCommit=%t spentTimeMills=%d remark=%q",
		r.ConsumeResult, r.Order, r.AutoCommit, r.SpentTimeMills, r.Remark)
	return r, nil
}

func queryMsgByKey(x *cmdCtx) error {
	if err := x.need("topic", "msgKey"); err != nil {
		return err
	}
	begin, err := x.int64("beginTimestamp", 0)
	if err != nil {
		return err
	}
	end, err := x.int64("endTimestamp", time.Now().UnixMilli())
	if err != nil {
		return err
	}
	n, err := x.int64("maxNum", 64)
	if err != nil {
		return err
	}
	msgs, err := x.admin.QueryMessages(x.ctx, x.str("topic"), x.str("msgKey"), time.UnixMilli(begin), time.UnixMilli(end), int(min(max(n, 1), client.MaxQueryMessages)))
	if err != nil && len(msgs) == 0 {
		return err
	}
	var tab [][]string
	var docs []map[string]any
	for _, m := range msgs {
		tab = append(tab, []string{m.MsgID, m.OffsetMsgID, strconv.Itoa(int(m.Queue.QueueID)), itoa(m.QueueOffset), fmtTime(m.StoreTimestamp.UnixMilli())})
		docs = append(docs, map[string]any{"msgId": m.MsgID, "offsetMsgId": m.OffsetMsgID, "queueId": m.Queue.QueueID,
			"queueOffset": m.QueueOffset, "storeTimestamp": m.StoreTimestamp.UnixMilli(), "brokerName": m.Queue.BrokerName})
	}
	x.table([]string{"Message ID", "Offset ID", "QID", "Offset", "Store Time"}, tab)
	x.doc = map[string]any{"messages": docs}
	return nil
}

func queryMsgByUniqueKey(x *cmdCtx) error {
	if err := x.need("msgId", "topic"); err != nil {
		return err
	}
	m, err := x.admin.QueryByUniqueKey(x.ctx, x.str("topic"), x.str("msgId"))
	if err != nil {
		return err
	}
	d := printMessage(x, m)
	if g, c := x.str("consumerGroup"), x.str("clientId"); g != "" && c != "" {
		r, err := consumeDirect(x, m, g, c, m.OffsetMsgID)
		if err != nil {
			return err
		}
		d["consumeResult"] = r
	}
	x.doc = d
	return nil
}

func queryMsgByOffset(x *cmdCtx) error {
	if err := x.need("topic", "brokerName", "queueId", "offset"); err != nil {
		return err
	}
	q, err := x.int64("queueId", 0)
	if err != nil {
		return err
	}
	off, err := x.int64("offset", 0)
	if err != nil {
		return err
	}
	b, err := brokerByName(x, x.str("topic"), x.str("brokerName"))
	if err != nil {
		return err
	}
	msgs, _, err := x.admin.PullOnce(x.ctx, b.Addr, b.Name, "TOOLS_CONSUMER", x.str("topic"), int32(q), off, 1)
	if err != nil {
		return err
	}
	if len(msgs) == 0 || msgs[0].QueueOffset != off {
		return fmt.Errorf("no message at %s %s queue %d offset %d", x.str("topic"), b.Name, q, off)
	}
	x.doc = printMessage(x, msgs[0])
	return nil
}

func brokerByName(x *cmdCtx, topic, name string) (broker, error) {
	bs, err := x.topicBrokers(topic)
	if err != nil {
		return broker{}, err
	}
	for _, b := range bs {
		if b.Name == name {
			return b, nil
		}
	}
	return broker{}, fmt.Errorf("topic %q has no broker named %q", topic, name)
}

// parseTimestamp reads resetOffsetByTime's -s: ms, "now", or
// yyyy-MM-dd#HH:mm:ss:SSS.
func parseTimestamp(s string) (time.Time, error) {
	if s == "now" {
		return time.Now(), nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.ParseInLocation("2006-01-02#15:04:05:000", s, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: timestamp %q: ms, now, or yyyy-MM-dd#HH:mm:ss:SSS", errUsage, s)
	}
	return t, nil
}

func resetOffsetByTime(x *cmdCtx) error {
	if err := x.need("group", "topic", "timestamp"); err != nil {
		return err
	}
	ts, err := parseTimestamp(x.str("timestamp"))
	if err != nil {
		return err
	}
	table, err := x.admin.ResetOffsetByTime(x.ctx, x.str("group"), x.str("topic"), ts)
	if err != nil {
		return err
	}
	type row struct {
		client.MessageQueue
		Offset int64 `json:"offset"`
	}
	var rows []row
	for mq, off := range table {
		rows = append(rows, row{mq, off})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].BrokerName != rows[j].BrokerName {
			return rows[i].BrokerName < rows[j].BrokerName
		}
		return rows[i].QueueID < rows[j].QueueID
	})
	var tab [][]string
	for _, r := range rows {
		tab = append(tab, []string{r.BrokerName, strconv.Itoa(int(r.QueueID)), itoa(r.Offset)})
	}
	x.table([]string{"brokerName", "queueId", "offset"}, tab)
	x.doc = map[string]any{"group": x.str("group"), "topic": x.str("topic"), "timestamp": ts.UnixMilli(), "offsets": rows}
	return nil
}

func cloneGroupOffset(x *cmdCtx) error {
	if err := x.need("srcGroup", "destGroup", "topic"); err != nil {
		return err
	}
	offline, err := x.bool("offline", false)
	if err != nil {
		return err
	}
	bs, err := x.topicBrokers(x.str("topic"))
	if err != nil {
		return err
	}
	for _, b := range bs {
		if err := x.admin.CloneGroupOffset(x.ctx, b.Addr, x.str("srcGroup"), x.str("destGroup"), x.str("topic"), offline); err != nil {
			return err
		}
	}
	x.say("clone group offset success. srcGroup[%s], destGroup=[%s], topic[%s]", x.str("srcGroup"), x.str("destGroup"), x.str("topic"))
	x.doc = map[string]any{"srcGroup": x.str("srcGroup"), "destGroup": x.str("destGroup"), "topic": x.str("topic"), "brokers": bs}
	return nil
}

func brokerStatus(x *cmdCtx) error {
	bs, err := x.brokers(false)
	if err != nil {
		return err
	}
	out := map[string]map[string]string{}
	for _, b := range bs {
		rt, err := x.admin.BrokerRuntimeInfo(x.ctx, b.Addr)
		if err != nil {
			return err
		}
		out[b.Addr] = rt
		keys := make([]string, 0, len(rt))
		for k := range rt {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var tab [][]string
		for _, k := range keys {
			line := []string{k, rt[k]}
			if len(bs) > 1 {
				line = append([]string{b.Addr}, line...)
			}
			tab = append(tab, line)
		}
		if !x.json {
			tw := x.stdout
			for _, r := range tab {
				if len(r) == 3 {
					fmt.Fprintf(tw, "%-24s %-32s: %s\n", r[0], r[1], r[2])
				} else {
					fmt.Fprintf(tw, "%-32s: %s\n", r[0], r[1])
				}
			}
		}
	}
	x.doc = map[string]any{"brokers": out}
	return nil
}

func getBrokerConfig(x *cmdCtx) error {
	bs, err := x.brokers(false)
	if err != nil {
		return err
	}
	out := map[string]map[string]string{}
	for _, b := range bs {
		cfg, _, err := x.admin.BrokerConfig(x.ctx, b.Addr)
		if err != nil {
			return err
		}
		out[b.Addr] = cfg
		x.say("============%s============", b.Addr)
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x.say("%-50s=  %s", k, cfg[k])
		}
	}
	x.doc = map[string]any{"brokers": out}
	return nil
}

func updateBrokerConfig(x *cmdCtx) error {
	if err := x.need("key", "value"); err != nil {
		return err
	}
	bs, err := x.brokers(false)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if err := x.admin.UpdateBrokerConfig(x.ctx, b.Addr, map[string]string{x.str("key"): x.str("value")}); err != nil {
			return err
		}
		x.say("update broker config success, %s", b.Addr)
	}
	x.doc = map[string]any{"key": x.str("key"), "value": x.str("value"), "brokers": bs}
	return nil
}

func writePerm(x *cmdCtx, add bool) error {
	if err := x.need("brokerName"); err != nil {
		return err
	}
	name := x.str("brokerName")
	var counts map[string]int32
	var err error
	if add {
		counts, err = x.admin.AddWritePerm(x.ctx, name)
	} else {
		counts, err = x.admin.WipeWritePerm(x.ctx, name)
	}
	nss := make([]string, 0, len(counts))
	for ns := range counts {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		if add {
			x.say("add write perm of broker[%s] in name server[%s] OK, %d", name, ns, counts[ns])
		} else {
			x.say("wipe write perm of broker[%s] in name server[%s] OK, %d", name, ns, counts[ns])
		}
	}
	x.doc = map[string]any{"brokerName": name, "topics": counts}
	return err
}

func sendMessage(x *cmdCtx) error {
	if err := x.need("topic", "body"); err != nil {
		return err
	}
	opts := []client.ProducerOpt{client.NameServer(x.nsList), client.ProducerGroup("PID_APOGEE_ADMIN"),
		client.InstanceName(fmt.Sprintf("apogee-admin-send-%d", time.Now().UnixNano()))}
	if x.str("broker") != "" {
		opts = append(opts, client.Selector(client.ManualSelector()))
	}
	p, err := client.NewProducer(opts...)
	if err != nil {
		return err
	}
	defer p.Close(x.ctx)
	m := &client.Message{Topic: x.str("topic"), Body: []byte(x.str("body")), Tags: x.str("tags")}
	if k := x.str("key"); k != "" {
		m.Keys = []string{k}
	}
	if b := x.str("broker"); b != "" {
		q, err := x.int64("qid", 0)
		if err != nil {
			return err
		}
		m.Queue = &client.MessageQueue{Topic: m.Topic, BrokerName: b, QueueID: int32(q)}
	}
	r, err := p.SendSync(x.ctx, m)
	if err != nil {
		return err
	}
	x.table([]string{"Broker Name", "QID", "Send Result", "MsgId"}, [][]string{{r.Queue.BrokerName, strconv.Itoa(int(r.Queue.QueueID)), r.Status.String(), r.MsgID()}})
	x.doc = map[string]any{"brokerName": r.Queue.BrokerName, "queueId": r.Queue.QueueID, "queueOffset": r.QueueOffset,
		"sendStatus": r.Status.String(), "msgId": r.MsgID(), "offsetMsgId": r.OffsetMsgID()}
	return nil
}

func consumeMessage(x *cmdCtx) error {
	if err := x.need("topic"); err != nil {
		return err
	}
	topic := x.str("topic")
	group := x.str("consumerGroup")
	if group == "" {
		group = "TOOLS_CONSUMER"
	}
	limit, err := x.int64("MessageNumber", 128)
	if err != nil {
		return err
	}
	begin, err := x.int64("beginTimestamp", 0)
	if err != nil {
		return err
	}
	end, err := x.int64("endTimestamp", 0)
	if err != nil {
		return err
	}
	ts, err := x.admin.TopicRoute(x.ctx, topic)
	if err != nil {
		return err
	}
	bs, err := x.topicBrokers(topic)
	if err != nil {
		return err
	}
	var docs []map[string]any
	n := int64(0)
	for _, b := range bs {
		if name := x.str("brokerName"); name != "" && name != b.Name {
			continue
		}
		stats, err := x.admin.TopicStats(x.ctx, b.Addr, topic)
		if err != nil {
			return err
		}
		var queues []int32
		for _, qd := range ts.QueueDatas {
			if qd.BrokerName == b.Name {
				for q := int32(0); q < qd.ReadQueueNums; q++ {
					queues = append(queues, q)
				}
			}
		}
		if x.has("queueId") {
			q, err := x.int64("queueId", 0)
			if err != nil {
				return err
			}
			queues = []int32{int32(q)}
		}
		for _, q := range queues {
			o := stats.OffsetTable[protocol.MessageQueue{Topic: topic, BrokerName: b.Name, QueueID: q}]
			off := o.MinOffset
			if x.has("offset") {
				if off, err = x.int64("offset", 0); err != nil {
					return err
				}
			}
			for off < o.MaxOffset && n < limit {
				msgs, next, err := x.admin.PullOnce(x.ctx, b.Addr, b.Name, group, topic, q, off, int32(min(32, limit-n)))
				if err != nil {
					return err
				}
				if len(msgs) == 0 {
					if next <= off {
						break
					}
					off = next
					continue
				}
				for _, m := range msgs {
					st := m.StoreTimestamp.UnixMilli()
					if (begin > 0 && st < begin) || (end > 0 && st > end) || n >= limit {
						continue
					}
					docs = append(docs, printMessage(x, m))
					n++
				}
				off = next
			}
		}
	}
	x.say("%d messages", n)
	x.doc = map[string]any{"topic": topic, "messages": docs}
	return nil
}

// statsAll: StatsAllSubCommand's columns (#Topic #Consumer Group #Accumulation
// #InTPS #OutTPS #InMsg24Hour #OutMsg24Hour) from VIEW_BROKER_STATS_DATA.
func statsAll(x *cmdCtx) error {
	topics, err := x.admin.TopicList(x.ctx)
	if err != nil {
		return err
	}
	if t := x.str("topic"); t != "" {
		topics = []string{t}
	}
	active, _ := x.fs.GetBool("activeTopic")
	type row struct {
		Topic        string  `json:"topic"`
		Group        string  `json:"consumerGroup"`
		Accumulation int64   `json:"accumulation"`
		InTPS        float64 `json:"inTps"`
		OutTPS       float64 `json:"outTps"`
		InMsg24Hour  int64   `json:"inMsg24Hour"`
		OutMsg24Hour int64   `json:"outMsg24Hour"`
	}
	var rows []row
	for _, t := range topics {
		if strings.HasPrefix(t, "%RETRY%") || strings.HasPrefix(t, "%DLQ%") {
			continue
		}
		bs, err := x.topicBrokers(t)
		if err != nil {
			continue
		}
		var inTPS float64
		var in24 int64
		groups := map[string]bool{}
		for _, b := range bs {
			if d, err := x.admin.ViewStats(x.ctx, b.Addr, "TOPIC_PUT_NUMS", t); err == nil {
				inTPS += d.StatsMinute.Tps
				in24 += d.StatsDay.Sum
			}
			gs, _ := x.admin.TopicConsumeByWho(x.ctx, b.Addr, t)
			for _, g := range gs {
				groups[g] = true
			}
		}
		if len(groups) == 0 {
			if !active || inTPS > 0 {
				rows = append(rows, row{Topic: t, InTPS: inTPS, InMsg24Hour: in24})
			}
			continue
		}
		for _, g := range sortedKeys(groups) {
			r := row{Topic: t, Group: g, InTPS: inTPS, InMsg24Hour: in24}
			for _, b := range bs {
				if d, err := x.admin.ViewStats(x.ctx, b.Addr, "GROUP_GET_NUMS", t+"@"+g); err == nil {
					r.OutTPS += d.StatsMinute.Tps
					r.OutMsg24Hour += d.StatsDay.Sum
				}
				if cs, err := x.admin.ConsumeStats(x.ctx, b.Addr, g, t); err == nil {
					r.Accumulation += cs.TotalDiff()
				}
			}
			if !active || r.InTPS > 0 || r.OutTPS > 0 {
				rows = append(rows, r)
			}
		}
	}
	var tab [][]string
	for _, r := range rows {
		tab = append(tab, []string{r.Topic, r.Group, itoa(r.Accumulation), fmt.Sprintf("%.2f", r.InTPS), fmt.Sprintf("%.2f", r.OutTPS),
			itoa(r.InMsg24Hour), itoa(r.OutMsg24Hour)})
	}
	x.table([]string{"Topic", "Consumer Group", "Accumulation", "InTPS", "OutTPS", "InMsg24Hour", "OutMsg24Hour"}, tab)
	x.doc = map[string]any{"stats": rows}
	return nil
}

// getConsumerStatus: GetConsumerStatusCommand (#clientId #brokerName #queueId #offset).
func getConsumerStatus(x *cmdCtx) error {
	if err := x.need("group", "topic"); err != nil {
		return err
	}
	bs, err := x.topicBrokers(x.str("topic"))
	if err != nil {
		return err
	}
	type row struct {
		ClientID string `json:"clientId"`
		protocol.MessageQueue
		Offset int64 `json:"offset"`
	}
	var rows []row
	for _, b := range bs {
		t, err := x.admin.ConsumerStatus(x.ctx, b.Addr, x.str("group"), x.str("topic"), x.str("originClientId"))
		if err != nil {
			return err
		}
		for id, qs := range t {
			for mq, off := range qs {
				rows = append(rows, row{id, mq, off})
			}
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.ClientID != b.ClientID {
			return a.ClientID < b.ClientID
		}
		if a.BrokerName != b.BrokerName {
			return a.BrokerName < b.BrokerName
		}
		return a.QueueID < b.QueueID
	})
	x.say("get consumer status from client. group=%s, topic=%s, originClientId=%s", x.str("group"), x.str("topic"), x.str("originClientId"))
	var tab [][]string
	for _, r := range rows {
		tab = append(tab, []string{r.ClientID, r.BrokerName, strconv.Itoa(int(r.QueueID)), itoa(r.Offset)})
	}
	x.table([]string{"clientId", "brokerName", "queueId", "offset"}, tab)
	x.doc = map[string]any{"group": x.str("group"), "topic": x.str("topic"), "offsets": rows}
	return nil
}

// parseAttributes reads RocketMQ 5's attribute changes, "+key=value"
// (add or change) and "-key" (remove), comma-separated, into the map
// mqadmin sends (AttributeParser.parseToMap: "+key" → value, "-key" → "").
// nil for "".
func parseAttributes(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		k, v, hasValue := strings.Cut(item, "=")
		switch {
		case hasValue && (len(k) < 2 || k[0] != '+'):
			return nil, fmt.Errorf("%w: --attributes %q: %q: a change is +key=value", errUsage, s, item)
		case !hasValue && (len(k) < 2 || k[0] != '-'):
			return nil, fmt.Errorf("%w: --attributes %q: %q: a removal is -key (a change is +key=value)", errUsage, s, item)
		}
		name := k[1:]
		if _, dup := out["+"+name]; dup {
			return nil, fmt.Errorf("%w: --attributes %q: %s given twice", errUsage, s, name)
		}
		if _, dup := out["-"+name]; dup {
			return nil, fmt.Errorf("%w: --attributes %q: %s given twice", errUsage, s, name)
		}
		out[k] = v
	}
	return out, nil
}
