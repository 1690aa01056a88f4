package core

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// The configuration follows the log: a topic created with 4 queues, a
// message acknowledged under it, a group changed, are on the replica as
// soon as the replica holds the log (no periodic sync: the cores here have
// none), and a replica opened as the new master (topics.json and
// subscriptionGroup.json lost as a crash before their write leaves them)
// has them from its log.
func TestConfigurationFollowsTheLog(t *testing.T) {
	m := newTestCore(t, nil)
	sdir := t.TempDir()
	s := newSlaveCore(t, func(o *Options) { o.DataDir = sdir })

	if err := m.Admin().CreateTopic(&TopicRequest{Topic: "Cfg", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	g := protocol.DefaultSubscriptionGroupConfig("CfgGroup")
	g.RetryMaxTimes = 3
	if err := m.Admin().UpdateSubscriptionGroup(g); err != nil {
		t.Fatal(err)
	}
	var res SendResult
	if err := m.Send(sendReq("Cfg", 3, 64), &res); err != nil {
		t.Fatal(err)
	}
	// A send's auto-creation is recorded like an admin's.
	if err := m.Send(sendReq("Auto", 1, 64), &res); err != nil {
		t.Fatal(err)
	}
	auto, _ := m.TopicConfig("Auto")
	replicate(t, m, s)

	if cfg, ok := s.TopicConfig("Cfg"); !ok || cfg.ReadQueueNums != 4 || cfg.WriteQueueNums != 4 || cfg.Perm != 6 {
		t.Fatalf("the replica's Cfg: %+v %v", cfg, ok)
	}
	if cfg, ok := s.TopicConfig("Auto"); !ok || !sameTopicConfig(&cfg, &auto) {
		t.Fatalf("the replica's auto-created topic: %+v %v, want %+v", cfg, ok, auto)
	}
	if sg, err := s.SubscriptionGroup([]byte("CfgGroup")); err != nil || sg.RetryMaxTimes != 3 {
		t.Fatalf("the replica's group: %+v %v", sg, err)
	}
	if _, ok := s.TopicConfig(configTopic); ok {
		t.Fatal("the configuration topic is in a table")
	}
	// A master reading its own records back changes nothing.
	if st := m.Replication().ConfigLogStats(); st.Applied != 0 || st.Appended < 3 {
		t.Fatalf("the master's record counters: %+v", st)
	}

	// Changes and deletions follow, in log order.
	if err := m.Admin().CreateTopic(&TopicRequest{Topic: "Cfg", ReadQueueNums: 6, WriteQueueNums: 6, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().DeleteTopic("Auto"); err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().DeleteSubscriptionGroup("CfgGroup", false); err != nil {
		t.Fatal(err)
	}
	before := m.Replication().TopicTable() // a snapshot the periodic sync could still be applying
	if err := m.Admin().CreateTopic(&TopicRequest{Topic: "Cfg", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	replicate(t, m, s)
	if _, ok := s.TopicConfig("Auto"); ok {
		t.Fatal("a topic the master deleted stays on the replica")
	}
	if _, err := s.SubscriptionGroup([]byte("CfgGroup")); err == nil {
		t.Fatal("a group the master deleted stays on the replica")
	}
	// The log wins over an older table from the periodic sync: neither
	// the 6 queues nor the deleted topic come back.
	s.Replication().SyncTopics(before)
	if cfg, _ := s.TopicConfig("Cfg"); cfg.ReadQueueNums != 4 {
		t.Fatalf("the periodic sync undid a record: Cfg has %d queues", cfg.ReadQueueNums)
	}
	if _, ok := s.TopicConfig("Auto"); ok {
		t.Fatal("the periodic sync brought a deleted topic back")
	}

	// The replica becomes the master after a crash that lost its state
	// files: its log has the configuration.
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{TopicsFile, SubscriptionGroupFile} {
		os.Remove(filepath.Join(sdir, ConfigDir, f))
		os.Remove(filepath.Join(sdir, ConfigDir, f+BakSuffix))
	}
	nm := newTestCore(t, func(o *Options) { o.DataDir = sdir })
	if cfg, ok := nm.TopicConfig("Cfg"); !ok || cfg.ReadQueueNums != 4 || cfg.WriteQueueNums != 4 {
		t.Fatalf("the new master's Cfg: %+v %v", cfg, ok)
	}
	if _, ok := nm.TopicConfig("Auto"); ok {
		t.Fatal("the new master adopted a deleted topic")
	}
	if _, err := nm.SubscriptionGroup([]byte("CfgGroup")); err == nil {
		t.Fatal("the new master has a deleted group")
	}
	if err := nm.Send(sendReq("Cfg", 3, 64), &res); err != nil {
		t.Fatalf("a send to the new master's queue 3: %v", err)
	}
	if err := nm.Send(sendReq("Cfg", 5, 64), &res); Code(err) != protocol.RespSystemError {
		t.Fatalf("a send to queue 5 of a 4-queue topic: %v", err)
	}
}

// A replica whose log is cut below records it applied applies the log's
// records again from the start: entries set by records no longer in the
// log are the periodic sync's again.
func TestConfigurationAfterACutLog(t *testing.T) {
	m := newTestCore(t, nil)
	s := newSlaveCore(t, nil)
	if err := m.Admin().CreateTopic(&TopicRequest{Topic: "Kept", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	replicate(t, m, s)
	cut := s.Store().WrittenOffset()
	if err := m.Admin().CreateTopic(&TopicRequest{Topic: "Cut", ReadQueueNums: 3, WriteQueueNums: 3, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	replicate(t, m, s)
	if _, ok := s.TopicConfig("Cut"); !ok {
		t.Fatal("the replica lacks Cut")
	}
	if _, err := s.Store().TruncateReplica(cut); err != nil {
		t.Fatal(err)
	}
	s.catchUpConfig()
	if e := s.topics.lookup("Cut"); e == nil || e.logOff.Load() >= 0 {
		t.Fatalf("an entry set by a record the log no longer holds is still the log's: %v", e)
	}
	if e := s.topics.lookup("Kept"); e == nil || e.logOff.Load() < 0 {
		t.Fatalf("an entry set by a record the log holds is not the log's: %v", e)
	}
	// The periodic sync now decides for Cut: the master it follows lacks it.
	s.Replication().SyncTopics(TopicTable{Topics: map[string]*protocol.TopicConfig{}})
	if _, ok := s.TopicConfig("Cut"); ok {
		t.Fatal("the periodic sync did not delete a topic no record holds")
	}
	if _, ok := s.TopicConfig("Kept"); !ok {
		t.Fatal("the periodic sync deleted a topic a record holds")
	}
}

// A slave never creates a topic or a group: a route query of a topic it
// does not know is TOPIC_NOT_EXIST (ErrSlaveCreate), a heartbeat creates
// neither its groups nor their retry topics, a pull of an unknown group is
// served without creating it, and a group's retry topic is refused.
func TestSlaveCreatesNothing(t *testing.T) {
	m := newTestCore(t, nil)
	s := newSlaveCore(t, nil)
	if err := m.Admin().CreateTopic(&TopicRequest{Topic: "Known", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	var res SendResult
	if err := m.Send(sendReq("Known", 0, 64), &res); err != nil {
		t.Fatal(err)
	}
	replicate(t, m, s)

	if cfg, err := s.RouteTopic("Known", true, netip.AddrPort{}); err != nil || cfg.WriteQueueNums != 4 {
		t.Fatalf("the slave's route of a topic it follows: %+v %v", cfg, err)
	}
	_, err := s.RouteTopic("Unknown", true, netip.AddrPort{})
	if Code(err) != protocol.RespTopicNotExist || ReasonOf(err) != ReasonSlaveCreate {
		t.Fatalf("the slave's route of an unknown topic: code %d %v", Code(err), err)
	}
	if _, ok := s.TopicConfig("Unknown"); ok {
		t.Fatal("the slave created a topic for a route query")
	}
	if _, err := s.ensureGroupTopic(retryTopicPrefix+"G", 1); ReasonOf(err) != ReasonSlaveCreate {
		t.Fatalf("the slave's retry topic: %v", err)
	}

	hb := &protocol.HeartbeatData{ClientID: "c1", ConsumerDataSet: []protocol.ConsumerData{{GroupName: "HbGroup"}}}
	if err := s.Heartbeat(nil, hb, "GO", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubscriptionGroup([]byte("HbGroup")); err == nil {
		t.Fatal("a heartbeat created a group on the slave")
	}
	if _, ok := s.TopicConfig(retryTopicPrefix + "HbGroup"); ok {
		t.Fatal("a heartbeat created a retry topic on the slave")
	}

	var pr PullResult
	defer pr.Release()
	if err := s.Pull(&PullRequest{Group: []byte("PullGroup"), Topic: []byte("Known"), MaxMsgs: 32, OwnSubscription: true}, &pr); err != nil ||
		pr.Status != PullFound || len(pr.Records) != 1 {
		t.Fatalf("a pull of an unknown group from the slave: %v status %d, %d records", err, pr.Status, len(pr.Records))
	}
	if _, err := s.SubscriptionGroup([]byte("PullGroup")); err == nil {
		t.Fatal("a pull created a group on the slave")
	}
	if st := s.Replication().ConfigLogStats(); st.Appended != 0 {
		t.Fatalf("the slave appended %d configuration records", st.Appended)
	}

	// The master creates them as before, and its slave follows.
	if err := m.Heartbeat(nil, hb, "GO", 0); err != nil {
		t.Fatal(err)
	}
	replicate(t, m, s)
	if _, err := s.SubscriptionGroup([]byte("HbGroup")); err != nil {
		t.Fatalf("the slave lacks the group its master created: %v", err)
	}
	if _, ok := s.TopicConfig(retryTopicPrefix + "HbGroup"); !ok {
		t.Fatal("the slave lacks the retry topic its master created")
	}
}

// The configuration topic is nobody's to send to, create or pull.
func TestConfigTopicIsClosedToClients(t *testing.T) {
	c := newTestCore(t, nil)
	var res SendResult
	if err := c.Send(sendReq(configTopic, 0, 64), &res); Code(err) != protocol.RespNoPermission {
		t.Fatalf("a send to %s: %v", configTopic, err)
	}
	if _, err := c.RouteTopic(configTopic, true, netip.AddrPort{}); err == nil {
		t.Fatalf("a route query of %s answered", configTopic)
	}
	if err := c.Admin().CreateTopic(&TopicRequest{Topic: configTopic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}); err == nil {
		t.Fatalf("an admin created %s", configTopic)
	}
	if err := c.Admin().CreateTopic(&TopicRequest{Topic: "Visible", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	waitDispatched(t, c, configTopic, 0, 1)
	var pr PullResult
	defer pr.Release()
	if err := c.Pull(&PullRequest{Group: []byte("g"), Topic: []byte(configTopic), MaxMsgs: 32, OwnSubscription: true}, &pr); Code(err) != protocol.RespTopicNotExist {
		t.Fatalf("a pull of %s: %v status %d", configTopic, err, pr.Status)
	}
	cfgs, _ := c.Admin().Topics()
	for _, cfg := range cfgs {
		if cfg.TopicName == configTopic {
			t.Fatalf("%s is listed", configTopic)
		}
	}
}
