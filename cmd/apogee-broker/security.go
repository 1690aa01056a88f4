package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// securityConfig is the access control and TLS part of the configuration
// (docs/security.md).
type securityConfig struct {
	acl     bool   // --acl, aclEnable, authenticationEnabled, authorizationEnabled
	aclFile string // --acl-file, aclFile

	tlsMode                         string // --tls-mode, tls.server.mode
	tlsCert, tlsKey, tlsCA, tlsAuth string // --tls-cert, --tls-key, --tls-client-ca, --tls-client-auth

	// The broker's own connections: --tls-enable (tls.enable: all of
	// them), --ha-tls (a slave's HA stream; implied by --tls-mode
	// enforcing), --controller-tls, and
	// what they verify and present: --tls-ca, --tls-client-cert,
	// --tls-client-key (tls.client.trustCertPath, tls.client.certPath,
	// tls.client.keyPath).
	tlsEnable, haTLS, controllerTLS          bool
	tlsServerCA, tlsClientCert, tlsClientKey string

	maxConns, maxConnsPerSource int   // --max-connections, --max-connections-per-source (0: default)
	responseBudget              int64 // --response-budget (0: default)

	// --max-auto-create-topics, --max-auto-create-groups,
	// --max-auto-create-per-source (0: default, negative: no cap)
	autoTopics, autoGroups, autoPerSource int

	// innerCreds sign the broker's own requests: to external name
	// servers, its master, the controllers and its group
	// (innerClientAuthenticationCredentials; innerauth.go); empty: unsigned. With
	// access control on they are also a super user of this broker, created
	// at start when absent (RocketMQ 5.3 does the same), so that the
	// group's other brokers, which sign with them, are served.
	innerCreds auth.Credentials

	// initUser is initAuthenticationUser: the first super user, created
	// at start when absent. Its password is never logged.
	initUser *acl.User
}

// secretConfKeys are the broker.conf keys whose values hold secrets: no
// log line or error message shows them (confShown).
var secretConfKeys = map[string]bool{"initAuthenticationUser": true, "innerClientAuthenticationCredentials": true}

// confShown is how a broker.conf value is shown in logs and errors: as it
// is, or for a key that may hold a secret, its length only.
func confShown(key, value string) string {
	k := strings.ToLower(key)
	if secretConfKeys[key] || strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.Contains(k, "credential") {
		return fmt.Sprintf("(hidden: %d bytes)", len(value))
	}
	return value
}

// jsonShape is a JSON error without any of the text it was reading (a
// syntax error names a character of it): where it failed, or the field
// of the wrong type.
func jsonShape(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te):
		return fmt.Errorf("field %q is not a %s", te.Field, te.Type)
	}
	return errors.New("not valid JSON")
}

// securityFlags are the flags of securityConfig.
type securityFlags struct {
	acl                                               *bool
	aclFile, tlsMode, tlsCert, tlsKey, tlsCA, tlsAuth *string
	tlsEnable, haTLS, controllerTLS                   *bool
	tlsServerCA, tlsClientCert, tlsClientKey          *string
	maxConns, maxConnsPerSource                       *int
	responseBudget                                    *int64
	autoTopics, autoGroups, autoPerSource             *int
}

