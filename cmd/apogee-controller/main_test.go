package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
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

// member is one controller of a test's group (proctest.Controller: ports
// from :0 at its first run, kept by its restarts; its log printed if the
// test fails).
type member = proctest.Controller

// newGroup starts n members on ports from :0: the first alone (--peers
// c1=127.0.0.1:0), each other joining through the members before it
// (--join); it returns once every member's configuration has all n (asked
// with cfg: nil for plain remoting). extra flags go to every process. Every
// start checks the start line against the ready file.
func newGroup(t *testing.T, n int, cfg *tls.Config, extra ...string) []*member {
	t.Helper()
	ms := proctest.StartControllers(t, binPath, n, extra...)
	for _, m := range ms {
		checkStart(t, m)
	}
	waitMembers(t, ms, n, cfg)
	return ms
}

// start runs the member again (on the addresses of its first run) and
// checks its start line.
func start(t *testing.T, m *member) {
	t.Helper()
	m.Start()
	checkStart(t, m)
}

// checkStart checks that the member's start line and ready file name it at
// the addresses its first run bound.
func checkStart(t *testing.T, m *member) {
	t.Helper()
	r := m.P.Ready
	mm := startLine.FindStringSubmatch(m.P.Line())
	if mm == nil || mm[1] != m.ID || mm[2] != m.Addr || mm[3] != m.Raft || r.Listen != m.Addr || r.Raft != m.Raft ||
		r.Advertise != m.Addr || r.Command != "apogee-controller" {
		t.Fatalf("start line %q, ready file %+v: want %s at %s, raft %s", m.P.Line(), r, m.ID, m.Addr, m.Raft)
	}
}

func addrsOf(ms []*member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Addr
	}
	return out
}

