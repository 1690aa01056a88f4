package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// buildBinary compiles apogee-broker once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "apogee-broker")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var startLine = regexp.MustCompile(`^apogee-broker (\S+) listening on (\S+) \(advertised (\S+)\), name server on (\S+), data (.+), grpc on (\S+), flush (\S+), version (.+)$`)

type process struct {
	cmd                            *exec.Cmd
	addr, advertised, nsAddr, line string
	stderr                         *logBuffer
	exited                         chan error
}

// logBuffer collects a process's output; tests read it while the process
// still writes.
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

func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p, err := tryStart(bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// errAddrInUse marks a start that failed because a port the test chose was
// taken between freePort's check and the broker's bind.
var errAddrInUse = errors.New("address already in use")

// startOnFreePort starts the broker with the arguments args(port) for a
// port from freePort, choosing another port when the broker found it taken:
// freePort closes its listener before the broker binds, and other processes'
// outgoing connections draw from the same ephemeral range meanwhile.
func startOnFreePort(t *testing.T, bin string, args func(port int) []string) (*process, int) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		p, err := tryStart(bin, args(port)...)
		if err == nil {
			return p, port
		}
		if !errors.Is(err, errAddrInUse) || attempt == 4 {
			t.Fatal(err)
		}
		t.Logf("port %d taken before the broker bound it; another", port)
	}
}

// tryStart starts the broker and waits for its start line.
func tryStart(bin string, args ...string) (*process, error) {
	if !slices.Contains(args, "--grpc-listen") {
		// Not the default port: tests run in parallel.
		args = append(args, "--grpc-listen", "127.0.0.1:0")
	}
	cmd := exec.Command(bin, args...)
	out, _ := cmd.StdoutPipe()
	var stderr logBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, stderr: &stderr, exited: make(chan error, 1)}
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
	select {
	case line := <-lines:
		m := startLine.FindStringSubmatch(line)
		if m == nil {
			cmd.Process.Kill()
			return nil, fmt.Errorf("unexpected start line %q", line)
		}
		p.addr, p.advertised, p.nsAddr, p.line = m[2], m[3], m[4], line
	case err := <-p.exited:
		logs := stderr.String()
		if strings.Contains(logs, "address already in use") {
			return nil, fmt.Errorf("broker exited at start: %w\n%s", errAddrInUse, logs)
		}
		return nil, fmt.Errorf("broker exited at start: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return nil, fmt.Errorf("no start line: %s", stderr.String())
	}
	return p, nil
}

// invoke sends req to addr on a connection of its own and returns the answer.
func invoke(t *testing.T, addr string, req *protocol.Command) *protocol.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := remoting.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Invoke(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// route asks addr for a topic's route and returns the response code.
func route(t *testing.T, addr, topic string) int32 {
	t.Helper()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
	return invoke(t, addr, &req).Code
}

func TestStartServeSignalRestartAndLock(t *testing.T) {
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	conf := filepath.Join(t.TempDir(), "broker.conf")
	os.WriteFile(conf, []byte("# test\nbrokerClusterName=TestCluster\nbrokerName=broker-x\nflushDiskType=SYNC_FLUSH\nautoCreateTopicEnable=true\ndefaultTopicQueueNums=4\n"), 0o644)
	args := []string{"--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0", "--data-dir", data, "--config", conf}
	p := start(t, bin, args...)
	if !strings.HasPrefix(p.addr, "127.0.0.1:") {
		t.Fatalf("listen address %q", p.addr)
	}
	// Both the broker's address and the name-server listener answer routes;
	// TBW102 exists because auto-create is on.
	for _, a := range []string{p.addr, p.nsAddr} {
		if code := route(t, a, "TBW102"); code != protocol.RespSuccess {
			t.Fatalf("route of TBW102 at %s: code %d", a, code)
		}
		if code := route(t, a, "NoSuchTopic"); code != protocol.RespTopicNotExist {
			t.Fatalf("route of an unknown topic at %s: code %d", a, code)
		}
	}
	// A second broker on the same data directory is refused with a clear message.
	second := exec.Command(bin, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--grpc-listen", "", "--data-dir", data)
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another running broker") {
		t.Fatalf("second broker on the same directory: %v\n%s", err, out)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatal("broker did not stop after SIGTERM")
	}
	// A restart on the same directory recovers cleanly.
	p2 := start(t, bin, args...)
	if code := route(t, p2.addr, "TBW102"); code != protocol.RespSuccess {
		t.Fatalf("route after restart: %d", code)
	}
	p2.cmd.Process.Signal(syscall.SIGINT)
	if err := <-p2.exited; err != nil {
		t.Fatalf("exit after SIGINT: %v", err)
	}
}

// stop sends sig and checks that the broker exits 0 after logging that it
// stopped cleanly; it returns the broker's stderr.
func (p *process) stop(t *testing.T, sig os.Signal) string {
	t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit after %v: %v\n%s", sig, err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("broker did not stop after %v\n%s", sig, p.stderr.String())
	}
	logs := p.stderr.String()
	if !strings.Contains(logs, `msg="stopped cleanly"`) {
		t.Fatalf("no \"stopped cleanly\" line:\n%s", logs)
	}
	return logs
}

