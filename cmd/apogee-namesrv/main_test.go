package main

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The binary is built once per test run (TestMain) into a temporary directory.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "apogee-namesrv-test-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "apogee-namesrv")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("go build: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var startLine = regexp.MustCompile(`^apogee-namesrv listening on (\S+), data (.+), version (.+)$`)

// process is one running apogee-namesrv (package proctest: its addresses
// from its ready file, its log in a file printed if the test fails).
type process struct {
	*proctest.Proc
	addr, line string
}

// start runs the binary with args and waits for its ready file; the start
// line must name the address the ready file does. The process is killed
// when the test ends if the test has not stopped it.
func start(t *testing.T, args ...string) *process {
	t.Helper()
	pp := proctest.Start(t, "apogee-namesrv", binPath, args...)
	p := &process{Proc: pp, addr: pp.Ready.Listen, line: pp.Line()}
	m := startLine.FindStringSubmatch(p.line)
	if m == nil || m[1] != p.addr || pp.Ready.Command != "apogee-namesrv" || pp.Ready.PID != pp.PID() {
		t.Fatalf("start line %q and ready file %+v disagree", p.line, pp.Ready)
	}
	return p
}

// stop sends sig and checks that the process exits 0 after logging that it
// stopped cleanly, and that it removed its ready file.
func (p *process) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.Stop(sig); err != nil {
		t.Fatalf("exit after %v: %v\n%s", sig, err, p.RunLog())
	}
	if logs := p.RunLog(); !strings.Contains(logs, `msg="stopped cleanly"`) {
		t.Fatalf("no \"stopped cleanly\" line:\n%s", logs)
	}
	if _, err := os.Stat(p.ReadyPath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the ready file outlived the process: %v", err)
	}
}

// dial connects to addr; the connection is closed when the test ends.
func dial(t *testing.T, addr string) *remoting.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func invoke(t *testing.T, c *remoting.Client, req *protocol.Command) *protocol.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Invoke(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", protocol.RequestCodeName(req.Code), err)
	}
	return resp
}

// routeCode asks addr for topic's route on a connection of its own and
// returns the response code.
func routeCode(t *testing.T, addr, topic string) int32 {
	t.Helper()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
	c := dial(t, addr)
	defer c.Close()
	return invoke(t, c, &req).Code
}

// route returns topic's route from addr, failing unless it exists.
func route(t *testing.T, addr, topic string) protocol.TopicRouteData {
	t.Helper()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
	c := dial(t, addr)
	defer c.Close()
	resp := invoke(t, c, &req)
	if resp.Code != protocol.RespSuccess {
		t.Fatalf("route of %s at %s: code %d %s", topic, addr, resp.Code, resp.Remark)
	}
	var rd protocol.TopicRouteData
	if err := rd.Decode(resp.Body); err != nil {
		t.Fatal(err)
	}
	return rd
}

// registerBroker sends a raw REGISTER_BROKER over c (as a Java broker does):
// broker name, address and one topic.
func registerBroker(t *testing.T, c *remoting.Client, name, addr, topic string) {
	t.Helper()
	body := protocol.RegisterBrokerBody{TopicConfigSerializeWrapper: protocol.TopicConfigSerializeWrapper{
		TopicConfigTable: map[string]*protocol.TopicConfig{topic: {TopicName: topic, ReadQueueNums: 4, WriteQueueNums: 4,
			Perm: 6, TopicFilterType: "SINGLE_TAG"}}}}
	b, err := body.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var req protocol.Command
	req.InitRequest(protocol.ReqRegisterBroker, 0)
	(&protocol.RegisterBrokerRequest{BrokerName: name, BrokerAddr: addr, ClusterName: "TestCluster",
		BodyCRC32: int32(crc32.ChecksumIEEE(b) & 0x7FFFFFFF)}).Encode(&req.Ext)
	req.Body = b
	if resp := invoke(t, c, &req); resp.Code != protocol.RespSuccess {
		t.Fatalf("REGISTER_BROKER: code %d %s", resp.Code, resp.Remark)
	}
}

func kvRequest(code int32, ns, key, value string) *protocol.Command {
	var req protocol.Command
	req.InitRequest(code, 0)
	req.Ext.SetString("namespace", ns)
	if key != "" {
		req.Ext.SetString("key", key)
	}
	if code == protocol.ReqPutKVConfig {
		req.Ext.SetString("value", value)
	}
	return &req
}

