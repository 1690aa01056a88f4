package node

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// A classic group's gRPC endpoints (outside controller mode): a slave's
// gRPC front end forwards to its master's, which it learns from the
// master's GET_BROKER_CONFIG (grpcAdvertiseAddr) at the remoting address
// the name servers gave it; routes name the master and this member. A
// master serves everything itself. Read again every classicRefresh.

// classicRefresh is how often a classic slave reads its master's gRPC
// address again.
const classicRefresh = 5 * time.Second

type classicEndpoints struct {
	own    string
	master atomic.Pointer[string] // the master's gRPC address; nil or "": unknown
	stop   chan struct{}
	done   chan struct{}
}

// grpcMaster is grpcfe.Options.Master for a classic member.
func (n *Node) grpcMaster() (string, bool) {
	if !n.b.Core().IsSlave() {
		return n.classic.own, true
	}
	if m := n.classic.master.Load(); m != nil && *m != "" {
		return *m, false
	}
	return "", false
}

// grpcMembers is grpcfe.Options.Members for a classic member.
func (n *Node) grpcMembers() []string {
	if m, self := n.grpcMaster(); m != "" && !self {
		return []string{m, n.classic.own}
	}
	return []string{n.classic.own}
}

// followClassicMaster reads the master's gRPC address while the broker is
// a slave, until stopClassic.
func (n *Node) followClassicMaster(clientTLS *remoting.ClientOptions) {
	c := &n.classic
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	pool := remoting.NewPool(clientTLS)
	go func() {
		defer close(c.done)
		defer pool.Close()
		t := time.NewTicker(classicRefresh)
		defer t.Stop()
		for {
			if addr := n.b.MasterAddr(); addr != "" {
				g := n.masterGRPC(pool, addr)
				old := c.master.Swap(&g)
				if (old == nil || *old != g) && g != "" {
					if gs := n.grpcServer(); gs != nil {
						gs.MasterChanged()
					}
				}
			}
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
		}
	}()
}

func (n *Node) stopClassic(context.Context) error {
	if n.classic.stop != nil {
		close(n.classic.stop)
		<-n.classic.done
	}
	return nil
}

// masterGRPC asks the broker at addr for its gRPC address ("" when it has
// none or does not answer).
func (n *Node) masterGRPC(pool *remoting.Pool, addr string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerConfig, 0)
	resp, err := pool.Invoke(ctx, addr, &req)
	if err != nil || resp.Code != protocol.RespSuccess {
		return ""
	}
	for _, line := range strings.Split(string(resp.Body), "\n") {
		if v, ok := strings.CutPrefix(line, "grpcAdvertiseAddr="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
