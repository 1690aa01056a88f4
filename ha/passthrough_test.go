package ha

import (
	"context"
	"net"
	"testing"

	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
)

// countedListener wraps accepted connections as remoting.LimitListener
// does: a wrapper that passes a TCP connection's bytes through and says so
// with a TCPConn method.
type countedListener struct{ net.Listener }

type countedConn struct{ net.Conn }

func (c countedConn) TCPConn() *net.TCPConn { tc, _ := c.Conn.(*net.TCPConn); return tc }

func (l countedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countedConn{c}, nil
}

// A plain slave's connection that arrives wrapped (counted in the
// process's connection limit) keeps the vectored writes, with no TLS and
// in permissive mode: the master writes to the TCP connection under the
// wrapper and closes the wrapper.
func TestWrappedConnKeepsVectoredWrites(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	for _, secure := range []func(context.Context, net.Conn) (net.Conn, error){nil, tlsServer(t, f, tlsconf.Permissive, false).Handshake} {
		master := openStore(t, storeOptions(t.TempDir()))
		m, err := NewMaster(master, MasterOptions{BatchSize: 64 << 10, Secure: secure})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go m.Serve(countedListener{ln})
		r := openStore(t, replicaOptions(t.TempDir()))
		s := startSlave(t, r, ln.Addr().String(), SlaveOptions{})
		put(t, master, 1_000, 4, 2, "p")
		caughtUp(t, master, r)
		wait.Until(t, "the slave's connection vectored", func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			for c := range m.conns {
				if _, tcp := c.c.(*net.TCPConn); !c.vectored || !tcp {
					return false
				}
				if _, wrapped := c.raw.(countedConn); !wrapped {
					return false
				}
			}
			return len(m.conns) == 1
		})
		s.Close()
		m.Close()
		r.Close()
		master.Close()
	}
}