// probe is a controller client that only asks for metadata.
func probe(t *testing.T, ms []*member, cfg *tls.Config) *client.Client {
	t.Helper()
	cl, err := client.New(client.Options{Addrs: addrsOf(ms), Broker: "probe", Addr: "127.0.0.1:1", RequestTimeout: time.Second,
		TLS: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// waitMembers waits until every running member's GET_METADATA_INFO lists
// n members (the group's Raft configuration).
func waitMembers(t *testing.T, ms []*member, n int, cfg *tls.Config) {
	t.Helper()
	cl := probe(t, ms, cfg)
	wait.For(t, fmt.Sprintf("%d members in every controller's configuration", n), func() error {
		for _, m := range ms {
			if !m.P.Running() {
				continue
			}
			md, err := cl.Metadata(context.Background(), m.Addr)
			if err != nil {
				return fmt.Errorf("%s: %w", m.ID, err)
			}
			if got := len(strings.Split(md.Peers, ",")); md.Peers == "" || got != n {
				return fmt.Errorf("%s has %q", m.ID, md.Peers)
			}
		}
		return nil
	})
}

// leader waits until a member other than skip, asked for its metadata (with
// cfg, nil for plain), says it leads.
func leader(t *testing.T, ms []*member, skip *member, cfg *tls.Config) *member {
	t.Helper()
	cl := probe(t, ms, cfg)
	var found *member
	wait.For(t, "a controller leader", func() error {
		for _, m := range ms {
			if m == skip || !m.P.Running() {
				continue
			}
			if md, err := cl.Metadata(context.Background(), m.Addr); err == nil && md.IsLeader {
				found = m
				return nil
			}
		}
		return errors.New("no member says it leads")
	})
	return found
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
	ms := newGroup(t, 3, nil, append(fastFlags, "--snapshot-threshold", "8", "--trailing-logs", "4", "--snapshot-interval", "200ms")...)
	lead := leader(t, ms, nil, nil)
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
	lead.P.Stop(syscall.SIGKILL)
	next := leader(t, ms, lead, nil)
	t.Logf("leader %s SIGKILLed; %s leads %v later", lead.ID, next.ID, time.Since(killed).Round(time.Millisecond))
	s, err := a.cl.GetReplicaInfo(ctx, "broker-a")
	if err != nil {
		t.Fatal(err)
	}
	if s.MasterID != a.id || s.MasterEpoch != 1 || len(s.SyncStateSet) != 2 {
		t.Fatalf("state after the leader's death: %+v", s)
	}
	// The brokers kept heartbeating the survivors: no election meanwhile.
	// The sleep is the span being tested (longer than the 2 s heartbeat
	// timeout): nothing happens at its end to wait for.
	time.Sleep(2500 * time.Millisecond)
	if s, err := a.cl.GetReplicaInfo(ctx, "broker-a"); err != nil || s.MasterEpoch != 1 {
		t.Fatalf("master replaced after a controller failover: %+v %v", s, err)
	}
	start(t, lead)

	var follower *member
	for _, m := range ms {
		if m != next && m != lead {
			follower = m
		}
	}
	follower.P.Stop(syscall.SIGKILL)
	died := time.Now()
	a.stop()
	stopped := time.Now()
	wait.Until(t, "b told it is master", func() bool {
		m, e := b.view()
		return m == b.id && e == 2
	})
	t.Logf("with %s down, master replaced %v after its broker stopped", follower.ID, time.Since(stopped).Round(time.Millisecond))
	_ = died
	start(t, follower)
	// The leader goes again: the group of the two restarted nodes must
	// hold the election that happened while one of them was down.
	next.P.Stop(syscall.SIGKILL)
	leader(t, ms, next, nil)
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
	if snaps, _ := filepath.Glob(filepath.Join(lead.DataDir, "snapshots", "*")); len(snaps) == 0 {
		t.Errorf("no snapshot in %s", lead.DataDir)
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
	ms := newGroup(t, 3, nil)
	lead := leader(t, ms, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := newSimBroker(t, ms, "broker-a", 0), newSimBroker(t, ms, "broker-a", 0)
	a.join(t, ctx)
	b.join(t, ctx)
	if _, err := a.cl.AlterSyncStateSet(ctx, a.id, 1, wire.SyncStateSet{Set: []int64{a.id, b.id}, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	lead.P.Stop(syscall.SIGKILL)
	next := leader(t, ms, lead, nil)
	t.Logf("default Raft timeouts: leader SIGKILLed, %s leads %v later", next.ID, time.Since(killed).Round(time.Millisecond))
	a.stop()
	stopped := time.Now()
	wait.Until(t, "b told it is master", func() bool {
		m, e := b.view()
		return m == b.id && e == 2
	})
	// The time is reported, not bounded: the failover budget is measured
	// by scripts/bench-controller.sh and the interop suite's full rounds
	// (docs/failover.md), on a machine whose load the test cannot know.
	t.Logf("default timings: master's broker stopped, replacement told %v later", time.Since(stopped).Round(time.Millisecond))
}

// SIGTERM: leadership is handed over, the process exits 0 after "stopped
// cleanly"; a second process on the same data directory is refused.
func TestSIGTERMAndLock(t *testing.T) {
	ms := newGroup(t, 3, nil, fastFlags...)
	lead := leader(t, ms, nil, nil)
	dup := exec.Command(binPath, "--id", lead.ID, "--peers", lead.ID+"=127.0.0.1:0", "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0",
		"--data-dir", lead.DataDir)
	out, err := dup.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another running controller") {
		t.Fatalf("second process on a data directory: %v\n%s", err, out)
	}
	start := time.Now()
	if err := lead.P.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, lead.P.RunLog())
	}
	if !strings.Contains(lead.P.RunLog(), "stopped cleanly") {
		t.Fatalf("no clean stop:\n%s", lead.P.RunLog())
	}
	if _, err := os.Stat(lead.P.ReadyPath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the ready file outlived the process: %v", err)
	}
	next := leader(t, ms, lead, nil)
	t.Logf("leader stopped by SIGTERM; %s leads %v later", next.ID, time.Since(start).Round(time.Millisecond))
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

// --peers and --join: one of them, not both; --join needs --raft-listen;
// port 0 only for a group of one. A listener in use is an error naming
// what moves it.
func TestJoinFlagsAndListenersInUse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--id", "c1"}, "--peers or --join is required"},
		{[]string{"--id", "c2", "--peers", "c2=127.0.0.1:0", "--join", "127.0.0.1:9"}, "exclude each other"},
		{[]string{"--id", "c2", "--join", "127.0.0.1:9"}, "--join needs --raft-listen"},
		{[]string{"--id", "c2", "--join", "no-port", "--raft-listen", "127.0.0.1:0"}, `--join "no-port"`},
	} {
		if _, err := parseConfig(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().String()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--peers", "c1=127.0.0.1:0,c2=127.0.0.1:7,c3=127.0.0.1:8", "--listen", "127.0.0.1:0"}, "port 0 only for a group of one"},
		{[]string{"--peers", "c1=127.0.0.1:0", "--listen", taken}, "move it with --listen"},
		{[]string{"--peers", "c1=" + taken, "--listen", "127.0.0.1:0"}, "move it with --raft-listen, or this node's --peers address"},
		{[]string{"--peers", "c1=127.0.0.1:0", "--listen", "127.0.0.1:0", "--pprof", taken}, "move it with --pprof"},
	} {
		ready := filepath.Join(t.TempDir(), "ready.json")
		args := append([]string{"--id", "c1", "--data-dir", t.TempDir(), "--ready-file", ready}, c.args...)
		out, err := exec.Command(binPath, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v\n%s", c.args, err, out)
		}
		if _, err := os.Stat(ready); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v: a ready file after a failed start: %v", c.args, err)
		}
	}
}

// --log-format json: every line on standard error is one JSON object, the
// Raft library's own lines included.
func TestJSONLogs(t *testing.T) {
	ms := newGroup(t, 1, nil, append([]string{"--log-format", "json", "--raft-log-level", "info"}, fastFlags...)...)
	leader(t, ms, nil, nil)
	m := ms[0]
	if err := m.P.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, m.P.RunLog())
	}
	raft := 0
	for _, line := range strings.Split(strings.TrimSpace(m.P.RunLog()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q (%v)", line, err)
		}
		if rec["@module"] == "raft" {
			raft++
		}
	}
	if raft == 0 {
		t.Fatalf("no line of the Raft library at --raft-log-level info:\n%s", m.P.RunLog())
	}
}
