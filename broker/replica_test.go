package broker

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// group is a master and a slave, in one process, over real TCP: the master
// serves remoting (and its embedded name server) and the HA stream; the
// slave registers with the master's embedded name server, which answers
// with the master's addresses.
type group struct {
	master, slave *harness
}

func startGroup(t *testing.T, role core.Role, mutateMaster, mutateSlave func(*Options)) *group {
	t.Helper()
	m := newHarness(t, func(o *Options) {
		o.Core.Role = role
		o.Core.Store.SyncFlushTimeout = time.Second
		if mutateMaster != nil {
			mutateMaster(o)
		}
	})
	haln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go m.b.ServeHA(haln)
	s := newHarness(t, func(o *Options) {
		o.Core.Role, o.Core.BrokerID = core.RoleSlave, 1
		o.NamesrvAddrs = []string{m.addr}
		o.RegisterInterval = 200 * time.Millisecond
		o.SlaveSyncInterval = 100 * time.Millisecond
		if mutateSlave != nil {
			mutateSlave(o)
		}
	})
	return &group{master: m, slave: s}
}

// info is a broker's GET_BROKER_RUNTIME_INFO.
func info(t *testing.T, h *harness) map[string]string {
	t.Helper()
	resp := invoke(t, h.dial(nil), goRequest(protocol.ReqGetBrokerRuntimeInfo))
	var kv protocol.KVTable
	if err := kv.Decode(resp.Body); err != nil {
		t.Fatal(err)
	}
	return kv.Table
}

// waitInfo waits until h's runtime info says want for key.
func waitInfo(t *testing.T, h *harness, key, want string) {
	t.Helper()
	wait.Equal(t, h.opts.Core.AdvertiseAddr+"'s "+key, want, func() string { return h.b.RuntimeInfo()[key] })
}

// A SYNC_MASTER answers SLAVE_NOT_AVAILABLE, with the send result's
// fields, until its slave connects (learning the master's HA address from
// the name server's answer to its registration), and SUCCESS once the
// slave holds the message; the slave then holds the master's log byte for
// byte and refuses sends.
func TestSyncMasterAndSlave(t *testing.T) {
	// The slave starts without a master to learn from: it registers with
	// a name server that has none yet.
	// The replica timeout is internal/wait's bound: nothing here waits for
	// it, and a loaded machine must not make a send time out.
	m := newHarness(t, func(o *Options) {
		o.Core.Role = core.RoleSyncMaster
		o.Core.Store.SyncFlushTimeout = wait.DefaultTimeout
	})
	mc := m.dial(nil)
	resp := invoke(t, mc, sendRequest("Grp", 0, []byte("before the slave"), props("UNIQ_KEY", "U0")))
	if resp.Code != protocol.RespSlaveNotAvailable {
		t.Fatalf("SYNC_MASTER without a slave: code %d %q", resp.Code, resp.Remark)
	}
	var sr protocol.SendMessageResponse
	if err := sr.Decode(&resp.Ext); err != nil || len(sr.MsgID) == 0 || string(sr.TransactionID) != "U0" {
		t.Fatalf("SLAVE_NOT_AVAILABLE without the send fields: %v %+v", err, sr)
	}
	haln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go m.b.ServeHA(haln)
	s := newHarness(t, func(o *Options) {
		o.Core.Role, o.Core.BrokerID = core.RoleSlave, 1
		o.NamesrvAddrs = []string{m.addr}
		o.SlaveSyncInterval = 100 * time.Millisecond
	})
	waitInfo(t, s, "haMasterConnected", "true")
	// The slave's side connects first; the master's sends wait for it once
	// its store counts it as a replica (SLAVE_NOT_AVAILABLE before).
	wait.Equal(t, "the master's replicas", 1, func() int { return len(m.b.Store().Replicas()) })
	for i := 0; i < 50; i++ {
		resp := invoke(t, mc, sendRequest("Grp", int32(i%4), bytes.Repeat([]byte{byte(i)}, 100+i), props("UNIQ_KEY", "U")))
		if resp.Code != protocol.RespSuccess {
			t.Fatalf("send %d with the slave connected: code %d %q", i, resp.Code, resp.Remark)
		}
	}
	ms, ss := m.b.Store(), s.b.Store()
	wait.Equal(t, "the slave caught up", ms.WrittenOffset(), ss.WrittenOffset)
	sameLog(t, ms, ss)

	mi, si := info(t, m), info(t, s)
	for k, want := range map[string]string{"brokerRole": "SYNC_MASTER", "brokerId": "0", "haConnectedSlaves": "1", "haServerAddr": haln.Addr().String()} {
		if mi[k] != want {
			t.Errorf("master's %s = %q, want %q", k, mi[k], want)
		}
	}
	for k, want := range map[string]string{"brokerRole": "SLAVE", "brokerId": "1", "haMasterAddr": haln.Addr().String(), "masterAddr": m.addr} {
		if si[k] != want {
			t.Errorf("slave's %s = %q, want %q", k, si[k], want)
		}
	}
	resp = invoke(t, s.dial(nil), sendRequest("Grp", 0, []byte("to the slave"), ""))
	if resp.Code != protocol.RespSystemBusy || !strings.Contains(string(resp.Remark), "[REJECTREQUEST]") {
		t.Fatalf("send to the slave: code %d %q", resp.Code, resp.Remark)
	}

	// The slave stops: the master's sends answer SLAVE_NOT_AVAILABLE again.
	s.close()
	waitInfo(t, m, "haConnectedSlaves", "0")
	if resp := invoke(t, mc, sendRequest("Grp", 0, []byte("after the slave"), "")); resp.Code != protocol.RespSlaveNotAvailable {
		t.Fatalf("after the slave stopped: code %d %q", resp.Code, resp.Remark)
	}
}

