package broker

import (
	"net"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Options.Remoting reaches the broker's server, and the runtime info reports its
// receive limits: a connection that leaves a frame incomplete past FrameTimeout is
// closed and counted.
func TestRuntimeInfoReceiveLimits(t *testing.T) {
	log := testlog.New(t, "remoting")
	budget := remoting.NewReceiveBudget(1<<20, log)
	h := newHarness(t, func(o *Options) {
		o.Remoting = &remoting.Options{ReceiveBudget: budget, FrameTimeout: 200 * time.Millisecond, MinReceiveRate: -1, Logger: log}
	})
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte{0, 0, 1, 0, 0, 0, 0, 20, '{'}); err != nil { // 9 of 260 bytes
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(wait.DefaultTimeout))
	if _, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatal("the broker answered an incomplete frame")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the broker kept a connection with an incomplete frame past FrameTimeout")
	}
	info := invoke(t, h.dial(nil), goRequest(protocol.ReqGetBrokerRuntimeInfo))
	var kv protocol.KVTable
	if err := kv.Decode(info.Body); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"remotingFrameTimeouts":       "1",
		"remotingSlowSenders":         "0",
		"remotingReceiveBudgetCloses": "0",
		"remotingReceiveBudgetLimit":  "1048576",
		"remotingReceiveBudgetInUse":  "0",
		"remotingReceiveBudgetWaits":  "0",
	} {
		if got := kv.Table[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}
