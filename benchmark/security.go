package benchmark

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/remoting"
)

// clientOpts are the options every client of the run shares: TLS and
// credentials when the configuration has them.
func (t *brokerTarget) clientOpts() []client.Opt {
	var o []client.Opt
	if t.tls != nil {
		o = append(o, client.TLS(t.tls))
	}
	if !t.cfg.Credentials.IsEmpty() {
		o = append(o, client.Credentials(t.cfg.Credentials))
	}
	return o
}

func producerOpts(base []client.Opt, more ...client.ProducerOpt) []client.ProducerOpt {
	out := make([]client.ProducerOpt, 0, len(base)+len(more))
	for _, o := range base {
		out = append(out, o)
	}
	return append(out, more...)
}

func pushOpts(base []client.Opt, more ...client.PushConsumerOpt) []client.PushConsumerOpt {
	out := make([]client.PushConsumerOpt, 0, len(base)+len(more))
	for _, o := range base {
		out = append(out, o)
	}
	return append(out, more...)
}

// embeddedSecurity prepares the embedded broker for Config.TLS and
// Config.Credentials: a TLS listener in RocketMQ's permissive mode (TLS and
// plain clients on one port) with a certificate for 127.0.0.1 made for the
// run and trusted by the run's clients, and access control with one user of
// the credentials, allowed to publish and subscribe the benchmark's topic
// and groups and nothing more (so every request is matched against
// policies, as a production user's would be). It fills t.tls (the clients'
// TLS configuration), and the remoting options and access control of the
// broker.
func (t *brokerTarget) embeddedSecurity(ro *remoting.Options) (*acl.Guard, error) {
	if t.cfg.TLS != nil {
		dir := filepath.Join(t.dir, "bench-tls")
		certFile, keyFile, roots, err := writeBenchCert(dir)
		if err != nil {
			return nil, fmt.Errorf("benchmark: certificate for the embedded broker: %w", err)
		}
		srv, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Permissive, CertFile: certFile, KeyFile: keyFile,
			ReloadInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, fmt.Errorf("benchmark: TLS of the embedded broker: %w", err)
		}
		t.tlsServer = srv
		ro.Handshake = srv.Handshake
		t.tls = t.cfg.TLS.Clone()
		if !t.tls.InsecureSkipVerify {
			t.tls.RootCAs = roots
		}
	}
	if t.cfg.Credentials.IsEmpty() {
		return nil, nil
	}
	return openBenchGuard(t.dir, t.cfg.Credentials.AccessKey, t.cfg.Credentials.SecretKey, t.cfg.Topic)
}

// openBenchGuard writes the embedded broker's ACL file and opens it.
func openBenchGuard(dir, accessKey, secretKey, topic string) (*acl.Guard, error) {
	doc := struct {
		Users []acl.UserInfo `json:"users"`
		ACLs  []acl.AclInfo  `json:"acls"`
	}{
		Users: []acl.UserInfo{{Username: accessKey, Password: secretKey}},
		ACLs: []acl.AclInfo{{Subject: "User:" + accessKey, Policies: []acl.PolicyInfo{{Entries: []acl.PolicyEntryInfo{
			{Resource: "Topic:" + topic, Actions: []string{"Pub", "Sub"}, Decision: "Allow"},
			{Resource: "Group:apogee-bench*", Actions: []string{"Pub", "Sub"}, Decision: "Allow"},
		}}}}},
	}
	data, err := json.Marshal(&doc)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "bench-acl.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("benchmark: ACL file: %w", err)
	}
	g, err := acl.Open(acl.Options{File: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, fmt.Errorf("benchmark: access control of the embedded broker: %w", err)
	}
	return g, nil
}

// writeBenchCert writes a self-signed ECDSA P-256 certificate for
// 127.0.0.1, ::1 and localhost (valid for a day) and its key into dir, and
// returns their paths and a pool trusting it.
func writeBenchCert(dir string) (certFile, keyFile string, roots *x509.CertPool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "apogee-bench"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, err
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots, nil
}

// describeSecurity is the part of a run's description for TLS and
// credentials.
func describeSecurity(c Config) string {
	s := ""
	if c.TLS != nil {
		s += ", TLS"
	}
	if !c.Credentials.IsEmpty() {
		s += ", signed (ACL on when embedded)"
	}
	return s
}
