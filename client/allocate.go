package client

import (
	"crypto/md5"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
)

// AllocateStrategy divides a topic's queues among the consumers of a group. Every
// consumer of the group runs it on the same inputs and takes its own share, so a
// strategy must be deterministic: for the same queues and consumers, each queue goes
// to exactly one consumer (the property tests check this for every strategy here).
type AllocateStrategy interface {
	// Name identifies the strategy in logs.
	Name() string
	// Allocate returns the queues self gets. queues (sorted by topic, broker name,
	// queue id) and consumers (sorted client IDs, self among them) must not be
	// modified. A self not in consumers gets nothing.
	Allocate(group, self string, queues []MessageQueue, consumers []string) []MessageQueue
}

type averagely struct{}

// AllocateAveragely gives each consumer a contiguous run of queues, the first
// len(queues) % len(consumers) consumers one more than the others (RocketMQ's
// AllocateMessageQueueAveragely). It is the default.
func AllocateAveragely() AllocateStrategy { return averagely{} }

func (averagely) Name() string { return "AVG" }

func (averagely) Allocate(_, self string, queues []MessageQueue, consumers []string) []MessageQueue {
	idx := slices.Index(consumers, self)
	if idx < 0 || len(queues) == 0 {
		return nil
	}
	n, c := len(queues), len(consumers)
	size, start := n/c, 0
	if rem := n % c; idx < rem {
		size++
		start = idx * size
	} else {
		start = idx*size + rem
	}
	if start >= n || size == 0 {
		return nil
	}
	return slices.Clone(queues[start : start+size])
}

type byCircle struct{}

// AllocateAveragelyByCircle deals the queues out to the consumers in turn, like
// cards: consumer i gets queues i, i+c, i+2c, ... (RocketMQ's
// AllocateMessageQueueAveragelyByCircle).
func AllocateAveragelyByCircle() AllocateStrategy { return byCircle{} }

func (byCircle) Name() string { return "AVG_BY_CIRCLE" }

func (byCircle) Allocate(_, self string, queues []MessageQueue, consumers []string) []MessageQueue {
	idx := slices.Index(consumers, self)
	if idx < 0 {
		return nil
	}
	var out []MessageQueue
	for i := idx; i < len(queues); i += len(consumers) {
		out = append(out, queues[i])
	}
	return out
}

type consistentHash struct{ vnodes int }

// AllocateConsistentHash places virtualNodes points per consumer on a hash ring (MD5
// of "clientID#i") and gives each queue to the consumer owning the first point at or
// after the queue's hash. When a consumer joins or leaves, only the queues of the
// ring segments it takes or gives up move. virtualNodes <= 0 means 10 (RocketMQ's
// default).
func AllocateConsistentHash(virtualNodes int) AllocateStrategy {
	if virtualNodes <= 0 {
		virtualNodes = 10
	}
	return consistentHash{vnodes: virtualNodes}
}

func (h consistentHash) Name() string { return "CONSISTENT_HASH" }

func ringHash(s string) uint64 {
	sum := md5.Sum([]byte(s))
	return binary.BigEndian.Uint64(sum[:8])
}

type ringPoint struct {
	h     uint64
	owner int
}

func (h consistentHash) Allocate(_, self string, queues []MessageQueue, consumers []string) []MessageQueue {
	me := slices.Index(consumers, self)
	if me < 0 {
		return nil
	}
	ring := make([]ringPoint, 0, len(consumers)*h.vnodes)
	for i, c := range consumers {
		for v := 0; v < h.vnodes; v++ {
			ring = append(ring, ringPoint{h: ringHash(c + "#" + strconv.Itoa(v)), owner: i})
		}
	}
	// Ties (astronomically unlikely) are broken by owner so every consumer agrees.
	slices.SortFunc(ring, func(a, b ringPoint) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return a.owner - b.owner
	})
	var out []MessageQueue
	for _, q := range queues {
		qh := ringHash(q.String())
		i, _ := slices.BinarySearchFunc(ring, qh, func(p ringPoint, t uint64) int {
			if p.h < t {
				return -1
			}
			if p.h > t {
				return 1
			}
			return 0
		})
		if i == len(ring) {
			i = 0
		}
		if ring[i].owner == me {
			out = append(out, q)
		}
	}
	return out
}

type machineRoom struct {
	brokerRoom   func(brokerName string) string
	consumerRoom func(clientID string) string
	inner        AllocateStrategy
}

// AllocateByMachineRoom keeps consumption inside machine rooms (RocketMQ's
// AllocateMachineRoomNearby): the queues of a room with consumers are divided among
// that room's consumers (by inner), and the queues of a room without consumers among
// all consumers. brokerRoom gives a broker's room (nil: the part of the broker name
// before '@', RocketMQ's "room@broker" convention); consumerRoom gives a consumer's
// room from its client ID (nil: the part of the instance name before '@', so
// InstanceName("room1@a") puts a consumer in room1). inner nil is AllocateAveragely.
func AllocateByMachineRoom(brokerRoom func(brokerName string) string, consumerRoom func(clientID string) string, inner AllocateStrategy) AllocateStrategy {
	if brokerRoom == nil {
		brokerRoom = func(b string) string {
			room, _, ok := strings.Cut(b, "@")
			if !ok {
				return ""
			}
			return room
		}
	}
	if consumerRoom == nil {
		consumerRoom = func(id string) string {
			_, inst, _ := strings.Cut(id, "@")
			room, _, ok := strings.Cut(inst, "@")
			if !ok {
				return ""
			}
			return room
		}
	}
	if inner == nil {
		inner = AllocateAveragely()
	}
	return machineRoom{brokerRoom: brokerRoom, consumerRoom: consumerRoom, inner: inner}
}

func (m machineRoom) Name() string { return "MACHINE_ROOM_NEARBY-" + m.inner.Name() }

func (m machineRoom) Allocate(group, self string, queues []MessageQueue, consumers []string) []MessageQueue {
	if !slices.Contains(consumers, self) {
		return nil
	}
	qByRoom := map[string][]MessageQueue{}
	for _, q := range queues {
		r := m.brokerRoom(q.BrokerName)
		qByRoom[r] = append(qByRoom[r], q)
	}
	cByRoom := map[string][]string{}
	for _, c := range consumers {
		r := m.consumerRoom(c)
		cByRoom[r] = append(cByRoom[r], c)
	}
	var out, orphans []MessageQueue
	rooms := make([]string, 0, len(qByRoom))
	for r := range qByRoom {
		rooms = append(rooms, r)
	}
	slices.Sort(rooms)
	myRoom := m.consumerRoom(self)
	for _, r := range rooms {
		if cs := cByRoom[r]; len(cs) > 0 {
			if r == myRoom {
				out = append(out, m.inner.Allocate(group, self, qByRoom[r], cs)...)
			}
			continue
		}
		orphans = append(orphans, qByRoom[r]...)
	}
	if len(orphans) > 0 {
		out = append(out, m.inner.Allocate(group, self, orphans, consumers)...)
	}
	return out
}
