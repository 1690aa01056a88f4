package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The HA port's security (issue 29: cases 4 and 11, and the HA parts of
// "Brokers and controllers authenticate each other"), through the broker
// binary: docs/replication.md, "The identity handshake".

var syncMasterConf = filepath.Join("testdata", "2m-2s-sync", "broker-a.properties")
var slaveConf = filepath.Join("testdata", "2m-2s-sync", "broker-a-s.properties")

// logLine returns the first line of logs that contains every one of want
// ("" when none does).
func logLine(logs string, want ...string) string {
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, w := range want {
			all = all && strings.Contains(line, w)
		}
		if all {
			return line
		}
	}
	return ""
}

// sendCodes sends n messages to addr (signed by s when not nil) and
// returns the answers' codes.
func sendCodes(t *testing.T, addr, topic string, n int, s *auth.Signer) []int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var codes []int32
	for i := range n {
		req := sendRequest("pg", topic, 0, []byte(fmt.Sprintf("ha-security-%d", i)))
		if s != nil {
			s.Sign(req)
		}
		resp, err := cl.Invoke(ctx, req)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		codes = append(codes, resp.Code)
	}
	return codes
}

// TestHAStrangerAckBeyondEnd (case 4): a stranger on a SYNC_MASTER's HA
// port (the classic stream: a first report, then an acknowledgement of
// 2^40) is closed with an ERROR; the acknowledgement never counts, so
// sends stay SLAVE_NOT_AVAILABLE and haReplicatedOffset stays 0.
func TestHAStrangerAckBeyondEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	m := start(t, buildBinary(t), "-c", syncMasterConf, "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "master"))
	defer m.stop(t, syscall.SIGTERM)
	for i, code := range sendCodes(t, m.addr, "HAStranger", 3, nil) {
		if code != protocol.RespSlaveNotAvailable {
			t.Fatalf("send %d without a slave: code %d, want SLAVE_NOT_AVAILABLE", i, code)
		}
	}
	c, err := net.Dial("tcp", m.Ready.HA)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait.DefaultTimeout))
	var rep [8]byte
	if _, err := c.Write(rep[:]); err != nil { // "I hold nothing": the stream starts at 0
		t.Fatal(err)
	}
	wait.Equal(t, "the stranger counted as a slave", "1", func() string { return runtimeInfo(t, m.addr)["haConnectedSlaves"] })
	binary.BigEndian.PutUint64(rep[:], 1<<40)
	if _, err := c.Write(rep[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("the stranger's connection was not closed: %v", err)
	}
	logs := m.AwaitLog("acknowledged an offset beyond the master's log end")
	if line := logLine(logs, "acknowledged an offset beyond"); !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "acked=1099511627776") {
		t.Errorf("the master's line: %s", line)
	}
	for i, code := range sendCodes(t, m.addr, "HAStranger", 20, nil) {
		if code != protocol.RespSlaveNotAvailable {
			t.Fatalf("send %d after the fake acknowledgement: code %d, want SLAVE_NOT_AVAILABLE", i, code)
		}
	}
	info := runtimeInfo(t, m.addr)
	if info["haReplicatedOffset"] != "0" || info["haConnectedSlaves"] != "0" {
		t.Fatalf("after the fake acknowledgement: haReplicatedOffset %s, haConnectedSlaves %s", info["haReplicatedOffset"], info["haConnectedSlaves"])
	}
}

