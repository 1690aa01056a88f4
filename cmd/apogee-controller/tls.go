package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/internal/tlsconf"
)

// tlsSettings are the controller's TLS flags (docs/security.md): the
// remoting listener's server side as the broker's (--tls-mode, --tls-cert,
// --tls-key, --tls-client-ca, --tls-client-auth), Raft between controllers
// (--raft-tls), and the client side of the controller's own connections
// (--tls-ca, --tls-client-cert, --tls-client-key: to its Raft peers and,
// with --notify-tls, to brokers).
type tlsSettings struct {
	mode, cert, key, clientCA, clientAuth string
	ca, clientCert, clientKey             string
	raft, notify                          bool
}

type tlsFlags struct {
	mode, cert, key, clientCA, clientAuth, ca, clientCert, clientKey *string
	raft, notify                                                     *bool
}

func addTLSFlags(fs *pflag.FlagSet) *tlsFlags {
	return &tlsFlags{
		mode:       fs.String("tls-mode", "disabled", "TLS on the remoting listener (brokers, admin tools): disabled, permissive (TLS and plain on one port) or enforcing"),
		cert:       fs.String("tls-cert", "", "this controller's certificate chain (PEM), reloaded when it changes: the remoting listener's and, with --raft-tls, Raft's"),
		key:        fs.String("tls-key", "", "the key of --tls-cert (PEM), reloaded when it changes"),
		clientCA:   fs.String("tls-client-ca", "", "CAs client certificates are verified against (PEM): mutual TLS; with --raft-tls, Raft peers must present one"),
		clientAuth: fs.String("tls-client-auth", "", "on the remoting listener: none, optional or require a client certificate (default: optional with --tls-client-ca)"),
		ca:         fs.String("tls-ca", "", "CAs to verify the servers this controller dials with (PEM): its Raft peers, and brokers with --notify-tls (default: the system's)"),
		clientCert: fs.String("tls-client-cert", "", "the certificate (PEM) this controller presents when it dials (mutual TLS with its Raft peers and brokers)"),
		clientKey:  fs.String("tls-client-key", "", "the key of --tls-client-cert (PEM)"),
		raft:       fs.Bool("raft-tls", false, "Raft between the controllers over TLS (every member must set it): needs --tls-cert and --tls-key; mutual TLS with --tls-client-ca and --tls-client-cert"),
		notify:     fs.Bool("notify-tls", false, "NOTIFY_BROKER_ROLE_CHANGED pushes to brokers over TLS (brokers run with --tls-mode enforcing)"),
	}
}

func (f *tlsFlags) settings() tlsSettings {
	return tlsSettings{mode: *f.mode, cert: *f.cert, key: *f.key, clientCA: *f.clientCA, clientAuth: *f.clientAuth,
		ca: *f.ca, clientCert: *f.clientCert, clientKey: *f.clientKey, raft: *f.raft, notify: *f.notify}
}

// The properties keys of tlsSettings: RocketMQ's TlsSystemConfig names.
func init() {
	str := func(set func(*tlsSettings, string)) func(*config, string, *string) error {
		return func(c *config, v string, _ *string) error {
			set(&c.tls, v)
			return nil
		}
	}
	honoured["tls.server.mode"] = confKey{"tls-mode", str(func(s *tlsSettings, v string) { s.mode = v })}
	honoured["tls.server.certPath"] = confKey{"tls-cert", str(func(s *tlsSettings, v string) { s.cert = v })}
	honoured["tls.server.keyPath"] = confKey{"tls-key", str(func(s *tlsSettings, v string) { s.key = v })}
	honoured["tls.server.trustCertPath"] = confKey{"tls-client-ca", str(func(s *tlsSettings, v string) { s.clientCA = v })}
	honoured["tls.server.need.client.auth"] = confKey{"tls-client-auth", str(func(s *tlsSettings, v string) { s.clientAuth = v })}
	honoured["tls.client.trustCertPath"] = confKey{"tls-ca", str(func(s *tlsSettings, v string) { s.ca = v })}
	honoured["tls.client.certPath"] = confKey{"tls-client-cert", str(func(s *tlsSettings, v string) { s.clientCert = v })}
	honoured["tls.client.keyPath"] = confKey{"tls-client-key", str(func(s *tlsSettings, v string) { s.clientKey = v })}
	honoured["raftTlsEnable"] = confKey{"raft-tls", func(c *config, v string, _ *string) (err error) {
		c.tls.raft, err = strconv.ParseBool(v)
		return err
	}}
	honoured["notifyTlsEnable"] = confKey{"notify-tls", func(c *config, v string, _ *string) (err error) {
		c.tls.notify, err = strconv.ParseBool(v)
		return err
	}}
}

