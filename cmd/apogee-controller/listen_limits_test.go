package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// The controller's Raft listener counts its connections in the process's
// limit as its remoting listener does: past the per-source bound (20 here)
// a connection to the Raft port is closed at once, logged once with the
// listener's name, and the group keeps answering.
func TestRaftListenerConnectionLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("127.0.0.x source addresses")
	}
	ms := newGroup(t, 2, nil, "--max-connections-per-source", "20")
	raft := ms[0].Raft
	var closed atomic.Int64
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range 25 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", raft)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		go func() {
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil && !errors.Is(err, net.ErrClosed) {
				closed.Add(1)
			}
		}()
	}
	wait.Until(t, "5 of one source's Raft connections closed", func() bool { return closed.Load() == 5 })
	wait.Until(t, "the refusal logged", func() bool {
		return strings.Count(ms[0].P.RunLog(), `msg="connection refused: too many connections from one source`) == 1 &&
			strings.Contains(ms[0].P.RunLog(), "listener=Raft")
	})
	// The members, from another source, keep their group.
	leader(t, ms, nil, nil)
	waitMembers(t, ms, 2, nil)
}

// A key given twice in the controller's properties: the last line wins,
// with a WARN naming both lines.
func TestRepeatedKeyNoted(t *testing.T) {
	path := t.TempDir() + "/controller.properties"
	if err := os.WriteFile(path, []byte("controllerDLegerSelfId=n0\ncontrollerDLegerSelfId=n1\ncontrollerDLegerPeers=n0-127.0.0.1:9880;n1-127.0.0.1:9881\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"-c", path})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range c.notes {
		got = append(got, fmt.Sprint(n.msg, n.attrs))
	}
	want := "controller properties: a key given twice; the last line wins (as Java's Properties): remove the other line[key controllerDLegerSelfId line 1 value n0 winning_line 2 winning_value n1]"
	if c.id != "n1" || len(got) != 1 || got[0] != want {
		t.Fatalf("id %q, notes %q", c.id, got)
	}
}
