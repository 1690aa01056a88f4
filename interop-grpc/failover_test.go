package interopgrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
)

// TestFailover5x: the official 5.x Go SDK through failovers of a
// controller-mode group (docs/failover.md, "RocketMQ 5 (gRPC) clients"),
// with real processes on 127.0.0.1: three apogee-controller processes, an
// apogee-namesrv and a group of three apogee-broker processes in controller
// mode, each serving gRPC on a port from :0 (ready-file key "grpc").
//
// The clients: a Producer sending continuously from two goroutines (every
// SEND_OK recorded), a SimpleConsumer receiving and acking, and a
// PushConsumer whose listener consumes (the SDK acks; the test sees those
// acks on the client's connection, observeUnary), in two consumer groups.
// Each is given the three members' gRPC addresses as its endpoints, in the
// SDK's "a:1;b:2;c:3" form (utils.ParseTarget splits it; the SDK dials
// "ip:///a:1;b:2;c:3" through its own resolver: one gRPC connection over
// the three, grpc-go's pick-first, moving to another member when its own
// fails). No client is told which member is the master: whichever member
// its connection reaches serves it, forwarding to the current master what
// only the master serves.
//
// Rounds alternate SIGKILL of the master (restarted when the clients have
// recovered: it rejoins as a slave) and SIGSTOP of the master (SIGCONT a
// second after the controllers elected a new master: a client whose
// connection is on the paused member waits for it to wake, as grpc-go
// notices a silent peer only through keepalive, at 10 s at the least).
// Before each fault the SyncStateSet holds all three (allAckInSyncStateSet:
// every SEND_OK is on every member) and every client has been acknowledged.
//
// Asserted: every message acknowledged SEND_OK is received by both
// consumer groups by the end (at least once); in each round each client
// is acknowledged again (a send answered SEND_OK, an ack answered OK) for
// a call begun after the fault within 10 s of it. The gaps are printed per
// round and client, and a failure names them. APOGEE_FAILOVER_FULL=1 runs
// ten rounds instead of four.
func TestFailover5x(t *testing.T) {
	rounds := 4
	if os.Getenv("APOGEE_FAILOVER_FULL") != "" {
		rounds = 10
	}
	// The clients' stops begin before the brokers' and are waited for
	// after them (registered first, this cleanup runs last): the SDK's
	// PushConsumer stop waits up to its request timeout plus the brokers'
	// long-polling timeout (about 35 s) for its receives in flight.
	var clientsStopped sync.WaitGroup
	t.Cleanup(clientsStopped.Wait)
	g := startFoGroup(t)
	endpoints := g.endpoints()
	t.Logf("group of three in controller mode; the clients' endpoints %q", endpoints)

	l := newFoLoad(t, endpoints, &clientsStopped)
	var results []foRound
	for r := range rounds {
		kind := "SIGKILL"
		if r%2 == 1 {
			kind = "SIGSTOP"
		}
		res := g.faultRound(t, l, r, kind)
		results = append(results, res)
		t.Logf("%s", res)
	}
	l.stopProducer()
	sent, failed := l.counts()
	t.Logf("%d messages acknowledged SEND_OK (%d sends failed)", sent, failed)
	wait.For(t, "every acknowledged message received by both consumer groups", l.missing)
	t.Logf("every acknowledged message received by the SimpleConsumer and by the PushConsumer")

	var slow []string
	for _, res := range results {
		for _, c := range l.clients {
			if gap := res.gaps[c.name]; gap > foRecovery {
				slow = append(slow, fmt.Sprintf("round %d (%s): %s acknowledged again after %v", res.n, res.kind, c.name, gap))
			}
		}
	}
	if len(slow) > 0 {
		t.Fatalf("clients not acknowledged within %v of a fault:\n%s\nall rounds:\n%s", foRecovery,
			strings.Join(slow, "\n"), foTable(results))
	}
}

const (
	foTopic       = "FoTopic"
	foSimpleGroup = "FoSimpleGroup"
	foPushGroup   = "FoPushGroup"
	foGroupName   = "g1"
	// foRecovery is how soon after a fault each client must be
	// acknowledged again (issue 28).
	foRecovery = 10 * time.Second
)

// --- the group -------------------------------------------------------------

// foGroup is the controllers, the name server and the three brokers.
type foGroup struct {
	ctls    []*proctest.Controller
	ns      *proctest.Proc
	brokers []*foBroker
}

