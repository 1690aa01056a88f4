package controller_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// TestRaftAuthGroup runs three nodes whose Raft connections begin with the
// signed preamble and whose requests need a signature: the group elects a
// leader and replicates a broker's election to every node; an unsigned
// request is refused with Authorize's answer; a stranger on a Raft port
// that answers the nonce unsigned, or sends Raft bytes at once, is
// disconnected without an answer.
func TestRaftAuthGroup(t *testing.T) {
	creds := auth.Credentials{AccessKey: "ctl", SecretKey: "ctl-secret"}
	key := auth.NewKey(creds.SecretKey)
	var refused, raftAllowed atomic.Int64
	authorize := func(_ net.Addr, req *protocol.Command) (bool, int32, string) {
		if ak, ok := auth.AccessKey(req); !ok || string(ak) != creds.AccessKey || key.Verify(req) != nil {
			refused.Add(1)
			return false, protocol.RespNoPermission, "not the controllers' user"
		}
		if req.Code == controller.RaftAuthCode {
			raftAllowed.Add(1)
		}
		return true, 0, ""
	}
	c := newCluster(t, 3, func(o *controller.Options) {
		o.Authorize = authorize
		o.RaftAuth = &controller.RaftAuth{Signer: auth.NewSigner(creds), Authorize: authorize}
	})
	c.leader()
	if raftAllowed.Load() == 0 {
		t.Fatal("a leader was elected without a preamble allowed")
	}

	// An unsigned broker is refused at its registration.
	plain := newBroker(t, c, "broker-a")
	if _, err := plain.cl.Register(ctxT(t, 10*time.Second), 0, "plain"); err == nil {
		t.Fatal("an unsigned broker registered")
	}
	if refused.Load() == 0 {
		t.Fatal("no refusal counted")
	}

	for _, tn := range c.nodes {
		for _, mode := range []string{"unsigned preamble", "raft bytes at once"} {
			if err := raftStranger(tn.raftAddr, mode == "raft bytes at once"); err != nil {
				t.Errorf("%s, %s: %v", tn.opts.ID, mode, err)
			}
		}
	}
	// The group still works: the leader stopped, the others elect one
	// (their votes over authenticated connections).
	old := c.leader()
	old.stop()
	wait.Until(t, "a new leader among the others", func() bool {
		for _, tn := range c.nodes {
			if tn != old && tn.node != nil && tn.node.Status().Leader {
				return true
			}
		}
		return false
	})
}

// raftStranger connects to a Raft port and either answers the nonce with an
// unsigned preamble or sends Raft's bytes straight away; the connection
// must close without an answer.
func raftStranger(addr string, rawRaft bool) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait.DefaultTimeout))
	if rawRaft {
		if _, err := conn.Write([]byte{0, 0x8f, 0xa4, 'T', 'e', 'r', 'm', 0x01}); err != nil {
			return err
		}
	} else {
		hello := make([]byte, 17+32)
		if _, err := io.ReadFull(conn, hello); err != nil {
			return fmt.Errorf("no nonce: %w", err)
		}
		var req protocol.Command
		req.InitRequest(controller.RaftAuthCode, 0)
		req.Ext.SetString("nonce", fmt.Sprintf("%x", hello[17:]))
		frame, err := protocol.AppendFrame(nil, &req)
		if err != nil {
			return err
		}
		if _, err := conn.Write(frame); err != nil {
			return err
		}
	}
	buf := make([]byte, 256)
	total := 0
	for {
		n, err := conn.Read(buf)
		total += n
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return errors.New("the connection stayed open")
		}
		// Raw Raft bytes get the nonce (the node speaks first) and nothing
		// else; an unsigned preamble gets nothing more.
		if rawRaft && total > 17+32 || !rawRaft && total > 0 {
			return fmt.Errorf("answered %d bytes", total)
		}
		return nil
	}
}

// TestRaftAuthOverTLS: the preamble runs inside Raft's TLS (a group that
// has --raft-tls and the preamble both): the group elects a leader and,
// the leader stopped, another.
func TestRaftAuthOverTLS(t *testing.T) {
	p := newTLSPKI(t)
	creds := auth.Credentials{AccessKey: "ctl", SecretKey: "ctl-secret"}
	key := auth.NewKey(creds.SecretKey)
	var allowed atomic.Int64
	authorize := func(_ net.Addr, req *protocol.Command) (bool, int32, string) {
		if ak, ok := auth.AccessKey(req); !ok || string(ak) != creds.AccessKey || key.Verify(req) != nil {
			return false, protocol.RespNoPermission, "not the controllers' user"
		}
		allowed.Add(1)
		return true, 0, ""
	}
	c := newCluster(t, 3, func(o *controller.Options) {
		p.tweak(o)
		o.RaftAuth = &controller.RaftAuth{Signer: auth.NewSigner(creds), Authorize: authorize}
	})
	old := c.leader()
	if allowed.Load() == 0 {
		t.Fatal("a leader was elected without a preamble allowed")
	}
	old.stop()
	wait.Until(t, "a new leader among the others", func() bool {
		for _, tn := range c.nodes {
			if tn != old && tn.node != nil && tn.node.Status().Leader {
				return true
			}
		}
		return false
	})
}
