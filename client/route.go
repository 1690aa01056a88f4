package client

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/apogeemq/apogee/protocol"
)

// topicRoute is the client's digest of one topic's route. It is immutable once
// published in the instance's route table, except for publishInfo.next.
type topicRoute struct {
	topic     string
	data      *protocol.TopicRouteData
	publish   *publishInfo   // nil when no queue is writable
	subscribe []MessageQueue // readable queues, sorted
	// fromDefault: the topic has no route of its own yet; publish is built from the
	// create-topic key's route (the broker auto-creates the topic on first send).
	fromDefault bool
}

// publishInfo is a topic's writable queues and, per queue, its broker master address.
type publishInfo struct {
	queues []MessageQueue
	addrs  []string
	next   atomic.Uint32 // round-robin position
}

// brokerMaster returns the master address of brokerName in the route, or "".
func routeMaster(r *protocol.TopicRouteData, brokerName string) string {
	for i := range r.BrokerDatas {
		if r.BrokerDatas[i].BrokerName == brokerName {
			return r.BrokerDatas[i].BrokerAddrs[0]
		}
	}
	return ""
}

// buildPublish computes the publish queues of topic from a route (which may be the
// create-topic key's route, capped at maxQueues when maxQueues > 0), as the Java and
// Go clients do: orderTopicConf when present, otherwise every writable queue of every
// broker with a master, brokers in name order.
func buildPublish(topic string, r *protocol.TopicRouteData, maxQueues int) *publishInfo {
	p := &publishInfo{}
	add := func(broker string, n int) {
		addr := routeMaster(r, broker)
		if addr == "" {
			return
		}
		if maxQueues > 0 && n > maxQueues {
			n = maxQueues
		}
		for i := 0; i < n; i++ {
			p.queues = append(p.queues, MessageQueue{Topic: topic, BrokerName: broker, QueueID: int32(i)})
			p.addrs = append(p.addrs, addr)
		}
	}
	if r.OrderTopicConf != "" {
		for _, item := range strings.Split(r.OrderTopicConf, ";") {
			name, num, ok := strings.Cut(item, ":")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(num))
			if err != nil {
				continue
			}
			add(strings.TrimSpace(name), n)
		}
	} else {
		qds := slices.Clone(r.QueueDatas)
		slices.SortFunc(qds, func(a, b protocol.QueueData) int { return strings.Compare(a.BrokerName, b.BrokerName) })
		for _, qd := range qds {
			if qd.Perm&protocol.PermWrite == 0 {
				continue
			}
			add(qd.BrokerName, int(qd.WriteQueueNums))
		}
	}
	if len(p.queues) == 0 {
		return nil
	}
	return p
}

// buildSubscribe returns every readable queue of the route, sorted.
func buildSubscribe(topic string, r *protocol.TopicRouteData) []MessageQueue {
	var out []MessageQueue
	for _, qd := range r.QueueDatas {
		if qd.Perm&protocol.PermRead == 0 {
			continue
		}
		for i := int32(0); i < qd.ReadQueueNums; i++ {
			out = append(out, MessageQueue{Topic: topic, BrokerName: qd.BrokerName, QueueID: i})
		}
	}
	slices.SortFunc(out, mqLess)
	return out
}

func newTopicRoute(topic string, r *protocol.TopicRouteData) *topicRoute {
	return &topicRoute{topic: topic, data: r, publish: buildPublish(topic, r, 0), subscribe: buildSubscribe(topic, r)}
}

// sameRoute reports whether two routes are equal in everything the client uses.
func sameRoute(a, b *protocol.TopicRouteData) bool {
	if a.OrderTopicConf != b.OrderTopicConf || len(a.QueueDatas) != len(b.QueueDatas) || len(a.BrokerDatas) != len(b.BrokerDatas) {
		return false
	}
	for i := range a.QueueDatas {
		if a.QueueDatas[i] != b.QueueDatas[i] {
			return false
		}
	}
	for i := range a.BrokerDatas {
		x, y := &a.BrokerDatas[i], &b.BrokerDatas[i]
		if x.BrokerName != y.BrokerName || len(x.BrokerAddrs) != len(y.BrokerAddrs) {
			return false
		}
		for id, addr := range x.BrokerAddrs {
			if y.BrokerAddrs[id] != addr {
				return false
			}
		}
	}
	return true
}