// foBroker is one apogee-broker in controller mode. Its first run binds
// every listener on a port from :0; its restarts keep those addresses, as
// a restarted member keeps its identity (the clients' endpoints name its
// gRPC address).
type foBroker struct {
	t                      *testing.T
	p                      *proctest.Proc
	args                   []string // flags besides the listeners
	listen, ha, grpcListen string   // the first run's bound addresses
	addr                   string   // the remoting address the controllers name it by
	paused                 bool
}

func (b *foBroker) start() {
	b.t.Helper()
	listen, ha, grpcL := "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if b.listen != "" {
		listen, ha, grpcL = b.listen, b.ha, b.grpcListen
	}
	b.p.Run(append([]string{"--listen", listen, "--ha-listen", ha, "--grpc-listen", grpcL, "--namesrv-listen", ""},
		b.args...)...)
	r := b.p.Ready
	if r.GRPC == "" {
		b.t.Fatalf("broker %s in controller mode names no gRPC listener in its ready file (%+v): it serves no gRPC front end", r.Listen, r)
	}
	if b.listen == "" {
		b.listen, b.ha, b.grpcListen = r.Listen, r.HA, r.GRPC
	}
	b.addr = r.Advertise
}

// startFoGroup starts three controllers (short timings: Raft 300 ms, a
// broker deemed dead after 2 s without a heartbeat, scans every 200 ms),
// a name server and three brokers of group g1 (allAckInSyncStateSet, a
// member behind for 3 s leaves the SyncStateSet), and waits for a master,
// a SyncStateSet of three, the topic on every member and the two consumer
// groups on the master.
func startFoGroup(t *testing.T) *foGroup {
	t.Helper()
	ctlBin := binFor(t, "apogee-controller", "APOGEE_CONTROLLER_BIN")
	nsBin := binFor(t, "apogee-namesrv", "APOGEE_NAMESRV_BIN")
	g := &foGroup{}
	g.ctls = proctest.StartControllers(t, ctlBin, 3, "--raft-heartbeat-timeout", "300ms", "--raft-election-timeout", "300ms",
		"--raft-leader-lease-timeout", "150ms", "--heartbeat-timeout", "2s", "--scan-interval", "200ms")
	for _, c := range g.ctls {
		t.Cleanup(func() { _ = c.P.Stop(syscall.SIGTERM) })
	}
	wait.For(t, "three controllers in every controller's configuration", func() error {
		for _, c := range g.ctls {
			r, err := remotingCall(c.Addr, 1005, nil, nil, 2*time.Second) // GET_METADATA_INFO
			if err != nil {
				return err
			}
			if peers := r.Ext["peers"]; len(strings.Split(peers, ",")) != 3 {
				return fmt.Errorf("%s has peers %q", c.ID, peers)
			}
		}
		return nil
	})
	g.ns = proctest.New(t, "apogee-namesrv", nsBin)
	t.Cleanup(func() { _ = g.ns.Stop(syscall.SIGTERM) })
	g.ns.Run("--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "namesrv"))

	conf := strings.Join([]string{"brokerClusterName=FoCluster", "brokerName=" + foGroupName, "enableControllerMode=true",
		"controllerAddr=" + proctest.ControllerAddrs(g.ctls), "allAckInSyncStateSet=true", "haMaxTimeSlaveNotCatchup=3000"}, "\n")
	for i := range 3 {
		dir := t.TempDir()
		cf := filepath.Join(dir, "broker.conf")
		if err := os.WriteFile(cf, []byte(conf+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		b := &foBroker{t: t, p: proctest.New(t, fmt.Sprintf("apogee-broker-%d", i+1), brokerBin),
			args: []string{"--data-dir", filepath.Join(dir, "data"), "-c", cf, "--namesrv", g.ns.Ready.Listen}}
		t.Cleanup(func() {
			if b.paused {
				_ = b.p.Signal(syscall.SIGCONT)
			}
			if b.p.Running() {
				if err := b.p.Stop(syscall.SIGTERM); err != nil {
					t.Errorf("broker %s exit after SIGTERM: %v", b.addr, err)
				}
			}
		})
		b.start()
		g.brokers = append(g.brokers, b)
	}
	master := g.waitFullSet(t)
	ext := map[string]string{"topic": foTopic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
		"perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
	if code, remark := remoting(t, master.addr, 17, ext, nil); code != 0 { // UPDATE_AND_CREATE_TOPIC
		t.Fatalf("create topic %s on the master %s: %d %s", foTopic, master.addr, code, remark)
	}
	for _, group := range []string{foSimpleGroup, foPushGroup} {
		body, _ := json.Marshal(map[string]any{"groupName": group, "consumeEnable": true, "consumeFromMinEnable": true,
			"consumeBroadcastEnable": true, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
			"whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": true})
		if code, remark := remoting(t, master.addr, 200, map[string]string{}, body); code != 0 { // UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
			t.Fatalf("create group %s on the master %s: %d %s", group, master.addr, code, remark)
		}
	}
	wait.For(t, "the topic on every member", func() error {
		for _, b := range g.brokers {
			r, err := remotingCall(b.addr, 21, nil, nil, 5*time.Second) // GET_ALL_TOPIC_CONFIG
			if err != nil {
				return err
			}
			if r.Code != 0 || !strings.Contains(string(r.Body), `"`+foTopic+`"`) {
				return fmt.Errorf("%s lacks %s (code %d)", b.addr, foTopic, r.Code)
			}
		}
		return nil
	})
	return g
}

// endpoints is the three members' gRPC addresses as the clients are given
// them.
func (g *foGroup) endpoints() string {
	var a []string
	for _, b := range g.brokers {
		a = append(a, b.grpcListen)
	}
	return strings.Join(a, ";")
}

// foState is the group as the controller leader has it.
type foState struct {
	master string // the master's remoting address ("" while none)
	epoch  string
	set    int // members in the SyncStateSet
}

// state asks the controllers for g1's master and SyncStateSet
// (CONTROLLER_GET_REPLICA_INFO, 1004, which only the leader answers).
func (g *foGroup) state() (foState, error) {
	last := fmt.Errorf("no controller answered")
	for _, c := range g.ctls {
		if !c.P.Running() {
			continue
		}
		r, err := remotingCall(c.Addr, 1004, map[string]string{"brokerName": foGroupName}, nil, 2*time.Second)
		if err != nil {
			last = err
			continue
		}
		if r.Code != 0 {
			last = fmt.Errorf("controller %s: %d %s", c.ID, r.Code, r.Remark)
			continue
		}
		var set struct {
			Set []int64 `json:"syncStateSet"`
		}
		if err := json.Unmarshal(r.Body, &set); err != nil {
			return foState{}, fmt.Errorf("controller %s: replica info %q: %w", c.ID, r.Body, err)
		}
		return foState{master: r.Ext["masterAddress"], epoch: r.Ext["masterEpoch"], set: len(set.Set)}, nil
	}
	return foState{}, last
}

func (g *foGroup) brokerAt(addr string) *foBroker {
	for _, b := range g.brokers {
		if b.addr == addr {
			return b
		}
	}
	return nil
}

// waitFullSet waits for a running master and a SyncStateSet of three, and
// returns the master.
func (g *foGroup) waitFullSet(t *testing.T) *foBroker {
	t.Helper()
	var m *foBroker
	wait.For(t, "a master and a SyncStateSet of three", func() error {
		st, err := g.state()
		if err != nil {
			return err
		}
		if m = g.brokerAt(st.master); m == nil || !m.p.Running() || m.paused {
			return fmt.Errorf("master %q", st.master)
		}
		if st.set != 3 {
			return fmt.Errorf("master %s, SyncStateSet of %d", st.master, st.set)
		}
		return nil
	})
	return m
}

// --- one round ----------------------------------------------------------------

// foRound is what one fault round measured.
type foRound struct {
	n                int
	kind             string
	oldMaster, nextM string
	elected          time.Duration // from the fault to the controllers naming another master
	gaps             map[string]time.Duration
}

func (r foRound) String() string {
	var gaps []string
	for _, name := range []string{"Producer", "SimpleConsumer", "PushConsumer"} {
		gaps = append(gaps, fmt.Sprintf("%s %v", name, r.gaps[name].Round(time.Millisecond)))
	}
	return fmt.Sprintf("round %d: master %s %s; %s elected after %v; acknowledged again after: %s", r.n, r.oldMaster,
		r.kind, r.nextM, r.elected.Round(time.Millisecond), strings.Join(gaps, ", "))
}

func foTable(rs []foRound) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

// faultRound SIGKILLs or SIGSTOPs the master once the group and the
// clients are steady, and measures the election and each client's gap.
func (g *foGroup) faultRound(t *testing.T, l *foLoad, n int, kind string) foRound {
	t.Helper()
	old := g.waitFullSet(t)
	steady := time.Now()
	wait.For(t, fmt.Sprintf("round %d: every client acknowledged before the fault", n), func() error {
		for _, c := range l.clients {
			if c.firstAfter(steady).IsZero() {
				return fmt.Errorf("%s: nothing acknowledged since %v", c.name, steady.Format("15:04:05.000"))
			}
		}
		return nil
	})
	switch kind {
	case "SIGKILL":
		_ = old.p.Stop(syscall.SIGKILL) // returns once the process has exited
	case "SIGSTOP":
		if err := old.p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		old.paused = true
	}
	fault := time.Now()
	res := foRound{n: n, kind: kind, oldMaster: old.addr, gaps: map[string]time.Duration{}}
	wait.For(t, fmt.Sprintf("round %d: a new master", n), func() error {
		st, err := g.state()
		if err != nil {
			return err
		}
		if st.master == "" || st.master == old.addr {
			return fmt.Errorf("the controllers name %q", st.master)
		}
		res.nextM, res.elected = st.master, time.Since(fault)
		return nil
	})
	if kind == "SIGSTOP" {
		// The old master stays paused a second after the election: the
		// scenario, not a wait.
		time.Sleep(time.Second)
		if err := old.p.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		old.paused = false
	}
	// Each client's first acknowledgement of a call begun after the fault;
	// a client not acknowledged within three times the target fails the
	// round at once.
	err := wait.Poll(3*foRecovery, func() error {
		var missing []string
		for _, c := range l.clients {
			if first := c.firstAfter(fault); first.IsZero() {
				missing = append(missing, c.name)
			} else {
				res.gaps[c.name] = first.Sub(fault)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not acknowledged since the fault: %s", strings.Join(missing, ", "))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("round %d (%s of the master %s, %s elected after %v): %v; acknowledged again: %v", n, kind, old.addr,
			res.nextM, res.elected.Round(time.Millisecond), err, res.gaps)
	}
	if kind == "SIGKILL" {
		old.start() // it rejoins as a slave of the new master
	}
	return res
}

// --- the clients ---------------------------------------------------------------

// foClient records the acknowledgements one client got: when each call
// began and when its OK came, in the order they came.
type foClient struct {
	name string
	mu   sync.Mutex
	acks []foAck
}

type foAck struct{ began, at time.Time }

func (c *foClient) ack(began time.Time) {
	now := time.Now()
	c.mu.Lock()
	c.acks = append(c.acks, foAck{began, now})
	c.mu.Unlock()
}

// firstAfter is when the first OK of a call begun at or after since came
// (zero: none yet). A call begins before it ends, so only the OKs that
// came at or after since are looked at, from the newest back.
func (c *foClient) firstAfter(since time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for i := len(c.acks) - 1; i >= 0 && !c.acks[i].at.Before(since); i-- {
		if a := c.acks[i]; !a.began.Before(since) && (first.IsZero() || a.at.Before(first)) {
			first = a.at
		}
	}
	return first
}

// foLoad is the three clients and what they saw.
type foLoad struct {
	t                      *testing.T
	producer, simple, push *foClient
	clients                []*foClient

	mu       sync.Mutex
	acked    map[string]string // body → message id, every SEND_OK
	failed   int
	received map[string]map[string]bool // consumer → bodies received

	stopSend, stopRecv chan struct{}
	sendWG, recvWG     sync.WaitGroup
}

// newFoLoad starts the three clients with endpoints and the load; their
// stops, when the test ends, are added to stopped.
func newFoLoad(t *testing.T, endpoints string, stopped *sync.WaitGroup) *foLoad {
	t.Helper()
	l := &foLoad{t: t, producer: &foClient{name: "Producer"}, simple: &foClient{name: "SimpleConsumer"},
		push: &foClient{name: "PushConsumer"}, acked: map[string]string{},
		received: map[string]map[string]bool{"SimpleConsumer": {}, "PushConsumer": {}},
		stopSend: make(chan struct{}), stopRecv: make(chan struct{})}
	l.clients = []*foClient{l.producer, l.simple, l.push}
	config := func(group string) *rmq.Config {
		return &rmq.Config{Endpoint: endpoints, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
	}

	// The PushConsumer's acks, which the SDK sends itself.
	observe := func(method string, req, resp any, err error, began time.Time) {
		if method != v2.MessagingService_AckMessage_FullMethodName || err != nil {
			return
		}
		r, ok := req.(*v2.AckMessageRequest)
		a, ok2 := resp.(*v2.AckMessageResponse)
		if ok && ok2 && r.GetGroup().GetName() == foPushGroup && a.GetStatus().GetCode() == v2.Code_OK {
			l.push.ack(began)
		}
	}
	clientObserver.Store(&observe)
	t.Cleanup(func() { clientObserver.Store(nil) })

	p, err := rmq.NewProducer(config(""), rmq.WithTopics(foTopic))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer start: %v", err)
	}
	sc, err := rmq.NewSimpleConsumer(config(foSimpleGroup), rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(all(foTopic)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatalf("simple consumer start: %v", err)
	}
	pc, err := rmq.NewPushConsumer(config(foPushGroup), rmq.WithPushSubscriptionExpressions(all(foTopic)),
		rmq.WithPushAwaitDuration(2*time.Second), rmq.WithPushConsumptionThreadCount(4),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
			l.saw("PushConsumer", mv)
			return rmq.SUCCESS
		}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatalf("push consumer start: %v", err)
	}
	// The load stops before the brokers (cleanups run last first); the
	// clients' stops begin then and stopped waits for them.
	t.Cleanup(func() {
		l.stopProducer()
		close(l.stopRecv)
		l.recvWG.Wait()
		for _, stop := range []func() error{p.GracefulStop, sc.GracefulStop, pc.GracefulStop} {
			stopped.Go(func() { _ = stop() })
		}
	})

	for w := range 2 {
		l.sendWG.Go(func() { l.send(p, w) })
	}
	l.recvWG.Go(func() { l.receive(sc) })
	return l
}

// send sends until stopSend, recording every SEND_OK.
func (l *foLoad) send(p rmq.Producer, w int) {
	for i := 0; ; i++ {
		select {
		case <-l.stopSend:
			return
		default:
		}
		body := fmt.Sprintf("w%d-%07d", w, i)
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rs, err := p.Send(ctx, &rmq.Message{Topic: foTopic, Body: []byte(body)})
		cancel()
		if err == nil && len(rs) == 1 {
			l.producer.ack(began)
			l.mu.Lock()
			l.acked[body] = rs[0].MessageID
			l.mu.Unlock()
			// The load's pace: the scenario, not a wait.
			time.Sleep(2 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		l.failed++
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the pace after a failed send, as an application's retry
	}
}

// receive receives and acks with the SimpleConsumer until stopRecv.
func (l *foLoad) receive(sc rmq.SimpleConsumer) {
	for {
		select {
		case <-l.stopRecv:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		mvs, err := sc.Receive(ctx, 16, 10*time.Second)
		cancel()
		if err != nil {
			if codeOf(err) != codeMessageNotFound {
				time.Sleep(20 * time.Millisecond) // the pace after a failed receive, as an application's retry
			}
			continue
		}
		for _, mv := range mvs {
			l.saw("SimpleConsumer", mv)
			began := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := sc.Ack(ctx, mv); err == nil {
				l.simple.ack(began)
			}
			cancel()
		}
	}
}

func (l *foLoad) saw(consumer string, mv *rmq.MessageView) {
	l.mu.Lock()
	l.received[consumer][string(mv.GetBody())] = true
	l.mu.Unlock()
}

func (l *foLoad) stopProducer() {
	select {
	case <-l.stopSend:
	default:
		close(l.stopSend)
	}
	l.sendWG.Wait()
}

func (l *foLoad) counts() (acked, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), l.failed
}

// missing reports the acknowledged messages a consumer group has not
// received yet (nil: none).
func (l *foLoad) missing() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, consumer := range []string{"SimpleConsumer", "PushConsumer"} {
		var bodies []string
		for body, id := range l.acked {
			if !l.received[consumer][body] {
				bodies = append(bodies, body+" ("+id+")")
			}
		}
		if len(bodies) > 0 {
			slices.Sort(bodies)
			out = append(out, fmt.Sprintf("%s lacks %d of %d acknowledged, e.g. %s", consumer, len(bodies), len(l.acked),
				strings.Join(bodies[:min(len(bodies), 5)], ", ")))
		}
	}
	if len(out) > 0 {
		return fmt.Errorf("%s", strings.Join(out, "; "))
	}
	return nil
}
