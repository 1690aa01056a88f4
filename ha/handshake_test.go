package ha

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// TestHandshakeHooks: with both hooks set, the slave's hello reaches the
// master before any report, the master's answer reaches the slave before
// its first report, and the master names the replica as its hook says
// (the store counts its acknowledgements under that name). A hook that
// fails ends the connection before the stream starts; the slave retries.
func TestHandshakeHooks(t *testing.T) {
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	var refuse atomic.Bool
	refuse.Store(true)
	var refused atomic.Int32
	m, addr := startMaster(t, master, MasterOptions{Handshake: func(c net.Conn) (string, error) {
		var b [5]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return "", err
		}
		if string(b[:]) != "hello" {
			return "", errors.New("bad hello " + string(b[:]))
		}
		if refuse.Load() {
			refused.Add(1)
			return "", errors.New("refused")
		}
		_, err := c.Write([]byte("ok"))
		return "id:7", err
	}})
	defer m.Close()
	var answered atomic.Int32
	s := startSlave(t, replica, addr, SlaveOptions{RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 50 * time.Millisecond,
		Handshake: func(c net.Conn) error {
			if _, err := c.Write([]byte("hello")); err != nil {
				return err
			}
			var b [2]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return err
			}
			answered.Add(1)
			return nil
		}})
	defer s.Close()
	wait.Until(t, "a refused handshake", func() bool { return refused.Load() >= 1 })
	if len(master.Replicas()) != 0 {
		t.Fatal("a refused slave counts as a replica")
	}
	refuse.Store(false)
	put(t, master, 200, 2, 1, "h")
	caughtUp(t, master, replica)
	if answered.Load() < 1 {
		t.Fatal("the slave's hook never read the master's answer")
	}
	wait.Until(t, "the replica named by the hook", func() bool {
		acked, ok := master.ReplicaAcked("id:7")
		return ok && acked == master.WrittenOffset()
	})
	if sl := m.Slaves(); len(sl) != 1 || !strings.HasPrefix(sl[0].Addr, "id:") {
		t.Fatalf("slaves %+v", sl)
	}
}

// TestInSyncMembers: the store side of the handshake's names: with
// store.SetInSyncReplicas only the named members' acknowledgements count,
// and need 0 leaves the master's own durability.
func TestInSyncMembers(t *testing.T) {
	o := storeOptions(t.TempDir())
	o.SyncReplicas = 1
	master := openStore(t, o)
	defer master.Close()
	a, b := master.AddReplica("id:2", 0), master.AddReplica("id:3", 0)
	master.SetInSyncReplicas(1, []string{"id:3"})
	put(t, master, 10, 1, 1, "m")
	end := master.WrittenOffset()
	a.Ack(end)
	if got := master.ReplicatedOffset(); got >= end {
		t.Fatalf("a non-member's ack counted: replicated %d of %d", got, end)
	}
	b.Ack(end)
	if got := master.ReplicatedOffset(); got != end {
		t.Fatalf("the member's ack did not count: replicated %d of %d", got, end)
	}
	// need 0: the master alone makes messages durable.
	master.SetInSyncReplicas(0, []string{})
	put(t, master, 1, 1, 1, "n")
	if err := master.WaitDurable(master.WrittenOffset()); err != nil {
		t.Fatalf("with no replica needed: %v", err)
	}
}
