package controller

import (
	"testing"
	"time"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/remoting"
)

// What a new leader makes of the records it kept as a follower: a
// connection that closed while its broker was heartbeating is evidence of
// death (no heartbeat-timeout wait), a record that merely stopped is not,
// and a heartbeat after the close clears it.
func TestNewLeaderTrustsRecordedCloses(t *testing.T) {
	const timeout, grace = time.Minute, 100 * time.Millisecond
	n := &Node{}
	n.opts.HeartbeatTimeout = timeout
	n.live.init()
	t0 := time.Unix(1_000_000, 0)
	closedConn, openConn := &remoting.Conn{}, &remoting.Conn{}
	hb := func(id int64, c *remoting.Conn, at time.Time) {
		n.live.heartbeat(&wire.HeartbeatRequest{ClusterName: "c", BrokerName: "g", BrokerAddr: "x", BrokerID: id}, c, at, timeout)
	}
	hb(1, closedConn, t0)                       // the master: its connection closes below
	hb(2, openConn, t0.Add(-2*timeout))         // heard from long ago, never closed (a leader-alone client)
	hb(3, &remoting.Conn{}, t0.Add(-2*timeout)) // its connection closes after its record expired
	n.live.closed(closedConn, t0.Add(time.Second), grace)
	// This node becomes leader well after the close and its grace.
	since := t0.Add(10 * time.Second)
	n.leaderSince.Store(since.UnixNano())
	now := since.Add(50 * time.Millisecond)
	if n.maybeAlive("g", 1, now) {
		t.Error("the master whose connection closed while it heartbeated is given a heartbeat timeout by the new leader")
	}
	if !n.maybeAlive("g", 2, now) {
		t.Error("a record that stopped before this node led (no close) is taken as death")
	}
	for k, e := range n.live.m {
		if k.id == 3 {
			n.live.closed(e.conn, t0, grace)
		}
	}
	if !n.maybeAlive("g", 3, now) {
		t.Error("a close after the record had expired is taken as evidence")
	}
	if n.maybeAlive("g", 2, since.Add(timeout)) {
		t.Error("a broker never heard from is alive a heartbeat timeout after the leader took over")
	}
	// The broker reconnects: the heartbeat clears the close.
	hb(1, &remoting.Conn{}, now)
	if !n.maybeAlive("g", 1, now.Add(time.Millisecond)) {
		t.Error("a heartbeat after the close did not revive the record")
	}
	if e, _ := n.live.info("g", 1); e.closedLive {
		t.Error("closedLive survives a heartbeat")
	}
}
