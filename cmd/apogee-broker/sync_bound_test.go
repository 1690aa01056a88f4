package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// TestSyncMasterBoundPerSend (case 7): a SYNC_MASTER whose slave never
// acknowledges answers each send FLUSH_SLAVE_TIMEOUT at that send's own
// deadline (syncFlushTimeout, 5 s), also a send that arrives while another
// one waits: before the fix it joined the next window and was answered
// after about 10 s.
//
// The slave is a connection to the HA port that reports offset 0 and then
// reads the stream without ever acknowledging. The bound checked is loose
// (8 s against the 10 s of the old behaviour) so a loaded machine cannot
// break it; the store's TestOnDurableOwnDeadline checks it exactly, in
// virtual time.
func TestSyncMasterBoundPerSend(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	m := start(t, buildBinary(t), "-c", syncMasterConf, "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "master"))
	defer m.stop(t, syscall.SIGTERM)

	c, err := net.Dial("tcp", m.Ready.HA)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rep [8]byte // "I hold nothing": the stream starts at 0, and no acknowledgement follows
	if _, err := c.Write(rep[:]); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, c)
	wait.Equal(t, "the silent slave connected", "1", func() string { return runtimeInfo(t, m.addr)["haConnectedSlaves"] })

	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, m.addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type answer struct {
		code int32
		took time.Duration
		err  error
	}
	send := func(i int, out chan<- answer) {
		began := time.Now()
		resp, err := cl.Invoke(ctx, sendRequest("pg", "SyncBound", 0, []byte{byte('a' + i)}))
		a := answer{took: time.Since(began), err: err}
		if err == nil {
			a.code = resp.Code
		}
		out <- a
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go send(0, first)
	wait.Until(t, "the first send waiting for the slave", func() bool {
		return runtimeInfo(t, m.addr)["commitLogMaxOffset"] != "0"
	})
	go send(1, second)
	for i, ch := range []chan answer{first, second} {
		a := <-ch
		if a.err != nil {
			t.Fatalf("send %d: %v", i, a.err)
		}
		if a.code != protocol.RespFlushSlaveTimeout {
			t.Fatalf("send %d: code %d, want FLUSH_SLAVE_TIMEOUT", i, a.code)
		}
		t.Logf("send %d answered FLUSH_SLAVE_TIMEOUT after %v", i, a.took.Round(time.Millisecond))
		if a.took < 4500*time.Millisecond {
			t.Errorf("send %d answered after %v, before its 5 s", i, a.took)
		}
		if a.took > 8*time.Second {
			t.Errorf("send %d answered after %v: it waited beyond its own 5 s deadline (joined another send's window)", i, a.took)
		}
	}
}
