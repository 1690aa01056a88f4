// Package tlstest writes certificates for tests (valid from an hour ago
// for a year, unless ReissueValid says otherwise): a CA, a server
// certificate for 127.0.0.1, ::1 and localhost signed by it, and a client
// certificate signed by it (for mutual TLS). Test code only.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the paths of a test PKI's PEM files.
type Files struct {
	CA                    string // the CA certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	Dir                   string
}

// Write creates a new CA and its server and client certificates in dir.
// Every call makes a new CA; serial numbers tell the server certificates
// of two calls apart (Serial).
func Write(t testing.TB, dir string) Files {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "apogee test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{Dir: dir, CA: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem")}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	caKDER, err := x509.MarshalPKCS8PrivateKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "ca-key.pem"), "PRIVATE KEY", caKDER)
	issue(t, ca, caKey, "apogee test server", x509.ExtKeyUsageServerAuth, f.ServerCert, f.ServerKey)
	issue(t, ca, caKey, "apogee test client", x509.ExtKeyUsageClientAuth, f.ClientCert, f.ClientKey)
	return f
}

// Reissue gives the server a new certificate and key signed by the same
// CA (a rotation clients trusting the CA accept), replacing f's files.
func Reissue(t testing.TB, f Files) {
	t.Helper()
	now := time.Now()
	ReissueValid(t, f, now.Add(-time.Hour), now.Add(365*24*time.Hour))
}

// ReissueValid is Reissue with a certificate valid from notBefore to
// notAfter (an expired one, or one not valid yet, for the checks of
// package tlsconf).
func ReissueValid(t testing.TB, f Files, notBefore, notAfter time.Time) {
	t.Helper()
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(f.Dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(keyPEM)
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	issueValid(t, ca, k.(*ecdsa.PrivateKey), "apogee test server", x509.ExtKeyUsageServerAuth, f.ServerCert, f.ServerKey, notBefore, notAfter)
}

func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) {
	t.Helper()
	now := time.Now()
	issueValid(t, ca, caKey, cn, usage, certPath, keyPath, now.Add(-time.Hour), now.Add(365*24*time.Hour))
}

func issueValid(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage, certPath, keyPath string, notBefore, notAfter time.Time) {
	t.Helper()
	{
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(t),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    notBefore,
			NotAfter:     notAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		// The key first, then the certificate: a reader that checks the two
		// agree sees either the old pair or the new one after a rename.
		writePEM(t, keyPath, "PRIVATE KEY", kder)
		writePEM(t, certPath, "CERTIFICATE", der)
	}
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writePEM writes one PEM block by a temporary file and a rename, so that
// a reader never sees half a file.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
