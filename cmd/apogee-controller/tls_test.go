package main

import (
	"context"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
)

// TestTLSProcesses runs three controller processes with Raft over mutual
// TLS (--raft-tls) and TLS-only remoting listeners: a broker reaching them
// with its client certificate registers and is elected (a Raft commit
// across the processes); the leader SIGKILLed, the other two elect a new
// one over TLS and keep the state; a plain client gets no answer.
func TestTLSProcesses(t *testing.T) {
	pki := tlstest.Write(t, t.TempDir())
	flags := append([]string{"--tls-mode", "enforcing", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey,
		"--tls-client-ca", pki.CA, "--tls-client-auth", "require", "--raft-tls",
		"--tls-ca", pki.CA, "--tls-client-cert", pki.ClientCert, "--tls-client-key", pki.ClientKey}, fastFlags...)
	good, err := tlsconf.ClientConfig{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}.Load()
	if err != nil {
		t.Fatal(err)
	}
	ms := newGroup(t, 3, good, flags...)
	lead := leader(t, ms, nil, good)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Options{Addrs: addrsOf(ms), Cluster: "DefaultCluster", Broker: "broker-a", Addr: "127.0.0.1:1",
		RequestTimeout: time.Second, TLS: good, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	reg, err := cl.Register(ctx, 0, "tok")
	if err != nil {
		t.Fatal(err)
	}
	cl.StartHeartbeats(reg.ID)
	if el, err := cl.ElectMaster(ctx, reg.ID, false); err != nil || el.State.MasterID != reg.ID {
		t.Fatalf("election over TLS: %+v %v", el, err)
	}

	lead.P.Stop(syscall.SIGKILL)
	leader(t, ms, lead, good)
	s, err := cl.GetReplicaInfo(ctx, "broker-a")
	if err != nil || s.MasterID != reg.ID || s.MasterEpoch != 1 {
		t.Fatalf("state after the leader's death: %+v %v", s, err)
	}

	plain, err := client.New(client.Options{Addrs: addrsOf(ms), Broker: "plain", Addr: "127.0.0.1:1", RequestTimeout: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, m := range ms {
		if !m.P.Running() {
			continue
		}
		if _, err := plain.Metadata(ctx, m.Addr); err == nil {
			t.Fatalf("%s answered a plain client", m.ID)
		}
	}
}
