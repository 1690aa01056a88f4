package client_test

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/apogeemq/apogee/client"
)

func strategies() []client.AllocateStrategy {
	return []client.AllocateStrategy{
		client.AllocateAveragely(),
		client.AllocateAveragelyByCircle(),
		client.AllocateConsistentHash(0),
		client.AllocateConsistentHash(3),
		client.AllocateByMachineRoom(nil, nil, nil),
		client.AllocateByMachineRoom(nil, nil, client.AllocateAveragelyByCircle()),
	}
}

// queuesAndConsumers builds a sorted input: brokers named "roomN@broker-i" and
// consumers "ip@roomM@c-j" so the machine-room strategy has rooms to work with.
func queuesAndConsumers(r *rand.Rand) ([]client.MessageQueue, []string) {
	var qs []client.MessageQueue
	brokers := 1 + r.Intn(4)
	for b := 0; b < brokers; b++ {
		name := fmt.Sprintf("room%d@broker-%d", r.Intn(3), b)
		for q := 0; q < 1+r.Intn(16); q++ {
			qs = append(qs, client.MessageQueue{Topic: "T", BrokerName: name, QueueID: int32(q)})
		}
	}
	slices.SortFunc(qs, func(a, b client.MessageQueue) int {
		if a.BrokerName != b.BrokerName {
			if a.BrokerName < b.BrokerName {
				return -1
			}
			return 1
		}
		return int(a.QueueID - b.QueueID)
	})
	var cs []string
	for c := 0; c < 1+r.Intn(12); c++ {
		cs = append(cs, fmt.Sprintf("10.0.0.%d@room%d@c-%d", c, r.Intn(3), c))
	}
	slices.Sort(cs)
	return qs, cs
}

// TestAllocationComplete checks, for random inputs, that every strategy gives each
// queue to exactly one consumer, and gives the same answer twice.
func TestAllocationCompleteDisjointDeterministic(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for round := 0; round < 300; round++ {
		qs, cs := queuesAndConsumers(r)
		for _, s := range strategies() {
			owner := map[client.MessageQueue]string{}
			for _, c := range cs {
				got := s.Allocate("g", c, qs, cs)
				if again := s.Allocate("g", c, qs, cs); !slices.Equal(got, again) {
					t.Fatalf("%s: not deterministic", s.Name())
				}
				for _, q := range got {
					if prev, dup := owner[q]; dup {
						t.Fatalf("%s: %v given to %s and %s", s.Name(), q, prev, c)
					}
					owner[q] = c
				}
			}
			if len(owner) != len(qs) {
				t.Fatalf("%s: %d of %d queues allocated (consumers %v)", s.Name(), len(owner), len(qs), cs)
			}
			if got := s.Allocate("g", "not-a-member", qs, cs); len(got) != 0 {
				t.Fatalf("%s: a non-member got %d queues", s.Name(), len(got))
			}
		}
	}
}

// TestAllocationBalanced: the averaging strategies differ by at most one queue
// between consumers.
func TestAllocationBalanced(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for round := 0; round < 300; round++ {
		qs, cs := queuesAndConsumers(r)
		for _, s := range []client.AllocateStrategy{client.AllocateAveragely(), client.AllocateAveragelyByCircle()} {
			lo, hi := len(qs), 0
			for _, c := range cs {
				n := len(s.Allocate("g", c, qs, cs))
				lo, hi = min(lo, n), max(hi, n)
			}
			if hi-lo > 1 {
				t.Fatalf("%s: shares from %d to %d", s.Name(), lo, hi)
			}
		}
	}
}

// TestConsistentHashStable: when a consumer joins, every queue that changes owner
// goes to the newcomer; when it leaves again, the old assignment comes back.
func TestConsistentHashStable(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	s := client.AllocateConsistentHash(10)
	for round := 0; round < 200; round++ {
		qs, cs := queuesAndConsumers(r)
		owners := func(cs []string) map[client.MessageQueue]string {
			m := map[client.MessageQueue]string{}
			for _, c := range cs {
				for _, q := range s.Allocate("g", c, qs, cs) {
					m[q] = c
				}
			}
			return m
		}
		before := owners(cs)
		newcomer := fmt.Sprintf("10.9.9.9@x@new-%d", round)
		grown := slices.Sorted(slices.Values(append(slices.Clone(cs), newcomer)))
		after := owners(grown)
		for q, o := range after {
			if o != before[q] && o != newcomer {
				t.Fatalf("queue %v moved from %s to %s, not to the newcomer", q, before[q], o)
			}
		}
		back := owners(cs)
		for q, o := range back {
			if before[q] != o {
				t.Fatal("assignment did not come back when the newcomer left")
			}
		}
	}
}

// TestMachineRoomKeepsRooms: a room with consumers consumes its own queues.
func TestMachineRoomKeepsRooms(t *testing.T) {
	s := client.AllocateByMachineRoom(nil, nil, nil)
	qs := []client.MessageQueue{
		{Topic: "T", BrokerName: "east@b1", QueueID: 0}, {Topic: "T", BrokerName: "east@b1", QueueID: 1},
		{Topic: "T", BrokerName: "north@b3", QueueID: 0},
		{Topic: "T", BrokerName: "west@b2", QueueID: 0}, {Topic: "T", BrokerName: "west@b2", QueueID: 1},
	}
	cs := []string{"1.1.1.1@east@a", "2.2.2.2@west@b"}
	east := s.Allocate("g", cs[0], qs, cs)
	west := s.Allocate("g", cs[1], qs, cs)
	for _, q := range east {
		if q.BrokerName == "west@b2" {
			t.Fatalf("east consumer got west queue %v", q)
		}
	}
	for _, q := range west {
		if q.BrokerName == "east@b1" {
			t.Fatalf("west consumer got east queue %v", q)
		}
	}
	if len(east)+len(west) != len(qs) {
		t.Fatalf("north's queue (no consumer in north) not shared: %v %v", east, west)
	}
}

// TestAveragelyMatchesRocketMQ pins the averaging layouts to RocketMQ's.
func TestAveragelyMatchesRocketMQ(t *testing.T) {
	var qs []client.MessageQueue
	for i := 0; i < 8; i++ {
		qs = append(qs, client.MessageQueue{Topic: "T", BrokerName: "b", QueueID: int32(i)})
	}
	cs := []string{"a", "b", "c"}
	ids := func(s client.AllocateStrategy, c string) []int32 {
		var out []int32
		for _, q := range s.Allocate("g", c, qs, cs) {
			out = append(out, q.QueueID)
		}
		return out
	}
	for c, want := range map[string][]int32{"a": {0, 1, 2}, "b": {3, 4, 5}, "c": {6, 7}} {
		if got := ids(client.AllocateAveragely(), c); !slices.Equal(got, want) {
			t.Errorf("averagely %s: %v, want %v", c, got, want)
		}
	}
	for c, want := range map[string][]int32{"a": {0, 3, 6}, "b": {1, 4, 7}, "c": {2, 5}} {
		if got := ids(client.AllocateAveragelyByCircle(), c); !slices.Equal(got, want) {
			t.Errorf("by circle %s: %v, want %v", c, got, want)
		}
	}
}
