package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// aclUsers are the controllers' own user (innerClientAuthenticationCredentials
// of their properties), the brokers' and an application user without
// admin rights.
const aclUsers = `
users:
  - {username: ctl, password: ctl-secret, userType: Super}
  - {username: brokers, password: brokers-secret, userType: Super}
  - {username: app, password: app-secret}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:*", actions: [Pub, Sub], decision: Allow}
`

// aclFlags writes the ACL file and the controllers' properties and returns
// the flags that give them to a controller.
func aclFlags(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	props := filepath.Join(dir, "controller.properties")
	if err := os.WriteFile(file, []byte(aclUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(props, []byte(`innerClientAuthenticationCredentials={"accessKey":"ctl","secretKey":"ctl-secret"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--acl-file", file, "-c", props}
}

// aclClient is a controller client for broker group broker signed as s
// (nil: unsigned).
func aclClient(t *testing.T, ms []*member, broker string, s *auth.Signer) *client.Client {
	t.Helper()
	o := client.Options{Addrs: addrsOf(ms), Cluster: "DefaultCluster", Broker: broker, Addr: "127.0.0.1:1", RequestTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if s != nil {
		o.Signer = s
	}
	cl, err := client.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestACLProcesses runs three controller processes with --acl-file (and
// their own credentials, which sign their Raft preambles and --join): a
// broker signing as a Super user registers, heartbeats and is elected; a
// stranger without credentials, one with a wrong secret and a user without
// admin rights are refused NO_PERMISSION for every request (apply a broker
// id, heartbeat, alter the SyncStateSet, elect, metadata), and the
// broker's group is as it was; a stranger on a Raft port gets the nonce,
// and its unsigned or forged preamble closes the connection; the group
// still elects a new leader when the old one dies.
func TestACLProcesses(t *testing.T) {
	flags := append(aclFlags(t), fastFlags...)
	ms := proctest.StartControllers(t, binPath, 3, flags...)
	brokers := auth.NewSigner(auth.Credentials{AccessKey: "brokers", SecretKey: "brokers-secret"})
	real := aclClient(t, ms, "broker-a", brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wait.For(t, "three members in every controller's configuration (joined with signed requests)", func() error {
		for _, m := range ms {
			md, err := real.Metadata(ctx, m.Addr)
			if err != nil {
				return fmt.Errorf("%s: %w", m.ID, err)
			}
			if got := len(strings.Split(md.Peers, ",")); got != 3 {
				return fmt.Errorf("%s has %q", m.ID, md.Peers)
			}
		}
		return nil
	})
	reg, err := real.Register(ctx, 0, "tok-a")
	if err != nil {
		t.Fatal(err)
	}
	real.StartHeartbeats(reg.ID)
	el, err := real.ElectMaster(ctx, reg.ID, false)
	if err != nil || el.State.MasterID != reg.ID {
		t.Fatalf("the signed broker's election: %+v %v", el, err)
	}
	before, err := real.GetReplicaInfo(ctx, "broker-a")
	if err != nil {
		t.Fatal(err)
	}

	for _, s := range []struct {
		name   string
		signer *auth.Signer
	}{
		{"a stranger without credentials", nil},
		{"a stranger with a wrong secret", auth.NewSigner(auth.Credentials{AccessKey: "brokers", SecretKey: "guess"})},
		{"an application user without admin rights", auth.NewSigner(auth.Credentials{AccessKey: "app", SecretKey: "app-secret"})},
	} {
		st := aclClient(t, ms, "broker-a", s.signer)
		refused := func(what string, err error) {
			t.Helper()
			if client.Code(err) != protocol.RespNoPermission {
				t.Errorf("%s: %s: %v, want NO_PERMISSION", s.name, what, err)
			}
		}
		_, err := st.Register(ctx, 0, "tok-stranger")
		refused("apply a broker id", err)
		_, err = st.ElectMaster(ctx, 7, true)
		refused("elect itself", err)
		_, err = st.AlterSyncStateSet(ctx, 7, before.MasterEpoch, wire.SyncStateSet{Set: []int64{7}, Epoch: before.SyncStateSetEpoch})
		refused("alter the SyncStateSet", err)
		_, err = st.GetReplicaInfo(ctx, "broker-a")
		refused("read the replica info", err)
		for _, m := range ms {
			_, err = st.Metadata(ctx, m.Addr)
			refused("metadata of "+m.ID, err)
			// A heartbeat, answered inline by every node.
			var hb protocol.Command
			(&wire.HeartbeatRequest{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:2", BrokerID: 7,
				Epoch: 99, MaxOffset: 1 << 40, ConfirmOffset: 1 << 40}).Encode(&hb)
			if resp := rawInvoke(t, m.Addr, &hb, s.signer); resp.Code != protocol.RespNoPermission {
				t.Errorf("%s: heartbeat to %s: %d %s, want NO_PERMISSION", s.name, m.ID, resp.Code, resp.Remark)
			}
		}
	}
	after, err := real.GetReplicaInfo(ctx, "broker-a")
	if err != nil || after.MasterID != reg.ID || after.MasterEpoch != before.MasterEpoch || after.SyncStateSetEpoch != before.SyncStateSetEpoch {
		t.Fatalf("the group after the strangers: %+v %v, before %+v", after, err, before)
	}

	// The Raft ports: the nonce, then the connection closed.
	for _, forge := range []*auth.Signer{nil, auth.NewSigner(auth.Credentials{AccessKey: "ctl", SecretKey: "guess"}),
		auth.NewSigner(auth.Credentials{AccessKey: "app", SecretKey: "app-secret"})} {
		for _, m := range ms {
			if err := strangerOnRaft(m.Raft, forge); err != nil {
				t.Errorf("raft port of %s: %v", m.ID, err)
			}
		}
	}
	for _, m := range ms {
		m.P.AwaitLog("a connection to the Raft port was dropped")
	}

	// The group still works: its leader killed, another is elected and
	// the state stays.
	lead := aclLeader(t, ms, nil, real)
	lead.P.Kill()
	aclLeader(t, ms, lead, real)
	s, err := real.GetReplicaInfo(ctx, "broker-a")
	if err != nil || s.MasterID != reg.ID {
		t.Fatalf("state after the leader's death: %+v %v", s, err)
	}
}

// aclLeader waits until a running member other than skip says it leads.
func aclLeader(t *testing.T, ms []*member, skip *member, cl *client.Client) *member {
	t.Helper()
	var found *member
	wait.For(t, "a controller leader", func() error {
		for _, m := range ms {
			if m == skip || !m.P.Running() {
				continue
			}
			if md, err := cl.Metadata(context.Background(), m.Addr); err == nil && md.IsLeader {
				found = m
				return nil
			}
		}
		return errors.New("no member leads")
	})
	return found
}

// rawInvoke sends req to addr on a connection of its own, signed by s
// (nil: unsigned).
func rawInvoke(t *testing.T, addr string, req *protocol.Command, s *auth.Signer) *protocol.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := &remoting.ClientOptions{Options: remoting.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	if s != nil {
		o.Signer = s
	}
	cl, err := remoting.Dial(ctx, addr, o)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// strangerOnRaft connects to a Raft port, reads the preamble's nonce,
// answers it signed by s (nil: unsigned) and checks that the connection is
// then closed rather than handed to Raft.
func strangerOnRaft(addr string, s *auth.Signer) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait.DefaultTimeout))
	hello := make([]byte, 17+32)
	if _, err := io.ReadFull(c, hello); err != nil {
		return fmt.Errorf("no nonce: %w", err)
	}
	var req protocol.Command
	req.InitRequest(controller.RaftAuthCode, 0)
	req.Ext.SetString("nonce", fmt.Sprintf("%x", hello[17:]))
	req.Ext.SetString("id", "stranger")
	if s != nil {
		s.Sign(&req)
	}
	frame, err := protocol.AppendFrame(nil, &req)
	if err != nil {
		return err
	}
	// Then what a Raft leader would send: an AppendEntries type byte and
	// garbage, which must never reach Raft.
	if _, err := c.Write(append(frame, 0, 1, 2, 3, 4, 5, 6, 7)); err != nil {
		return err
	}
	var one [1]byte
	n, err := c.Read(one[:])
	var ne net.Error
	switch {
	case n > 0:
		return fmt.Errorf("the node answered %d", one[0])
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("the connection stayed open: %w", err)
	}
	return nil
}

// TestACLConfig: the properties keys set the controller's access control,
// and what cannot work is refused at start with what to set.
func TestACLConfig(t *testing.T) {
	flags := aclFlags(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	parse := func(args ...string) *config {
		t.Helper()
		c, err := parseConfig(append([]string{"--id", "c1", "--peers", "c1=127.0.0.1:0"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse(flags...)
	if !c.sec.acl || c.sec.aclFile != flags[1] || c.sec.inner.AccessKey != "ctl" {
		t.Fatalf("--acl-file and the properties' credentials: %+v", c.sec)
	}
	var o controller.Options
	sec, err := openSecurity(c, &o, false, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sec.close()
	if o.Authorize == nil || o.Signer == nil || o.RaftAuth == nil {
		t.Fatalf("options under --acl-file: authorize %v, signer %v, raft preamble %v", o.Authorize != nil, o.Signer != nil, o.RaftAuth != nil)
	}
	o = controller.Options{}
	sec2, err := openSecurity(c, &o, true, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sec2.close()
	if o.RaftAuth != nil || o.Authorize == nil {
		t.Fatalf("with mutual Raft TLS the preamble is not added: %+v", o.RaftAuth)
	}

	dir := t.TempDir()
	props := filepath.Join(dir, "c.properties")
	if err := os.WriteFile(props, []byte("authenticationEnabled=true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openSecurity(parse("-c", props), &controller.Options{}, false, logger); err == nil || !strings.Contains(err.Error(), "--acl-file") {
		t.Errorf("authenticationEnabled without a file: %v", err)
	}
	if _, err := openSecurity(parse("--acl-file", flags[1]), &controller.Options{}, false, logger); err == nil ||
		!strings.Contains(err.Error(), "innerClientAuthenticationCredentials") {
		t.Errorf("--acl-file without the controller's credentials: %v", err)
	}
	if err := os.WriteFile(props, []byte(`innerClientAuthenticationCredentials={"accessKey":"ctl"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parseConfig([]string{"--id", "c1", "--peers", "c1=127.0.0.1:0", "-c", props}); err == nil {
		t.Error("credentials without a secret key accepted")
	}
}