// The name server alone: start line, routes of a registered broker, the KV
// config across a restart (routes are not kept: brokers register again),
// the data directory's lock, SIGTERM and SIGINT.
func TestRegisterKVRestartAndSignals(t *testing.T) {
	data := filepath.Join(t.TempDir(), "ns-data")
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", data}
	p := start(t, args...)
	if !strings.HasPrefix(p.addr, "127.0.0.1:") || !strings.Contains(p.line, "data "+data+", version ") {
		t.Fatalf("start line %q", p.line)
	}

	c := dial(t, p.addr)
	registerBroker(t, c, "broker-a", "127.0.0.1:10911", "TopicA")
	rd := route(t, p.addr, "TopicA")
	if len(rd.BrokerDatas) != 1 || rd.BrokerDatas[0].BrokerAddrs[0] != "127.0.0.1:10911" ||
		len(rd.QueueDatas) != 1 || rd.QueueDatas[0].WriteQueueNums != 4 {
		t.Fatalf("route %+v", rd)
	}
	for _, kv := range [][3]string{{namesrv.NamespaceOrderTopicConfig, "TopicA", "broker-a:4"}, {"ns", "k", "v"}} {
		if resp := invoke(t, c, kvRequest(protocol.ReqPutKVConfig, kv[0], kv[1], kv[2])); resp.Code != protocol.RespSuccess {
			t.Fatalf("PUT_KV_CONFIG: %d %s", resp.Code, resp.Remark)
		}
	}
	if rd := route(t, p.addr, "TopicA"); rd.OrderTopicConf != "broker-a:4" {
		t.Fatalf("orderTopicConf %q", rd.OrderTopicConf)
	}
	if got := readFile(t, filepath.Join(data, "kvConfig.json")); got !=
		`{"configTable":{"ORDER_TOPIC_CONFIG":{"TopicA":"broker-a:4"},"ns":{"k":"v"}}}` {
		t.Fatalf("kvConfig.json: %s", got)
	}

	// A second name server on the same data directory is refused.
	out, err := exec.Command(binPath, "--listen", "127.0.0.1:0", "--data-dir", data).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another running name server") {
		t.Fatalf("second name server on the same directory: %v\n%s", err, out)
	}

	p.stop(t, syscall.SIGTERM)

	p2 := start(t, args...)
	c2 := dial(t, p2.addr)
	resp := invoke(t, c2, kvRequest(protocol.ReqGetKVConfig, "ns", "k", ""))
	if v, _ := resp.Ext.GetString("value"); resp.Code != protocol.RespSuccess || v != "v" {
		t.Fatalf("GET_KV_CONFIG after restart: %d %q", resp.Code, v)
	}
	resp = invoke(t, c2, kvRequest(protocol.ReqGetKVListByNamespace, namesrv.NamespaceOrderTopicConfig, "", ""))
	if resp.Code != protocol.RespSuccess || string(resp.Body) != `{"table":{"TopicA":"broker-a:4"}}` {
		t.Fatalf("GET_KVLIST_BY_NAMESPACE after restart: %d %s", resp.Code, resp.Body)
	}
	if code := routeCode(t, p2.addr, "TopicA"); code != protocol.RespTopicNotExist {
		t.Fatalf("a route survived the restart without a registration: code %d", code)
	}
	// The broker registers again (every 30 s): its route and the order
	// config are back.
	registerBroker(t, c2, "broker-a", "127.0.0.1:10911", "TopicA")
	if rd := route(t, p2.addr, "TopicA"); rd.OrderTopicConf != "broker-a:4" {
		t.Fatalf("route after re-registration: %+v", rd)
	}
	if resp := invoke(t, c2, kvRequest(protocol.ReqDeleteKVConfig, "ns", "k", "")); resp.Code != protocol.RespSuccess {
		t.Fatalf("DELETE_KV_CONFIG: %d %s", resp.Code, resp.Remark)
	}
	p2.stop(t, syscall.SIGINT)

	p3 := start(t, args...)
	if resp := invoke(t, dial(t, p3.addr), kvRequest(protocol.ReqGetKVConfig, "ns", "k", "")); resp.Code != protocol.RespQueryNotFound {
		t.Fatalf("a deleted key came back after a restart: code %d", resp.Code)
	}
	p3.stop(t, syscall.SIGTERM)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A broker whose registrations stop is dropped once its timeout has passed,
