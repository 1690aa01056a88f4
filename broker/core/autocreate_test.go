package core_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
)

// TestAutoCreateCaps: sends to unknown topics stop creating them at the
// overall cap and at the per-source cap (TOPIC_NOT_EXIST, counted), other
// sources keep theirs, existing topics keep working, and heartbeats and
// pulls of unknown groups are capped the same way.
func TestAutoCreateCaps(t *testing.T) {
	c := openCore(t, func(o *core.Options) {
		o.MaxAutoCreatePerSource = 5
		o.MaxAutoCreateGroups = -1
	})
	a := netip.MustParseAddrPort("10.0.0.1:5000")
	b := netip.MustParseAddrPort("10.0.0.2:5000")
	send := func(topic string, from netip.AddrPort) error {
		var res core.SendResult
		return c.Send(&core.SendRequest{ProducerGroup: []byte("pg"), Topic: []byte(topic), QueueID: -1, Body: []byte("x"), BornHost: from}, &res)
	}
	for i := 0; i < 5; i++ {
		if err := send(fmt.Sprintf("a%d", i), a); err != nil {
			t.Fatalf("auto-create %d: %v", i, err)
		}
	}
	err := send("a5", a)
	if core.Code(err) != protocol.RespTopicNotExist || !strings.Contains(core.Remark(err), "maxAutoCreatePerSource") {
		t.Fatalf("sixth auto-create from one source: %v", err)
	}
	if err := send("a0", a); err != nil {
		t.Fatalf("an existing topic after the cap: %v", err)
	}
	if err := send("b0", b); err != nil {
		t.Fatalf("another source: %v", err)
	}
	if got := c.Admin().RuntimeInfo()["autoCreateRefusedPerSource"]; got != "1" {
		t.Fatalf("autoCreateRefusedPerSource = %s", got)
	}

}

func TestAutoCreateOverallCaps(t *testing.T) {
	var n int
	c := openCore(t, func(o *core.Options) { o.MaxAutoCreatePerSource = -1 })
	fmt.Sscan(c.Admin().RuntimeInfo()["topics"], &n)
	c = openCore(t, func(o *core.Options) {
		o.MaxAutoCreatePerSource = -1
		o.MaxAutoCreateTopics = n + 3 // the system topics and three more
		o.MaxAutoCreateGroups = 2
	})
	var res core.SendResult
	for i := 0; i < 3; i++ {
		if err := c.Send(&core.SendRequest{Topic: []byte(fmt.Sprintf("t%d", i)), QueueID: -1, Body: []byte("x")}, &res); err != nil {
			t.Fatal(err)
		}
	}
	err := c.Send(&core.SendRequest{Topic: []byte("t3"), QueueID: -1, Body: []byte("x")}, &res)
	if core.Code(err) != protocol.RespTopicNotExist || !strings.Contains(core.Remark(err), "maxAutoCreateTopics") {
		t.Fatalf("over the topic cap: %v", err)
	}
	if err := c.Admin().CreateTopic(&core.TopicRequest{Topic: "admin-made", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}); err != nil {
		t.Fatalf("the admin API over the cap: %v", err)
	}
	// Groups: heartbeats create two, then stop; a pull of a third is refused.
	conn := &fakeConn{addr: "10.0.0.9:1234"}
	hb := &protocol.HeartbeatData{ClientID: "cid", ConsumerDataSet: []protocol.ConsumerData{{GroupName: "g1"}, {GroupName: "g2"}, {GroupName: "g3"}}}
	if err := c.Heartbeat(conn, hb, "GO", 317); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionGroup([]byte("g3")); err == nil {
		t.Fatal("a heartbeat created a group over the cap")
	}
	var pr core.PullResult
	err = c.Pull(&core.PullRequest{Group: []byte("g4"), Topic: []byte("t0"), QueueID: 0, MaxMsgs: 1}, &pr)
	if core.Code(err) != protocol.RespSubscriptionGroupNotExist || !strings.Contains(core.Remark(err), "maxAutoCreateGroups") {
		t.Fatalf("a pull of a new group over the cap: %v", err)
	}
	info := c.Admin().RuntimeInfo()
	if info["autoCreateRefusedTopics"] != "1" || info["autoCreateRefusedGroups"] != "2" {
		t.Fatalf("counters %s %s", info["autoCreateRefusedTopics"], info["autoCreateRefusedGroups"])
	}
}
