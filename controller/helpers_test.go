package controller_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/remoting"
)

// fastRaft are Raft timeouts for tests: an election takes a few hundred
// milliseconds instead of seconds.
var fastRaft = controller.RaftTiming{HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
	LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}

// testNode is one in-process controller with fixed addresses (a restart
// listens on them again).
type testNode struct {
	t        *testing.T
	opts     controller.Options
	raftAddr string
	addr     string // remoting
	node     *controller.Node
	served   chan error
}

type cluster struct {
	t     *testing.T
	nodes []*testNode
	addrs []string // remoting addresses
}

// testLogger is the log of a controller or client the test runs: printed if
// the test fails.
func testLogger(t *testing.T, name string) *slog.Logger { return testlog.New(t, name) }

// newCluster starts n controllers on 127.0.0.1; tweak adjusts each one's
// options.
func newCluster(t *testing.T, n int, tweak func(*controller.Options)) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var raftLns, lns []net.Listener
	var peers []controller.Peer
	for i := range n {
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		raftLns, lns = append(raftLns, rl), append(lns, l)
		peers = append(peers, controller.Peer{ID: fmt.Sprintf("n%d", i+1), Addr: rl.Addr().String()})
		c.addrs = append(c.addrs, l.Addr().String())
	}
	for i := range n {
		// A broker heartbeats every 100 ms; 1.5 s before it counts as dead
		// leaves room for a loaded machine (parallel tests under -race).
		o := controller.Options{ID: peers[i].ID, Peers: peers, DataDir: t.TempDir(), Advertise: c.addrs[i],
			Raft: fastRaft, HeartbeatTimeout: 1500 * time.Millisecond, ScanInterval: 50 * time.Millisecond,
			CloseGrace: 200 * time.Millisecond, Logger: testLogger(t, peers[i].ID), RaftLogOutput: io.Discard}
		if tweak != nil {
			tweak(&o)
		}
		tn := &testNode{t: t, opts: o, raftAddr: peers[i].Addr, addr: c.addrs[i]}
		tn.start(raftLns[i], lns[i])
		c.nodes = append(c.nodes, tn)
	}
	t.Cleanup(func() {
		for _, tn := range c.nodes {
			tn.stop()
		}
	})
	return c
}

func (tn *testNode) start(rl, l net.Listener) {
	tn.t.Helper()
	var err error
	if rl == nil {
		if rl, err = listenRetry(tn.raftAddr); err != nil {
			tn.t.Fatal(err)
		}
		if l, err = listenRetry(tn.addr); err != nil {
			tn.t.Fatal(err)
		}
	}
	o := tn.opts
	o.RaftListener = rl
	if tn.node, err = controller.New(o); err != nil {
		tn.t.Fatal(err)
	}
	tn.served = make(chan error, 1)
	node := tn.node
	go func() { tn.served <- node.Serve(l) }()
}

func listenRetry(addr string) (net.Listener, error) {
	var err error
	var l net.Listener
	wait.Poll(wait.DefaultTimeout, func() error {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

func (tn *testNode) stop() {
	if tn.node == nil {
		return
	}
	if err := tn.node.Close(); err != nil {
		tn.t.Logf("close %s: %v", tn.opts.ID, err)
	}
	<-tn.served
	tn.node = nil
}

// leader waits for a leading node and returns it.
func (c *cluster) leader() *testNode {
	c.t.Helper()
	var found *testNode
	wait.Until(c.t, "a controller leader", func() bool {
		for _, tn := range c.nodes {
			if tn.node != nil && tn.node.Status().Leader {
				found = tn
				return true
			}
		}
		return false
	})
	return found
}

// broker is a broker simulated by the client library: a remoting listener
// for the controller's pushes, a client, and the role changes it was told.
type broker struct {
	t      *testing.T
	cl     *client.Client
	srv    *remoting.Server
	addr   string
	id     int64
	mu     sync.Mutex
	states []client.State
	status client.HeartbeatStatus
}

func newBroker(t *testing.T, c *cluster, name string) *broker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, addr: l.Addr().String(), status: client.HeartbeatStatus{Epoch: -1, MaxOffset: 0, ConfirmOffset: -1}}
	b.cl, err = client.New(client.Options{Addrs: c.addrs, Cluster: "DefaultCluster", Broker: name, Addr: b.addr,
		HeartbeatInterval: 100 * time.Millisecond, RequestTimeout: time.Second, RetryInterval: 50 * time.Millisecond,
		Logger: testLogger(t, "broker-client"),
		Status: func() client.HeartbeatStatus {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.status
		},
		OnRoleChange: func(s client.State) {
			b.mu.Lock()
			b.states = append(b.states, s)
			b.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = remoting.NewServer(b.cl, nil)
	go b.srv.Serve(l)
	t.Cleanup(b.stop)
	return b
}

// stop ends the broker's heartbeats and connections, as its death would.
func (b *broker) stop() {
	b.cl.Close()
	b.srv.Close()
}

func (b *broker) setStatus(epoch int32, maxOffset int64) {
	b.mu.Lock()
	b.status.Epoch, b.status.MaxOffset = epoch, maxOffset
	b.mu.Unlock()
}

// waitFigures waits until a heartbeat has carried the broker's status (as
// setStatus left it) to the controller leader, which elects by it.
func (b *broker) waitFigures(c *cluster) {
	b.t.Helper()
	b.mu.Lock()
	want := b.status
	b.mu.Unlock()
	wait.For(b.t, "the leader told the broker's figures", func() error {
		epoch, max, ok := c.leader().node.LiveFigures("broker-a", b.id)
		if !ok || epoch != want.Epoch || max != want.MaxOffset {
			return fmt.Errorf("the leader has epoch %d, max offset %d (heard: %v); want %d, %d", epoch, max, ok, want.Epoch, want.MaxOffset)
		}
		return nil
	})
}

// lastState is the last role change the broker was told (ok false: none).
func (b *broker) lastState() (client.State, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.states) == 0 {
		return client.State{}, false
	}
	return b.states[len(b.states)-1], true
}

// register registers the broker, starts its heartbeats and, when the group
// has no master, asks to be elected.
func (b *broker) register(ctx context.Context) client.Registration {
	b.t.Helper()
	reg, err := b.cl.Register(ctx, 0, "token-"+b.addr)
	if err != nil {
		b.t.Fatalf("register: %v", err)
	}
	b.id = reg.ID
	b.cl.StartHeartbeats(reg.ID)
	return reg
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
