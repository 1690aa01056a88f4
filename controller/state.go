package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/apogeemq/apogee/controller/wire"
)

// Replica is one broker of a group as the replicated state knows it.
type Replica struct {
	ID   int64  `json:"id"`
	Addr string `json:"addr"`
	// CheckCode is what the broker sent when it applied for its id
	// ("address;token"): a later claim of the same id must bring the same.
	CheckCode string `json:"checkCode"`
}

// Group is the replicated state of one broker group (a broker name; its
// cluster is recorded, and a broker name belongs to one cluster).
type Group struct {
	Cluster string `json:"cluster"`
	Broker  string `json:"broker"`
	// Replicas, ascending by id.
	Replicas []Replica `json:"replicas"`
	// NextID is the id CONTROLLER_GET_NEXT_BROKER_ID offers.
	NextID int64 `json:"nextId"`
	// MasterID is the master's broker id; 0 when there is none.
	MasterID int64 `json:"masterId"`
	// MasterEpoch grows by one at every election (one that found nobody
	// too): a broker's writes as master are fenced by it.
	MasterEpoch int32 `json:"masterEpoch"`
	// SyncStateSet, ascending: the replicas that hold everything the master
	// acknowledged. An election resets it to the new master alone.
	SyncStateSet []int64 `json:"syncStateSet"`
	// SyncStateSetEpoch grows by one at every change of the set.
	SyncStateSetEpoch int32 `json:"syncStateSetEpoch"`
}

// replica returns the replica with id, or nil.
func (g *Group) replica(id int64) *Replica {
	i, ok := slices.BinarySearchFunc(g.Replicas, id, func(r Replica, id int64) int { return cmpInt(r.ID, id) })
	if !ok {
		return nil
	}
	return &g.Replicas[i]
}

// Addr returns the address of replica id ("" if unknown).
func (g *Group) Addr(id int64) string {
	if r := g.replica(id); r != nil {
		return r.Addr
	}
	return ""
}

// InSync reports whether id is in the SyncStateSet.
func (g *Group) InSync(id int64) bool {
	_, ok := slices.BinarySearch(g.SyncStateSet, id)
	return ok
}

// MasterInfo is the group's master and epochs as answers carry them.
func (g *Group) MasterInfo() wire.MasterInfo {
	return wire.MasterInfo{MasterID: g.MasterID, MasterAddress: g.Addr(g.MasterID),
		MasterEpoch: g.MasterEpoch, SyncStateSetEpoch: g.SyncStateSetEpoch}
}

