package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

var startLine = regexp.MustCompile(`listening on (\S+) \(advertised (\S+)\), name server on (\S+),`)

type process struct {
	cmd          *exec.Cmd
	addr, nsAddr string
	stderr       *strings.Builder
	exited       chan error
}

func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
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
			t.Fatalf("unexpected start line %q", line)
		}
		p.addr, p.nsAddr = m[1], m[3]
	case err := <-p.exited:
		t.Fatalf("broker exited at start: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("no start line: %s", stderr.String())
	}
	return p
}

func route(t *testing.T, addr, topic string) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := remoting.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	req.Ext.SetString("topic", topic)
	resp, err := c.Invoke(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Code
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
	second := exec.Command(bin, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--data-dir", data)
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

func TestConfigErrors(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "bad.conf")
	os.WriteFile(conf, []byte("brokerNmae=typo\n"), 0o644)
	if _, err := parseConfig([]string{"--config", conf}); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("typo in config = %v", err)
	}
	if _, err := parseConfig([]string{"--flush", "sometimes"}); err == nil {
		t.Fatal("bad flush mode accepted")
	}
	good := filepath.Join(t.TempDir(), "good.conf")
	os.WriteFile(good, []byte("brokerName=from-file\nlistenPort=10999\nflushDiskType=SYNC_FLUSH\n"+
		"messageDelayLevel=1s 2s\ntransactionTimeOut=3000\ntransactionCheckInterval=1000\ntransactionCheckMax=5\nenablePropertyFilter=false\ntimerMaxDelaySec=3600\n"), 0o644)
	c, err := parseConfig([]string{"--config", good, "--broker-name", "from-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if c.delayLevels != "1s 2s" || c.txTimeout != 3*time.Second || c.txCheckInterval != time.Second ||
		c.txCheckMax != 5 || c.propertyFilter || c.timerMaxDelay != time.Hour {
		t.Fatalf("feature keys not applied: %+v", c)
	}
	if c.brokerName != "from-flag" || c.listen != "0.0.0.0:10999" || c.store.FlushMode.String() != "sync" {
		t.Fatalf("config %+v", c)
	}
}
