package client

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	maxQueues   int // the cap buildPublish applied (fromDefault routes), 0 for none
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

// refreshGate rate-limits the route refreshes that failures ask for: per topic, at
// most one fetch runs at a time, and a new one starts at most once per gap. It is
// off the send path's success case: only failed sends and pulls consult it.
type refreshGate struct {
	gap time.Duration
	mu  sync.Mutex
	m   map[string]*gateEntry // by topic; entries live as long as the instance
}

type gateEntry struct {
	last    int64         // unix nanos when the last fetch started
	running chan struct{} // closed when the running fetch ends; nil when none runs
}

// begin asks to refresh topic at now (unix nanos). run: the caller must fetch and
// then call end. Otherwise wait, when not nil, is closed when the fetch that is
// running ends; a nil wait means the gap since the last fetch has not passed.
func (g *refreshGate) begin(topic string, now int64) (run bool, wait <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*gateEntry{}
	}
	e := g.m[topic]
	if e == nil {
		e = &gateEntry{}
		g.m[topic] = e
	} else {
		if e.running != nil {
			return false, e.running
		}
		if now-e.last < int64(g.gap) {
			return false, nil
		}
	}
	e.last = now
	e.running = make(chan struct{})
	return true, nil
}

// end marks topic's fetch over and wakes its waiters.
func (g *refreshGate) end(topic string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.m[topic]; e != nil && e.running != nil {
		close(e.running)
		e.running = nil
	}
}

// masterChanges returns the broker names whose master (brokerId 0) address in rd
// differs from the one in known (a master that appeared or went away counts).
// Broker names known has no entry for are not changes: they are new.
func masterChanges(known map[string]map[int64]string, rd *protocol.TopicRouteData) []string {
	var out []string
	for i := range rd.BrokerDatas {
		bd := &rd.BrokerDatas[i]
		old, ok := known[bd.BrokerName]
		if ok && old[0] != bd.BrokerAddrs[0] {
			out = append(out, bd.BrokerName)
		}
	}
	return out
}

// withBrokers returns a copy of r's route in which the addresses of every broker
// named in addrs are replaced by addrs' (nil when r names none of them), with its
// publish and subscribe views rebuilt. A broker name's addresses are the same in
// every topic's route (the name server keeps them per broker name), so the route a
// refresh of one topic brought stands for every topic on that broker.
func (r *topicRoute) withBrokers(addrs map[string]map[int64]string) *topicRoute {
	hit := false
	for i := range r.data.BrokerDatas {
		bd := &r.data.BrokerDatas[i]
		if a, ok := addrs[bd.BrokerName]; ok && !sameAddrs(bd.BrokerAddrs, a) {
			hit = true
			break
		}
	}
	if !hit {
		return nil
	}
	d := *r.data
	d.BrokerDatas = slices.Clone(r.data.BrokerDatas)
	for i := range d.BrokerDatas {
		bd := &d.BrokerDatas[i]
		if a, ok := addrs[bd.BrokerName]; ok {
			bd.BrokerAddrs = maps.Clone(a)
		}
	}
	nr := &topicRoute{topic: r.topic, data: &d, fromDefault: r.fromDefault, maxQueues: r.maxQueues}
	nr.publish = buildPublish(r.topic, &d, r.maxQueues)
	if !r.fromDefault {
		nr.subscribe = buildSubscribe(r.topic, &d)
	}
	return nr
}

func sameAddrs(a, b map[int64]string) bool {
	if len(a) != len(b) {
		return false
	}
	for id, x := range a {
		if b[id] != x {
			return false
		}
	}
	return true
}
