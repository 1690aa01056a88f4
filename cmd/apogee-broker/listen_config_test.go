package main

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/readyfile"
)

// checkOnHost fails t unless every listener of the ready file is bound to
// host (not to every interface) on a port of its own; on Linux it also
// checks that another loopback address is refused on that port.
func checkOnHost(t *testing.T, r readyfile.File, host string) {
	t.Helper()
	for key, addr := range map[string]string{"listen": r.Listen, "ha": r.HA, "namesrv": r.Namesrv, "grpc": r.GRPC, "metrics": r.Metrics} {
		h, port, err := net.SplitHostPort(addr)
		if err != nil || h != host || port == "0" {
			t.Errorf("%s bound to %q, want %s and a port", key, addr, host)
			continue
		}
		if runtime.GOOS != "linux" {
			continue
		}
		// 127.0.0.2 is this host too: a wildcard listener would accept it.
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", port), 5*time.Second)
		if err == nil {
			c.Close()
			t.Errorf("%s (%s) accepts a connection to 127.0.0.2: it listens on every interface", key, addr)
		}
	}
}

// Case 13: bindAddress in broker.conf, and the host of --listen, apply to
// every listener not given an address of its own: the embedded name
// server, gRPC, HA and the metrics listener (ports from :0: grpcServerPort,
// haListenPort and metricsPromExporterPort give ports alone, and ":0" is an
// address without a host).
func TestBindAddressAppliesToEveryListener(t *testing.T) {
	bin := buildBinary(t)
	t.Run("bindAddress", func(t *testing.T) {
		conf := writeConf(t, "bindAddress=127.0.0.1", "listenPort=0", "haListenPort=0", "grpcServerPort=0",
			"metricsExporterType=PROM", "metricsPromExporterPort=0")
		p := proctest.New(t, "apogee-broker", bin)
		p.Run("-c", conf, "--namesrv-listen", ":0", "--data-dir", t.TempDir())
		checkOnHost(t, p.Ready, "127.0.0.1")
		p.StopClean()
	})
	t.Run("listen host", func(t *testing.T) {
		p := proctest.New(t, "apogee-broker", bin)
		p.Run("--listen", "127.0.0.1:0", "--namesrv-listen", ":0", "--grpc-listen", ":0", "--metrics-listen", ":0",
			"--data-dir", t.TempDir())
		checkOnHost(t, p.Ready, "127.0.0.1")
		p.StopClean()
	})
}

// The defaults follow the listen host too (ports fixed, so checked on the
// parsed configuration rather than bound).
func TestListenerDefaultsTakeTheListenHost(t *testing.T) {
	c, err := parseConfig([]string{"-c", writeConf(t, "bindAddress=127.0.0.1", "metricsExporterType=PROM")})
	if err != nil {
		t.Fatal(err)
	}
	if c.namesrvListen != "127.0.0.1:9876" || c.grpcListen != "127.0.0.1:8081" || c.metricsListen != "127.0.0.1:5557" ||
		c.defaultNamesrv != c.namesrvListen || c.defaultGRPC != c.grpcListen {
		t.Fatalf("with bindAddress: namesrv %q, grpc %q, metrics %q", c.namesrvListen, c.grpcListen, c.metricsListen)
	}
	if a, err := haListenAddr("", c.listen, &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 10911}); err != nil || a != "127.0.0.1:10912" {
		t.Fatalf("HA with bindAddress: %q %v", a, err)
	}
	// Without one: every interface, as before.
	c, err = parseConfig(nil)
	if err != nil || c.namesrvListen != defaultNamesrvListen || c.grpcListen != defaultGRPCListen {
		t.Fatalf("defaults: namesrv %q, grpc %q (%v)", c.namesrvListen, c.grpcListen, err)
	}
	// An address of its own stays; grpcListen's host stays with grpcServerPort.
	c, err = parseConfig([]string{"--listen", "127.0.0.1:10911", "--namesrv-listen", "0.0.0.0:9876", "-c",
		writeConf(t, "grpcListen=10.0.0.1:8081", "grpcServerPort=9000")})
	if err != nil || c.namesrvListen != "0.0.0.0:9876" || c.grpcListen != "10.0.0.1:9000" {
		t.Fatalf("own addresses: namesrv %q, grpc %q (%v)", c.namesrvListen, c.grpcListen, err)
	}
}