func (g *Group) clone() *Group {
	c := *g
	c.Replicas = slices.Clone(g.Replicas)
	c.SyncStateSet = slices.Clone(g.SyncStateSet)
	return &c
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// state is the replicated state machine's data: every node applies the same
// commands in the same order to it, and every check a command makes is made
// here, at apply time, on this data alone (never on the clock or on
// liveness), so all nodes reach the same result.
type state struct {
	Groups map[string]*Group `json:"groups"` // by broker name
	// Nodes maps a controller's Raft id to the remoting address it
	// announced when it last became leader.
	Nodes map[string]string `json:"nodes"`
}

func newState() *state { return &state{Groups: map[string]*Group{}, Nodes: map[string]string{}} }

// Command kinds.
const (
	opApplyID  = "applyBrokerId"
	opAddress  = "updateAddress"
	opAlter    = "alterSyncStateSet"
	opElect    = "electMaster"
	opClean    = "cleanBrokerData"
	opAnnounce = "announce"
)

// command is one entry of the Raft log (JSON). Fields are used as its Op
// says.
type command struct {
	Op        string `json:"op"`
	Cluster   string `json:"cluster,omitempty"`
	Broker    string `json:"broker,omitempty"`
	ID        int64  `json:"id,omitempty"`
	Addr      string `json:"addr,omitempty"`
	CheckCode string `json:"checkCode,omitempty"`
	// alter: the requesting master, its epoch, the set's epoch it saw and
	// the new set. elect: the epochs the leader decided on (compare and
	// set) and the new master (0: none).
	MasterID    int64   `json:"masterId,omitempty"`
	MasterEpoch int32   `json:"masterEpoch,omitempty"`
	SetEpoch    int32   `json:"setEpoch,omitempty"`
	Set         []int64 `json:"set,omitempty"`
	NewMaster   int64   `json:"newMaster,omitempty"`
	IDs         []int64 `json:"ids,omitempty"`
	Node        string  `json:"node,omitempty"`
}

// result is what applying a command answers: a response code (SUCCESS or
// one of wire's), a remark, and the group after the command.
type result struct {
	Code   int32
	Remark string
	Group  *Group // a copy; nil when the group does not exist
}

func fail(code int32, format string, args ...any) *result {
	return &result{Code: code, Remark: fmt.Sprintf(format, args...)}
}

// apply runs one command. It never fails as a whole: a refused command
// changes nothing and says why in its result.
func (s *state) apply(c *command) *result {
	switch c.Op {
	case opApplyID:
		return s.applyID(c)
	case opAddress:
		g := s.Groups[c.Broker]
		if g == nil || g.replica(c.ID) == nil {
			return fail(wire.RespBrokerNeedToRegister, "broker %s id %d is not registered", c.Broker, c.ID)
		}
		g.replica(c.ID).Addr = c.Addr
		return &result{Group: g.clone()}
	case opAlter:
		return s.alter(c)
	case opElect:
		return s.elect(c)
	case opClean:
		return s.clean(c)
	case opAnnounce:
		s.Nodes[c.Node] = c.Addr
		return &result{}
	}
	return fail(wire.RespInvalidRequest, "unknown command %q", c.Op)
}

// applyID gives id to the broker that sent checkCode: a new id (a new
// group starts with it), or one the same broker (same check code) had.
func (s *state) applyID(c *command) *result {
	if c.ID < wire.FirstBrokerID {
		return fail(wire.RespBrokerIDInvalid, "broker id %d: ids start at %d", c.ID, wire.FirstBrokerID)
	}
	g := s.Groups[c.Broker]
	if g == nil {
		g = &Group{Cluster: c.Cluster, Broker: c.Broker, NextID: wire.FirstBrokerID}
		s.Groups[c.Broker] = g
	}
	if g.Cluster != c.Cluster {
		return fail(wire.RespBrokerIDInvalid, "broker name %s belongs to cluster %s, not %s", c.Broker, g.Cluster, c.Cluster)
	}
	if r := g.replica(c.ID); r != nil {
		if r.CheckCode != c.CheckCode {
			return fail(wire.RespBrokerIDInvalid, "broker id %d of %s is taken by another broker (%s)", c.ID, c.Broker, r.Addr)
		}
		r.Addr = c.Addr
		return &result{Group: g.clone()}
	}
	g.Replicas = append(g.Replicas, Replica{ID: c.ID, Addr: c.Addr, CheckCode: c.CheckCode})
	sort.Slice(g.Replicas, func(i, j int) bool { return g.Replicas[i].ID < g.Replicas[j].ID })
	g.NextID = max(g.NextID, c.ID+1)
	return &result{Group: g.clone()}
}

// alter replaces the SyncStateSet for the current master at the current
// epochs only (RocketMQ's ReplicasInfoManager.alterSyncStateSet; the
// liveness of the new members is the leader's check, made before it
// proposed the command).
func (s *state) alter(c *command) *result {
	g := s.Groups[c.Broker]
	if g == nil {
		return fail(wire.RespAlterSyncStateSetFailed, "broker %s is not registered", c.Broker)
	}
	if g.MasterID == 0 || g.MasterID != c.MasterID {
		return fail(wire.RespInvalidMaster, "rejecting the SyncStateSet change of %s: the master is %d, not %d", c.Broker, g.MasterID, c.MasterID)
	}
	if c.MasterEpoch != g.MasterEpoch {
		return fail(wire.RespFencedMasterEpoch, "rejecting the SyncStateSet change of %s: the master epoch is %d, not %d", c.Broker, g.MasterEpoch, c.MasterEpoch)
	}
	if c.SetEpoch != g.SyncStateSetEpoch {
		return fail(wire.RespFencedSyncStateSetEpoch, "rejecting the SyncStateSet change of %s: the SyncStateSet epoch is %d, not %d", c.Broker, g.SyncStateSetEpoch, c.SetEpoch)
	}
	set := slices.Clone(c.Set)
	slices.Sort(set)
	set = slices.Compact(set)
	for _, id := range set {
		if g.replica(id) == nil {
			return fail(wire.RespInvalidReplicas, "rejecting the SyncStateSet change of %s: replica %d does not exist", c.Broker, id)
		}
	}
	if _, ok := slices.BinarySearch(set, g.MasterID); !ok {
		return fail(wire.RespAlterSyncStateSetFailed, "rejecting the SyncStateSet change of %s: the new set %v lacks the master %d", c.Broker, set, g.MasterID)
	}
	if slices.Equal(set, g.SyncStateSet) {
		return fail(wire.RespAlterSyncStateSetFailed, "the SyncStateSet of %s is %v already", c.Broker, set)
	}
	g.SyncStateSet = set
	g.SyncStateSetEpoch++
	return &result{Group: g.clone()}
}

// elect installs the leader's choice if the group is still at the epochs
// the choice was made at (a compare and set: two elections decided on the
// same state cannot both apply). A new master's SyncStateSet is itself;
// no master (NewMaster 0) keeps the set.
func (s *state) elect(c *command) *result {
	g := s.Groups[c.Broker]
	if g == nil {
		return fail(wire.RespBrokerNeedToRegister, "broker %s is not registered", c.Broker)
	}
	if g.MasterEpoch != c.MasterEpoch || g.SyncStateSetEpoch != c.SetEpoch {
		return &result{Code: wire.RespElectMasterFailed, Group: g.clone(),
			Remark: fmt.Sprintf("the state of %s changed while the election was decided (epochs %d/%d, decided at %d/%d)",
				c.Broker, g.MasterEpoch, g.SyncStateSetEpoch, c.MasterEpoch, c.SetEpoch)}
	}
	if c.NewMaster != 0 && g.replica(c.NewMaster) == nil {
		return fail(wire.RespElectMasterFailed, "broker %s has no replica %d", c.Broker, c.NewMaster)
	}
	g.MasterID = c.NewMaster
	g.MasterEpoch++
	if c.NewMaster != 0 {
		g.SyncStateSet = []int64{c.NewMaster}
		g.SyncStateSetEpoch++
	}
	return &result{Group: g.clone()}
}

// clean forgets a group, or some of its replicas (the checks of liveness
// are the leader's).
func (s *state) clean(c *command) *result {
	g := s.Groups[c.Broker]
	if g == nil {
		return fail(wire.RespInvalidCleanBrokerData, "broker %s is not registered", c.Broker)
	}
	if len(c.IDs) == 0 {
		delete(s.Groups, c.Broker)
		return &result{}
	}
	for _, id := range c.IDs {
		g.Replicas = slices.DeleteFunc(g.Replicas, func(r Replica) bool { return r.ID == id })
		g.SyncStateSet = slices.DeleteFunc(g.SyncStateSet, func(x int64) bool { return x == id })
		if g.MasterID == id {
			g.MasterID = 0
		}
	}
	if len(g.Replicas) == 0 {
		delete(s.Groups, c.Broker)
		return &result{}
	}
	return &result{Group: g.clone()}
}

// marshal encodes the whole state (a snapshot).
func (s *state) marshal() ([]byte, error) { return json.Marshal(s) }

// unmarshalState decodes a snapshot.
func unmarshalState(b []byte) (*state, error) {
	s := newState()
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("controller: snapshot: %w", err)
	}
	if s.Groups == nil {
		s.Groups = map[string]*Group{}
	}
	if s.Nodes == nil {
		s.Nodes = map[string]string{}
	}
	return s, nil
}

// names returns the group names, sorted.
func (s *state) names() []string { return slices.Sorted(maps.Keys(s.Groups)) }