func addSecurityFlags(fs *pflag.FlagSet) *securityFlags {
	return &securityFlags{
		acl:               fs.Bool("acl", false, "authenticate and authorize every request (RocketMQ's ACL; see docs/security.md)"),
		aclFile:           fs.String("acl-file", "", "users and ACLs: Apogee's format or a RocketMQ 4 plain_acl.yml (reloaded when it changes); implies --acl"),
		tlsMode:           fs.String("tls-mode", "disabled", "TLS on the broker's and the name server's listeners: disabled, permissive (TLS and plain on one port) or enforcing"),
		tlsCert:           fs.String("tls-cert", "", "the server certificate chain (PEM), reloaded when it changes"),
		tlsKey:            fs.String("tls-key", "", "the server key (PEM), reloaded when it changes"),
		tlsCA:             fs.String("tls-client-ca", "", "CAs that client certificates are verified against (PEM): mutual TLS"),
		tlsAuth:           fs.String("tls-client-auth", "", "none, optional or require a client certificate (default: optional with --tls-client-ca)"),
		tlsEnable:         fs.Bool("tls-enable", false, "TLS on every connection the broker makes: a slave's HA stream and requests to its master, registrations with --namesrv, the controllers"),
		haTLS:             fs.Bool("ha-tls", false, "a slave connects to its master's HA port with TLS (implied by --tls-mode enforcing and --tls-enable)"),
		controllerTLS:     fs.Bool("controller-tls", false, "connect to the controllers (--controller-addr) with TLS (implied by --tls-enable)"),
		tlsServerCA:       fs.String("tls-ca", "", "CAs (PEM) that the certificates of the servers the broker connects to are verified against: master, name servers, controllers (default: the system's)"),
		tlsClientCert:     fs.String("tls-client-cert", "", "the certificate (PEM) the broker presents on its own TLS connections (mutual TLS)"),
		tlsClientKey:      fs.String("tls-client-key", "", "the key of --tls-client-cert (PEM)"),
		maxConns:          fs.Int("max-connections", 0, fmt.Sprintf("connections the process accepts in all (default %d)", remoting.DefaultMaxConns)),
		maxConnsPerSource: fs.Int("max-connections-per-source", 0, fmt.Sprintf("connections the process accepts from one source address (default %d)", remoting.DefaultMaxConnsPerSource)),
		responseBudget:    fs.Int64("response-budget", 0, "bytes of answers queued for clients that do not read them, in all (default 512 MiB)"),
		autoTopics:        fs.Int("max-auto-create-topics", 0, "sends to unknown topics stop creating them once the broker holds this many topics (default 10000; negative: no cap)"),
		autoGroups:        fs.Int("max-auto-create-groups", 0, "consumers of unknown groups stop creating them once the broker holds this many groups (default 10000; negative: no cap)"),
		autoPerSource:     fs.Int("max-auto-create-per-source", 0, "topics and groups one source address may create on demand per hour (default 1000; negative: no cap)"),
	}
}

func (f *securityFlags) config() securityConfig {
	return securityConfig{acl: *f.acl || *f.aclFile != "", aclFile: *f.aclFile,
		tlsMode: *f.tlsMode, tlsCert: *f.tlsCert, tlsKey: *f.tlsKey, tlsCA: *f.tlsCA, tlsAuth: *f.tlsAuth,
		tlsEnable: *f.tlsEnable, haTLS: *f.haTLS, controllerTLS: *f.controllerTLS,
		tlsServerCA: *f.tlsServerCA, tlsClientCert: *f.tlsClientCert, tlsClientKey: *f.tlsClientKey,
		maxConns: *f.maxConns, maxConnsPerSource: *f.maxConnsPerSource, responseBudget: *f.responseBudget,
		autoTopics: *f.autoTopics, autoGroups: *f.autoGroups, autoPerSource: *f.autoPerSource}
}

