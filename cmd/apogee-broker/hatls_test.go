package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// TestMasterSlaveEnforcingTLS runs a SYNC_MASTER and its slave as
// processes, both with --tls-mode enforcing and mutual TLS: the slave
// registers with the master's embedded name server and replicates over
// TLS (--tls-enable, its client certificate), and sends are answered
// SEND_OK once it holds them. A slave without TLS pointed at the same HA
// port is refused and gets nothing.
func TestMasterSlaveEnforcingTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := buildBinary(t)
	pki := tlstest.Write(t, t.TempDir())
	server := []string{"--tls-mode", "enforcing", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey,
		"--tls-client-ca", pki.CA, "--tls-client-auth", "require"}
	conf := filepath.Join("testdata", "2m-2s-sync")
	m := start(t, bin, append([]string{"-c", filepath.Join(conf, "broker-a.properties"),
		"--data-dir", filepath.Join(t.TempDir(), "master")}, server...)...)
	good, err := tlsconf.ClientConfig{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}.Load()
	if err != nil {
		t.Fatal(err)
	}
	sl := start(t, bin, append([]string{"-c", filepath.Join(conf, "broker-a-s.properties"),
		"--namesrv-listen", "", "--namesrv", m.nsAddr, "--data-dir", filepath.Join(t.TempDir(), "slave"),
		"--tls-enable", "--tls-ca", pki.CA, "--tls-client-cert", pki.ClientCert, "--tls-client-key", pki.ClientKey}, server...)...)
	wait.Equal(t, "the slave connected to its master over TLS", "true", func() string {
		return runtimeInfoTLS(t, sl.addr, good)["haMasterConnected"]
	})
	haAddr := runtimeInfoTLS(t, m.addr, good)["haServerAddr"]
	if haAddr != m.Ready.HA {
		t.Fatalf("haServerAddr %q, the ready file's HA %q", haAddr, m.Ready.HA)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, m.addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}, TLS: good})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	send := func(i int) *protocol.Command {
		var req protocol.Command
		req.InitRequest(protocol.ReqSendMessageV2, 0)
		(&protocol.SendMessageRequest{ProducerGroup: []byte("pg"), Topic: []byte("ReplicatedTLS"), DefaultTopic: []byte("TBW102"),
			DefaultTopicQueueNums: 4, QueueID: -1, BornTimestamp: time.Now().UnixMilli()}).EncodeV2(&req.Ext)
		req.Body = []byte(strings.Repeat("x", 1000))
		resp, err := cl.Invoke(ctx, &req)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		return resp
	}
	for i := range 200 {
		if resp := send(i); resp.Code != protocol.RespSuccess {
			t.Fatalf("send %d to a SYNC_MASTER with its TLS slave: code %d %q", i, resp.Code, resp.Remark)
		}
	}
	wait.For(t, "the slave's commit log at the master's", func() error {
		mi, si := runtimeInfoTLS(t, m.addr, good), runtimeInfoTLS(t, sl.addr, good)
		if mi["commitLogMaxOffset"] == si["commitLogMaxOffset"] && si["brokerRole"] == "SLAVE" {
			return nil
		}
		return fmt.Errorf("slave at %s, master at %s", si["commitLogMaxOffset"], mi["commitLogMaxOffset"])
	})

	// A plain slave, told the master's HA address: refused at every attempt.
	plain := start(t, bin, "-c", filepath.Join(conf, "broker-a-s.properties"), "--broker-id", "2",
		"--namesrv-listen", "", "--ha-master-addr", haAddr, "--data-dir", filepath.Join(t.TempDir(), "plain"))
	m.AwaitLog("refusing a slave's connection")
	// Its haMasterConnected flickers true between each dial and the
	// master's refusal; what it holds is the test.
	if pi := runtimeInfo(t, plain.addr); pi["commitLogMaxOffset"] != "0" {
		t.Fatalf("the plain slave replicated: log end %s", pi["commitLogMaxOffset"])
	}
	if n := runtimeInfoTLS(t, m.addr, good)["haConnectedSlaves"]; n != "1" {
		t.Fatalf("the master counts %s slaves, want the TLS one only", n)
	}
	plain.stop(t, syscall.SIGTERM)
	for _, p := range []*process{sl, m} {
		if logs := p.stop(t, syscall.SIGTERM); strings.Contains(logs, "level=ERROR") {
			t.Errorf("an ERROR logged:\n%s", logs)
		}
	}
}
