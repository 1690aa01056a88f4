package ha

import (
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
)

// tlsServer loads a tlsconf server of mode on f's files (mutual TLS when
// requireClient), checking the files every 20 ms.
func tlsServer(t testing.TB, f tlstest.Files, mode tlsconf.Mode, requireClient bool) *tlsconf.Server {
	t.Helper()
	cfg := tlsconf.Config{Mode: mode, CertFile: f.ServerCert, KeyFile: f.ServerKey, ReloadInterval: 20 * time.Millisecond,
		Logger: testlog.New(t, "tls")}
	if requireClient {
		cfg.ClientCAFile, cfg.RequireClientCert = f.CA, true
	}
	s, err := tlsconf.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// slaveTLS is a slave's client configuration: f's CA, and its client
// certificate when withCert.
func slaveTLS(t testing.TB, f tlstest.Files, withCert bool) *tls.Config {
	t.Helper()
	cc := tlsconf.ClientConfig{CAFile: f.CA}
	if withCert {
		cc.CertFile, cc.KeyFile = f.ClientCert, f.ClientKey
	}
	c, err := cc.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLSEnforcing replicates over mutual TLS from a master that refuses
// plain connections: the replica ends byte for byte the master's log, and
// the stream went through TLS handshakes only.
func TestTLSEnforcing(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	srv := tlsServer(t, f, tlsconf.Enforcing, true)
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	m, addr := startMaster(t, master, MasterOptions{BatchSize: 256 << 10, Secure: srv.Handshake})
	defer m.Close()
	s := startSlave(t, replica, addr, SlaveOptions{TLS: slaveTLS(t, f, true)})
	defer s.Close()

	put(t, master, 20_000, 10, 4, "tls")
	caughtUp(t, master, replica)
	if segs := master.WrittenOffset() / master.SegmentSize(); segs < 3 {
		t.Fatalf("only %d segments: the test should cross segment ends", segs)
	}
	sameLog(t, master, replica, 0, master.WrittenOffset())
	if n := sameQueues(t, master, replica, false); n != 20_000 {
		t.Fatalf("%d entries compared, want 20000", n)
	}
	wait.Until(t, "the master to see the last acknowledgement", func() bool {
		sl := m.Slaves()
		return len(sl) == 1 && sl[0].Acked == master.WrittenOffset()
	})
	st := srv.Stats()
	if st.TLSConns < 1 || st.PlainConns != 0 || st.HandshakeFailures != 0 {
		t.Fatalf("TLS server stats: %+v (want TLS connections only)", st)
	}
	if ss := s.Status(); ss.Sessions < 1 || !ss.Connected {
		t.Fatalf("slave status: %+v", ss)
	}
}

// TestTLSEnforcingRefusesPlainSlave: a slave that dials without TLS, and one
// with TLS but no client certificate where one is required, never count as
// replicas and receive nothing; the refusal is logged.
func TestTLSEnforcingRefusesPlainSlave(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	srv := tlsServer(t, f, tlsconf.Enforcing, true)
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	var logs logBuffer
	m, addr := startMaster(t, master, MasterOptions{Secure: srv.Handshake, Logger: logs.logger(t, "master")})
	defer m.Close()
	put(t, master, 100, 2, 1, "x")

	for _, tc := range []struct {
		name string
		tls  *tls.Config
	}{{"plain", nil}, {"no client certificate", slaveTLS(t, f, false)}} {
		t.Run(tc.name, func(t *testing.T) {
			replica := openStore(t, replicaOptions(t.TempDir()))
			defer replica.Close()
			before := srv.Stats().HandshakeFailures
			s := startSlave(t, replica, addr, SlaveOptions{TLS: tc.tls})
			wait.Until(t, "two refused attempts", func() bool { return srv.Stats().HandshakeFailures >= before+2 })
			s.Close()
			if n := replica.WrittenOffset(); n != 0 {
				t.Fatalf("a refused slave received %d bytes", n)
			}
			if r := master.Replicas(); len(r) != 0 {
				t.Fatalf("a refused slave counts as a replica: %v", r)
			}
			if ss := s.Status(); ss.Connected || ss.Received != 0 {
				t.Fatalf("slave status: %+v", ss)
			}
		})
	}
	if !strings.Contains(logs.String(), "refusing a slave's connection") {
		t.Fatalf("no refusal logged:\n%s", logs.String())
	}
}

// TestTLSPermissiveServesBoth: in permissive mode one HA port serves a TLS
// slave and a plain one side by side, the plain one still with vectored
// writes.
func TestTLSPermissiveServesBoth(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	srv := tlsServer(t, f, tlsconf.Permissive, false)
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	m, addr := startMaster(t, master, MasterOptions{BatchSize: 64 << 10, Secure: srv.Handshake})
	defer m.Close()
	r1 := openStore(t, replicaOptions(t.TempDir()))
	defer r1.Close()
	r2 := openStore(t, replicaOptions(t.TempDir()))
	defer r2.Close()
	s1 := startSlave(t, r1, addr, SlaveOptions{TLS: slaveTLS(t, f, false)})
	defer s1.Close()
	s2 := startSlave(t, r2, addr, SlaveOptions{})
	defer s2.Close()
	put(t, master, 5_000, 4, 2, "p")
	caughtUp(t, master, r1)
	caughtUp(t, master, r2)
	sameLog(t, master, r1, 0, master.WrittenOffset())
	sameLog(t, master, r2, 0, master.WrittenOffset())
	if st := srv.Stats(); st.TLSConns != 1 || st.PlainConns != 1 {
		t.Fatalf("TLS server stats: %+v (want one TLS and one plain connection)", st)
	}
	m.mu.Lock()
	var vectored, copied int
	for c := range m.conns {
		if c.vectored {
			vectored++
		} else {
			copied++
		}
	}
	m.mu.Unlock()
	if vectored != 1 || copied != 1 {
		t.Fatalf("%d vectored and %d copying connections, want one each", vectored, copied)
	}
}

// TestTLSCertificateRotation replaces the master's certificate while a TLS
// slave replicates: the established stream goes on, the next connection
// the slave makes is served the new certificate, without a restart.
func TestTLSCertificateRotation(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	srv := tlsServer(t, f, tlsconf.Enforcing, false)
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	m, addr := startMaster(t, master, MasterOptions{Secure: srv.Handshake})
	defer m.Close()

	var mu sync.Mutex
	var seen []string // the serial of the certificate each session was served
	cfg := slaveTLS(t, f, false)
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no certificate")
		}
		mu.Lock()
		seen = append(seen, cs.PeerCertificates[0].SerialNumber.String())
		mu.Unlock()
		return nil
	}
	serials := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
	s := startSlave(t, replica, addr, SlaveOptions{TLS: cfg})
	defer s.Close()
	put(t, master, 1_000, 2, 1, "before")
	caughtUp(t, master, replica)

	tlstest.Reissue(t, f)
	wait.Until(t, "the reload", func() bool { return srv.Stats().Reloads >= 1 })
	put(t, master, 1_000, 2, 1, "during")
	caughtUp(t, master, replica)
	if ss := s.Status(); ss.Sessions != 1 {
		t.Fatalf("the established stream did not survive the rotation: %+v", ss)
	}

	s.SetMasterAddr("") // a new connection
	s.SetMasterAddr(addr)
	put(t, master, 1_000, 2, 1, "after")
	caughtUp(t, master, replica)
	sameLog(t, master, replica, 0, master.WrittenOffset())
	got := serials()
	if len(got) < 2 || got[0] == got[len(got)-1] {
		t.Fatalf("certificates served per session %v: the new connection should see a new certificate", got)
	}
	if ss := s.Status(); ss.Sessions < 2 {
		t.Fatalf("slave status: %+v", ss)
	}
}
