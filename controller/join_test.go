package controller_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// joinNode is an in-process controller whose Raft listener is on a port
// it chose (RaftBind 127.0.0.1:0) and whose remoting listener the test
// holds.
type joinNode struct {
	t      *testing.T
	opts   controller.Options
	node   *controller.Node
	ln     net.Listener
	served chan error
}

func startJoinNode(t *testing.T, o controller.Options) *joinNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.Advertise = l.Addr().String()
	o.Raft, o.Logger, o.RaftLogOutput = fastRaft, testLogger(t, o.ID), io.Discard
	jn := &joinNode{t: t, opts: o, ln: l}
	if jn.node, err = controller.New(o); err != nil {
		l.Close()
		t.Fatal(err)
	}
	jn.served = make(chan error, 1)
	go func() { jn.served <- jn.node.Serve(l) }()
	t.Cleanup(jn.stop)
	return jn
}

func (jn *joinNode) stop() {
	if jn.node == nil {
		return
	}
	if err := jn.node.Close(); err != nil {
		jn.t.Logf("close %s: %v", jn.opts.ID, err)
	}
	<-jn.served
	jn.node = nil
}

func (jn *joinNode) addr() string { return jn.opts.Advertise }

// members waits until every running node's configuration lists want
// members and returns one node's view.
func members(t *testing.T, nodes []*joinNode, want int) string {
	t.Helper()
	var got string
	wait.For(t, fmt.Sprintf("%d members in every node's configuration", want), func() error {
		for _, jn := range nodes {
			if jn.node == nil {
				continue
			}
			got = jn.node.Members()
			if n := len(strings.Split(got, ",")); got == "" || n != want {
				return fmt.Errorf("%s has %q", jn.opts.ID, got)
			}
		}
		return nil
	})
	return got
}

// A group on ports chosen at start: one node bootstraps alone with port 0
// in its own peer address, two join it through its leader (the second
// through the first joiner, which points it to the leader); the three
// elect a new leader when the first goes; a member restarted on its Raft
// address joins again without a change; another id on a member's address
// is refused.
func TestJoinGrowsAGroupOnPortsChosenAtStart(t *testing.T) {
	seed := startJoinNode(t, controller.Options{ID: "n1", Peers: []controller.Peer{{ID: "n1", Addr: "127.0.0.1:0"}},
		DataDir: t.TempDir()})
	if a := seed.node.RaftAddr(); !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") {
		t.Fatalf("the seed's Raft address %q", a)
	}
	wait.Until(t, "the seed to lead", func() bool { return seed.node.Status().Leader })

	ctx, cancel := context.WithTimeout(context.Background(), 2*wait.DefaultTimeout)
	defer cancel()
	n2 := startJoinNode(t, controller.Options{ID: "n2", Join: true, RaftBind: "127.0.0.1:0", DataDir: t.TempDir()})
	if _, err := n2.node.Join(ctx, []string{seed.addr()}, nil); err != nil {
		t.Fatal(err)
	}
	n3dir := t.TempDir()
	n3 := startJoinNode(t, controller.Options{ID: "n3", Join: true, RaftBind: "127.0.0.1:0", DataDir: n3dir})
	if _, err := n3.node.Join(ctx, []string{n2.addr(), seed.addr()}, nil); err != nil {
		t.Fatal(err)
	}
	nodes := []*joinNode{seed, n2, n3}
	all := members(t, nodes, 3)
	for _, jn := range nodes {
		if !strings.Contains(all, jn.opts.ID+"="+jn.node.RaftAddr()) {
			t.Fatalf("members %q lack %s at %s", all, jn.opts.ID, jn.node.RaftAddr())
		}
	}

	// The seed goes: the two joiners are a majority and elect a leader.
	seed.stop()
	wait.Until(t, "a leader among the joiners", func() bool {
		return n2.node.Status().Leader || n3.node.Status().Leader
	})

	// n3 restarts on its Raft address and data directory and joins again:
	// nothing changes.
	raft3 := n3.node.RaftAddr()
	n3.stop()
	n3 = startJoinNode(t, controller.Options{ID: "n3", Join: true, RaftBind: raft3, DataDir: n3dir})
	if got, err := n3.node.Join(ctx, []string{n2.addr(), n3.addr()}, nil); err != nil || got != all {
		t.Fatalf("join after a restart: %q %v, want %q", got, err, all)
	}

	// Another node claiming n2's Raft address is refused by the leader
	// (CONTROLLER_INVALID_REQUEST: a retry cannot succeed).
	leader := n2
	if n3.node.Status().Leader {
		leader = n3
	}
	cl, err := remoting.Dial(ctx, leader.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var req protocol.Command
	(&wire.JoinRequest{ID: "n9", RaftAddress: n2.node.RaftAddr()}).Encode(&req)
	resp, err := cl.Invoke(ctx, &req)
	if err != nil || resp.Code != wire.RespInvalidRequest || !strings.Contains(string(resp.Remark), "is member n2's Raft address") {
		t.Fatalf("a join at a member's Raft address: %v %v", err, resp)
	}
	if got := members(t, []*joinNode{n2, n3}, 3); got != all {
		t.Fatalf("members %q after the refused join, want %q", got, all)
	}
}

func TestJoinOptionsRefused(t *testing.T) {
	base := controller.Options{ID: "n1", DataDir: t.TempDir(), Advertise: "127.0.0.1:1", RaftLogOutput: io.Discard}
	for name, o := range map[string]controller.Options{
		"port 0 in a group of three": {Peers: []controller.Peer{{ID: "n1", Addr: "127.0.0.1:0"}, {ID: "n2", Addr: "127.0.0.1:2"},
			{ID: "n3", Addr: "127.0.0.1:3"}}},
		"Join with Peers":   {Join: true, RaftBind: "127.0.0.1:0", Peers: []controller.Peer{{ID: "n1", Addr: "127.0.0.1:0"}}},
		"Join without bind": {Join: true},
	} {
		o.ID, o.DataDir, o.Advertise, o.RaftLogOutput = base.ID, t.TempDir(), base.Advertise, base.RaftLogOutput
		if n, err := controller.New(o); err == nil {
			n.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	// A joining node on every interface needs a host to give its peers.
	o := controller.Options{ID: "n1", DataDir: t.TempDir(), Advertise: "0.0.0.0:9878", Join: true, RaftBind: "0.0.0.0:0",
		RaftLogOutput: io.Discard}
	if n, err := controller.New(o); err == nil || !strings.Contains(err.Error(), "on every interface") {
		if n != nil {
			n.Close()
		}
		t.Fatalf("a joining node on 0.0.0.0 without an advertised host: %v", err)
	}
}
