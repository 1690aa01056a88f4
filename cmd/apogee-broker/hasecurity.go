package main

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/protocol"
)

// haAuth sets the HA stream's authentication in o (docs/replication.md,
// "The identity handshake"; docs/security.md): under access control
// (guard not nil) a master takes a slave only with a verified client
// certificate or with inner credentials verifyHA accepts; a slave with
// innerClientAuthenticationCredentials signs its handshake with them.
func haAuth(c *config, guard *acl.Guard, o *broker.Options) {
	if guard != nil {
		o.HAVerify = verifyHA(guard)
	}
	if !c.sec.innerCreds.IsEmpty() {
		o.HASign = signHA(c.sec.innerCreds)
	}
}

// haSigned is the HA handshake's content as a remoting request, so that
// the ACL's signature (RocketMQ's: HMAC-SHA1 over the extension fields'
// values and the body) signs and verifies it: the body is the content, the
// only field the AccessKey.
func haSigned(content []byte) *protocol.Command {
	var req protocol.Command
	req.Body = content
	return &req
}

// signHA signs the HA handshake with creds (their security token left
// out: the master has no way to check one).
func signHA(creds auth.Credentials) func([]byte) (string, []byte) {
	creds.SecurityToken = ""
	key := auth.NewKey(creds.SecretKey)
	return func(content []byte) (string, []byte) {
		req := haSigned(content)
		key.Sign(req, creds)
		sig, _ := req.Ext.Get(auth.FieldSignature)
		return creds.AccessKey, append([]byte(nil), sig...)
	}
}

// verifyHA checks a slave's HA credentials against guard: the signature
// must verify with the user's secret, and the user must be a super user
// or be allowed every action on the broker's cluster (Cluster:<name>): a
// slave reads every topic's messages and its acknowledgements make a
// SYNC_MASTER's sends durable, which no narrower right covers.
func verifyHA(guard *acl.Guard) func(net.Addr, string, []byte, []byte) (string, error) {
	cluster := acl.Resource{Type: acl.TypeCluster, Name: guard.ClusterName(), Pattern: acl.Literal}
	var checks []acl.Check
	for _, a := range []acl.Action{acl.Pub, acl.Sub, acl.Create, acl.Update, acl.Delete, acl.Get, acl.List} {
		checks = append(checks, acl.Check{Resource: cluster, Actions: a})
	}
	return func(remote net.Addr, ak string, content, sig []byte) (string, error) {
		req := haSigned(content)
		req.Ext.SetString(auth.FieldAccessKey, ak)
		req.Ext.Set(auth.FieldSignature, sig)
		user, err := guard.Authenticate(remote, req)
		if err != nil {
			return "", err
		}
		var ip netip.Addr
		if ta, ok := remote.(*net.TCPAddr); ok {
			ip = ta.AddrPort().Addr().Unmap()
		}
		if err := guard.Authorize(user, ip, checks...); err != nil {
			return "", fmt.Errorf("user %s may not replicate (a super user, or one allowed every action on %s): %w", user, cluster, err)
		}
		return user, nil
	}
}