// noteLines renders the configuration's notes as the WARN lines show them.
func noteLines(c *config) string {
	var b strings.Builder
	for _, n := range c.notes {
		b.WriteString(n.msg)
		for i := 0; i+1 < len(n.attrs); i += 2 {
			fmt.Fprintf(&b, " %v=%v", n.attrs[i], n.attrs[i+1])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Case 14 on the parsed configuration: which line wins, and the notes.
func TestConflictingKeysNoted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		check func(c *config) bool
		notes []string // substrings, one note each, in order
	}{
		{"grpcListen then grpcServerPort", []string{"grpcListen=", "grpcServerPort=9000"},
			func(c *config) bool { return c.grpcListen == "0.0.0.0:9000" },
			[]string{"two keys set the gRPC listener's port; the later line (2, grpcServerPort) wins: remove one of them key=grpcServerPort line=2 value=9000 other_key=grpcListen other_line=1 other_value="}},
		{"grpcServerPort then grpcListen", []string{"grpcServerPort=9000", "grpcListen="},
			func(c *config) bool { return c.grpcListen == "" },
			[]string{"the later line (2, grpcListen) wins"}},
		{"agreeing", []string{"grpcListen=127.0.0.1:9000", "grpcServerPort=9000", "aclEnable=true", "authenticationEnabled=true"},
			func(c *config) bool { return c.grpcListen == "127.0.0.1:9000" && c.sec.acl }, nil},
		{"a key twice", []string{"flushDiskType=ASYNC_FLUSH", "brokerName=b", "flushDiskType=SYNC_FLUSH"},
			func(c *config) bool { return c.store.FlushMode.String() == "sync" },
			[]string{"a key given twice; the last line wins (as Java's Properties): remove the other line key=flushDiskType line=1 value=ASYNC_FLUSH winning_line=3 winning_value=SYNC_FLUSH"}},
		{"three times", []string{"flushDiskType=SYNC_FLUSH", "flushDiskType=SYNC_FLUSH", "flushDiskType=ASYNC_FLUSH"},
			func(c *config) bool { return c.store.FlushMode.String() == "async" },
			[]string{"key=flushDiskType line=1 value=SYNC_FLUSH winning_line=3", "key=flushDiskType line=2 value=SYNC_FLUSH winning_line=3"}},
		{"RocketMQ 4 and 5 spellings", []string{"mapedFileSizeCommitLog=1048576", "mappedFileSizeCommitLog=2097152"},
			func(c *config) bool { return c.store.SegmentSize == 2<<20 },
			[]string{"two keys set the commit-log segment size; the later line (2, mappedFileSizeCommitLog) wins"}},
		{"ACL switches", []string{"aclEnable=true", "authenticationEnabled=false"},
			func(c *config) bool { return c.sec.acl },
			[]string{"two keys set access control; access control is on when any of them asks for it: remove one of them key=authenticationEnabled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig([]string{"-c", writeConf(t, tc.lines...)})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("%q: the wrong line won: %+v", tc.lines, c)
			}
			got := noteLines(c)
			if n := strings.Count(got, "\n"); n != len(tc.notes) {
				t.Fatalf("%d notes, want %d:\n%s", n, len(tc.notes), got)
			}
			for _, want := range tc.notes {
				if !strings.Contains(got, want) {
					t.Errorf("notes\n%s\nlack %q", got, want)
				}
			}
		})
	}
}

// Case 14 through the binary: conflicting lines start the broker with a
// WARN naming both, the later line winning; an empty brokerName (or
// cluster name, or data directory) stops the start with an error naming
// the key and the flag.
func TestConflictingKeysThroughTheBinary(t *testing.T) {
	bin := buildBinary(t)
	conf := writeConf(t, "bindAddress=127.0.0.1", "listenPort=0", "haListenPort=0",
		"grpcListen=", "grpcServerPort=0", "flushDiskType=ASYNC_FLUSH", "flushDiskType=SYNC_FLUSH")
	p := proctest.New(t, "apogee-broker", bin)
	p.Run("-c", conf, "--namesrv-listen", "", "--data-dir", t.TempDir())
	if h, _, _ := net.SplitHostPort(p.Ready.GRPC); h != "127.0.0.1" {
		t.Errorf("gRPC at %q: grpcServerPort (the later line) should enable it on the listen host", p.Ready.GRPC)
	}
	if !strings.Contains(p.Line(), ", flush sync,") {
		t.Errorf("start line %q: the last flushDiskType line should win", p.Line())
	}
	log := p.RunLog()
	for _, want := range []string{
		`level=WARN msg="broker.conf: two keys set the gRPC listener's port; the later line (5, grpcServerPort) wins: remove one of them" key=grpcServerPort line=5 value=0 other_key=grpcListen other_line=4 other_value=""`,
		`level=WARN msg="broker.conf: a key given twice; the last line wins (as Java's Properties): remove the other line" key=flushDiskType line=6 value=ASYNC_FLUSH winning_line=7 winning_value=SYNC_FLUSH`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	p.StopClean()

	for _, tc := range []struct{ line, want string }{
		{"brokerName=", "brokerName (--broker-name) is empty"},
		{"brokerClusterName=  ", "brokerClusterName (--cluster) is empty"},
		{"storePathRootDir=", "storePathRootDir (--data-dir) is empty"},
	} {
		out, err := exec.Command(bin, "-c", writeConf(t, tc.line), "--listen", "127.0.0.1:0", "--namesrv-listen", "",
			"--grpc-listen", "").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: exit %v, output %q; want exit 1 with %q", tc.line, err, out, tc.want)
		}
	}
	if out, err := exec.Command(bin, "--broker-name", "", "--listen", "127.0.0.1:0").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "brokerName (--broker-name) is empty") {
		t.Errorf("--broker-name '': %v %q", err, out)
	}
}
