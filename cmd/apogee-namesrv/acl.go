package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// aclConfig is the name server's access control (docs/security.md), as
// the broker's: off by default; --acl turns it on, --acl-file names the
// ACL file (Apogee's format or RocketMQ 4's plain_acl.yml), reloaded when
// it changes.
type aclConfig struct {
	enabled bool
	file    string
	cluster string
}

type aclFlags struct {
	enabled       *bool
	file, cluster *string
}

func addACLFlags(fs *pflag.FlagSet) *aclFlags {
	return &aclFlags{
		enabled: fs.Bool("acl", false, "authenticate and authorize every request (users and ACLs from --acl-file)"),
		file:    fs.String("acl-file", "", "the ACL file (Apogee's format or RocketMQ 4's plain_acl.yml), reloaded when it changes; implies --acl"),
		cluster: fs.String("acl-cluster", acl.DefaultClusterName, "the Cluster resource whose Update (or Get, to read) is admin rights here (registering brokers, KV config)"),
	}
}

func (f *aclFlags) config() aclConfig {
	return aclConfig{enabled: *f.enabled || *f.file != "", file: *f.file, cluster: *f.cluster}
}

// openGuard opens the access control, or returns nil when it is off.
func openGuard(a aclConfig, logger *slog.Logger) (*acl.Guard, error) {
	if !a.enabled {
		return nil, nil
	}
	g, err := acl.Open(acl.Options{File: a.file, ClusterName: a.cluster, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("--acl-file: %w", err)
	}
	logger.Info("access control on", "file", a.file, "users", g.Stats().Users, "cluster", a.cluster)
	return g, nil
}

// guarded serves the registry's requests that the guard allows and
// answers the others NO_PERMISSION with the guard's remark.
type guarded struct {
	g   *acl.Guard
	reg *namesrv.Registry
}

func (h guarded) ServeRemoting(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	if ok, code, remark := h.g.Check(c.RemoteAddr(), req); !ok {
		resp.Cmd.Code = code
		resp.Cmd.SetRemark(remark)
		return remoting.Reply
	}
	return h.reg.ServeRemoting(c, req, resp)
}