// freePort returns a loopback port nobody listens on at the moment.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// confFrom copies a testdata file into a temporary directory with the
// replacements old1, new1, old2, new2, ... applied.
func confFrom(t *testing.T, name string, replace ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer(replace...).Replace(string(b))
	path := filepath.Join(t.TempDir(), filepath.Base(name))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStockBrokerConf runs the binary with the broker.conf RocketMQ ships
// (and the namesrvAddr line every user adds, naming the broker's own
// embedded name server), the master of a 2m-2s-sync cluster, and a
// production-style file: each starts, serves, and stops on SIGTERM with
// status 0 and "stopped cleanly", without ever registering with itself.
func TestStockBrokerConf(t *testing.T) {
	bin := buildBinary(t)
	t.Run("broker.conf", func(t *testing.T) {
		p, _ := startOnFreePort(t, bin, func(port int) []string {
			conf := confFrom(t, "broker.conf", "127.0.0.1:9876", fmt.Sprintf("127.0.0.1:%d", port))
			return []string{"-c", conf, "--listen", "127.0.0.1:0", "--namesrv-listen", fmt.Sprintf("127.0.0.1:%d", port),
				"--data-dir", filepath.Join(t.TempDir(), "data")}
		})
		if code := route(t, p.nsAddr, "TBW102"); code != protocol.RespSuccess {
			t.Fatalf("route at the embedded name server: code %d", code)
		}
		logs := p.stop(t, syscall.SIGTERM)
		for _, want := range []string{
			"not registering with a name server that is this broker's own",
			`msg="broker.conf: key ignored" key=deleteWhen value=04`,
		} {
			if !strings.Contains(logs, want) {
				t.Errorf("stderr lacks %q:\n%s", want, logs)
			}
		}
		for _, bad := range []string{"level=ERROR", "unregister from the name servers failed", "registration failed"} {
			if strings.Contains(logs, bad) {
				t.Errorf("stderr has %q:\n%s", bad, logs)
			}
		}
	})
	t.Run("2m-2s-sync master", func(t *testing.T) {
		p := start(t, bin, "--config", filepath.Join("testdata", "2m-2s-sync", "broker-a.properties"),
			"--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"))
		if info := runtimeInfo(t, p.addr); info["brokerRole"] != "SYNC_MASTER" || info["brokerId"] != "0" {
			t.Errorf("runtime info: role %q id %q, want SYNC_MASTER 0", info["brokerRole"], info["brokerId"])
		}
		p.stop(t, syscall.SIGTERM)
	})
	t.Run("production", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "store")
		p, port := startOnFreePort(t, bin, func(port int) []string {
			conf := confFrom(t, "production.conf", "localhost:9876", fmt.Sprintf("localhost:%d", port), "/data/rocketmq/store", root)
			return []string{"-c", conf, "--listen", "127.0.0.1:0", "--namesrv-listen", fmt.Sprintf("0.0.0.0:%d", port)}
		})
		if !strings.Contains(p.line, "broker-prod") || !strings.Contains(p.line, "data "+root+",") || !strings.Contains(p.line, "flush sync,") {
			t.Fatalf("start line %q does not reflect the file", p.line)
		}
		if !strings.HasPrefix(p.advertised, "127.0.0.1:") { // brokerIP1
			t.Fatalf("advertised %q, want brokerIP1's 127.0.0.1", p.advertised)
		}
		// mapedFileSizeCommitLog=64 MiB: the first segment has that size.
		st, err := os.Stat(filepath.Join(root, "commitlog", "00000000000000000000"))
		if err != nil || st.Size() != 64<<20 {
			t.Fatalf("first segment: %v, size %d", err, st.Size())
		}
		// autoCreateTopicEnable=false: no TBW102.
		if code := route(t, p.addr, "TBW102"); code != protocol.RespTopicNotExist {
			t.Fatalf("route of TBW102 with auto-create off: code %d", code)
		}
		logs := p.stop(t, syscall.SIGTERM)
		if !strings.Contains(logs, "not registering with a name server that is this broker's own") {
			t.Errorf("localhost:%d was not recognised as the embedded name server:\n%s", port, logs)
		}
		if n := strings.Count(logs, `msg="broker.conf: key ignored"`); n != 11 {
			t.Errorf("%d keys ignored, want 11 (one WARN each):\n%s", n, logs)
		}
	})
}