// TestHASlaveOfAnotherGroupRefused (case 11): a slave of broker-b pointed
// at broker-a's master is refused by the master with an ERROR naming both
// groups, logs the refusal as an ERROR itself, and copies nothing.
func TestHASlaveOfAnotherGroupRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := buildBinary(t)
	m := start(t, bin, "-c", syncMasterConf, "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "master"))
	defer m.stop(t, syscall.SIGTERM)
	sendCodes(t, m.addr, "HAGroups", 5, nil) // stored (SLAVE_NOT_AVAILABLE): something to copy
	sl := start(t, bin, "-c", slaveConf, "--broker-name", "broker-b", "--namesrv-listen", "", "--ha-master-addr", m.Ready.HA,
		"--data-dir", filepath.Join(t.TempDir(), "slave"))
	defer sl.stop(t, syscall.SIGTERM)
	logs := m.AwaitLog("refusing a slave of another broker group")
	line := logLine(logs, "refusing a slave of another broker group")
	for _, want := range []string{"level=ERROR", "slaveBrokerName=broker-b", "masterBrokerName=broker-a", "slaveCluster=DefaultCluster"} {
		if !strings.Contains(line, want) {
			t.Errorf("the master's refusal lacks %q: %s", want, line)
		}
	}
	slogs := sl.AwaitLog("the master refused this slave")
	if line := logLine(slogs, "the master refused this slave"); !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "masterBrokerName=broker-a") {
		t.Errorf("the slave's line: %s", line)
	}
	if si := runtimeInfo(t, sl.addr); si["commitLogMaxOffset"] != "0" {
		t.Fatalf("a slave of another group copied the log: end %s", si["commitLogMaxOffset"])
	}
	if mi := runtimeInfo(t, m.addr); mi["haConnectedSlaves"] != "0" {
		t.Fatalf("the master counts %s slaves", mi["haConnectedSlaves"])
	}
}

