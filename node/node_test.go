package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/ctrlmode"
	"github.com/apogeemq/apogee/broker/metrics"
	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/rmqpb"
	"github.com/apogeemq/apogee/store"
)

// logWriter turns Raft's lines into records of a test's log.
type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.l.Debug(line)
	}
	return len(p), nil
}

// startController runs a one-member controller group on 127.0.0.1.
func startController(t testing.TB) string {
	t.Helper()
	rl := listen(t)
	l := listen(t)
	c, err := controller.New(controller.Options{ID: "n1", Peers: []controller.Peer{{ID: "n1", Addr: rl.Addr().String()}},
		DataDir: t.TempDir(), Advertise: l.Addr().String(), RaftListener: rl,
		Raft: controller.RaftTiming{HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
			LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond},
		HeartbeatTimeout: time.Second, ScanInterval: 50 * time.Millisecond, CloseGrace: 200 * time.Millisecond,
		Logger: testlog.New(t, "controller"), RaftLogOutput: logWriter{testlog.New(t, "raft")}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Serve(l) }()
	t.Cleanup(func() {
		c.Close()
		<-served
	})
	return l.Addr().String()
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// member is one node of a controller-mode group, every attachment on.
type member struct {
	name              string
	n                 *Node
	addr, grpc, http  string
	namesrv           string
	remoting          *remoting.Client // one connection, kept across role changes
	grpcConn          *grpc.ClientConn
	grpcCli           rmqpb.MessagingServiceClient
	grpcDials         atomic.Int32 // connections the gRPC client opened
	remotingConnsOpen func() int
}

func startMember(t testing.TB, name, ctl string) *member {
	t.Helper()
	log := testlog.New(t, name)
	ln, hln, gln, nsln, opln := listen(t), listen(t), listen(t), listen(t), listen(t)
	dir := filepath.Join(t.TempDir(), name)
	n, err := Start(Options{
		Broker:   broker.Options{Core: core.Options{DataDir: dir, BrokerName: "g1", ClusterName: "c1", AdvertiseAddr: ln.Addr().String(), Store: store.Options{SegmentSize: 16 << 20}, Logger: log}},
		Listener: ln, HAListener: hln,
		Namesrv: &Namesrv{Listener: nsln},
		GRPC:    &GRPC{Listener: gln},
		Operator: &Operator{Listener: opln, Handler: func(n *Node) (http.Handler, error) {
			exp, err := metrics.New(metrics.Options{Core: n.Broker().Core(), Remoting: n.Broker().RemotingStats})
			if err != nil {
				return nil, err
			}
			return exp.Handler(), nil
		}},
		Controller: &ctrlmode.Options{DataDir: dir, ClusterName: "c1", BrokerName: "g1", AdvertiseAddr: ln.Addr().String(),
			ControllerAddrs: []string{ctl}, AllAckInSyncStateSet: true, MaxTimeSlaveNotCatchup: 5 * time.Second,
			SyncStateSetCheckInterval: 50 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, StartTimeout: 20 * time.Second},
		Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &member{name: name, n: n, addr: ln.Addr().String(), grpc: gln.Addr().String(), http: opln.Addr().String(),
		namesrv: nsln.Addr().String()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("%s: shutdown: %v", name, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m.remoting, err = remoting.Dial(ctx, m.addr, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.remoting.Close() })
	m.grpcConn, err = grpc.NewClient(m.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			m.grpcDials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.grpcConn.Close() })
	m.grpcCli = rmqpb.NewMessagingServiceClient(m.grpcConn)
	return m
}

func (m *member) isMaster() bool { return m.n.Controller().IsMaster() }

// runtimeInfo asks GET_BROKER_RUNTIME_INFO on the member's one remoting
// connection.
func (m *member) runtimeInfo() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerRuntimeInfo, 0)
	resp, err := m.remoting.Invoke(ctx, &req)
	if err != nil {
		return "", err
	}
	if resp.Code != protocol.RespSuccess {
		return "", fmt.Errorf("code %d (%s)", resp.Code, resp.Remark)
	}
	return string(resp.Body), nil
}

// sendGRPC sends one message over the member's gRPC connection.
func (m *member) sendGRPC(topic, body string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", "node-test-producer")
	r, err := m.grpcCli.SendMessage(ctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{{
		Topic: &rmqpb.Resource{Name: topic}, Body: []byte(body), SystemProperties: &rmqpb.SystemProperties{
			MessageId: fmt.Sprintf("%s-%d", body, time.Now().UnixNano()), BornTimestamp: timestamppb.Now(), BornHost: "test",
			BodyEncoding: rmqpb.Encoding_IDENTITY}}}})
	if err != nil {
		return err
	}
	if c := r.GetStatus().GetCode(); c != rmqpb.Code_OK {
		return fmt.Errorf("SendMessage: %v %s", c, r.GetStatus().GetMessage())
	}
	return nil
}

// metricsUp reads the member's operator port.
func (m *member) metricsUp() error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + m.http + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "rocketmq_") {
		return fmt.Errorf("/metrics: %s, %d bytes", resp.Status, len(b))
	}
	return nil
}

