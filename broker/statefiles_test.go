package broker

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/protocol"
)

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Auto-created topics and groups are written in the background, many per
// write; Shutdown writes the rest; an admin request answers once written.
func TestTopicAndGroupCreationCoalesceWrites(t *testing.T) {
	var topicWrites, groupWrites atomic.Int32
	dir := t.TempDir()
	h := startHarness(t, testOptions(t, dir), func(o *Options) {
		o.Core.WriteConfigFile = func(path string, data []byte) error {
			switch filepath.Base(path) {
			case core.TopicsFile:
				topicWrites.Add(1)
			case core.SubscriptionGroupFile:
				groupWrites.Add(1)
			}
			return core.WriteConfigFile(path, data)
		}
	})
	topicWrites.Store(0)
	groupWrites.Store(0)
	cl := h.dial(nil)
	const n = 300
	for i := 0; i < n; i++ {
		name := "Auto" + string(rune('A'+i%26)) + strings.Repeat("x", i/26)
		if r := invoke(t, cl, sendRequest(name, 0, []byte("x"), "")); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		if r := invoke(t, cl, heartbeatRequest(t, "c@1", "G"+name, map[string]string{name: "*"})); r.Code != 0 {
			t.Fatalf("heartbeat: %d", r.Code)
		}
		// The topic is routed at once by the embedded registry.
		if _, ok := h.b.registry.Route(name); !ok {
			t.Fatalf("%s not routed after its creation", name)
		}
	}
	if tw, gw := topicWrites.Load(), groupWrites.Load(); tw >= n/3 || gw >= n/3 {
		t.Fatalf("%d topics.json and %d subscriptionGroup.json writes for %d topics and groups", tw, gw, n)
	}

	// An admin creation is on disk when it is answered.
	req := goRequest(protocol.ReqUpdateAndCreateTopic)
	(&protocol.CreateTopicRequest{Topic: "AdminMade", DefaultTopic: "TBW102", ReadQueueNums: 3, WriteQueueNums: 3, Perm: 6, TopicFilterType: "SINGLE_TAG"}).Encode(&req.Ext)
	if r := invoke(t, cl, req); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	if !strings.Contains(readFile(t, statePath(h.b, core.TopicsFile)), `"AdminMade"`) {
		t.Fatal("admin-created topic not in topics.json when answered")
	}

	// Created just before a clean stop: written by Shutdown.
	if r := invoke(t, cl, sendRequest("LastMinute", 0, []byte("x"), "")); r.Code != 0 {
		t.Fatalf("send: %d", r.Code)
	}
	h.close()
	var w protocol.TopicConfigSerializeWrapper
	if err := w.Decode([]byte(readFile(t, statePath(h.b, core.TopicsFile)))); err != nil {
		t.Fatal(err)
	}
	if w.TopicConfigTable["LastMinute"] == nil || w.TopicConfigTable["AutoA"] == nil || len(w.TopicConfigTable) < n {
		t.Fatalf("topics.json after Shutdown has %d topics", len(w.TopicConfigTable))
	}
	var gw protocol.SubscriptionGroupWrapper
	if err := gw.Decode([]byte(readFile(t, filepath.Join(dir, core.ConfigDir, core.SubscriptionGroupFile)))); err != nil {
		t.Fatal(err)
	}
	if len(gw.SubscriptionGroupTable) < n {
		t.Fatalf("subscriptionGroup.json after Shutdown has %d groups", len(gw.SubscriptionGroupTable))
	}

	// A deleted topic leaves the embedded registry's routes at once.
	h2 := startHarness(t, testOptions(t, dir), nil)
	if _, ok := h2.b.registry.Route("AutoA"); !ok {
		t.Fatal("AutoA not routed after restart")
	}
	del := goRequest(protocol.ReqDeleteTopicInBroker)
	(&protocol.DeleteTopicRequest{Topic: "AutoA"}).Encode(&del.Ext)
	if r := invoke(t, h2.dial(nil), del); r.Code != 0 {
		t.Fatalf("delete: %d %s", r.Code, r.Remark)
	}
	if _, ok := h2.b.registry.Route("AutoA"); ok {
		t.Fatal("deleted topic still routed")
	}
	if _, ok := h2.b.registry.Route("AutoB"); !ok {
		t.Fatal("another topic lost its route")
	}
}

// Defect 7: topics.json and consumerOffset.json damaged after a clean stop.
// The broker starts from their previous versions (.bak) with a WARN each,
// and has what the last-but-one writes held.
func TestDamagedStateFilesFallBackToPrevious(t *testing.T) {
	dir := t.TempDir()
	h := startHarness(t, testOptions(t, dir), nil)
	cl := h.dial(nil)
	for _, topic := range []string{"Kept1", "Kept2"} {
		if r := invoke(t, cl, sendRequest(topic, 0, []byte("x"), "")); r.Code != 0 {
			t.Fatalf("send: %d", r.Code)
		}
	}
	h.b.core.UpdateConsumerOffset([]byte("Kept1"), []byte("g"), 0, 1)
	if err := h.b.core.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// The last writes (at Shutdown) hold offset 5; the ones before, offset 1.
	h.b.core.UpdateConsumerOffset([]byte("Kept1"), []byte("g"), 0, 5)
	h.close()

	cfg := filepath.Join(dir, core.ConfigDir)
	for _, name := range []string{core.TopicsFile, core.ConsumerOffsetFile} {
		if !strings.Contains(readFile(t, filepath.Join(cfg, name+core.BakSuffix)), "Kept1") {
			t.Fatalf("%s.bak lacks the last-but-one write", name)
		}
		p := filepath.Join(cfg, name)
		data := readFile(t, p)
		if err := os.WriteFile(p, []byte(data[:len(data)/2]), 0o644); err != nil { // torn
			t.Fatal(err)
		}
	}

	logs := &logCounter{}
	h2 := startHarness(t, testOptions(t, dir), func(o *Options) { o.Core.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	if n := logs.count("state file damaged; using its previous version"); n != 2 {
		t.Fatalf("%d fallback WARNs: %q", n, logs.lines)
	}
	for _, topic := range []string{"Kept1", "Kept2"} {
		if lookupTopic(h2.b, topic) == nil {
			t.Fatalf("%s lost", topic)
		}
	}
	if off, ok := h2.b.core.CommittedOffset("Kept1", "g", 0); !ok || off != 1 {
		t.Fatalf("offset %d %v, want the last-but-one write's 1", off, ok)
	}
	// The damaged copies are kept aside, and topics.json is written again.
	for _, name := range []string{core.TopicsFile, core.ConsumerOffsetFile} {
		if _, err := os.Stat(filepath.Join(cfg, name+durable.DamagedSuffix)); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(readFile(t, filepath.Join(cfg, core.TopicsFile)), "Kept2") {
		t.Fatal("topics.json not written again at start")
	}
	h2.close()

	// Both copies damaged: the broker refuses to start and names both.
	p := filepath.Join(cfg, core.SubscriptionGroupFile)
	for _, f := range []string{p, p + core.BakSuffix} {
		if err := os.WriteFile(f, []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := testOptions(t, dir)
	opts.Core.AdvertiseAddr = "127.0.0.1:1"
	b, err := New(opts)
	if err == nil {
		b.Shutdown(timeoutCtx(t))
		t.Fatal("started with both copies damaged")
	}
	if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), p+core.BakSuffix) {
		t.Fatalf("error does not name both files: %v", err)
	}
}
