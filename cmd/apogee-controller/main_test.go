package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/remoting"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "apogee-controller-test-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "apogee-controller")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("go build: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var startLine = regexp.MustCompile(`^apogee-controller (\S+) listening on (\S+), raft (\S+), data (.+), version (.+)$`)

type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is one apogee-controller process; member is its place in the
// group (addresses and data directory survive restarts).
type proc struct {
	cmd    *exec.Cmd
	stderr *logBuffer
	exited chan error
	done   bool
}

type member struct {
	id, raftAddr, addr, dataDir string
	extra                       []string
	peers                       string
	p                           *proc
}

// freeAddrs reserves n loopback addresses (listen on port 0, then close:
// the processes bind them right after).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range lns {
		l.Close()
	}
	return out
}

// newGroup lays out n members; extra flags go to every process.
func newGroup(t *testing.T, n int, extra ...string) []*member {
	addrs := freeAddrs(t, 2*n)
	var ms []*member
	var peers []string
	for i := range n {
		m := &member{id: fmt.Sprintf("c%d", i+1), raftAddr: addrs[2*i], addr: addrs[2*i+1], dataDir: t.TempDir(), extra: extra}
		peers = append(peers, m.id+"="+m.raftAddr)
		ms = append(ms, m)
	}
	for _, m := range ms {
		m.peers = strings.Join(peers, ",")
	}
	for _, m := range ms {
		m.start(t)
	}
	return ms
}

func (m *member) start(t *testing.T) {
	t.Helper()
	args := append([]string{"--id", m.id, "--peers", m.peers, "--listen", m.addr, "--data-dir", m.dataDir}, m.extra...)
	cmd := exec.Command(binPath, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: &logBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() { p.exited <- cmd.Wait() }()
	m.p = p
	t.Cleanup(func() {
		if !p.done {
			cmd.Process.Kill()
			<-p.exited
			p.done = true
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", m.id, p.stderr.String())
		}
	})
	select {
	case line := <-lines:
		mm := startLine.FindStringSubmatch(line)
		if mm == nil || mm[1] != m.id || mm[2] != m.addr || mm[3] != m.raftAddr {
			t.Fatalf("unexpected start line %q", line)
		}
	case err := <-p.exited:
		p.done = true
		t.Fatalf("%s exited at start: %v\n%s", m.id, err, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no start line: %s", m.id, p.stderr.String())
	}
}

// kill sends sig and waits for the exit.
func (m *member) kill(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := m.p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-m.p.exited:
		m.p.done = true
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not exit after %v", m.id, sig)
	}
	return nil
}

func addrsOf(ms []*member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.addr
	}
	return out
}

