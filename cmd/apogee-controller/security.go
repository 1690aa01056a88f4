package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/controller"
)

// securitySettings are the controller's access control (docs/security.md,
// docs/failover.md): --acl and --acl-file (RocketMQ 5.3's controller
// authenticationEnabled; the users in an ACL file as the broker's), and
// the controller's own credentials (innerClientAuthenticationCredentials),
// which sign its Raft preamble, its pushes to brokers and its --join
// requests.
type securitySettings struct {
	acl     bool
	aclFile string
	inner   auth.Credentials
}

type securityFlags struct {
	acl     *bool
	aclFile *string
}

func addSecurityFlags(fs *pflag.FlagSet) *securityFlags {
	return &securityFlags{
		acl:     fs.Bool("acl", false, "obey only signed requests of users with admin rights (Update on Cluster:*) or Super users of --acl-file, and only authenticated Raft peers (docs/failover.md)"),
		aclFile: fs.String("acl-file", "", "users and ACLs, the broker's format (reloaded when it changes); implies --acl"),
	}
}

func (f *securityFlags) settings() securitySettings {
	return securitySettings{acl: *f.acl || *f.aclFile != "", aclFile: *f.aclFile}
}

// The properties keys of securitySettings (RocketMQ 5.3's AuthConfig
// names, and the broker's aclFile).
func init() {
	on := func(c *config, v string, _ *string) error {
		b, err := strconv.ParseBool(v)
		c.sec.acl = c.sec.acl || b
		return err
	}
	honoured["authenticationEnabled"] = confKey{"acl", on}
	honoured["authorizationEnabled"] = confKey{"acl", on}
	honoured["aclFile"] = confKey{"acl-file", func(c *config, v string, _ *string) error {
		c.sec.aclFile, c.sec.acl = v, true
		return nil
	}}
	honoured["innerClientAuthenticationCredentials"] = confKey{"", func(c *config, v string, _ *string) error {
		var creds struct {
			AccessKey string `json:"accessKey"`
			SecretKey string `json:"secretKey"`
		}
		if err := json.Unmarshal([]byte(v), &creds); err != nil {
			return fmt.Errorf(`want {"accessKey":"...","secretKey":"..."}: %w`, err)
		}
		c.sec.inner = auth.Credentials{AccessKey: creds.AccessKey, SecretKey: creds.SecretKey}
		if c.sec.inner.IsEmpty() {
			return fmt.Errorf("want both accessKey and secretKey")
		}
		return nil
	}}
}

// security is what the settings give: the ACL guard (nil: off) and the
// node's options that follow from it.
type security struct {
	guard *acl.Guard
}

func (s *security) close() {
	if s.guard != nil {
		s.guard.Close()
	}
}

// openSecurity opens the ACL file and sets o's Authorize, Signer and
// RaftAuth. mutualRaft tells whether Raft runs over TLS with client
// certificates required (then the peers are already authenticated, and
// the preamble is not added).
func openSecurity(c *config, o *controller.Options, mutualRaft bool, logger *slog.Logger) (*security, error) {
	s := &security{}
	if !c.sec.inner.IsEmpty() {
		o.Signer = auth.NewSigner(c.sec.inner)
	}
	if !c.sec.acl {
		return s, nil
	}
	if c.sec.aclFile == "" {
		return nil, fmt.Errorf("--acl needs --acl-file (the controller keeps no users of its own): the users brokers and administrators sign with")
	}
	g, err := acl.Open(acl.Options{File: c.sec.aclFile, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("--acl-file: %w", err)
	}
	s.guard = g
	o.Authorize = g.Check
	switch {
	case mutualRaft:
		logger.Info("access control on: Raft peers are authenticated by their client certificates (--raft-tls, --tls-client-ca)")
	case o.Signer == nil:
		g.Close()
		return nil, fmt.Errorf("--acl: the controller needs its own credentials to authenticate to its Raft peers: " +
			`set innerClientAuthenticationCredentials={"accessKey":"...","secretKey":"..."} in the properties (-c), ` +
			"a user with admin rights in --acl-file, the same on every member (or use --raft-tls with --tls-client-ca)")
	default:
		o.RaftAuth = &controller.RaftAuth{Signer: o.Signer, Authorize: g.Check}
	}
	if o.Signer == nil && !o.DisableNotify {
		logger.Warn("access control on without innerClientAuthenticationCredentials: role-change pushes to brokers go unsigned, " +
			"and brokers under ACL refuse them (they learn of the change from their heartbeats, a second later); set the key in the properties")
	}
	logger.Info("access control on", "file", c.sec.aclFile, "users", g.Stats().Users, "raft_preamble", o.RaftAuth != nil)
	return s, nil
}