// though its connection stays open; not before.
func TestSilentBrokerExpires(t *testing.T) {
	const timeout = time.Second
	p := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--broker-timeout", timeout.String(), "--scan-interval", "50ms")
	c := dial(t, p.addr)
	registerBroker(t, c, "broker-a", "127.0.0.1:10911", "TopicA")
	registered := time.Now()
	if code := routeCode(t, p.addr, "TopicA"); code != protocol.RespSuccess {
		t.Fatalf("route after registration: %d", code)
	}
	wait.Equal(t, "the silent broker to expire", protocol.RespTopicNotExist, func() int32 { return routeCode(t, p.addr, "TopicA") })
	if d := time.Since(registered); d < timeout {
		t.Fatalf("dropped after %v, before its timeout %v", d, timeout)
	}
	if !strings.Contains(p.RunLog(), "namesrv: broker expired") {
		t.Fatalf("no expiry line:\n%s", p.RunLog())
	}
	// The connection is still open: a registration over it brings it back.
	registerBroker(t, c, "broker-a", "127.0.0.1:10911", "TopicA")
	if code := routeCode(t, p.addr, "TopicA"); code != protocol.RespSuccess {
		t.Fatalf("route after registering again: %d", code)
	}
	p.stop(t, syscall.SIGTERM)
}

// A broker's address leaves routes as soon as the connection it registered
// over closes, long before its timeout (120 s by default).
func TestConnectionCloseDropsBroker(t *testing.T) {
	p := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	keep := dial(t, p.addr)
	registerBroker(t, keep, "broker-b", "127.0.0.1:10921", "TopicB")
	c := dial(t, p.addr)
	registerBroker(t, c, "broker-a", "127.0.0.1:10911", "TopicA")
	registerBroker(t, c, "broker-a", "127.0.0.1:10911", "TopicA") // again, as every 30 s
	if code := routeCode(t, p.addr, "TopicA"); code != protocol.RespSuccess {
		t.Fatalf("route after registration: %d", code)
	}
	c.Close()
	closed := time.Now()
	wait.Equal(t, "the closed connection's broker to be dropped", protocol.RespTopicNotExist, func() int32 { return routeCode(t, p.addr, "TopicA") })
	t.Logf("dropped %v after the connection closed", time.Since(closed).Round(time.Millisecond))
	// The other broker, whose connection is open, stays.
	if code := routeCode(t, p.addr, "TopicB"); code != protocol.RespSuccess {
		t.Fatalf("the other broker's route: %d", code)
	}
	p.stop(t, syscall.SIGTERM)
}

