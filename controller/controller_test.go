package controller_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// A group of three brokers: the first registered becomes master at epoch 1;
// the master adds a slave to the SyncStateSet; when the master's heartbeats
// stop, the in-sync slave is elected within the heartbeat timeout (and the
// out-of-sync one is not), at epoch 2, and both survivors are told.
func TestMasterReplacedWhenHeartbeatsStop(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader()
	ctx := ctxT(t, 20*time.Second)
	a, b, x := newBroker(t, c, "broker-a"), newBroker(t, c, "broker-a"), newBroker(t, c, "broker-a")
	ra := a.register(ctx)
	if ra.ID != 1 || ra.State.MasterID != 0 {
		t.Fatalf("first registration: %+v", ra)
	}
	el, err := a.cl.ElectMaster(ctx, ra.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if el.Code != protocol.RespSuccess || el.State.MasterID != 1 || el.State.MasterEpoch != 1 || el.Members[1] != a.addr {
		t.Fatalf("first election: %+v", el)
	}
	rb, rx := b.register(ctx), x.register(ctx)
	if rb.ID != 2 || rx.ID != 3 || rb.State.MasterID != 1 || rb.State.MasterAddress != a.addr {
		t.Fatalf("registrations: %+v %+v", rb, rx)
	}
	// A second election request while the master lives changes nothing.
	if el, err := b.cl.ElectMaster(ctx, rb.ID, false); err != nil || el.Code != wire.RespMasterStillExist || el.State.MasterID != 1 {
		t.Fatalf("election with a live master: %+v %v", el, err)
	}
	set, err := a.cl.AlterSyncStateSet(ctx, 1, 1, wire.SyncStateSet{Set: []int64{1, 2}, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.Set, []int64{1, 2}) || set.Epoch != 2 {
		t.Fatalf("new SyncStateSet %+v", set)
	}
	// The slave outside the set reports a longer log: it must not win.
	b.setStatus(1, 1000)
	x.setStatus(1, 5000)
	b.waitFigures(c)
	x.waitFigures(c)

	died := time.Now()
	a.stop()
	wait.Until(t, "broker b told it is master", func() bool {
		s, ok := b.lastState()
		return ok && s.MasterID == 2
	})
	took := time.Since(died)
	t.Logf("master replaced %v after its death (heartbeat timeout 600ms, close grace 200ms)", took)
	s, _ := b.lastState()
	if s.MasterEpoch != 2 || s.MasterAddress != b.addr || !slices.Equal(s.SyncStateSet, []int64{2}) || s.SyncStateSetEpoch != 3 {
		t.Fatalf("b's state after failover: %+v", s)
	}
	wait.Until(t, "broker x told of the new master", func() bool {
		s, ok := x.lastState()
		return ok && s.MasterID == 2 && s.MasterEpoch == 2
	})
	for _, tn := range c.nodes {
		wait.Until(t, "every node applied the election", func() bool {
			g := tn.node.Group("broker-a")
			return g != nil && g.MasterID == 2 && g.MasterEpoch == 2
		})
	}
}

// With no in-sync replica alive the group gets no master (and a new epoch
// that fences the old one), although an out-of-sync replica is alive; the
// dead master, back, is elected again.
func TestElectionOnlyFromSyncStateSet(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader()
	ctx := ctxT(t, 20*time.Second)
	a, x := newBroker(t, c, "broker-a"), newBroker(t, c, "broker-a")
	ra := a.register(ctx)
	if _, err := a.cl.ElectMaster(ctx, ra.ID, false); err != nil {
		t.Fatal(err)
	}
	x.register(ctx)
	x.setStatus(1, 1<<20)
	a.stop()
	wait.Until(t, "the dead master recorded as gone", func() bool {
		g := c.leader().node.Group("broker-a")
		return g.MasterID == 0 && g.MasterEpoch == 2
	})
	g := c.leader().node.Group("broker-a")
	if !slices.Equal(g.SyncStateSet, []int64{1}) {
		t.Fatalf("SyncStateSet %v: want the dead master's [1] kept", g.SyncStateSet)
	}
	if _, err := x.cl.ElectMaster(ctx, x.id, false); client.Code(err) != wire.RespElectMasterFailed {
		t.Fatalf("election of an out-of-sync replica: %v", err)
	}
	if _, err := x.cl.ElectMaster(ctx, x.id, true); client.Code(err) != wire.RespElectMasterFailed {
		t.Fatalf("designated election of an out-of-sync replica: %v", err)
	}
	// Nothing changes with time either: what is tested is a time, six of
	// the leader's scans for dead masters (a loaded machine runs fewer, which
	// can only let a bug pass, never fail the test).
	time.Sleep(300 * time.Millisecond)
	if g := c.leader().node.Group("broker-a"); g.MasterID != 0 || g.MasterEpoch != 2 {
		t.Fatalf("state changed: %+v", g)
	}
	// The old master comes back (same id and token): the scan elects it.
	a2 := newBroker(t, c, "broker-a")
	a2.cl.Close()
	a2.cl, _ = client.New(client.Options{Addrs: c.addrs, Cluster: "DefaultCluster", Broker: "broker-a", Addr: a.addr,
		HeartbeatInterval: 100 * time.Millisecond, Logger: testLogger(t, "broker-client")})
	t.Cleanup(func() { a2.cl.Close() })
	if _, err := a2.cl.Register(ctx, 1, "token-"+a.addr); err != nil {
		t.Fatal(err)
	}
	a2.cl.StartHeartbeats(1)
	wait.Until(t, "the returning in-sync master elected", func() bool {
		g := c.leader().node.Group("broker-a")
		return g.MasterID == 1 && g.MasterEpoch == 3
	})
}

// With ElectUncleanMaster the out-of-sync replica is elected, and the loss
// is reported.
func TestUncleanElection(t *testing.T) {
	c := newCluster(t, 3, func(o *controller.Options) { o.ElectUncleanMaster = true })
	c.leader()
	ctx := ctxT(t, 20*time.Second)
	a, x := newBroker(t, c, "broker-a"), newBroker(t, c, "broker-a")
	ra := a.register(ctx)
	if _, err := a.cl.ElectMaster(ctx, ra.ID, false); err != nil {
		t.Fatal(err)
	}
	x.register(ctx)
	a.setStatus(1, 10_000)
	x.setStatus(1, 4_000)
	a.waitFigures(c)
	x.waitFigures(c)
	a.stop()
	wait.Until(t, "the out-of-sync replica elected", func() bool {
		s, ok := x.lastState()
		return ok && s.MasterID == x.id
	})
	g := c.leader().node.Group("broker-a")
	if g.MasterEpoch != 2 || !slices.Equal(g.SyncStateSet, []int64{x.id}) {
		t.Fatalf("group after an unclean election: %+v", g)
	}
}

// Requests with a stale view are refused: another master, an old master
// epoch, an old SyncStateSet epoch; the old master after a failover.
func TestStaleEpochsRejected(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader()
	ctx := ctxT(t, 20*time.Second)
	a, b := newBroker(t, c, "broker-a"), newBroker(t, c, "broker-a")
	ra := a.register(ctx)
	if _, err := a.cl.ElectMaster(ctx, ra.ID, false); err != nil {
		t.Fatal(err)
	}
	rb := b.register(ctx)
	if _, err := a.cl.AlterSyncStateSet(ctx, ra.ID, 1, wire.SyncStateSet{Set: []int64{1, 2}, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		master      int64
		masterEpoch int32
		set         wire.SyncStateSet
		code        int32
	}{
		{"not the master", rb.ID, 1, wire.SyncStateSet{Set: []int64{1}, Epoch: 2}, wire.RespInvalidMaster},
		{"old master epoch", ra.ID, 0, wire.SyncStateSet{Set: []int64{1}, Epoch: 2}, wire.RespFencedMasterEpoch},
		{"old set epoch", ra.ID, 1, wire.SyncStateSet{Set: []int64{1}, Epoch: 1}, wire.RespFencedSyncStateSetEpoch},
		{"unknown replica", ra.ID, 1, wire.SyncStateSet{Set: []int64{1, 9}, Epoch: 2}, wire.RespInvalidReplicas},
		{"set without the master", ra.ID, 1, wire.SyncStateSet{Set: []int64{2}, Epoch: 2}, wire.RespAlterSyncStateSetFailed},
		{"same set", ra.ID, 1, wire.SyncStateSet{Set: []int64{1, 2}, Epoch: 2}, wire.RespAlterSyncStateSetFailed},
	}
	for _, tc := range cases {
		_, err := a.cl.AlterSyncStateSet(ctx, tc.master, tc.masterEpoch, tc.set)
		if client.Code(err) != tc.code {
			t.Errorf("%s: got %v, want code %s", tc.name, err, wire.RespName(tc.code))
		}
	}
	if g := c.leader().node.Group("broker-a"); g.SyncStateSetEpoch != 2 || !slices.Equal(g.SyncStateSet, []int64{1, 2}) {
		t.Fatalf("a refused request changed the state: %+v", g)
	}
	// Failover; the old master's view is stale now.
	a.stop()
	wait.Until(t, "b elected", func() bool {
		s, ok := b.lastState()
		return ok && s.MasterID == rb.ID
	})
	_, err := b.cl.AlterSyncStateSet(ctx, ra.ID, 1, wire.SyncStateSet{Set: []int64{1, 2}, Epoch: 2})
	if !client.IsFenced(err) {
		t.Fatalf("old master's change after failover: %v", err)
	}
	// A slave must be alive to join the set.
	if _, err := b.cl.AlterSyncStateSet(ctx, rb.ID, 2, wire.SyncStateSet{Set: []int64{1, 2}, Epoch: 3}); client.Code(err) != wire.RespBrokerNotAlive {
		t.Fatalf("adding a dead replica: %v", err)
	}
}

// A follower answers CONTROLLER_NOT_LEADER naming the leader's remoting
// address; the client gets to the leader from any address; every node
// answers heartbeats and GET_METADATA_INFO.
func TestNotLeaderNamesTheLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	var follower *testNode
	for _, tn := range c.nodes {
		if tn != lead {
			follower = tn
		}
	}
	ctx := ctxT(t, 10*time.Second)
	conn, err := remoting.Dial(ctx, follower.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wait.Until(t, "the follower to know the leader's address", func() bool {
		var req protocol.Command
		req.InitRequest(wire.ReqGetReplicaInfo, 0)
		req.Ext.SetString("brokerName", "broker-a")
		resp, err := conn.Invoke(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != wire.RespNotLeader {
			t.Fatalf("follower answered %s", wire.RespName(resp.Code))
		}
		id, addr := wire.LeaderHint(resp)
		return id == lead.opts.ID && addr == lead.addr
	})
	var req protocol.Command
	req.InitRequest(wire.ReqGetMetadataInfo, 0)
	resp, err := conn.Invoke(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	var m wire.Metadata
	if err := m.Decode(&resp.Ext); err != nil || m.IsLeader || m.LeaderAddress != lead.addr || m.LeaderID != lead.opts.ID {
		t.Fatalf("follower's metadata %+v %v", m, err)
	}
	// A client that knows only the follower's address still registers.
	cl, err := client.New(client.Options{Addrs: []string{follower.addr}, Cluster: "c", Broker: "broker-z", Addr: "127.0.0.1:1",
		Logger: testLogger(t, "broker-client")})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Register(ctx, 0, "t"); err != nil {
		t.Fatal(err)
	}
	if cl.Leader() != lead.addr {
		t.Fatalf("client's leader %q, want %q", cl.Leader(), lead.addr)
	}
}

// The leader stops; the others elect a new one; the state is intact; the
// stopped node restarts and catches up from a snapshot (the log was
// compacted meanwhile) and the log's tail.
func TestLeaderLossAndSnapshotRestart(t *testing.T) {
	c := newCluster(t, 3, func(o *controller.Options) { o.TrailingLogs = 4 })
	old := c.leader()
	ctx := ctxT(t, 30*time.Second)
	a := newBroker(t, c, "broker-a")
	ra := a.register(ctx)
	if _, err := a.cl.ElectMaster(ctx, ra.ID, false); err != nil {
		t.Fatal(err)
	}
	old.stop()
	lead := c.leader()
	if lead == old {
		t.Fatal("the stopped node still leads")
	}
	g := lead.node.Group("broker-a")
	if g == nil || g.MasterID != 1 || g.MasterEpoch != 1 {
		t.Fatalf("state after the leader's loss: %+v", g)
	}
	// Brokers notice nothing: the master's heartbeats reach the others, so
	// the new leader does not take it for dead. What is tested is a time:
	// the new leader's scans over a second in which the master heartbeats.
	time.Sleep(time.Second)
	if g := lead.node.Group("broker-a"); g.MasterID != 1 || g.MasterEpoch != 1 {
		t.Fatalf("the new leader replaced a live master: %+v", g)
	}
	// More entries, then a snapshot on the survivors: the log they keep
	// no longer reaches back to what the stopped node has.
	for i := range 10 {
		b := newBroker(t, c, "broker-b")
		if _, err := b.cl.Register(ctx, int64(i+1), "tok"); err != nil {
			t.Fatal(err)
		}
		b.stop()
	}
	for _, tn := range c.nodes {
		if tn.node != nil {
			if err := tn.node.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	old.start(nil, nil)
	wait.Until(t, "the restarted node to catch up", func() bool {
		g := old.node.Group("broker-b")
		return g != nil && len(g.Replicas) == 10 && old.node.Group("broker-a") != nil
	})
	// Its own restart from its data directory restores the snapshot.
	if err := old.node.Snapshot(); err != nil {
		t.Fatal(err)
	}
	old.stop()
	old.start(nil, nil)
	wait.Until(t, "the state after a restart", func() bool {
		g := old.node.Group("broker-b")
		return g != nil && len(g.Replicas) == 10
	})
}

// Role-change pushes reach a broker's remoting listener; a broker that
// misses them (pushes off) learns from its heartbeat answers.
func TestRoleChangeWithoutPush(t *testing.T) {
	c := newCluster(t, 3, func(o *controller.Options) { o.DisableNotify = true })
	c.leader()
	ctx := ctxT(t, 20*time.Second)
	a, b := newBroker(t, c, "broker-a"), newBroker(t, c, "broker-a")
	ra := a.register(ctx)
	if _, err := a.cl.ElectMaster(ctx, ra.ID, false); err != nil {
		t.Fatal(err)
	}
	rb := b.register(ctx)
	if _, err := a.cl.AlterSyncStateSet(ctx, ra.ID, 1, wire.SyncStateSet{Set: []int64{1, 2}, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a.stop()
	wait.Until(t, "b to learn it is master from a heartbeat answer", func() bool {
		s, ok := b.lastState()
		return ok && s.MasterID == rb.ID && s.MasterEpoch == 2 && slices.Equal(s.SyncStateSet, []int64{rb.ID})
	})
}

// CLEAN_BROKER_DATA refuses a live group and forgets a dead one.
func TestCleanBrokerData(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.leader()
	ctx := ctxT(t, 10*time.Second)
	a := newBroker(t, c, "broker-a")
	a.register(ctx)
	// Alive from its first heartbeat, which its client sends after the
	// registration (later on a loaded machine).
	wait.Until(t, "broker-a's first heartbeat", func() bool {
		info, err := a.cl.GetSyncStateData(ctx, "broker-a")
		if err != nil {
			return false
		}
		ri := info.ReplicasInfoTable["broker-a"]
		for _, r := range append(ri.InSyncReplicas, ri.NotInSyncReplicas...) {
			if r.Alive {
				return true
			}
		}
		return false
	})
	conn, err := remoting.Dial(ctx, c.addrs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	clean := func() int32 {
		var req protocol.Command
		r := wire.CleanBrokerDataRequest{ClusterName: "DefaultCluster", BrokerName: "broker-a"}
		r.Encode(&req)
		resp, err := conn.Invoke(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Code
	}
	if code := clean(); code != wire.RespInvalidCleanBrokerData {
		t.Fatalf("cleaning a live broker: %s", wire.RespName(code))
	}
	a.stop()
	wait.Until(t, "the broker dead and cleaned", func() bool { return clean() == protocol.RespSuccess })
	if g := c.nodes[0].node.Group("broker-a"); g != nil {
		t.Fatalf("group kept: %+v", g)
	}
}

func TestHeartbeatRequiresBrokerID(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.leader()
	ctx := ctxT(t, 10*time.Second)
	conn, err := remoting.Dial(ctx, c.addrs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var req protocol.Command
	req.InitRequest(wire.ReqBrokerHeartbeat, 0)
	req.Ext.SetString("clusterName", "c")
	req.Ext.SetString("brokerName", "b")
	req.Ext.SetString("brokerAddr", "127.0.0.1:1")
	resp, err := conn.Invoke(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Code != wire.RespInvalidRequest {
		t.Fatalf("heartbeat without broker id: %s", wire.RespName(resp.Code))
	}
}

// A master whose heartbeats stop while its connections stay open (a paused
// process, a partition) is replaced once the heartbeat timeout passes.
func TestSilentMasterReplaced(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader()
	ctx := ctxT(t, 20*time.Second)
	b := newBroker(t, c, "broker-a")
	// The master is driven by hand: registered, elected, heartbeating on
	// one connection per controller, then silent with the connections open.
	m, err := client.New(client.Options{Addrs: c.addrs, Cluster: "DefaultCluster", Broker: "broker-a", Addr: "127.0.0.1:9",
		Logger: testLogger(t, "broker-client")})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rm, err := m.Register(ctx, 0, "m")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ElectMaster(ctx, rm.ID, false); err != nil {
		t.Fatal(err)
	}
	var conns []*remoting.Client
	for _, addr := range c.addrs {
		conn, err := remoting.Dial(ctx, addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
	}
	beat := func() {
		for _, conn := range conns {
			var req protocol.Command
			h := wire.HeartbeatRequest{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:9", BrokerID: rm.ID}
			h.Encode(&req)
			if _, err := conn.Invoke(ctx, &req); err != nil {
				t.Fatal(err)
			}
		}
	}
	rb := b.register(ctx)
	beat()
	if _, err := m.AlterSyncStateSet(ctx, rm.ID, 1, wire.SyncStateSet{Set: []int64{rm.ID, rb.ID}, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	var lastBeat time.Time
	for range 5 {
		lastBeat = time.Now() // before the controllers receive it
		beat()
		time.Sleep(100 * time.Millisecond) // the master's heartbeat interval
	}
	if g := c.leader().node.Group("broker-a"); g.MasterID != rm.ID {
		t.Fatalf("master replaced while heartbeating: %+v", g)
	}
	wait.Until(t, "the silent master replaced", func() bool {
		s, ok := b.lastState()
		return ok && s.MasterID == rb.ID
	})
	took := time.Since(lastBeat)
	t.Logf("silent master replaced %v after its last heartbeat (heartbeat timeout 600ms, scan 50ms)", took)
	if took < 600*time.Millisecond {
		t.Fatalf("replaced %v after its last heartbeat, before its heartbeat timeout", took)
	}
}