// group starts a controller and two members and waits until one is master
// with both in its SyncStateSet.
func group(t testing.TB) (master, slave *member) {
	ctl := startController(t)
	a := startMember(t, "a", ctl)
	wait.Until(t, "the first member as master", a.isMaster)
	b := startMember(t, "b", ctl)
	waitSet(t, a, b)
	return a, b
}

// waitSet waits until master is master, slave is not, and the set has both.
func waitSet(t testing.TB, master, slave *member) {
	t.Helper()
	wait.For(t, master.name+" master of a SyncStateSet of two", func() error {
		s, ok := master.n.Controller().Controller().State()
		switch {
		case !ok:
			return fmt.Errorf("no state")
		case !master.isMaster() || slave.isMaster():
			return fmt.Errorf("%s master: %v, %s master: %v", master.name, master.isMaster(), slave.name, slave.isMaster())
		case len(s.SyncStateSet) != 2:
			return fmt.Errorf("SyncStateSet %v", s.SyncStateSet)
		case master.n.Broker().Core().Replication().WriteGate() != nil:
			return fmt.Errorf("writes gated: %v", master.n.Broker().Core().Replication().WriteGate())
		}
		return nil
	})
}

// switchMaster asks the controller to elect to (designated), and waits
// until the change is done on both members.
func switchMaster(t testing.TB, from, to *member) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := to.n.Controller().Controller().ElectMaster(ctx, to.n.Controller().ID(), true); err != nil {
		t.Fatalf("elect %s: %v", to.name, err)
	}
	waitSet(t, to, from)
}

// A controller-mode group serves every front end and service on every
// member in every role, and its role changes happen in place: across
// role changes the clients' connections (one remoting, one gRPC per
// member) are never closed, the metrics port answers, and the new master
// takes gRPC sends.
func TestControllerModeRoleChangesInPlace(t *testing.T) {
	a, b := group(t)
	members := []*member{a, b}
	check := func(when string) {
		t.Helper()
		for _, m := range members {
			if _, err := m.runtimeInfo(); err != nil {
				t.Fatalf("%s: %s: runtime info on the kept remoting connection: %v", when, m.name, err)
			}
			if err := m.metricsUp(); err != nil {
				t.Fatalf("%s: %s: %v", when, m.name, err)
			}
		}
	}
	check("at start")
	master, slave := a, b
	const changes = 6
	for i := range changes {
		if err := master.sendGRPC("TNode", fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatalf("change %d: send to master %s over gRPC: %v", i, master.name, err)
		}
		switchMaster(t, master, slave)
		master, slave = slave, master
		wait.For(t, "a gRPC send to the new master "+master.name, func() error {
			return master.sendGRPC("TNode", fmt.Sprintf("after-%d", i))
		})
		check(fmt.Sprintf("after change %d", i))
	}
	for _, m := range members {
		if d := m.grpcDials.Load(); d != 1 {
			t.Errorf("%s: the gRPC client connected %d times (a role change closed its connection)", m.name, d)
		}
		toMaster, toSlave := m.n.Controller().RoleChanges()
		t.Logf("%s: to master %v; to slave %v", m.name, toMaster, toSlave)
	}
}

// BenchmarkRoleChange measures role changes in place in a group of two
// (one controller, two members in one process): from the controller's
// notification to the new master serving writes, over b.N designated
// elections; it reports the median and the 99th percentile.
//
//	go test -run '^$' -bench RoleChange -benchtime 40x ./node/
func BenchmarkRoleChange(b *testing.B) {
	a, s := group(b)
	master, slave := a, s
	b.ResetTimer()
	for range b.N {
		switchMaster(b, master, slave)
		master, slave = slave, master
	}
	b.StopTimer()
	var all []time.Duration
	for _, m := range []*member{a, s} {
		toMaster, _ := m.n.Controller().RoleChanges()
		all = append(all, toMaster...)
	}
	if len(all) == 0 {
		b.Fatal("no role change recorded")
	}
	slices.Sort(all)
	q := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(len(all)), "changes")
}