// leader waits until a member, asked for its metadata, says it leads.
func leader(t *testing.T, ms []*member, skip *member, within time.Duration) *member {
	t.Helper()
	cl, err := client.New(client.Options{Addrs: addrsOf(ms), Broker: "probe", Addr: "127.0.0.1:1", RequestTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, m := range ms {
			if m == skip || m.p.done {
				continue
			}
			md, err := cl.Metadata(context.Background(), m.addr)
			if err == nil && md.IsLeader {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no controller leader within %v", within)
	return nil
}

// simBroker is a broker simulated by the client library.
type simBroker struct {
	cl     *client.Client
	srv    *remoting.Server
	addr   string
	id     int64
	mu     sync.Mutex
	master int64
	epoch  int32
}

func newSimBroker(t *testing.T, ms []*member, name string, hbTimeout time.Duration) *simBroker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &simBroker{addr: l.Addr().String()}
	b.cl, err = client.New(client.Options{Addrs: addrsOf(ms), Cluster: "DefaultCluster", Broker: name, Addr: b.addr,
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: hbTimeout, RequestTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnRoleChange: func(s client.State) {
			b.mu.Lock()
			b.master, b.epoch = s.MasterID, s.MasterEpoch
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

func (b *simBroker) stop() {
	b.cl.Close()
	b.srv.Close()
}

func (b *simBroker) view() (int64, int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.master, b.epoch
}

func (b *simBroker) join(t *testing.T, ctx context.Context) {
	t.Helper()
	reg, err := b.cl.Register(ctx, 0, "tok")
	if err != nil {
		t.Fatal(err)
	}
	b.id = reg.ID
	b.cl.StartHeartbeats(reg.ID)
	if reg.State.MasterID == 0 {
		if _, err := b.cl.ElectMaster(ctx, reg.ID, false); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// fastFlags shorten Raft's timeouts; the brokers' heartbeat timeout stays
// at 2 s, as a loaded machine (parallel tests under -race) delays a
// heartbeat by a second now and then, which would replace a live master.
var fastFlags = []string{"--raft-heartbeat-timeout", "200ms", "--raft-election-timeout", "200ms",
	"--raft-leader-lease-timeout", "100ms", "--heartbeat-timeout", "2s", "--scan-interval", "100ms"}

// Three real processes: SIGKILL the leader (a new one is elected, the state
// survives, live masters stay masters), bring it back, SIGKILL a follower
// (the majority goes on: a master whose broker dies is replaced), bring it
// back and SIGKILL the leader again so that the restarted follower must
// serve what it caught up on.
func TestThreeProcessesSurviveMinorityLoss(t *testing.T) {
	ms := newGroup(t, 3, append(fastFlags, "--snapshot-threshold", "8", "--trailing-logs", "4", "--snapshot-interval", "200ms")...)
	lead := leader(t, ms, nil, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := newSimBroker(t, ms, "broker-a", 0), newSimBroker(t, ms, "broker-a", 0)
	a.join(t, ctx)
	b.join(t, ctx)
	if _, err := a.cl.AlterSyncStateSet(ctx, a.id, 1, wire.SyncStateSet{Set: []int64{a.id, b.id}, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	// Enough entries for snapshots and compaction.
	for i := range 12 {
		x := newSimBroker(t, ms, fmt.Sprintf("broker-x%d", i), 0)
		x.join(t, ctx)
		x.stop()
	}

	killed := time.Now()
	lead.kill(t, syscall.SIGKILL)
	next := leader(t, ms, lead, 15*time.Second)
	t.Logf("leader %s SIGKILLed; %s leads %v later", lead.id, next.id, time.Since(killed).Round(time.Millisecond))
	s, err := a.cl.GetReplicaInfo(ctx, "broker-a")
	if err != nil {
		t.Fatal(err)
	}
	if s.MasterID != a.id || s.MasterEpoch != 1 || len(s.SyncStateSet) != 2 {
		t.Fatalf("state after the leader's death: %+v", s)
	}
	// The brokers kept heartbeating the survivors: no election meanwhile
	// (longer than the heartbeat timeout).
	time.Sleep(2500 * time.Millisecond)
	if s, err := a.cl.GetReplicaInfo(ctx, "broker-a"); err != nil || s.MasterEpoch != 1 {
		t.Fatalf("master replaced after a controller failover: %+v %v", s, err)
	}
	lead.start(t)

	var follower *member
	for _, m := range ms {
		if m != next && m != lead {
			follower = m
		}
	}
	follower.kill(t, syscall.SIGKILL)
	died := time.Now()
	a.stop()
	took := waitFor(t, 10*time.Second, "b told it is master", func() bool {
		m, e := b.view()
		return m == b.id && e == 2
	})
	t.Logf("with %s down, master replaced %v after its broker stopped", follower.id, took)
	_ = died
	follower.start(t)
	// The leader goes again: the group of the two restarted nodes must
	// hold the election that happened while one of them was down.
	next.kill(t, syscall.SIGKILL)
	leader(t, ms, next, 15*time.Second)
	s, err = b.cl.GetReplicaInfo(ctx, "broker-a")
	if err != nil {
		t.Fatal(err)
	}
	if s.MasterID != b.id || s.MasterEpoch != 2 {
		t.Fatalf("state held by the restarted nodes: %+v", s)
	}
	for i := range 12 {
		if _, err := b.cl.GetReplicaInfo(ctx, fmt.Sprintf("broker-x%d", i)); err != nil {
			t.Fatalf("broker-x%d lost: %v", i, err)
		}
	}
	if snaps, _ := filepath.Glob(filepath.Join(lead.dataDir, "snapshots", "*")); len(snaps) == 0 {
		t.Errorf("no snapshot in %s", lead.dataDir)
	}
}

// The defaults once: Raft's own timeouts and the 3 s heartbeat timeout.
// A SIGKILLed leader is replaced; a master whose heartbeats stop with its
// connections open would be replaced within the heartbeat timeout, and one
// whose process dies (connections closed) within the close grace.
func TestDefaultTimings(t *testing.T) {
	if testing.Short() {
		t.Skip("several seconds of default timeouts")
	}
	ms := newGroup(t, 3)
	lead := leader(t, ms, nil, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := newSimBroker(t, ms, "broker-a", 0), newSimBroker(t, ms, "broker-a", 0)
	a.join(t, ctx)
	b.join(t, ctx)
	if _, err := a.cl.AlterSyncStateSet(ctx, a.id, 1, wire.SyncStateSet{Set: []int64{a.id, b.id}, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	lead.kill(t, syscall.SIGKILL)
	next := leader(t, ms, lead, 20*time.Second)
	t.Logf("default Raft timeouts: leader SIGKILLed, %s leads %v later", next.id, time.Since(killed).Round(time.Millisecond))
	a.stop()
	took := waitFor(t, 10*time.Second, "b told it is master", func() bool {
		m, e := b.view()
		return m == b.id && e == 2
	})
	t.Logf("default timings: master's broker stopped, replacement told %v later", took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("replacement took %v: over the detection part of the 5 s budget", took)
	}
}

// SIGTERM: leadership is handed over, the process exits 0 after "stopped
// cleanly"; a second process on the same data directory is refused.
func TestSIGTERMAndLock(t *testing.T) {
	ms := newGroup(t, 3, fastFlags...)
	lead := leader(t, ms, nil, 15*time.Second)
	dup := exec.Command(binPath, "--id", lead.id, "--peers", lead.peers, "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0",
		"--data-dir", lead.dataDir)
	out, err := dup.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another running controller") {
		t.Fatalf("second process on a data directory: %v\n%s", err, out)
	}
	start := time.Now()
	if err := lead.kill(t, syscall.SIGTERM); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, lead.p.stderr.String())
	}
	if !strings.Contains(lead.p.stderr.String(), "stopped cleanly") {
		t.Fatalf("no clean stop:\n%s", lead.p.stderr.String())
	}
	next := leader(t, ms, lead, 10*time.Second)
	t.Logf("leader stopped by SIGTERM; %s leads %v later", next.id, time.Since(start).Round(time.Millisecond))
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "controller.properties")
	os.WriteFile(file, []byte("controllerDLegerGroup=g1\ncontrollerDLegerPeers=n0-127.0.0.1:9877;n1-127.0.0.1:9867;n2-127.0.0.1:9857\n"+
		"controllerDLegerSelfId=n1\ncontrollerStorePath="+dir+"/store\nlistenPort=19878\nenableElectUncleanMaster=true\n"+
		"scanInactiveMasterInterval=700\ncontrollerThreadPoolNums=4\n"), 0o644)
	c, err := parseConfig([]string{"-c", file, "--listen", "127.0.0.1:9999"})
	if err != nil {
		t.Fatal(err)
	}
	if c.id != "n1" || c.group != "g1" || len(c.peers) != 3 || c.peers[1].Addr != "127.0.0.1:9867" || c.dataDir != dir+"/store" ||
		c.listen != "127.0.0.1:9999" || !c.unclean || c.scanInterval != 700*time.Millisecond || len(c.notes) != 1 {
		t.Fatalf("config %+v", c)
	}
	os.WriteFile(file, []byte("controllerDLegerSelfID=n1\n"), 0o644)
	if _, err := parseConfig([]string{"-c", file}); err == nil || !strings.Contains(err.Error(), `did you mean "controllerDLegerSelfId"`) {
		t.Fatalf("misspelt key: %v", err)
	}
	if _, err := parseConfig([]string{"--id", "x", "--peers", "a=127.0.0.1:1"}); err == nil {
		t.Fatal("an id outside the peers was accepted")
	}
}