// The broker.conf keys of securityConfig.
func init() {
	on := func(c *config, v string) error {
		b, err := strconv.ParseBool(v)
		c.sec.acl = c.sec.acl || b
		return err
	}
	honoured["aclEnable"] = confKey{"acl", "`--acl`: `true` turns on authentication and authorization (RocketMQ 4's switch; docs/security.md)", on}
	honoured["authenticationEnabled"] = confKey{"acl", "as `aclEnable` (RocketMQ 5's switch: Apogee authenticates and authorizes together)", on}
	honoured["authorizationEnabled"] = confKey{"acl", "as `aclEnable`", on}
	str := func(set func(*securityConfig, string)) func(*config, string) error {
		return func(c *config, v string) error {
			set(&c.sec, v)
			return nil
		}
	}
	honoured["tls.server.mode"] = confKey{"tls-mode", "`--tls-mode`: `disabled`, `permissive` (TLS and plain clients on one port) or `enforcing` (RocketMQ's TlsSystemConfig key)", str(func(s *securityConfig, v string) { s.tlsMode = v })}
	honoured["tls.server.certPath"] = confKey{"tls-cert", "`--tls-cert`: the server certificate chain (PEM)", str(func(s *securityConfig, v string) { s.tlsCert = v })}
	honoured["tls.server.keyPath"] = confKey{"tls-key", "`--tls-key`: the server key (PEM; unencrypted)", str(func(s *securityConfig, v string) { s.tlsKey = v })}
	honoured["tls.server.trustCertPath"] = confKey{"tls-client-ca", "`--tls-client-ca`: CAs to verify client certificates with", str(func(s *securityConfig, v string) { s.tlsCA = v })}
	honoured["tls.server.need.client.auth"] = confKey{"tls-client-auth", "`--tls-client-auth`: `none`, `optional` or `require`", str(func(s *securityConfig, v string) { s.tlsAuth = v })}
	boolean := func(set func(*securityConfig, bool)) func(*config, string) error {
		return func(c *config, v string) error {
			b, err := strconv.ParseBool(v)
			set(&c.sec, b)
			return err
		}
	}
	honoured["tls.enable"] = confKey{"tls-enable", "`--tls-enable`: TLS on every connection the broker makes (a slave's to its master, registrations, the controllers; RocketMQ's client-side switch)", boolean(func(s *securityConfig, b bool) { s.tlsEnable = b })}
	honoured["tls.client.trustCertPath"] = confKey{"tls-ca", "`--tls-ca`: CAs to verify the servers the broker connects to (master, name servers, controllers)", str(func(s *securityConfig, v string) { s.tlsServerCA = v })}
	honoured["tls.client.certPath"] = confKey{"tls-client-cert", "`--tls-client-cert`: the certificate the broker presents on its own TLS connections", str(func(s *securityConfig, v string) { s.tlsClientCert = v })}
	honoured["tls.client.keyPath"] = confKey{"tls-client-key", "`--tls-client-key`: the key of `tls.client.certPath`", str(func(s *securityConfig, v string) { s.tlsClientKey = v })}
	num := func(set func(*securityConfig, int64)) func(*config, string) error {
		return func(c *config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("want a number >= 0")
			}
			set(&c.sec, n)
			return nil
		}
	}
	honoured["maxConnections"] = confKey{"max-connections", "`--max-connections`: connections accepted in all (default 10000; 0: the default)", num(func(s *securityConfig, n int64) { s.maxConns = int(n) })}
	honoured["maxConnectionsPerSource"] = confKey{"max-connections-per-source", "`--max-connections-per-source`: connections accepted from one source address (default 1000)", num(func(s *securityConfig, n int64) { s.maxConnsPerSource = int(n) })}
	honoured["responseBudget"] = confKey{"response-budget", "`--response-budget`: bytes of answers queued for clients that do not read them, in all (default 536870912)", num(func(s *securityConfig, n int64) { s.responseBudget = n })}
	signed := func(set func(*securityConfig, int)) func(*config, string) error {
		return func(c *config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("want a number (negative: no cap)")
			}
			set(&c.sec, n)
			return nil
		}
	}
	honoured["maxAutoCreateTopics"] = confKey{"max-auto-create-topics", "`--max-auto-create-topics`: a send to an unknown topic does not create it once the broker holds this many topics (default 10000; negative: no cap)", signed(func(s *securityConfig, n int) { s.autoTopics = n })}
	honoured["maxAutoCreateGroups"] = confKey{"max-auto-create-groups", "`--max-auto-create-groups`: a consumer of an unknown group does not create it once the broker holds this many groups (default 10000; negative: no cap)", signed(func(s *securityConfig, n int) { s.autoGroups = n })}
	honoured["maxAutoCreatePerSource"] = confKey{"max-auto-create-per-source", "`--max-auto-create-per-source`: topics and groups one source address may create on demand per hour (default 1000; negative: no cap)", signed(func(s *securityConfig, n int) { s.autoPerSource = n })}
	honoured["innerClientAuthenticationCredentials"] = confKey{"", "the broker signs its own requests with these credentials, `{\"accessKey\":\"...\",\"secretKey\":\"...\"}` (RocketMQ 5.3's format): registrations with external name servers, a slave's requests to its master and its HA handshake, and in controller mode its requests to the controllers and to its group; under ACL give them a Super user of every name server's and controller's ACL (a broker with access control on creates it as a super user of its own at start when absent, as RocketMQ 5.3 does)", func(c *config, v string) error {
		var creds struct {
			AccessKey string `json:"accessKey"`
			SecretKey string `json:"secretKey"`
		}
		if err := json.Unmarshal([]byte(v), &creds); err != nil {
			return fmt.Errorf("want {\"accessKey\":\"...\",\"secretKey\":\"...\"}: %w", jsonShape(err))
		}
		c.sec.innerCreds = auth.Credentials{AccessKey: creds.AccessKey, SecretKey: creds.SecretKey}
		if c.sec.innerCreds.IsEmpty() {
			return fmt.Errorf("want both accessKey and secretKey")
		}
		return nil
	}}
	honoured["initAuthenticationUser"] = confKey{"", "with access control on, the first super user, created at start when no user of its name exists (RocketMQ 5.3's format: `{\"username\":\"...\",\"password\":\"...\"}`; kept in the data directory's `config/acl.json`, its password encrypted; never logged): how the first user comes to exist without an ACL file (docs/security.md)", func(c *config, v string) error {
		var u acl.UserInfo
		if err := json.Unmarshal([]byte(v), &u); err != nil {
			return fmt.Errorf("want {\"username\":\"...\",\"password\":\"...\"}: %w", jsonShape(err))
		}
		if u.Username == "" || u.Password == "" {
			return fmt.Errorf("want both username and password")
		}
		user := acl.User{Name: u.Username, Password: u.Password, Type: acl.Super}
		if err := user.Validate(); err != nil {
			return err
		}
		c.sec.initUser = &user
		return nil
	}}
	honoured["aclFile"] = confKey{"acl-file", "`--acl-file`: the ACL file (Apogee's format or RocketMQ 4's `plain_acl.yml`), reloaded when it changes; implies `aclEnable=true`", func(c *config, v string) error {
		c.sec.aclFile, c.sec.acl = v, true
		return nil
	}}
}

