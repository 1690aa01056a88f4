package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/internal/wait"
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

// process is one apogee-broker run by a test (package proctest: every
// listener's address from its ready file, its log in a file printed when
// the test fails).
type process struct {
	*proctest.Proc
	addr, advertised, nsAddr, line string
}

// listenerFlags are the broker's listeners a test gives 127.0.0.1:0 unless
// it gives them itself: no test relies on a default or a derived port.
var listenerFlags = []string{"--listen", "--namesrv-listen", "--grpc-listen", "--ha-listen"}

// withListeners appends "127.0.0.1:0" for each listener args leaves out.
func withListeners(args []string) []string {
	out := slices.Clone(args)
	for _, f := range listenerFlags {
		if !slices.Contains(args, f) {
			out = append(out, f, "127.0.0.1:0")
		}
	}
	return out
}

// start runs the broker and waits for its ready file; the start line must
// agree with it.
func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	return startProc(t, proctest.New(t, "apogee-broker", bin), args...)
}

// startProc runs pp (a new run of it) as start does.
func startProc(t *testing.T, pp *proctest.Proc, args ...string) *process {
	t.Helper()
	pp.Run(withListeners(args)...)
	p := &process{Proc: pp, addr: pp.Ready.Listen, advertised: pp.Ready.Advertise, nsAddr: "disabled", line: pp.Line()}
	if pp.Ready.Namesrv != "" {
		p.nsAddr = pp.Ready.Namesrv
	}
	m := startLine.FindStringSubmatch(p.line)
	if m == nil || m[2] != p.addr || m[3] != p.advertised || m[4] != p.nsAddr || pp.Ready.PID != pp.PID() {
		t.Fatalf("start line %q and ready file %+v disagree", p.line, pp.Ready)
	}
	return p
}

// sameAddrs are the flags that restart a broker on the addresses its run
// bound (a restart keeps its identity, as in production: clients and
// slaves reconnect to the addresses they know).
func sameAddrs(f readyfile.File) []string {
	or := func(a string) string { return a } // "" stays "": the listener stays off
	args := []string{"--listen", f.Listen, "--namesrv-listen", or(f.Namesrv), "--grpc-listen", or(f.GRPC)}
	if f.HA != "" {
		args = append(args, "--ha-listen", f.HA)
	}
	return args
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
	p := start(t, bin, "--data-dir", data, "--config", conf, "--metrics-listen", "127.0.0.1:0", "--pprof", "127.0.0.1:0")
	// Every listener asked for port 0 got one of its own, and the ready file
	// names each: the remoting port, the embedded name server, HA, gRPC,
	// metrics and pprof all answer at the address it gives.
	r := p.Ready
	if r.Command != "apogee-broker" || r.Advertise != r.Listen {
		t.Fatalf("ready file %+v", r)
	}
	seen := map[string]bool{}
	for key, a := range map[string]string{"listen": r.Listen, "namesrv": r.Namesrv, "ha": r.HA, "grpc": r.GRPC, "metrics": r.Metrics, "pprof": r.Pprof} {
		if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") || seen[a] {
			t.Fatalf("ready file's %s is %q (file %+v)", key, a, r)
		}
		seen[a] = true
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatalf("%s at %s: %v", key, a, err)
		}
		c.Close()
	}
	if !strings.Contains(p.RunLog(), fmt.Sprintf("msg=ready pid=%d listen=%s advertise=%s ha=%s namesrv=%s grpc=%s metrics=%s pprof=%s",
		p.PID(), r.Listen, r.Advertise, r.HA, r.Namesrv, r.GRPC, r.Metrics, r.Pprof)) {
		t.Fatalf("no ready line with the addresses:\n%s", p.RunLog())
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
	second := exec.Command(bin, "--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--namesrv-listen", "", "--grpc-listen", "",
		"--data-dir", data)
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another running broker") {
		t.Fatalf("second broker on the same directory: %v\n%s", err, out)
	}
	p.stop(t, syscall.SIGTERM)
	// A restart on the same directory and addresses recovers cleanly.
	p2 := startProc(t, p.Proc, append(sameAddrs(r), "--data-dir", data, "--config", conf)...)
	if p2.Ready.Listen != r.Listen || p2.Ready.Namesrv != r.Namesrv || p2.Ready.HA != r.HA || p2.Ready.GRPC != r.GRPC {
		t.Fatalf("restart on %+v, want the addresses of %+v", p2.Ready, r)
	}
	if code := route(t, p2.addr, "TBW102"); code != protocol.RespSuccess {
		t.Fatalf("route after restart: %d", code)
	}
	p2.stop(t, syscall.SIGINT)
}

// stop sends sig and checks that the broker exits 0 after logging that it
// stopped cleanly, and that it removed its ready file; it returns the run's
// log.
func (p *process) stop(t *testing.T, sig os.Signal) string {
	t.Helper()
	if err := p.Stop(sig); err != nil {
		t.Fatalf("exit after %v: %v\n%s", sig, err, p.RunLog())
	}
	logs := p.RunLog()
	if !strings.Contains(logs, `msg="stopped cleanly"`) {
		t.Fatalf("no \"stopped cleanly\" line:\n%s", logs)
	}
	if _, err := os.Stat(p.ReadyPath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the ready file outlived the broker: %v", err)
	}
	return logs
}

