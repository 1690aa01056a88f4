package controller_test

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// tlsPKI is a test PKI and the configurations made of it: an enforcing
// server requiring client certificates (mutual TLS), and a client that
// verifies with the CA and presents the client certificate.
type tlsPKI struct {
	files  tlstest.Files
	server *tlsconf.Server
	client *tls.Config
}

func newTLSPKI(t *testing.T) *tlsPKI {
	t.Helper()
	f := tlstest.Write(t, t.TempDir())
	srv, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: f.ServerCert, KeyFile: f.ServerKey,
		ClientCAFile: f.CA, RequireClientCert: true, Logger: testLogger(t, "tls")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cl, err := tlsconf.ClientConfig{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}.Load()
	if err != nil {
		t.Fatal(err)
	}
	return &tlsPKI{files: f, server: srv, client: cl}
}

// The client certificate of tlstest is for client authentication only and
// the server one for server authentication only; a controller dialling a
// peer presents the client one, and answers with the server one.
func (p *tlsPKI) tweak(o *controller.Options) {
	o.RaftTLS = &controller.RaftTLS{Server: p.server.TLSConfig(), Client: p.client}
	o.Handshake = p.server.Handshake
	o.NotifyTLS = p.client
}

// newTLSBroker is newBroker with TLS both ways: its client reaches the
// controllers with mutual TLS (tlsCfg nil: plain), and its own listener,
// where the controller's pushes arrive, is enforcing.
func newTLSBroker(t *testing.T, c *cluster, p *tlsPKI, name string, tlsCfg *tls.Config) *broker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, addr: l.Addr().String(), status: client.HeartbeatStatus{Epoch: -1, MaxOffset: 0, ConfirmOffset: -1}}
	b.cl, err = client.New(client.Options{Addrs: c.addrs, Cluster: "DefaultCluster", Broker: name, Addr: b.addr,
		HeartbeatInterval: 100 * time.Millisecond, RequestTimeout: time.Second, RetryInterval: 50 * time.Millisecond,
		Logger: testLogger(t, "tls"), TLS: tlsCfg,
		Status: func() client.HeartbeatStatus {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.status
		},
		OnRoleChange: func(s client.State) {
			b.mu.Lock()
			b.states = append(b.states, s)
			b.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = remoting.NewServer(b.cl, &remoting.Options{Handshake: p.server.Handshake, Logger: testLogger(t, "tls")})
	go b.srv.Serve(l)
	t.Cleanup(b.stop)
	return b
}

// TestTLSGroup runs three controllers whose Raft traffic is mutual TLS and
// whose remoting listeners are TLS-only, with brokers that reach them over
// TLS and take the role-change pushes on TLS-only listeners: registration,
// election, failover and the replicated state work as in plain TCP; a plain
// broker and a plain Raft peer get nothing.
func TestTLSGroup(t *testing.T) {
	p := newTLSPKI(t)
	c := newCluster(t, 3, p.tweak)
	c.leader()
	ctx := ctxT(t, 20*time.Second)
	a, b := newTLSBroker(t, c, p, "broker-a", p.client), newTLSBroker(t, c, p, "broker-a", p.client)
	ra := a.register(ctx)
	el, err := a.cl.ElectMaster(ctx, ra.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if el.Code != protocol.RespSuccess || el.State.MasterID != ra.ID || el.Members[ra.ID] != a.addr {
		t.Fatalf("first election: %+v", el)
	}
	rb := b.register(ctx)
	if rb.State.MasterID != ra.ID || rb.State.MasterAddress != a.addr {
		t.Fatalf("b's registration: %+v", rb)
	}
	if _, err := a.cl.AlterSyncStateSet(ctx, ra.ID, 1, wire.SyncStateSet{Set: []int64{ra.ID, rb.ID}, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a.stop()
	wait.Until(t, "broker b told it is master", func() bool {
		s, ok := b.lastState()
		return ok && s.MasterID == rb.ID && s.MasterAddress == b.addr
	})
	for _, tn := range c.nodes {
		wait.Until(t, "every node applied the election (Raft over TLS)", func() bool {
			g := tn.node.Group("broker-a")
			return g != nil && g.MasterID == rb.ID && g.MasterEpoch == 2
		})
	}

	// A broker without TLS is refused by the controllers' enforcing
	// listeners: its registration never gets an answer.
	before := p.server.Stats().HandshakeFailures
	plain := newTLSBroker(t, c, p, "broker-b", nil)
	if _, err := plain.cl.Register(ctxT(t, 3*time.Second), 0, "token-plain"); err == nil {
		t.Fatal("a plain broker registered with TLS-only controllers")
	}
	if p.server.Stats().HandshakeFailures <= before {
		t.Fatal("the plain broker's connections were not counted as failed handshakes")
	}

	// A plain peer on the Raft port gets its connection closed without an
	// answer.
	conn, err := net.DialTimeout("tcp", c.nodes[0].raftAddr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	// rpcAppendEntries (0) then the start of a msgpack map: what a plain
	// peer would send.
	if _, err := conn.Write([]byte{0, 0x8f, 0xa4, 'T', 'e', 'r', 'm', 0x01, 0xa6, 'L', 'e', 'a', 'd', 'e', 'r', 0xc4}); err != nil {
		t.Fatal(err)
	}
	var buf [64]byte
	n, err := conn.Read(buf[:])
	for err == nil && n > 0 && buf[0] == 0x15 { // a TLS alert record: read on to the close
		n, err = conn.Read(buf[:])
	}
	if err == nil {
		t.Fatalf("a plain Raft peer got %d bytes of answer: % x", n, buf[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a plain Raft peer's connection stayed open")
	}
}
