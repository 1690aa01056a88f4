package broker

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// A topic created on the master with 4 queues, and a message acknowledged
// under it, reach the slave over the HA stream with their configuration:
// the slave here never runs the periodic sync (it knows its master's HA
// address only, and its sync interval is an hour). Opened as the new
// master with its state files lost, the slave has the topic with 4 queues
// from its log, and takes a send to queue 3.
func TestTopicConfigurationFollowsTheHAStream(t *testing.T) {
	m := newHarness(t, nil)
	haln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go m.b.ServeHA(haln)
	s := newHarness(t, func(o *Options) {
		o.Core.Role, o.Core.BrokerID = core.RoleSlave, 1
		o.HAMasterAddr = haln.Addr().String()
		o.SlaveSyncInterval = time.Hour
	})
	if err := m.b.Core().Admin().CreateTopic(&core.TopicRequest{Topic: "Cfg", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	g := protocol.DefaultSubscriptionGroupConfig("CfgGroup")
	g.RetryMaxTimes = 2
	if err := m.b.Core().Admin().UpdateSubscriptionGroup(g); err != nil {
		t.Fatal(err)
	}
	if resp := invoke(t, m.dial(nil), sendRequest("Cfg", 3, []byte("under 4 queues"), "")); resp.Code != protocol.RespSuccess {
		t.Fatalf("send: code %d %q", resp.Code, resp.Remark)
	}
	ms, ss := m.b.Store(), s.b.Store()
	wait.Equal(t, "the slave caught up", ms.WrittenOffset(), ss.WrittenOffset)
	wait.Equal(t, "the slave's Cfg queues", int32(4), func() int32 {
		cfg, _ := s.b.Core().TopicConfig("Cfg")
		return cfg.WriteQueueNums
	})
	// The group's record comes after the topic's: applied by the store's
	// arrival hook after its dispatch, so waited for too.
	wait.Equal(t, "the slave's CfgGroup retry times", int32(2), func() int32 {
		sg, err := s.b.Core().SubscriptionGroup([]byte("CfgGroup"))
		if err != nil {
			return -1
		}
		return sg.RetryMaxTimes
	})

	// Failover: the master is gone; the slave, restarted as the master,
	// lost its state files.
	m.close()
	s.close()
	dir := s.opts.Core.DataDir
	for _, f := range []string{core.TopicsFile, core.SubscriptionGroupFile} {
		os.Remove(filepath.Join(dir, core.ConfigDir, f))
		os.Remove(filepath.Join(dir, core.ConfigDir, f+core.BakSuffix))
	}
	nm := startHarness(t, testOptions(t, dir), nil)
	if cfg, ok := nm.b.Core().TopicConfig("Cfg"); !ok || cfg.ReadQueueNums != 4 || cfg.WriteQueueNums != 4 {
		t.Fatalf("the new master's Cfg: %+v %v", cfg, ok)
	}
	if sg, err := nm.b.Core().SubscriptionGroup([]byte("CfgGroup")); err != nil || sg.RetryMaxTimes != 2 {
		t.Fatalf("the new master's group: %+v %v", sg, err)
	}
	if resp := invoke(t, nm.dial(nil), sendRequest("Cfg", 3, []byte("after the failover"), "")); resp.Code != protocol.RespSuccess {
		t.Fatalf("send to the new master: code %d %q", resp.Code, resp.Remark)
	}
}

// A slave creates nothing over remoting: a heartbeat naming a consumer
// group creates neither the group nor its retry topic (the master creates
// them, and the slave follows through the log), a send to an unknown topic
// is refused as every send to a slave, and no configuration record is
// written.
func TestSlaveCreatesNothingOverRemoting(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone.Close() // the master's HA address: nobody there
	s := newHarness(t, func(o *Options) {
		o.Core.Role, o.Core.BrokerID = core.RoleSlave, 1
		o.HAMasterAddr = gone.Addr().String()
		o.SlaveSyncInterval = time.Hour
	})
	cl := s.dial(nil)
	if resp := invoke(t, cl, heartbeatRequest(t, "c1", "HbGroup", map[string]string{"T": "*"})); resp.Code != protocol.RespSuccess {
		t.Fatalf("heartbeat to the slave: code %d %q", resp.Code, resp.Remark)
	}
	if resp := invoke(t, cl, sendRequest("NewTopic", 0, []byte("x"), "")); resp.Code != protocol.RespSystemBusy {
		t.Fatalf("send to the slave: code %d %q", resp.Code, resp.Remark)
	}
	c := s.b.Core()
	if _, err := c.SubscriptionGroup([]byte("HbGroup")); err == nil {
		t.Fatal("a heartbeat created a group on the slave")
	}
	for _, topic := range []string{"%RETRY%HbGroup", "NewTopic"} {
		if _, ok := c.TopicConfig(topic); ok {
			t.Fatalf("the slave created %s", topic)
		}
	}
	if st := c.Replication().ConfigLogStats(); st.Appended != 0 {
		t.Fatalf("the slave appended %d configuration records", st.Appended)
	}
}
