package ctrlmode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// logWriter turns the lines of a library that logs to an io.Writer (Raft)
// into records of a test's log.
type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.l.Debug(line)
	}
	return len(p), nil
}

// startController runs a one-node controller group on 127.0.0.1.
func startController(t *testing.T) string {
	t.Helper()
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := controller.New(controller.Options{ID: "n1", Peers: []controller.Peer{{ID: "n1", Addr: rl.Addr().String()}},
		DataDir: t.TempDir(), Advertise: l.Addr().String(), RaftListener: rl,
		Raft:             controller.RaftTiming{HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond},
		HeartbeatTimeout: time.Second, ScanInterval: 50 * time.Millisecond, CloseGrace: 200 * time.Millisecond,
		Logger: testlog.New(t, "controller"), RaftLogOutput: logWriter{testlog.New(t, "raft")}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(l) }()
	t.Cleanup(func() {
		n.Close()
		<-served
	})
	return l.Addr().String()
}

type testBroker struct {
	t          *testing.T
	name       string // its logger's
	dir        string
	addr, ha   string
	controller string
	opts       func(*Options)
	node       *Node
	b          *broker.Broker
}

func newTestBroker(t *testing.T, name, ctl string, opts func(*Options)) *testBroker {
	tb := &testBroker{t: t, name: name, dir: filepath.Join(t.TempDir(), "data"), controller: ctl, opts: opts}
	tb.start("127.0.0.1:0", "127.0.0.1:0")
	t.Cleanup(tb.stop)
	return tb
}

// listen listens on addr; a broker restarted on the addresses it had waits
// until its previous listeners' ports are free again.
func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	wait.For(t, "listening on "+addr, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l
}

func (tb *testBroker) start(addr, ha string) {
	t := tb.t
	ln, hln := listen(t, addr), listen(t, ha)
	tb.addr, tb.ha = ln.Addr().String(), hln.Addr().String()
	log := testlog.New(t, "broker-"+tb.name)
	o := Options{
		DataDir: tb.dir, BrokerName: "g1", ClusterName: "c1", AdvertiseAddr: tb.addr,
		ControllerAddrs:      []string{tb.controller},
		AllAckInSyncStateSet: true, MaxTimeSlaveNotCatchup: 2 * time.Second, SyncStateSetCheckInterval: 50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, StartTimeout: 20 * time.Second, Logger: log,
	}
	if tb.opts != nil {
		tb.opts(&o)
	}
	// As package node runs them: the node first, the broker with its
	// options, served, then handed to the node.
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(n.BrokerOptions(broker.Options{Core: core.Options{DataDir: tb.dir, BrokerName: "g1", ClusterName: "c1", AdvertiseAddr: tb.addr, Store: store.Options{SegmentSize: 16 << 20}, Logger: log}}))
	if err != nil {
		n.Shutdown(context.Background())
		t.Fatal(err)
	}
	go b.Serve(ln)
	go b.ServeHA(hln)
	n.Start(b)
	tb.node, tb.b = n, b
}

func (tb *testBroker) stop() {
	if tb.node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tb.node.Shutdown(ctx); err != nil {
		tb.t.Errorf("shutdown: %v", err)
	}
	if err := tb.b.Shutdown(ctx); err != nil {
		tb.t.Errorf("broker shutdown: %v", err)
	}
	tb.node, tb.b = nil, nil
}

// send stores one message through the running broker's core and waits for
// its durability (the SyncStateSet's acknowledgements).
func send(n *Node, body string) error {
	b := n.Broker()
	if b == nil {
		return errors.New("no broker instance")
	}
	req := &core.SendRequest{ProducerGroup: []byte("pg"), Topic: []byte("TCtl"), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 4, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), Body: []byte(body)}
	var res core.SendResult
	if err := b.Core().Send(req, &res); err != nil {
		return err
	}
	return b.Core().WaitDurable(res.Pending)
}

// writtenOffset is the end of n's commit log, -1 while n runs no broker.
func writtenOffset(n *Node) int64 {
	b := n.Broker()
	if b == nil {
		return -1
	}
	return b.Store().WrittenOffset()
}

func setSize(n *Node) int {
	s, ok := n.Controller().State()
	if !ok {
		return 0
	}
	return len(s.SyncStateSet)
}

