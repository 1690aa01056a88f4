package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Membership changes: a group whose members listen on ports chosen at start
// (port 0) cannot be given as --peers up front. One node starts alone (a
// group of one, Options.Peers with its own address at port 0); every other
// starts with Options.Join and asks the leader to add it (Node.Join, the
// APOGEE_CONTROLLER_JOIN_GROUP request), which the leader does with
// hashicorp/raft's AddVoter: consensus on the new configuration is the
// library's. A member that restarts on another Raft address joins again and
// the leader records the new address.

// joinTimeout bounds the leader's AddVoter (the configuration entry's
// commit on the new majority, the joining node included).
const joinTimeout = 10 * time.Second

// handleJoin adds the requesting controller to the group as a voter at its
// Raft address (the leader only). A member already at that address is
// answered at once; one at another address has it updated.
func (n *Node) handleJoin(req, resp *protocol.Command) error {
	var j wire.JoinRequest
	if err := j.Decode(req); err != nil {
		return err
	}
	if err := n.verifyLeader(); err != nil {
		return err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("controller: configuration: %w", err)
	}
	for _, s := range f.Configuration().Servers {
		switch {
		case string(s.ID) == j.ID && string(s.Address) == j.RaftAddress && s.Suffrage == raft.Voter:
			resp.Ext.SetString("peers", describeConfig(f.Configuration()))
			return nil
		case string(s.ID) != j.ID && string(s.Address) == j.RaftAddress:
			return fmt.Errorf("%w: %s is member %s's Raft address", wire.ErrBadRequest, j.RaftAddress, s.ID)
		}
	}
	if err := n.raft.AddVoter(raft.ServerID(j.ID), raft.ServerAddress(j.RaftAddress), 0, joinTimeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return fmt.Errorf("%w: %w", errNotLeader, err)
		}
		return fmt.Errorf("controller: add %s at %s: %w", j.ID, j.RaftAddress, err)
	}
	members := n.Members()
	n.log.Info("controller: member added", "id", j.ID, "raft", j.RaftAddress, "members", members)
	resp.Ext.SetString("peers", members)
	return nil
}

// ErrJoin marks a join the group refused (a malformed request, a Raft
// address another member has): retrying the same request cannot succeed.
var ErrJoin = errors.New("controller: join refused")

// Join asks the controllers at addrs (remoting addresses of members of a
// group) to add this node, following CONTROLLER_NOT_LEADER answers to the
// leader, and returns once the leader has added it, with the group's
// members. It retries (every controller in turn, then again after a pause
// that grows to 2 s) until ctx ends or the group refuses (ErrJoin). With
// tlsConfig the requests go over TLS.
func (n *Node) Join(ctx context.Context, addrs []string, tlsConfig *tls.Config) (string, error) {
	if len(addrs) == 0 {
		return "", errors.New("controller: join: no controller address")
	}
	pool := remoting.NewPool(&remoting.ClientOptions{DialTimeout: 2 * time.Second, TLS: tlsConfig, Signer: n.opts.Signer,
		Options: remoting.Options{Logger: n.opts.Logger}})
	defer pool.Close()
	pause := 100 * time.Millisecond
	var last error
	for round := 1; ; round++ {
		next := ""
		tried := map[string]bool{}
		for i := 0; ; {
			addr := next
			next = ""
			if addr == "" || tried[addr] {
				for i < len(addrs) && tried[addrs[i]] {
					i++
				}
				if i == len(addrs) {
					break
				}
				addr = addrs[i]
			}
			tried[addr] = true
			resp, err := n.joinAt(ctx, pool, addr)
			switch {
			case err != nil:
				last = fmt.Errorf("%s: %w", addr, err)
			case resp.Code == protocol.RespSuccess:
				members, _ := resp.Ext.GetString("peers")
				n.log.Info("controller: joined the group", "via", addr, "members", members)
				return members, nil
			case resp.Code == wire.RespNotLeader:
				_, next = wire.LeaderHint(resp)
				last = fmt.Errorf("%s: %s", addr, resp.Remark)
			case resp.Code == wire.RespInvalidRequest:
				return "", fmt.Errorf("%w by %s: %s", ErrJoin, addr, resp.Remark)
			default:
				last = fmt.Errorf("%s: code %d: %s", addr, resp.Code, resp.Remark)
			}
		}
		if round == 1 || round%10 == 0 {
			n.log.Info("controller: not joined yet; retrying", "round", round, "last", last)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("controller: join: %w (last: %v)", ctx.Err(), last)
		case <-n.stop:
			return "", fmt.Errorf("controller: join: node closed (last: %v)", last)
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

func (n *Node) joinAt(ctx context.Context, pool *remoting.Pool, addr string) (*protocol.Command, error) {
	actx, cancel := context.WithTimeout(ctx, joinTimeout+5*time.Second)
	defer cancel()
	cl, err := pool.Get(actx, addr)
	if err != nil {
		return nil, err
	}
	var req protocol.Command
	(&wire.JoinRequest{ID: n.opts.ID, RaftAddress: n.raftAddr}).Encode(&req)
	return cl.Invoke(actx, &req)
}
