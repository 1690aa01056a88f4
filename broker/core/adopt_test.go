package core

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// A topic created on demand reaches topics.json through the background
// writer; a crash before that write loses it from the file but not its
// messages nor its configuration record. The next start puts it back in
// the table (and the file) from the log, so its acknowledged messages stay
// reachable.
func TestTopicsMissingFromTopicsJSONAreAdopted(t *testing.T) {
	dir := t.TempDir()
	c, err := New(testOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	first := c
	t.Cleanup(func() { first.Shutdown() })
	var res SendResult
	for q := int32(0); q < 3; q++ {
		if err := c.Send(sendReq("Lost", q, 100), &res); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.setGroup(protocol.DefaultSubscriptionGroupConfig("g"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ensureGroupTopic(retryTopicPrefix+"g", 1); err != nil {
		t.Fatal(err)
	}
	req := sendReq(retryTopicPrefix+"g", 0, 100)
	if err := c.Send(req, &res); err != nil {
		t.Fatal(err)
	}
	lost, _ := c.TopicConfig("Lost")
	waitDispatched(t, c, "Lost", 2, 1)
	waitDispatched(t, c, retryTopicPrefix+"g", 0, 1)
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}

	// topics.json as a crash before the background write leaves it.
	path := filepath.Join(dir, ConfigDir, TopicsFile)
	var file map[string]json.RawMessage
	if err := json.Unmarshal([]byte(readFile(t, path)), &file); err != nil {
		t.Fatal(err)
	}
	var table map[string]json.RawMessage
	if err := json.Unmarshal(file["topicConfigTable"], &table); err != nil {
		t.Fatal(err)
	}
	delete(table, "Lost")
	delete(table, retryTopicPrefix+"g")
	file["topicConfigTable"], _ = json.Marshal(table)
	b, _ := json.Marshal(file)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(path + BakSuffix)

	c = newTestCoreIn(t, dir)
	cfg, ok := c.TopicConfig("Lost")
	if !ok || !sameTopicConfig(&cfg, &lost) {
		t.Fatalf("Lost after the restart: %+v %v", cfg, ok)
	}
	if cfg, ok := c.TopicConfig(retryTopicPrefix + "g"); !ok || cfg.ReadQueueNums != 1 {
		t.Fatalf("the retry topic after the restart: %+v %v", cfg, ok)
	}
	var pr PullResult
	pull := PullRequest{Group: []byte("g2"), Topic: []byte("Lost"), QueueID: 2, MaxMsgs: 32, OwnSubscription: true, Expression: []byte("*")}
	if err := c.Pull(&pull, &pr); err != nil || pr.Status != PullFound || len(pr.Records) != 1 {
		t.Fatalf("pull of the adopted topic: %v %d %d", err, pr.Status, len(pr.Records))
	}
	pr.Release()
	if !strings.Contains(readFile(t, path), `"Lost"`) {
		t.Fatalf("topics.json after the restart lacks the adopted topic")
	}
}

// newTestCoreIn is newTestCore on an existing data directory.
func newTestCoreIn(t *testing.T, dir string) *Core {
	t.Helper()
	c, err := New(testOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(func() { c.Shutdown() })
	return c
}

// A topic the store holds messages of and the log has no record of (a log
// written before the records) is adopted with the queue count its consume
// queues show, never the default; a topic the table has keeps its
// configuration, whatever queues the store holds.
func TestAdoptionTakesTheStoresQueueCount(t *testing.T) {
	dir := t.TempDir()
	c := newTestCoreIn(t, dir)
	if err := c.Admin().CreateTopic(&TopicRequest{Topic: "Kept", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	// Messages stored as by a broker without configuration records.
	for _, m := range []struct {
		topic string
		q     int32
	}{{"Legacy", 0}, {"Legacy", 2}, {"Kept", 5}} {
		if _, err := c.Store().Put(&store.Message{Topic: m.topic, QueueID: m.q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	waitDispatched(t, c, "Kept", 5, 1)
	waitDispatched(t, c, "Legacy", 2, 1)
	adopted := c.Replication().AdoptStoredTopics()
	if len(adopted) != 1 || adopted[0] != "Legacy" {
		t.Fatalf("adopted %v, want [Legacy]", adopted)
	}
	if cfg, _ := c.TopicConfig("Legacy"); cfg.ReadQueueNums != 3 || cfg.WriteQueueNums != 3 || cfg.Perm != 6 {
		t.Fatalf("the adopted topic: %+v, want 3 queues (the store's highest queue id + 1)", cfg)
	}
	if cfg, _ := c.TopicConfig("Kept"); cfg.ReadQueueNums != 2 || cfg.WriteQueueNums != 2 {
		t.Fatalf("a topic the table had was changed by adoption: %+v", cfg)
	}
	// The adoption is a change like any other: a record, so it survives a
	// restart without topics.json (and reaches the slaves).
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{TopicsFile, TopicsFile + BakSuffix} {
		os.Remove(filepath.Join(dir, ConfigDir, f))
	}
	c = newTestCoreIn(t, dir)
	if cfg, _ := c.TopicConfig("Legacy"); cfg.ReadQueueNums != 3 {
		t.Fatalf("the adopted topic after a restart without topics.json: %+v", cfg)
	}
	if cfg, _ := c.TopicConfig("Kept"); cfg.ReadQueueNums != 2 {
		t.Fatalf("the created topic after a restart without topics.json: %+v", cfg)
	}
}