// One broker registers with two name servers through the project's
// Registrar; both route to it; one name server stopping does not affect the
// other; the Registrar's Close unregisters from the one left.
func TestTwoNameServersOneRegistrar(t *testing.T) {
	a := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	b := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	pool := remoting.NewPool(&remoting.ClientOptions{Options: remoting.Options{Logger: slog.New(slog.DiscardHandler)}})
	defer pool.Close()
	source := func() namesrv.BrokerRegistration {
		return namesrv.BrokerRegistration{ClusterName: "TestCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911",
			Topics: []protocol.TopicConfig{{TopicName: "TopicA", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6}}}
	}
	g := namesrv.NewRegistrar([]string{a.addr, b.addr}, pool, source, slog.New(slog.NewTextHandler(io.Discard, nil)))
	g.Period = 200 * time.Millisecond
	g.Start()
	closed := false
	defer func() {
		if !closed {
			g.Close(context.Background())
		}
	}()
	for _, p := range []*process{a, b} {
		wait.Equal(t, "the route at "+p.addr, protocol.RespSuccess, func() int32 { return routeCode(t, p.addr, "TopicA") })
		rd := route(t, p.addr, "TopicA")
		if rd.BrokerDatas[0].BrokerAddrs[0] != "127.0.0.1:10911" || rd.QueueDatas[0].WriteQueueNums != 8 {
			t.Fatalf("route at %s: %+v", p.addr, rd)
		}
	}
	a.stop(t, syscall.SIGTERM)
	// Several registration periods later b still routes to the broker. The
	// sleep is the span being tested (nothing happens at its end to wait
	// for): the route must stay through three periods of registrations.
	time.Sleep(3 * g.Period)
	if code := routeCode(t, b.addr, "TopicA"); code != protocol.RespSuccess {
		t.Fatalf("route at the name server left: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.Close(ctx) // unregisters: b answers, a is gone
	closed = true
	if err == nil || !strings.Contains(err.Error(), a.addr) {
		t.Fatalf("Close: %v (want the stopped name server's failure only)", err)
	}
	if code := routeCode(t, b.addr, "TopicA"); code != protocol.RespTopicNotExist {
		t.Fatalf("route after UNREGISTER_BROKER: %d", code)
	}
	b.stop(t, syscall.SIGTERM)
}

// -c: a namesrv.properties with the keys Apogee honours, one it ignores with
// a WARN, and a typo refused.
func TestConfigFileThroughBinary(t *testing.T) {
	dir := t.TempDir()
	kv := filepath.Join(dir, "kv", "kvConfig.json")
	conf := filepath.Join(dir, "namesrv.properties")
	if err := os.WriteFile(conf, []byte("bindAddress=127.0.0.1\nlistenPort=0\nkvConfigPath="+kv+
		"\nrocketmqHome=/opt/rocketmq\nscanNotActiveBrokerInterval=50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "-c", conf)
	if !strings.HasPrefix(p.addr, "127.0.0.1:") || !strings.Contains(p.line, "data "+filepath.Dir(kv)+",") {
		t.Fatalf("start line %q", p.line)
	}
	c := dial(t, p.addr)
	if resp := invoke(t, c, kvRequest(protocol.ReqPutKVConfig, "ns", "k", "v")); resp.Code != protocol.RespSuccess {
		t.Fatalf("PUT_KV_CONFIG: %d %s", resp.Code, resp.Remark)
	}
	if got := readFile(t, kv); got != `{"configTable":{"ns":{"k":"v"}}}` {
		t.Fatalf("%s: %s", kv, got)
	}
	p.stop(t, syscall.SIGTERM)
	if logs := p.RunLog(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "key=rocketmqHome") {
		t.Fatalf("no WARN for the ignored key:\n%s", logs)
	}

	if err := os.WriteFile(conf, []byte("listenPrt=9877\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binPath, "-c", conf).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), `did you mean "listenPort"?`) {
		t.Fatalf("typo: %v\n%s", err, out)
	}
}

func TestVersionAndBadFlags(t *testing.T) {
	out, err := exec.Command(binPath, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "apogee-namesrv ") || !strings.Contains(string(out), ", commit ") {
		t.Fatalf("--version: %v %q", err, out)
	}
	for _, args := range [][]string{{"--no-such-flag"}, {"--broker-timeout", "0s"}, {"extra"}, {"--log-level", "loud"}} {
		cmd := exec.Command(binPath, append(args, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	// A port in use (the running name server's) is an error at start, exit
	// status 1, naming the flag and the key that move it; so is a --pprof
	// address in use. Neither leaves a ready file.
	p := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--pprof", "127.0.0.1:0")
	if !strings.HasPrefix(p.Ready.Pprof, "127.0.0.1:") || p.Ready.Pprof == p.addr {
		t.Fatalf("ready file %+v: no pprof address of its own", p.Ready)
	}
	ready := filepath.Join(t.TempDir(), "ready.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", p.addr}, "listen " + p.addr + ": "},
		{[]string{"--listen", "127.0.0.1:0", "--pprof", p.Ready.Pprof}, "listen " + p.Ready.Pprof + ": "},
	} {
		out, err = exec.Command(binPath, append(c.args, "--data-dir", t.TempDir(), "--ready-file", ready)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), c.want) ||
			!strings.Contains(string(out), "address already in use") {
			t.Fatalf("%v in use: %v\n%s", c.args, err, out)
		}
		if _, err := os.Stat(ready); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%v: a ready file after a failed start: %v", c.args, err)
		}
	}
	if !strings.Contains(string(out), "--pprof") {
		t.Fatalf("the pprof error does not name --pprof: %s", out)
	}
	out, _ = exec.Command(binPath, "--listen", p.addr, "--data-dir", t.TempDir()).CombinedOutput()
	if !strings.Contains(string(out), "--listen, or namesrv.properties' listenPort and bindAddress") {
		t.Fatalf("the listen error does not say what moves it: %s", out)
	}
	p.stop(t, syscall.SIGTERM)
}

// A ready file left by an earlier run (a crash) is replaced, never read as
// this run's: the new one names this process.
func TestStaleReadyFileReplaced(t *testing.T) {
	pp := proctest.New(t, "apogee-namesrv", binPath)
	if err := os.WriteFile(pp.ReadyPath(), []byte(`{"command":"apogee-namesrv","pid":1,"listen":"127.0.0.1:1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pp.Run("--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	if pp.Ready.PID != pp.PID() || pp.Ready.Listen == "127.0.0.1:1" {
		t.Fatalf("ready file %+v after a stale one (pid %d)", pp.Ready, pp.PID())
	}
	pp.StopClean()
}