// openTLS returns the TLS server of the configuration, or nil when TLS is
// disabled.
func openTLS(c *config, logger *slog.Logger) (*tlsconf.Server, error) {
	return openTLSProtos(c, logger, nil)
}

// openTLSProtos is openTLS offering the ALPN protocols protos.
func openTLSProtos(c *config, logger *slog.Logger, protos []string) (*tlsconf.Server, error) {
	mode, err := tlsconf.ParseMode(c.sec.tlsMode)
	if err != nil {
		return nil, fmt.Errorf("--tls-mode: %w", err)
	}
	if mode == tlsconf.Disabled {
		return nil, nil
	}
	cfg := tlsconf.Config{Mode: mode, CertFile: c.sec.tlsCert, KeyFile: c.sec.tlsKey, ClientCAFile: c.sec.tlsCA, Logger: logger, NextProtos: protos}
	switch strings.ToLower(c.sec.tlsAuth) {
	case "", "optional":
	case "none":
		cfg.ClientCAFile = ""
	case "require":
		cfg.RequireClientCert = true
	default:
		return nil, fmt.Errorf("--tls-client-auth %q: want none, optional or require", c.sec.tlsAuth)
	}
	s, err := tlsconf.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	logger.Info("TLS on", "mode", mode.String(), "cert", cfg.CertFile, "client_ca", cfg.ClientCAFile, "client_cert_required", cfg.RequireClientCert)
	return s, nil
}

