package client

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"

	"github.com/apogeemq/apogee/auth"
)

// Credentials makes the instance sign every request it sends (to brokers
// and name servers, of every type) with RocketMQ's AccessKey and Signature
// fields, as rocketmq-client-go's WithCredentials does; a broker with
// access control on (docs/security.md) refuses unsigned requests with
// NO_PERMISSION. The SecurityToken, when set, is sent and signed.
// Instance-level: clients sharing an instance must give the same
// credentials. Default: none, requests unsigned.
func Credentials(c auth.Credentials) Opt {
	return opt{func(cfg *clientConfig) { cfg.creds = c }}
}

// TLS makes every connection of the instance a TLS connection with this
// configuration (nil: plain TCP, the default). Its ServerName defaults to
// the host of the address dialled; set RootCAs for a broker with a private
// CA, Certificates for mutual TLS, or InsecureSkipVerify to accept any
// certificate (what rocketmq-client-go's WithTls(true) does). Instance-level.
func TLS(cfg *tls.Config) Opt {
	return opt{func(c *clientConfig) { c.tls = cfg }}
}

// securitySignature is the instance signature's part for Credentials and
// TLS: the access key and a digest of the secret (never the secret), and
// the TLS configuration's identity.
func (c *clientConfig) securitySignature() string {
	if c.creds.IsEmpty() && c.tls == nil {
		return ""
	}
	sum := sha256.Sum256([]byte(c.creds.SecretKey + "\x00" + c.creds.SecurityToken))
	return "|" + c.creds.AccessKey + ":" + hex.EncodeToString(sum[:8]) + "|" + tlsIdentity(c.tls)
}

func tlsIdentity(t *tls.Config) string {
	if t == nil {
		return "plain"
	}
	return "tls:" + hex.EncodeToString([]byte(t.ServerName)) + ":" + boolString(t.InsecureSkipVerify)
}

func boolString(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// signer returns the remoting signer of the credentials, or nil.
func (c *clientConfig) signer() *auth.Signer {
	if c.creds.IsEmpty() {
		return nil
	}
	return auth.NewSigner(c.creds)
}
