package grpcfe

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
)

// The transport: RocketMQ 5's clients connect with TLS by default (the Go
// and Java SDKs trust any certificate unless told otherwise), and can be
// told to connect in plaintext. As RocketMQ's proxy does by default
// (tlsTestModeEnable), the front end accepts both on its one port: a
// connection whose first byte opens a TLS handshake (0x16) is served over
// TLS, any other in plaintext. Without Options.TLS the certificate is a
// self-signed one made at New, valid for a year: it encrypts, it proves
// nothing. The operator's certificates and a mode that refuses plaintext
// come with Options.TLSServer (security.go's transportCreds), which
// replaces this transport; authentication with Options.Guard.

// permissive is the TransportCredentials that serves TLS or plaintext by
// the connection's first byte.
type permissive struct {
	tls credentials.TransportCredentials
}

// newPermissive returns the credentials of cfg (nil: a self-signed
// certificate for hosts).
func newPermissive(cfg *tls.Config, hosts []string) (*permissive, error) {
	if cfg == nil {
		cert, err := selfSigned(hosts)
		if err != nil {
			return nil, err
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return &permissive{tls: credentials.NewTLS(cfg)}, nil
}

// peekedConn is a connection whose first bytes were read ahead.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// plainInfo is the AuthInfo of a plaintext connection.
type plainInfo struct{ credentials.CommonAuthInfo }

func (plainInfo) AuthType() string { return "insecure" }

func (p *permissive) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	r := bufio.NewReaderSize(conn, 512)
	first, err := r.Peek(1)
	if err != nil {
		return nil, nil, fmt.Errorf("grpcfe: first byte: %w", err)
	}
	pc := &peekedConn{Conn: conn, r: r}
	if first[0] == 0x16 { // a TLS record of type handshake
		return p.tls.ServerHandshake(pc)
	}
	return pc, plainInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (p *permissive) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("grpcfe: server credentials used by a client")
}

func (p *permissive) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls-or-plaintext"}
}

func (p *permissive) Clone() credentials.TransportCredentials {
	return &permissive{tls: p.tls.Clone()}
}

func (p *permissive) OverrideServerName(string) error { return nil }

// selfSigned makes an ECDSA P-256 certificate for hosts (names or IP
// addresses), valid for a year from an hour ago.
func selfSigned(hosts []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("grpcfe: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("grpcfe: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Apogee"}, CommonName: "apogee-broker (self-signed)"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range append([]string{"localhost", "127.0.0.1", "::1"}, hosts...) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("grpcfe: certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
