package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// The controller leader and the master broker die together. The followers
// saw the master's connections close (brokers heartbeat every controller),
// so the new leader elects the in-sync slave at once: with a heartbeat
// timeout of ten minutes, waiting it out would outlast the test's wait.
func TestNewLeaderElectsOnRecordedClose(t *testing.T) {
	c := newCluster(t, 3, func(o *controller.Options) {
		o.HeartbeatTimeout = 10 * time.Minute
		o.CloseGrace = time.Millisecond
	})
	old := c.leader()
	ctx := ctxT(t, 2*time.Minute)
	a, b := newBroker(t, c, "broker-a"), newBroker(t, c, "broker-a")
	ra := a.register(ctx)
	if el, err := a.cl.ElectMaster(ctx, ra.ID, false); err != nil || el.Code != protocol.RespSuccess {
		t.Fatalf("first election: %+v %v", el, err)
	}
	rb := b.register(ctx)
	if _, err := a.cl.AlterSyncStateSet(ctx, ra.ID, 1, wire.SyncStateSet{Set: []int64{ra.ID, rb.ID}, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	b.setStatus(1, 0)
	b.waitFigures(c)

	// The leader dies without handing over; the master's connections close
	// while the followers elect among themselves.
	died := time.Now()
	if err := old.node.Kill(); err != nil {
		t.Log(err)
	}
	<-old.served
	old.node = nil
	a.stop()
	wait.Until(t, "broker b told it is master", func() bool {
		s, ok := b.lastState()
		return ok && s.MasterID == rb.ID
	})
	t.Logf("new master %v after the controller leader and the master stopped (heartbeat timeout 10m)", time.Since(died))
	lead := c.leader()
	if g := lead.node.Group("broker-a"); g.MasterID != rb.ID || g.MasterEpoch != 2 {
		t.Fatalf("group after the failover: %+v", g)
	}
	// The scan says why it elected.
	if !strings.Contains(testlog.Lines(t), "master's connection closed and it was not heard from again; electing") {
		t.Error("no log line says the master's connection closed")
	}
}
