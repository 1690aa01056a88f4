package ctrlmode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
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
		Logger: testLogger(t), RaftLogOutput: io.Discard})
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
	dir        string
	addr, ha   string
	controller string
	opts       func(*Options)
	node       *Node
}

func newTestBroker(t *testing.T, ctl string, opts func(*Options)) *testBroker {
	tb := &testBroker{t: t, dir: filepath.Join(t.TempDir(), "data"), controller: ctl, opts: opts}
	tb.start("127.0.0.1:0", "127.0.0.1:0")
	t.Cleanup(tb.stop)
	return tb
}

func listenRetry(t *testing.T, addr string) net.Listener {
	var err error
	for range 100 {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

func (tb *testBroker) start(addr, ha string) {
	t := tb.t
	ln, hln := listenRetry(t, addr), listenRetry(t, ha)
	tb.addr, tb.ha = ln.Addr().String(), hln.Addr().String()
	o := Options{
		Broker: broker.Options{DataDir: tb.dir, BrokerName: "g1", ClusterName: "c1", AdvertiseAddr: tb.addr,
			Store: store.Options{SegmentSize: 16 << 20}, Logger: testLogger(t)},
		ControllerAddrs: []string{tb.controller}, Listener: ln, HAListener: hln,
		AllAckInSyncStateSet: true, MaxTimeSlaveNotCatchup: 2 * time.Second, SyncStateSetCheckInterval: 50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, StartTimeout: 20 * time.Second,
	}
	if tb.opts != nil {
		tb.opts(&o)
	}
	n, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	tb.node = n
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
	tb.node = nil
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	a := newTestBroker(t, ctl, minISR)
	waitFor(t, 10*time.Second, "the first broker as master", a.node.IsMaster)
	err := send(a.node, "alone")
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Code != protocol.RespSystemError || !strings.Contains(ce.Remark, "in-sync replicas not enough") {
		t.Fatalf("a send with a SyncStateSet of 1 and minInSyncReplicas 2: %v", err)
	}
	b := newTestBroker(t, ctl, minISR)
	waitFor(t, 10*time.Second, "a SyncStateSet of two", func() bool { return setSize(a.node) == 2 && a.node.Broker().Core().WriteGate() == nil })
	if b.node.IsMaster() {
		t.Fatal("the second broker is master too")
	}
	for i := range 200 {
		if err := send(a.node, fmt.Sprintf("m%03d", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	end := a.node.Broker().Store().WrittenOffset()
	waitFor(t, 10*time.Second, "the slave holding the master's log", func() bool {
		return b.node.Broker() != nil && b.node.Broker().Store().WrittenOffset() == end
	})

	aAddr, aHA := a.addr, a.ha
	a.stop()
	waitFor(t, 10*time.Second, "the slave elected", b.node.IsMaster)
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
	waitFor(t, 10*time.Second, "the old master rejoined as slave, the set of two again", func() bool {
		return !a.node.IsMaster() && setSize(b.node) == 2 && b.node.Broker().Core().WriteGate() == nil
	})
	if err := send(b.node, "after"); err != nil {
		t.Fatalf("send with both in the set: %v", err)
	}
	end2 := b.node.Broker().Store().WrittenOffset()
	waitFor(t, 10*time.Second, "the old master holding the new master's log", func() bool {
		return a.node.Broker() != nil && a.node.Broker().Store().WrittenOffset() == end2
	})
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
