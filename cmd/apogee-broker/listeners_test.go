package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// holdPort listens on a loopback port from :0 for the whole test: a port
// that is in use, for as long as the test needs it to be.
func holdPort(t *testing.T) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr)
}

// A listener whose address is in use stops the start with a listenError
// that names the listener (its ready-file key), the address, how the
// address was chosen and the flag and broker.conf key that move it. The
// broker runs in this process: it returns the error before it opens its
// store.
func TestListenerInUseNamesWhatMovesIt(t *testing.T) {
	taken := holdPort(t).String()
	conf := filepath.Join(t.TempDir(), "broker.conf")
	_, port, _ := net.SplitHostPort(taken)
	if err := os.WriteFile(conf, []byte("metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\nmetricsPromExporterPort="+port+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag, key string
		extra     []string
		moves     string
	}{
		{"--listen", "listen", nil, "--listen, or broker.conf's listenPort and bindAddress"},
		{"--ha-listen", "ha", nil, "--ha-listen, or broker.conf's haListenPort"},
		{"--namesrv-listen", "namesrv", nil, `--namesrv-listen ("" disables it)`},
		{"--grpc-listen", "grpc", nil, `--grpc-listen ("" disables it), or broker.conf's grpcListen or grpcServerPort`},
		{"--metrics-listen", "metrics", nil, "--metrics-listen, or broker.conf's metricsPromExporterHost and metricsPromExporterPort"},
		{"", "metrics", []string{"-c", conf}, "--metrics-listen, or broker.conf's metricsPromExporterHost and metricsPromExporterPort"},
		{"--pprof", "pprof", nil, "--pprof"},
	} {
		name := c.flag
		if name == "" {
			name = "broker.conf"
		}
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--data-dir", t.TempDir()}, c.extra...)
			if c.flag != "" {
				args = append(args, c.flag, taken)
			}
			err := run(withListeners(args))
			var le *listenError
			if !errors.As(err, &le) {
				t.Fatalf("run: %v, want a listenError", err)
			}
			if le.Listener != c.key || le.Addr != taken || le.How != "as configured" || !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("listenError %+v (%v), want listener %s at %s", le, err, c.key, taken)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "listen "+taken+" (") || !strings.Contains(msg, "move it with "+c.moves) {
				t.Fatalf("message %q does not say what moves it (%s)", msg, c.moves)
			}
		})
	}
}

// The HA listener's default is derived, the listen port + 1 (RocketMQ's):
// when that port is in use, the error says it was derived and what moves
// it. The test holds a port and asks the broker to listen on the one
// below it; if some other process holds that one, the error is the remoting
// listener's (also named), and the test tries another pair.
func TestDerivedHAPortInUse(t *testing.T) {
	for attempt := 0; attempt < 20; attempt++ {
		ha := holdPort(t)
		if ha.Port <= 1024 {
			continue
		}
		listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(ha.Port-1))
		err := run([]string{"--listen", listen, "--namesrv-listen", "", "--grpc-listen", "", "--data-dir", t.TempDir()})
		var le *listenError
		if !errors.As(err, &le) {
			t.Fatalf("run: %v, want a listenError", err)
		}
		if le.Listener == "listen" && le.Addr == listen {
			t.Logf("%s is in use by another process; another pair", listen)
			continue
		}
		want := fmt.Sprintf("listen %s (the HA listener for slaves, the listen port + 1): ", ha)
		if le.Listener != "ha" || !strings.HasPrefix(err.Error(), want) ||
			!strings.HasSuffix(err.Error(), "; move it with --ha-listen, or broker.conf's haListenPort") {
			t.Fatalf("error %q, want %q… naming --ha-listen", err, want)
		}
		return
	}
	t.Fatal("no free port below a held one in 20 attempts")
}

func TestListenErrorText(t *testing.T) {
	err := grpcListener.fail(defaultGRPCListen, howChosen(defaultGRPCListen, defaultGRPCListen), syscall.EADDRINUSE)
	const want = `listen 0.0.0.0:8081 (the gRPC front end, the default): address already in use; ` +
		`move it with --grpc-listen ("" disables it), or broker.conf's grpcListen or grpcServerPort`
	if err.Error() != want {
		t.Fatalf("got  %q\nwant %q", err, want)
	}
	if h := haHow("", "127.0.0.1:0"); h != "any port, as --listen asks for port 0" {
		t.Fatalf("haHow with --listen :0: %q", h)
	}
	if h := howChosen("127.0.0.1:9876", defaultNamesrvListen); h != "as configured" {
		t.Fatalf("howChosen of a given address: %q", h)
	}
}

// twoBrokerFlags are the flags docs/operations.md ("Two brokers on one
// host") gives each broker, with port 0 where the document writes fixed
// ports: broker-a keeps RocketMQ's defaults and serves the name server;
// broker-b moves every listener of its own and registers with broker-a's
// name server.
func twoBrokerFlags(dir, namesrv string) (a, b []string) {
	a = []string{"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0",
		"--grpc-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "a")}
	b = []string{"--broker-name", "broker-b", "--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
		"--grpc-listen", "127.0.0.1:0", "--namesrv-listen", "", "--namesrv", namesrv, "--data-dir", filepath.Join(dir, "b")}
	return a, b
}

// TestTwoBrokersOnOneHost starts two broker processes on one host with the
// documented flags: no listener of one collides with the other's, both
// register with the one name server, and each takes a send.
func TestTwoBrokersOnOneHost(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	aFlags, _ := twoBrokerFlags(dir, "")
	a := start(t, bin, aFlags...)
	_, bFlags := twoBrokerFlags(dir, a.Ready.Namesrv)
	b := start(t, bin, bFlags...)
	if b.Ready.Namesrv != "" || b.nsAddr != "disabled" {
		t.Fatalf("broker-b serves a name server: %+v", b.Ready)
	}
	var used []string
	for _, r := range []struct{ name, listen, ha, ns, grpc string }{
		{"a", a.Ready.Listen, a.Ready.HA, a.Ready.Namesrv, a.Ready.GRPC},
		{"b", b.Ready.Listen, b.Ready.HA, b.Ready.Namesrv, b.Ready.GRPC},
	} {
		for _, addr := range []string{r.listen, r.ha, r.ns, r.grpc} {
			if addr == "" {
				continue
			}
			if slices.Contains(used, addr) {
				t.Fatalf("%s is bound twice (%+v, %+v)", addr, a.Ready, b.Ready)
			}
			used = append(used, addr)
		}
	}
	wait.For(t, "both brokers in the name server's cluster info", func() error {
		var req protocol.Command
		req.InitRequest(protocol.ReqGetBrokerClusterInfo, 0)
		resp := invoke(t, a.nsAddr, &req)
		var ci protocol.ClusterInfo
		if err := ci.Decode(resp.Body); err != nil {
			return err
		}
		for name, addr := range map[string]string{"broker-a": a.advertised, "broker-b": b.advertised} {
			if ci.BrokerAddrTable[name].BrokerAddrs[0] != addr {
				return fmt.Errorf("%s not at %s: %+v", name, addr, ci.BrokerAddrTable)
			}
		}
		return nil
	})
	for _, p := range []*process{a, b} {
		if resp := invoke(t, p.addr, sendRequest("pg", "TwoBrokers", 0, []byte("hello"))); resp.Code != protocol.RespSuccess {
			t.Fatalf("send to %s: code %d %s", p.addr, resp.Code, resp.Remark)
		}
	}
	b.stop(t, syscall.SIGTERM)
	a.stop(t, syscall.SIGTERM)
}