// A group of two in one process: the first broker becomes master and the
// second its slave; with minInSyncReplicas 2 writes are refused until the
// slave is in the SyncStateSet. The master stops: the slave is elected
// (epoch 2, its epoch file records where epoch 2 began), refuses writes
// until the old master rejoins as its slave (after the epoch handshake),
// and holds every message acknowledged before.
func TestFailoverInProcess(t *testing.T) {
	ctl := startController(t)
	minISR := func(o *Options) { o.MinInSyncReplicas = 2 }
	a := newTestBroker(t, "a", ctl, minISR)
	wait.Until(t, "the first broker as master", a.node.IsMaster)
	err := send(a.node, "alone")
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Code != protocol.RespSystemError || !strings.Contains(ce.Remark, "in-sync replicas not enough") {
		t.Fatalf("a send with a SyncStateSet of 1 and minInSyncReplicas 2: %v", err)
	}
	b := newTestBroker(t, "b", ctl, minISR)
	wait.For(t, "a SyncStateSet of two", func() error {
		if n, gate := setSize(a.node), a.node.Broker().Core().Replication().WriteGate(); n != 2 || gate != nil {
			return fmt.Errorf("a set of %d, writes gated by %v", n, gate)
		}
		return nil
	})
	if b.node.IsMaster() {
		t.Fatal("the second broker is master too")
	}
	for i := range 200 {
		if err := send(a.node, fmt.Sprintf("m%03d", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	end := a.node.Broker().Store().WrittenOffset()
	wait.Equal(t, "the slave holding the master's log", end, func() int64 { return writtenOffset(b.node) })

	aAddr, aHA := a.addr, a.ha
	a.stop()
	wait.Until(t, "the slave elected", b.node.IsMaster)
	entries := b.node.epochs.Entries()
	if len(entries) != 2 || entries[1].Epoch != 2 || entries[1].StartOffset != end {
		t.Fatalf("epoch file after the election: %+v, want epoch 2 at %d", entries, end)
	}
	if b.node.Broker().Store().WrittenOffset() < end {
		t.Fatalf("new master's log ends at %d, before %d", b.node.Broker().Store().WrittenOffset(), end)
	}
	if err := send(b.node, "alone again"); !errors.As(err, &ce) || !strings.Contains(ce.Remark, "in-sync replicas not enough") {
		t.Fatalf("a send on the new master alone: %v", err)
	}

	// The old master comes back on its addresses: a slave of the new one.
	a.start(aAddr, aHA)
	wait.For(t, "the old master rejoined as slave, the set of two again", func() error {
		if master, n, gate := a.node.IsMaster(), setSize(b.node), b.node.Broker().Core().Replication().WriteGate(); master || n != 2 || gate != nil {
			return fmt.Errorf("old master is master: %v; a set of %d; writes gated by %v", master, n, gate)
		}
		return nil
	})
	if err := send(b.node, "after"); err != nil {
		t.Fatalf("send with both in the set: %v", err)
	}
	end2 := b.node.Broker().Store().WrittenOffset()
	wait.Equal(t, "the old master holding the new master's log", end2, func() int64 { return writtenOffset(a.node) })
	if got := a.node.epochs.Entries(); len(got) != 2 || got[1] != entries[1] {
		t.Fatalf("the rejoined slave's epochs %+v, want the master's %+v", got, entries)
	}
}

// The HA handshake's cut point when the epochs do not settle it.
func TestNoCommonEpoch(t *testing.T) {
	// A replica without epochs keeps what lies below the master's first.
	if got := noCommonEpoch(nil, 500, []store.EpochEntry{{Epoch: 1, StartOffset: 300}}, 900, 0); got != 300 {
		t.Errorf("no local epochs: %d, want 300", got)
	}
	if got := noCommonEpoch(nil, 200, []store.EpochEntry{{Epoch: 1, StartOffset: 300}}, 900, 0); got != 200 {
		t.Errorf("no local epochs, shorter log: %d, want 200", got)
	}
	// Epochs that all differ: nothing is kept.
	if got := noCommonEpoch([]store.EpochEntry{{Epoch: 3, StartOffset: 0}}, 500, []store.EpochEntry{{Epoch: 4, StartOffset: 0}}, 900, 64); got != 64 {
		t.Errorf("different epochs: %d, want the log's minimum 64", got)
	}
}

// The handshake's messages round-trip.
func TestHandshakeEncoding(t *testing.T) {
	h := hello{id: 7, epoch: 3, entries: []store.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 3, StartOffset: 4096}}, end: 9000}
	got, err := readHello(strings.NewReader(string(h.encode())))
	if err != nil || got.id != 7 || got.epoch != 3 || len(got.entries) != 2 || got.entries[1] != h.entries[1] || got.end != 9000 {
		t.Fatalf("hello: %+v %v", got, err)
	}
	a := answer{status: statusEpochBehind, epoch: 4, entries: h.entries, end: 12}
	ga, err := readAnswer(strings.NewReader(string(a.encode())))
	if err != nil || ga.status != statusEpochBehind || ga.epoch != 4 || len(ga.entries) != 2 || ga.end != 12 {
		t.Fatalf("answer: %+v %v", ga, err)
	}
	if _, err := readHello(strings.NewReader("XXXX0000000000000000")); err == nil {
		t.Fatal("a hello with a bad magic was accepted")
	}
}