// An attachment that fails stops the start: the error names it, what was
// attached stops, and every listener the options gave is closed.
func TestStartFailureClosesEverything(t *testing.T) {
	ln, hln, gln, nsln, opln := listen(t), listen(t), listen(t), listen(t), listen(t)
	addrs := []string{ln.Addr().String(), hln.Addr().String(), gln.Addr().String(), nsln.Addr().String(), opln.Addr().String()}
	broken := errors.New("no handler today")
	_, err := Start(Options{
		Broker:   broker.Options{Core: core.Options{DataDir: t.TempDir(), AdvertiseAddr: ln.Addr().String(), Logger: testlog.New(t, "broker")}},
		Listener: ln, HAListener: hln, Namesrv: &Namesrv{Listener: nsln}, GRPC: &GRPC{Listener: gln},
		Operator: &Operator{Listener: opln, Handler: func(*Node) (http.Handler, error) { return nil, broken }},
	})
	if !errors.Is(err, broken) || !strings.Contains(err.Error(), "operator port") {
		t.Fatalf("Start: %v, want the operator port's error", err)
	}
	for _, a := range addrs {
		wait.For(t, "listener "+a+" closed", func() error {
			c, err := net.Dial("tcp", a)
			if err != nil {
				return nil
			}
			c.Close()
			return fmt.Errorf("%s still accepts", a)
		})
	}
}

// Each attachment serves on its own in classic mode too, and Shutdown
// stops them all: a second Shutdown says the node is closed.
func TestClassicNodeServesAndStops(t *testing.T) {
	ln, gln := listen(t), listen(t)
	n, err := Start(Options{
		Broker:   broker.Options{Core: core.Options{DataDir: t.TempDir(), AdvertiseAddr: ln.Addr().String(), Logger: testlog.New(t, "broker")}},
		Listener: ln, GRPC: &GRPC{Listener: gln},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &member{name: "classic", n: n, grpc: gln.Addr().String()}
	cc, err := grpc.NewClient(m.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	m.grpcCli = rmqpb.NewMessagingServiceClient(cc)
	if err := m.sendGRPC("TClassic", "one"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := n.Shutdown(ctx); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("second Shutdown: %v, want ErrClosed", err)
	}
}

// A classic slave's gRPC front end forwards a send to its master's, whose
// address it reads from the master (GET_BROKER_CONFIG's
// grpcAdvertiseAddr, at the remoting address the name server gave it).
func TestClassicSlaveForwardsToMaster(t *testing.T) {
	mln, mgln, mnsln := listen(t), listen(t), listen(t)
	master, err := Start(Options{
		Broker: broker.Options{Core: core.Options{DataDir: t.TempDir(), BrokerName: "g1", AdvertiseAddr: mln.Addr().String(),
			Logger: testlog.New(t, "master")}, RegisterInterval: time.Second},
		Listener: mln, HAListener: listen(t), GRPC: &GRPC{Listener: mgln}, Namesrv: &Namesrv{Listener: mnsln},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Shutdown(context.Background())
	sln, sgln := listen(t), listen(t)
	slave, err := Start(Options{
		Broker: broker.Options{Core: core.Options{DataDir: t.TempDir(), BrokerName: "g1", AdvertiseAddr: sln.Addr().String(),
			Role: core.RoleSlave, BrokerID: 1, Logger: testlog.New(t, "slave")},
			NamesrvAddrs: []string{mnsln.Addr().String()}, RegisterInterval: time.Second},
		Listener: sln, GRPC: &GRPC{Listener: sgln},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Shutdown(context.Background())
	m := &member{name: "slave", n: slave, grpc: sgln.Addr().String()}
	cc, err := grpc.NewClient(m.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	m.grpcCli = rmqpb.NewMessagingServiceClient(cc)
	wait.For(t, "a gRPC send through the slave acknowledged", func() error { return m.sendGRPC("TClassicFwd", "x") })
	wait.For(t, "the message on the master", func() error {
		if got := master.Broker().Store().MaxOffset("TClassicFwd", 0) + master.Broker().Store().MaxOffset("TClassicFwd", 1) +
			master.Broker().Store().MaxOffset("TClassicFwd", 2) + master.Broker().Store().MaxOffset("TClassicFwd", 3); got < 1 {
			return fmt.Errorf("%d messages on the master", got)
		}
		return nil
	})
	if addrs := slave.grpcMembers(); len(addrs) != 2 || addrs[0] != mgln.Addr().String() {
		t.Fatalf("the slave's route endpoints %v, want the master's first", addrs)
	}
}
