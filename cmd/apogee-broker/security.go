package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/acl"
)

// securityConfig is the access control and TLS part of the configuration
// (docs/security.md).
type securityConfig struct {
	acl     bool   // --acl, aclEnable, authenticationEnabled, authorizationEnabled
	aclFile string // --acl-file, aclFile
}

// securityFlags are the flags of securityConfig.
type securityFlags struct {
	acl     *bool
	aclFile *string
}

func addSecurityFlags(fs *pflag.FlagSet) *securityFlags {
	return &securityFlags{
		acl:     fs.Bool("acl", false, "authenticate and authorize every request (RocketMQ's ACL; see docs/security.md)"),
		aclFile: fs.String("acl-file", "", "users and ACLs: Apogee's format or a RocketMQ 4 plain_acl.yml (reloaded when it changes); implies --acl"),
	}
}

func (f *securityFlags) config() securityConfig {
	return securityConfig{acl: *f.acl || *f.aclFile != "", aclFile: *f.aclFile}
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
	honoured["aclFile"] = confKey{"acl-file", "`--acl-file`: the ACL file (Apogee's format or RocketMQ 4's `plain_acl.yml`), reloaded when it changes; implies `aclEnable=true`", func(c *config, v string) error {
		c.sec.aclFile, c.sec.acl = v, true
		return nil
	}}
}

// openGuard returns the access control the configuration asks for, or nil
// when it is off. Users and ACLs created through the admin codes are kept
// in DATA/config.
func openGuard(c *config, logger *slog.Logger) (*acl.Guard, error) {
	if !c.sec.acl {
		return nil, nil
	}
	g, err := acl.Open(acl.Options{
		File:        c.sec.aclFile,
		Dir:         filepath.Join(c.dataDir, "config"),
		ClusterName: c.cluster,
		Logger:      logger,
	})
	if err != nil {
		return nil, fmt.Errorf("--acl-file: %w", err)
	}
	logger.Info("access control on", "file", c.sec.aclFile, "users", g.Stats().Users)
	return g, nil
}
