package core

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A topic created on demand reaches topics.json through the background
// writer; a crash before that write loses it from the file but not its
// messages. The next start puts it back in the table (and the file) from
// the consume queues, so its acknowledged messages stay reachable.
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
	c.groups.ensure([]byte("g"))
	if _, err := c.ensureGroupTopic(retryTopicPrefix+"g", 1); err != nil {
		t.Fatal(err)
	}
	req := sendReq(retryTopicPrefix+"g", 0, 100)
	if err := c.Send(req, &res); err != nil {
		t.Fatal(err)
	}
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
	if !ok || cfg.ReadQueueNums != int32(c.opts.DefaultTopicQueues) || cfg.Perm != 6 {
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