// tlsParts is what the settings give: the remoting listener's TLS server
// (nil: plain), Raft's TLS and the pushes' client configuration (nil:
// plain), and the servers to close at the end.
type tlsParts struct {
	remoting *tlsconf.Server
	raft     *controller.RaftTLS
	notify   *tls.Config
	// join is the client TLS of a --join request: the group's remoting
	// listeners are configured alike, so with --tls-mode enforcing the
	// request goes over TLS (--tls-ca, --tls-client-cert); nil: plain.
	join    *tls.Config
	closers []*tlsconf.Server
}

// openTLS loads the TLS the settings ask for.
func openTLS(s tlsSettings, logger *slog.Logger) (p tlsParts, err error) {
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	mode, err := tlsconf.ParseMode(s.mode)
	if err != nil {
		return p, fmt.Errorf("--tls-mode: %w", err)
	}
	if mode != tlsconf.Disabled {
		cfg := tlsconf.Config{Mode: mode, CertFile: s.cert, KeyFile: s.key, ClientCAFile: s.clientCA, Logger: logger}
		switch strings.ToLower(s.clientAuth) {
		case "", "optional":
		case "none":
			cfg.ClientCAFile = ""
		case "require":
			cfg.RequireClientCert = true
		default:
			return p, fmt.Errorf("--tls-client-auth %q: want none, optional or require", s.clientAuth)
		}
		if p.remoting, err = tlsconf.NewServer(cfg); err != nil {
			return p, fmt.Errorf("--tls-mode %s: %w", mode, err)
		}
		p.closers = append(p.closers, p.remoting)
		logger.Info("TLS on the remoting listener", "mode", mode.String(), "cert", s.cert, "client_ca", cfg.ClientCAFile,
			"client_cert_required", cfg.RequireClientCert)
	}
	var client *tls.Config
	if s.raft || s.notify || mode == tlsconf.Enforcing {
		c, err := tlsconf.ClientConfig{CAFile: s.ca, CertFile: s.clientCert, KeyFile: s.clientKey}.Load()
		if err != nil {
			return p, fmt.Errorf("--tls-ca / --tls-client-cert: %w", err)
		}
		client = c
	}
	if s.raft {
		cfg := tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: s.cert, KeyFile: s.key, ClientCAFile: s.clientCA,
			RequireClientCert: s.clientCA != "", Logger: logger}
		srv, err := tlsconf.NewServer(cfg)
		if err != nil {
			return p, fmt.Errorf("--raft-tls: %w", err)
		}
		p.closers = append(p.closers, srv)
		p.raft = &controller.RaftTLS{Server: srv.TLSConfig(), Client: client}
		logger.Info("TLS between the controllers (Raft)", "cert", s.cert, "client_ca", s.clientCA,
			"mutual", s.clientCA != "" && s.clientCert != "")
		if s.clientCA == "" {
			logger.Warn("--raft-tls without --tls-client-ca: any TLS client can reach the Raft port; mutual TLS is recommended")
		}
	}
	if s.notify {
		p.notify = client
	}
	if mode == tlsconf.Enforcing {
		p.join = client
	}
	return p, nil
}

func (p *tlsParts) close() {
	for _, s := range p.closers {
		s.Close()
	}
	p.closers = nil
}