// TestHASlaveUnderACL: a SYNC_MASTER with --acl-file refuses, on its HA
// port, a slave without inner credentials and one whose user may not
// replicate (neither a super user nor allowed every action on the
// cluster); a slave with innerClientAuthenticationCredentials of a super
// user replicates, and the sends are SEND_OK once it holds them. The slave
// is given the master's HA address: this tests the HA stream alone
// (TestClassicSlaveUnderACL runs the whole classic path under ACL: the
// registrations and the slave's requests to its master, signed with the
// same credentials, and this stream).
func TestHASlaveUnderACL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(secACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	m := start(t, bin, "-c", syncMasterConf, "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "master"), "--acl-file", file)
	defer m.stop(t, syscall.SIGTERM)
	app := auth.NewSigner(auth.Credentials{AccessKey: "app", SecretKey: "app-secret"})
	root := auth.NewSigner(auth.Credentials{AccessKey: "root", SecretKey: "root-secret"})
	for i, code := range sendCodes(t, m.addr, "SecHA", 5, app) {
		if code != protocol.RespSlaveNotAvailable {
			t.Fatalf("send %d without a slave: code %d", i, code)
		}
	}
	slave := func(name string, conf ...string) *process {
		lines, err := os.ReadFile(slaveConf)
		if err != nil {
			t.Fatal(err)
		}
		c := writeConf(t, append([]string{string(lines)}, conf...)...)
		return start(t, bin, "-c", c, "--namesrv-listen", "", "--ha-master-addr", m.Ready.HA, "--data-dir", filepath.Join(dir, name))
	}
	for _, tc := range []struct {
		name, creds, reason string
	}{
		{"nocreds", "", "no credentials"},
		{"app", `innerClientAuthenticationCredentials={"accessKey":"app","secretKey":"app-secret"}`, "credentials refused"},
		{"guess", `innerClientAuthenticationCredentials={"accessKey":"root","secretKey":"guess"}`, "credentials refused"},
	} {
		var conf []string
		if tc.creds != "" {
			conf = append(conf, tc.creds)
		}
		sl := slave(tc.name, conf...)
		slogs := sl.AwaitLog("the master refused this slave")
		if line := logLine(slogs, "the master refused this slave"); !strings.Contains(line, "level=ERROR") || !strings.Contains(line, tc.reason) {
			t.Errorf("%s: the slave's line: %s", tc.name, line)
		}
		if si := runtimeInfo(t, sl.addr); si["commitLogMaxOffset"] != "0" {
			t.Fatalf("%s: a refused slave copied the log: end %s", tc.name, si["commitLogMaxOffset"])
		}
		if logs := sl.stop(t, syscall.SIGTERM); strings.Contains(logs, "secret") {
			t.Errorf("%s: a secret in the slave's log", tc.name)
		}
	}
	mlogs := m.AwaitLog("it is not authenticated")
	if strings.Contains(mlogs, "app-secret") || strings.Contains(mlogs, "root-secret") || strings.Contains(mlogs, "guess") {
		t.Errorf("a secret in the master's log:\n%s", mlogs)
	}

	sl := slave("root", `innerClientAuthenticationCredentials={"accessKey":"root","secretKey":"root-secret"}`)
	defer sl.stop(t, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, m.addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wait.For(t, "the slave with credentials to hold the master's log", func() error {
		mi, si := runtimeInfoAs(t, cl, root), runtimeInfo(t, sl.addr)
		if mi["haConnectedSlaves"] == "1" && mi["commitLogMaxOffset"] == si["commitLogMaxOffset"] && si["commitLogMaxOffset"] != "0" {
			return nil
		}
		return fmt.Errorf("master at %s with %s slaves, slave at %s", mi["commitLogMaxOffset"], mi["haConnectedSlaves"], si["commitLogMaxOffset"])
	})
	for i, code := range sendCodes(t, m.addr, "SecHA", 20, app) {
		if code != protocol.RespSuccess {
			t.Fatalf("send %d with the authenticated slave: code %d, want SEND_OK", i, code)
		}
	}
	if line := logLine(m.RunLog(), "ha: slave connected"); !strings.Contains(line, "as root") {
		t.Errorf("the master's connect line does not name the user: %s", line)
	}
}

// TestHASlaveMutualTLSUnderACL: under --acl-file, a slave without inner
// credentials that comes over mutual TLS (a client certificate of the
// master's --tls-client-ca) replicates: the certificate authenticates it
// on the HA port.
func TestHASlaveMutualTLSUnderACL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(secACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	pki := tlstest.Write(t, t.TempDir())
	server := []string{"--tls-mode", "enforcing", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey,
		"--tls-client-ca", pki.CA, "--tls-client-auth", "require"}
	m := start(t, bin, append([]string{"-c", syncMasterConf, "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "master"),
		"--acl-file", file}, server...)...)
	defer m.stop(t, syscall.SIGTERM)
	good, err := tlsconf.ClientConfig{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, m.addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}, TLS: good})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	app := auth.NewSigner(auth.Credentials{AccessKey: "app", SecretKey: "app-secret"})
	root := auth.NewSigner(auth.Credentials{AccessKey: "root", SecretKey: "root-secret"})
	for i := range 5 {
		req := sendRequest("pg", "SecTLS", 0, []byte(fmt.Sprintf("over-tls-%d", i)))
		app.Sign(req)
		if resp, err := cl.Invoke(ctx, req); err != nil || resp.Code != protocol.RespSlaveNotAvailable {
			t.Fatalf("send %d without a slave: %v %v", i, err, resp)
		}
	}
	sl := start(t, bin, "-c", slaveConf, "--namesrv-listen", "", "--ha-master-addr", m.Ready.HA, "--data-dir", filepath.Join(dir, "slave"),
		"--ha-tls", "--tls-ca", pki.CA, "--tls-client-cert", pki.ClientCert, "--tls-client-key", pki.ClientKey)
	defer sl.stop(t, syscall.SIGTERM)
	wait.For(t, "the slave with a client certificate to hold the master's log", func() error {
		mi, si := runtimeInfoAs(t, cl, root), runtimeInfo(t, sl.addr)
		if mi["haConnectedSlaves"] == "1" && mi["commitLogMaxOffset"] == si["commitLogMaxOffset"] && si["commitLogMaxOffset"] != "0" {
			return nil
		}
		return fmt.Errorf("master at %s with %s slaves, slave at %s", mi["commitLogMaxOffset"], mi["haConnectedSlaves"], si["commitLogMaxOffset"])
	})
	if line := logLine(m.RunLog(), "ha: slave connected"); !strings.Contains(line, "client certificate") {
		t.Errorf("the master's connect line does not say how the slave authenticated: %s", line)
	}
}