// boundNotListening is a loopback address this test holds bound and does
// not listen on (reserve, the broker's own bind-before-listen): a
// connection to it is refused, and no other process can take the port
// while the test runs.
func boundNotListening(t *testing.T) string {
	t.Helper()
	r, err := reserve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.Addr().String()
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
//
// A broker.conf names the ports its deployment settled on; here the
// broker's first run picks them (every listener from :0, the file without
// its namesrvAddr line), and the file, naming them, runs the restart on
// the same addresses and data directory (a restart keeps its identity).
func TestStockBrokerConf(t *testing.T) {
	bin := buildBinary(t)
	// firstRun starts the broker on conf without its namesrvAddr line,
	// stops it, and returns its addresses.
	firstRun := func(t *testing.T, pp *proctest.Proc, conf string, args ...string) readyfile.File {
		t.Helper()
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "namesrvAddr") {
				keep = append(keep, l)
			}
		}
		first := filepath.Join(t.TempDir(), "first.conf")
		if err := os.WriteFile(first, []byte(strings.Join(keep, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		p := startProc(t, pp, append([]string{"-c", first}, args...)...)
		p.stop(t, syscall.SIGTERM)
		return p.Ready
	}
	t.Run("broker.conf", func(t *testing.T) {
		pp := proctest.New(t, "apogee-broker", bin)
		data := filepath.Join(t.TempDir(), "data")
		r := firstRun(t, pp, filepath.Join("testdata", "broker.conf"), "--data-dir", data)
		conf := confFrom(t, "broker.conf", "127.0.0.1:9876", r.Namesrv)
		p := startProc(t, pp, append(sameAddrs(r), "-c", conf, "--data-dir", data)...)
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
			"--data-dir", filepath.Join(t.TempDir(), "data"))
		if info := runtimeInfo(t, p.addr); info["brokerRole"] != "SYNC_MASTER" || info["brokerId"] != "0" {
			t.Errorf("runtime info: role %q id %q, want SYNC_MASTER 0", info["brokerRole"], info["brokerId"])
		}
		p.stop(t, syscall.SIGTERM)
	})
	t.Run("production", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "store")
		pp := proctest.New(t, "apogee-broker", bin)
		r := firstRun(t, pp, confFrom(t, "production.conf", "/data/rocketmq/store", root), "--namesrv-listen", "0.0.0.0:0")
		_, port, _ := net.SplitHostPort(r.Namesrv)
		conf := confFrom(t, "production.conf", "localhost:9876", "localhost:"+port, "/data/rocketmq/store", root)
		p := startProc(t, pp, append(sameAddrs(r), "-c", conf)...)
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
			t.Errorf("localhost:%s was not recognised as the embedded name server:\n%s", port, logs)
		}
		// (traceTopicEnable is honoured: issue 32's trace view.)
		if n := strings.Count(logs, `msg="broker.conf: key ignored"`); n != 10 {
			t.Errorf("%d keys ignored, want 10 (one WARN each):\n%s", n, logs)
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
	out, err := exec.Command(bin, "-c", slaveConf, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--grpc-listen", "",
		"--data-dir", filepath.Join(t.TempDir(), "lonely")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "a slave learns its master from the name servers") {
		t.Fatalf("a slave without name servers: %v\n%s", err, out)
	}

	m := start(t, bin, "-c", filepath.Join("testdata", "2m-2s-sync", "broker-a.properties"),
		"--data-dir", filepath.Join(t.TempDir(), "master"))
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

	sl := start(t, bin, "-c", slaveConf, "--namesrv-listen", "", "--namesrv", m.nsAddr,
		"--data-dir", filepath.Join(t.TempDir(), "slave"))
	wait.Equal(t, "the slave connected to its master", "true", func() string { return runtimeInfo(t, sl.addr)["haMasterConnected"] })
	if resp := send(m.addr); resp.Code != protocol.RespSuccess {
		t.Fatalf("send with the slave connected: code %d %q", resp.Code, resp.Remark)
	}
	wait.For(t, "the slave's commit log at the master's", func() error {
		mi, si := runtimeInfo(t, m.addr), runtimeInfo(t, sl.addr)
		if mi["commitLogMaxOffset"] == si["commitLogMaxOffset"] && si["brokerRole"] == "SLAVE" && si["brokerId"] == "1" {
			return nil
		}
		return fmt.Errorf("slave (%s %s) at %s, master at %s", si["brokerRole"], si["brokerId"], si["commitLogMaxOffset"], mi["commitLogMaxOffset"])
	})
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
	// The dead name server: an address this test binds and never listens
	// on, so nobody answers there (a connection is refused) while the
	// test holds it.
	dead := boundNotListening(t)
	p := start(t, bin, "--namesrv-listen", "", "--namesrv", dead,
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
	p := start(t, bin, "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"))
	if !strings.HasSuffix(p.line, ", version v9.8.7 (commit 0123456789ab)") {
		t.Fatalf("start line %q does not name the version", p.line)
	}
	p.stop(t, syscall.SIGINT)
}