// sameLog checks that the slave's commit log holds the master's bytes over
// the replicated range.
func sameLog(t *testing.T, ms, ss *store.Store) {
	t.Helper()
	for off := ms.LogMinOffset(); off < ms.WrittenOffset(); {
		mv, err := ms.ReadLog(off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		sv, err := ss.ReadLog(off, len(mv.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mv.Bytes(), sv.Bytes()) {
			t.Fatalf("the logs differ in [%d, %d)", off, off+int64(len(mv.Bytes())))
		}
		off += int64(len(mv.Bytes()))
		mv.Release()
		sv.Release()
	}
}

// The slave follows the master's topics, groups and offsets, and an offset
// a client commits on the slave reaches the master.
func TestSlaveFollowsMaster(t *testing.T) {
	g := startGroup(t, core.RoleAsyncMaster, nil, nil)
	mc, sc := g.master.dial(nil), g.slave.dial(nil)
	create := goRequest(protocol.ReqUpdateAndCreateTopic)
	(&protocol.CreateTopicRequest{Topic: "Followed", DefaultTopic: "TBW102", TopicFilterType: "SINGLE_TAG", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6}).Encode(&create.Ext)
	if resp := invoke(t, mc, create); resp.Code != protocol.RespSuccess {
		t.Fatalf("create topic: %d %q", resp.Code, resp.Remark)
	}
	commit := func(cl *remoting.Client, q int32, off int64) {
		t.Helper()
		req := goRequest(protocol.ReqUpdateConsumerOffset)
		(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte("FG"), Topic: []byte("Followed"), QueueID: q, CommitOffset: off}).Encode(&req.Ext)
		if resp := invoke(t, cl, req); resp.Code != protocol.RespSuccess {
			t.Fatalf("commit: %d %q", resp.Code, resp.Remark)
		}
	}
	commit(mc, 0, 3)
	wait.For(t, "the slave's topic and offset", func() error {
		_, ok := g.slave.b.Core().TopicConfig("Followed")
		off, _ := g.slave.b.Core().CommittedOffset("Followed", "FG", 0)
		if !ok || off != 3 {
			return fmt.Errorf("topic there: %v, offset %d", ok, off)
		}
		return nil
	})
	// An admin write on the slave is refused.
	if resp := invoke(t, sc, create); resp.Code != protocol.RespSystemError || !strings.Contains(string(resp.Remark), "from slave broker") {
		t.Fatalf("create topic on the slave: %d %q", resp.Code, resp.Remark)
	}
	// A commit on the slave reaches the master.
	commit(sc, 1, 7)
	wait.Equal(t, "the master has the slave's commit", 7, func() int64 {
		off, _ := g.master.b.Core().CommittedOffset("Followed", "FG", 1)
		return off
	})
	// GET_ALL_CONSUMER_OFFSET (43) on the master.
	resp := invoke(t, mc, goRequest(protocol.ReqGetAllConsumerOffset))
	var w protocol.ConsumerOffsetSerializeWrapper
	if err := w.Decode(resp.Body); err != nil || w.OffsetTable["Followed@FG"][0] != 3 || w.OffsetTable["Followed@FG"][1] != 7 {
		t.Fatalf("GET_ALL_CONSUMER_OFFSET: %v %v", err, w.OffsetTable)
	}
	// Deleting on the master deletes on the slave.
	del := goRequest(protocol.ReqDeleteTopicInBroker)
	(&protocol.DeleteTopicRequest{Topic: "Followed"}).Encode(&del.Ext)
	if resp := invoke(t, mc, del); resp.Code != protocol.RespSuccess {
		t.Fatalf("delete topic: %d %q", resp.Code, resp.Remark)
	}
	wait.Until(t, "the slave deleted the topic", func() bool {
		_, ok := g.slave.b.Core().TopicConfig("Followed")
		return !ok
	})
}

// The embedded registry of the master shows the group: both ids under one
// broker name, and the master's HA address answered to the slave.
func TestGroupRoute(t *testing.T) {
	g := startGroup(t, core.RoleAsyncMaster, nil, nil)
	wait.For(t, "the slave's registration", func() error {
		r, ok := g.master.b.Registry().Route("TBW102")
		if !ok || len(r.BrokerDatas) != 1 || r.BrokerDatas[0].BrokerAddrs[1] != g.slave.addr || r.BrokerDatas[0].BrokerAddrs[0] != g.master.addr {
			return fmt.Errorf("route %+v (found: %v)", r, ok)
		}
		return nil
	})
}