// TestStockMasterSlave runs the master and the slave of RocketMQ's
// 2m-2s-sync example as two processes, the slave registering with the
// master's embedded name server: before the slave connects, the
// SYNC_MASTER answers a send SLAVE_NOT_AVAILABLE (stored all the same, with
// the send result's fields); once it has, SUCCESS, and the slave's commit
// log reaches the master's; the slave refuses sends. A slave with no name
// server to learn its master from is refused at start.
func TestStockMasterSlave(t *testing.T) {
	bin := buildBinary(t)
	slaveConf := filepath.Join("testdata", "2m-2s-sync", "broker-a-s.properties")
	out, err := exec.Command(bin, "-c", slaveConf, "--listen", "127.0.0.1:0", "--namesrv-listen", "",
		"--data-dir", filepath.Join(t.TempDir(), "lonely")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "a slave learns its master from the name servers") {
		t.Fatalf("a slave without name servers: %v\n%s", err, out)
	}

	m := start(t, bin, "-c", filepath.Join("testdata", "2m-2s-sync", "broker-a.properties"),
		"--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "master"))
	send := func(addr string) *protocol.Command {
		var req protocol.Command
		req.InitRequest(protocol.ReqSendMessageV2, 0)
		(&protocol.SendMessageRequest{ProducerGroup: []byte("pg"), Topic: []byte("Replicated"), DefaultTopic: []byte("TBW102"),
			DefaultTopicQueueNums: 4, QueueID: -1, BornTimestamp: time.Now().UnixMilli()}).EncodeV2(&req.Ext)
		req.Body = []byte("hello")
		return invoke(t, addr, &req)
	}
	if resp := send(m.addr); resp.Code != protocol.RespSlaveNotAvailable {
		t.Fatalf("send to a SYNC_MASTER without a slave: code %d %q", resp.Code, resp.Remark)
	} else if id, _ := resp.Ext.GetString("msgId"); id == "" {
		t.Fatalf("SLAVE_NOT_AVAILABLE without the send result's msgId: %v", resp.Ext)
	}

	sl := start(t, bin, "-c", slaveConf, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--namesrv", m.nsAddr,
		"--data-dir", filepath.Join(t.TempDir(), "slave"))
	deadline := time.Now().Add(30 * time.Second)
	for runtimeInfo(t, sl.addr)["haMasterConnected"] != "true" {
		if time.Now().After(deadline) {
			t.Fatalf("the slave did not connect to its master:\n%s", sl.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp := send(m.addr); resp.Code != protocol.RespSuccess {
		t.Fatalf("send with the slave connected: code %d %q", resp.Code, resp.Remark)
	}
	for {
		mi, si := runtimeInfo(t, m.addr), runtimeInfo(t, sl.addr)
		if mi["commitLogMaxOffset"] == si["commitLogMaxOffset"] && si["brokerRole"] == "SLAVE" && si["brokerId"] == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slave at %s, master at %s", si["commitLogMaxOffset"], mi["commitLogMaxOffset"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp := send(sl.addr); resp.Code != protocol.RespSystemBusy || !strings.Contains(string(resp.Remark), "[REJECTREQUEST]") {
		t.Fatalf("send to the slave: code %d %q", resp.Code, resp.Remark)
	}
	for _, p := range []*process{sl, m} {
		if logs := p.stop(t, syscall.SIGTERM); strings.Contains(logs, "level=ERROR") {
			t.Errorf("an ERROR logged:\n%s", logs)
		}
	}
}

// TestUnregisterFailureIsAWarning: an external name server that is gone at
// shutdown costs a WARN, not a failed stop.
func TestUnregisterFailureIsAWarning(t *testing.T) {
	bin := buildBinary(t)
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := start(t, bin, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--namesrv", dead,
		"--data-dir", filepath.Join(t.TempDir(), "data"))
	logs := p.stop(t, syscall.SIGTERM)
	if !strings.Contains(logs, "level=WARN msg=\"broker: unregister from the name servers failed") {
		t.Fatalf("no WARN for the failed unregistration:\n%s", logs)
	}
}

// TestVersion: --version prints what -ldflags set, and the start line
// names it.
func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "apogee-broker")
	const pkg = "github.com/apogeemq/apogee/internal/version"
	ldflags := "-X " + pkg + ".version=v9.8.7 -X " + pkg + ".commit=0123456789abcdef0123456789abcdef01234567"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "apogee-broker v9.8.7, commit 0123456789abcdef0123456789abcdef01234567, go1.") {
		t.Fatalf("--version printed %q", out)
	}
	p := start(t, bin, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"))
	if !strings.HasSuffix(p.line, ", version v9.8.7 (commit 0123456789ab)") {
		t.Fatalf("start line %q does not name the version", p.line)
	}
	p.stop(t, syscall.SIGINT)
}
