package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/internal/tlsconf"
)

// tlsConfig is the listener's TLS (docs/security.md), as the broker's.
type tlsConfig struct {
	mode, cert, key, clientCA, clientAuth string
}

type tlsFlags struct{ mode, cert, key, clientCA, clientAuth *string }

func addTLSFlags(fs *pflag.FlagSet) *tlsFlags {
	return &tlsFlags{
		mode:       fs.String("tls-mode", "disabled", "TLS on the listener: disabled, permissive (TLS and plain on one port) or enforcing"),
		cert:       fs.String("tls-cert", "", "the server certificate chain (PEM), reloaded when it changes"),
		key:        fs.String("tls-key", "", "the server key (PEM), reloaded when it changes"),
		clientCA:   fs.String("tls-client-ca", "", "CAs that client certificates are verified against (PEM): mutual TLS"),
		clientAuth: fs.String("tls-client-auth", "", "none, optional or require a client certificate (default: optional with --tls-client-ca)"),
	}
}

func (f *tlsFlags) config() tlsConfig {
	return tlsConfig{mode: *f.mode, cert: *f.cert, key: *f.key, clientCA: *f.clientCA, clientAuth: *f.clientAuth}
}

// tlsSystemKeys are RocketMQ's TlsSystemConfig keys (tls.properties, or
// system properties) that Apogee reads from namesrv.properties.
var tlsSystemKeys = []string{"tls.server.certPath", "tls.server.keyPath", "tls.server.mode", "tls.server.need.client.auth", "tls.server.trustCertPath"}

// The TlsSystemConfig keys, read from namesrv.properties too.
func init() {
	set := func(field func(*tlsConfig) *string) func(*config, string) error {
		return func(c *config, v string) error {
			*field(&c.tls) = v
			return nil
		}
	}
	honoured["tls.server.mode"] = confKey{"tls-mode", set(func(t *tlsConfig) *string { return &t.mode })}
	honoured["tls.server.certPath"] = confKey{"tls-cert", set(func(t *tlsConfig) *string { return &t.cert })}
	honoured["tls.server.keyPath"] = confKey{"tls-key", set(func(t *tlsConfig) *string { return &t.key })}
	honoured["tls.server.trustCertPath"] = confKey{"tls-client-ca", set(func(t *tlsConfig) *string { return &t.clientCA })}
	honoured["tls.server.need.client.auth"] = confKey{"tls-client-auth", set(func(t *tlsConfig) *string { return &t.clientAuth })}
}

// openTLS returns the listener's TLS server, or nil when TLS is disabled.
func openTLS(t tlsConfig, logger *slog.Logger) (*tlsconf.Server, error) {
	mode, err := tlsconf.ParseMode(t.mode)
	if err != nil {
		return nil, fmt.Errorf("--tls-mode: %w", err)
	}
	if mode == tlsconf.Disabled {
		return nil, nil
	}
	cfg := tlsconf.Config{Mode: mode, CertFile: t.cert, KeyFile: t.key, ClientCAFile: t.clientCA, Logger: logger}
	switch strings.ToLower(t.clientAuth) {
	case "", "optional":
	case "none":
		cfg.ClientCAFile = ""
	case "require":
		cfg.RequireClientCert = true
	default:
		return nil, fmt.Errorf("--tls-client-auth %q: want none, optional or require", t.clientAuth)
	}
	s, err := tlsconf.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	logger.Info("TLS on", "mode", mode.String(), "cert", t.cert, "client_ca", cfg.ClientCAFile)
	return s, nil
}
