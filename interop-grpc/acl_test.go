package interopgrpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// aclFile grants app Pub and Sub on the topics granted* and Sub on the
// group app-group.
const aclFile = `users:
  - {username: app, password: app-secret}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:granted*", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:app-group", actions: [Sub], decision: Allow}
`

// The RocketMQ 5 status codes of a refusal.
const (
	codeUnauthorized = 40100
	codeForbidden    = 40300
)

// TestACL: the official 5.x client with credentials against a broker with
// --acl-file: a granted topic is sent to and received from; a topic not
// granted is refused FORBIDDEN; a wrong secret is refused UNAUTHORIZED;
// nothing is logged with a secret.
func TestACL(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte(aclFile), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "aclEnable=true", "aclFile="+file)
	as := func(group, ak, sk string) *rmq.Config {
		c := b.config(group)
		c.Credentials = &credentials.SessionCredentials{AccessKey: ak, AccessSecret: sk}
		return c
	}

	p, err := rmq.NewProducer(as("", "app", "app-secret"), rmq.WithTopics("granted-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer start: %v", err)
	}
	t.Cleanup(func() { p.GracefulStop() })
	const n = 5
	for i := 0; i < n; i++ {
		if _, err := p.Send(context.Background(), &rmq.Message{Topic: "granted-1", Body: []byte("granted")}); err != nil {
			t.Fatalf("granted send %d: %v", i, err)
		}
	}
	c, err := rmq.NewSimpleConsumer(as("app-group", "app", "app-secret"), rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(all("granted-1")))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("consumer start: %v", err)
	}
	t.Cleanup(func() { c.GracefulStop() })
	if got := receive(t, c, n, 30*time.Second, true); len(got) != n {
		t.Fatalf("granted receive: %d of %d messages", len(got), n)
	}

	// A topic not granted: the route (and so the send) is refused.
	_, err = p.Send(context.Background(), &rmq.Message{Topic: "billing", Body: []byte("x")})
	if codeOf(err) != codeForbidden || !strings.Contains(err.Error(), "Topic:billing") {
		t.Errorf("send to a topic not granted: %v, want %d naming Topic:billing", err, codeForbidden)
	}

	// A wrong secret: the producer cannot even start.
	bad, err := rmq.NewProducer(as("", "app", "guess"), rmq.WithTopics("granted-1"))
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Start()
	if err == nil {
		bad.GracefulStop()
		t.Fatal("a producer with a wrong secret started")
	}
	// The client wraps its start's error without the status type.
	if !strings.Contains(err.Error(), "UNAUTHORIZED") || !strings.Contains(err.Error(), "signature") {
		t.Errorf("wrong secret: %v, want UNAUTHORIZED (%d) naming the signature", err, codeUnauthorized)
	}
}

// writeCert writes a self-signed ECDSA certificate for 127.0.0.1 and its
// key into dir.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "apogee-interop"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestACLOverTLS: a broker with access control and TLS enforcing: the
// gRPC port serves the operator's certificate with ALPN h2, the 5.x
// client (TLS by default) with credentials sends and receives, and a
// plaintext client is refused.
func TestACLOverTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(aclFile), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := writeCert(t, dir)
	b := startBroker(t, "aclEnable=true", "aclFile="+file,
		"tls.server.mode=enforcing", "tls.server.certPath="+certFile, "tls.server.keyPath="+keyFile)

	// The operator's certificate, offered with ALPN h2.
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemBytes)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", b.GrpcAddr,
		&tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS handshake verifying the operator's certificate: %v", err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("ALPN %q, want h2", p)
	}
	conn.Close()

	cfg := func(group string) *rmq.Config {
		c := b.config(group)
		c.Credentials = &credentials.SessionCredentials{AccessKey: "app", AccessSecret: "app-secret"}
		return c
	}
	p, err := rmq.NewProducer(cfg(""), rmq.WithTopics("granted-tls"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer start over TLS: %v", err)
	}
	t.Cleanup(func() { p.GracefulStop() })
	if _, err := p.Send(context.Background(), &rmq.Message{Topic: "granted-tls", Body: []byte("over TLS")}); err != nil {
		t.Fatalf("send over TLS: %v", err)
	}
	c, err := rmq.NewSimpleConsumer(cfg("app-group"), rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(all("granted-tls")))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("consumer start over TLS: %v", err)
	}
	t.Cleanup(func() { c.GracefulStop() })
	if got := receive(t, c, 1, 30*time.Second, true); len(got) != 1 || string(got[0].GetBody()) != "over TLS" {
		t.Fatalf("receive over TLS: %d messages", len(got))
	}

	// A plaintext client gets no answer.
	cli, _, ctx := rawClient(t, b)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.QueryRoute(ctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: "granted-tls"}}); err == nil {
		t.Fatal("a plaintext client was served by an enforcing broker")
	}
}