// clientTLS sets the TLS of the broker's own connections in o, by the
// configuration: the HA listener follows --tls-mode (srv, nil when
// disabled); a slave's HA stream, the broker's remoting connections and
// its connections to the controllers are TLS as --ha-tls, --tls-enable and
// --controller-tls say. It returns the controllers' configuration (nil:
// plain).
func clientTLS(c *config, srv *tlsconf.Server, o *broker.Options, logger *slog.Logger) (*tls.Config, error) {
	if srv != nil {
		o.HASecure = srv.Handshake
	}
	s := c.sec
	ha := s.haTLS || s.tlsEnable || strings.EqualFold(strings.TrimSpace(s.tlsMode), "enforcing")
	ctl := s.controllerTLS || s.tlsEnable
	if !ha && !ctl {
		return nil, nil
	}
	t, err := tlsconf.ClientConfig{CAFile: s.tlsServerCA, CertFile: s.tlsClientCert, KeyFile: s.tlsClientKey}.Load()
	if err != nil {
		return nil, fmt.Errorf("--tls-ca / --tls-client-cert: %w", err)
	}
	if ha {
		o.HATLS = t
	}
	if s.tlsEnable {
		o.ClientTLS = t
	}
	logger.Info("TLS on the broker's own connections", "ha", ha, "controllers", ctl, "all", s.tlsEnable,
		"ca", s.tlsServerCA, "client_cert", s.tlsClientCert)
	if ctl {
		return t, nil
	}
	return nil, nil
}

// applyLimits sets the process-wide connection limit and response budget,
// and bounds the connections by the file descriptors left
// (remoting.ApplyProcessLimits): the soft RLIMIT_NOFILE, raised to the
// hard one first, less the descriptors the store and the rest of the
// process hold, less --fd-headroom, so that a flood of connections is
// refused before the store's next open fails with "too many open files".
func applyLimits(c *config, logger *slog.Logger) {
	remoting.ApplyProcessLimits(c.sec.maxConns, c.sec.maxConnsPerSource, c.fdHeadroom, logger)
	if c.sec.responseBudget > 0 {
		remoting.SharedResponseBudget().SetLimit(c.sec.responseBudget)
	}
}

// openGuard returns the access control the configuration asks for, or nil
// when it is off. Users and ACLs created through the admin codes are kept
// in DATA/config.
func openGuard(c *config, logger *slog.Logger) (*acl.Guard, error) {
	if !c.sec.acl {
		return nil, nil
	}
	var init []acl.User
	if c.sec.initUser != nil {
		init = append(init, *c.sec.initUser)
	}
	if !c.sec.innerCreds.IsEmpty() {
		init = append(init, acl.User{Name: c.sec.innerCreds.AccessKey, Password: c.sec.innerCreds.SecretKey, Type: acl.Super})
	}
	g, err := acl.Open(acl.Options{
		File:        c.sec.aclFile,
		Dir:         filepath.Join(c.dataDir, "config"),
		ClusterName: c.cluster,
		Logger:      logger,
		InitUsers:   init,
	})
	if err != nil {
		return nil, fmt.Errorf("--acl-file: %w", err)
	}
	logger.Info("access control on", "file", c.sec.aclFile, "users", g.Stats().Users)
	return g, nil
}

// namesrvSigner signs the broker's requests to external name servers with
// innerClientAuthenticationCredentials, or is nil without them.
func namesrvSigner(c *config) func(*protocol.Command) {
	if c.sec.innerCreds.IsEmpty() {
		return nil
	}
	key, creds := auth.NewKey(c.sec.innerCreds.SecretKey), c.sec.innerCreds
	return func(req *protocol.Command) { key.Sign(req, creds) }
}
