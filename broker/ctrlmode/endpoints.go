package ctrlmode

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The gRPC endpoints of the group's members (package node gives them to
// the gRPC front end, which forwards to the master what only it serves and
// names every member in routes). A member's gRPC address is what its
// GET_BROKER_CONFIG reports as grpcAdvertiseAddr (broker.Options); the
// members are the controller's replicas of the group (in the SyncStateSet
// or not, alive). They are read again when the controller's state changes
// and every endpointsRefresh; the master's is known at once when it is
// this member.

// endpointsRefresh is how often the members' endpoints are read again
// without a change of the controller's state.
const endpointsRefresh = 10 * time.Second

type endpoints struct {
	own string // this member's gRPC address ("" without a gRPC front end)

	master  atomic.Pointer[masterEndpoint]
	members atomic.Pointer[[]string]

	mu      sync.Mutex // guards running, last and changes of master (a refresh's answer is checked and applied under it)
	running bool       // a refresh is under way
	last    time.Time  // when the last refresh began
}

type masterEndpoint struct {
	addr string // gRPC
	self bool
}

// GRPCMaster names the group's master's gRPC address and whether it is
// this member (grpcfe.Options.Master): "" while it is not known.
func (n *Node) GRPCMaster() (addr string, self bool) {
	if m := n.ep.master.Load(); m != nil {
		return m.addr, m.self
	}
	return "", false
}

// GRPCMembers returns every member's gRPC address known
// (grpcfe.Options.Members): this member's first.
func (n *Node) GRPCMembers() []string {
	if m := n.ep.members.Load(); m != nil {
		return *m
	}
	if n.ep.own != "" {
		return []string{n.ep.own}
	}
	return nil
}

// setMaster records the master's gRPC endpoint and tells the front end
// when it changed.
func (n *Node) setMaster(addr string, self bool) {
	n.ep.mu.Lock()
	defer n.ep.mu.Unlock()
	n.setMasterLocked(addr, self)
}

func (n *Node) setMasterLocked(addr string, self bool) {
	old := n.ep.master.Load()
	if old != nil && old.addr == addr && old.self == self {
		return
	}
	n.ep.master.Store(&masterEndpoint{addr: addr, self: self})
	if n.opts.OnMasterChange != nil {
		n.opts.OnMasterChange()
	}
}

// refreshEndpoints reads the members' endpoints again on its own
// goroutine (one at a time), unless force is false and the last began
// less than endpointsRefresh ago.
func (n *Node) refreshEndpoints(force bool) {
	if n.ep.own == "" {
		return
	}
	ep := &n.ep
	ep.mu.Lock()
	if ep.running || !force && time.Since(ep.last) < endpointsRefresh {
		ep.mu.Unlock()
		return
	}
	ep.running, ep.last = true, time.Now()
	ep.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() {
			ep.mu.Lock()
			ep.running = false
			ep.mu.Unlock()
		}()
		n.readEndpoints()
	}()
}

// readEndpoints asks the controller for the group's replicas and each
// member for its gRPC address.
func (n *Node) readEndpoints() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, ok := n.ctl.State()
	if !ok {
		return
	}
	info, err := n.ctl.GetSyncStateData(ctx, n.opts.BrokerName)
	if err != nil {
		n.log.Debug("ctrlmode: reading the group's members for their gRPC endpoints", "err", err)
		return
	}
	g := info.ReplicasInfoTable[n.opts.BrokerName]
	var addrs []string
	for _, r := range append(slices.Clone(g.InSyncReplicas), g.NotInSyncReplicas...) {
		if r.Alive && r.BrokerAddress != "" && !slices.Contains(addrs, r.BrokerAddress) {
			addrs = append(addrs, r.BrokerAddress)
		}
	}
	if s.MasterAddress != "" && !slices.Contains(addrs, s.MasterAddress) {
		addrs = append(addrs, s.MasterAddress)
	}
	members := []string{n.ep.own}
	for _, a := range addrs {
		if a == n.opts.AdvertiseAddr {
			continue
		}
		if g := n.grpcAddrOf(a); g != "" && !slices.Contains(members, g) {
			members = append(members, g)
		}
	}
	n.ep.members.Store(&members)
	var master string
	if s.MasterID != n.id && s.MasterAddress != "" {
		master = n.grpcAddrOf(s.MasterAddress)
	}
	// The state may have changed while the members were asked (an
	// election, this node's own promotion): a stale answer must not
	// overwrite what the role change set; the change's own refresh
	// follows.
	n.ep.mu.Lock()
	defer n.ep.mu.Unlock()
	if now, ok := n.ctl.State(); !ok || now.MasterEpoch != s.MasterEpoch || now.MasterID != s.MasterID {
		return
	}
	switch {
	case s.MasterID == n.id:
		if n.IsMaster() {
			n.setMasterLocked(n.ep.own, true)
		}
	case master != "":
		n.setMasterLocked(master, false)
	}
}

// grpcAddrOf is the gRPC address of the broker at remoting address addr
// ("" when it has none or cannot say).
func (n *Node) grpcAddrOf(addr string) string {
	cfg, err := n.brokerConfig(addr)
	if err != nil {
		return ""
	}
	return cfg["grpcAdvertiseAddr"]
}
