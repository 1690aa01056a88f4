package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// invokeOK sends req to addr and fails the test unless it succeeds.
func invokeOK(t *testing.T, addr string, req *protocol.Command) *protocol.Command {
	t.Helper()
	resp := invoke(t, addr, req)
	if resp.Code != protocol.RespSuccess {
		t.Fatalf("%s: code %d %s", protocol.RequestCodeName(req.Code), resp.Code, resp.Remark)
	}
	return resp
}

// autoCreate sends one message to a topic that does not exist yet, through
// TBW102, as the official clients do.
func autoCreate(t *testing.T, addr, topic string) {
	t.Helper()
	var req protocol.Command
	req.InitRequest(protocol.ReqSendMessageV2, 0)
	(&protocol.SendMessageRequest{ProducerGroup: []byte("pg"), Topic: []byte(topic), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 4, BornTimestamp: time.Now().UnixMilli()}).EncodeV2(&req.Ext)
	req.Body = []byte("hello")
	invokeOK(t, addr, &req)
}

func commitOffset(t *testing.T, addr, group, topic string, off int64) {
	t.Helper()
	var req protocol.Command
	req.InitRequest(protocol.ReqUpdateConsumerOffset, 0)
	(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), CommitOffset: off}).Encode(&req.Ext)
	invokeOK(t, addr, &req)
}

func committedOffset(t *testing.T, addr, group, topic string) int64 {
	t.Helper()
	var req protocol.Command
	req.InitRequest(protocol.ReqQueryConsumerOffset, 0)
	(&protocol.QueryConsumerOffsetRequest{ConsumerGroup: []byte(group), Topic: []byte(topic)}).Encode(&req.Ext)
	resp := invokeOK(t, addr, &req)
	var o protocol.OffsetResponse
	if err := o.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	return o.Offset
}

// Defect 7 through the binary: topics.json and consumerOffset.json damaged
// after a clean stop. The broker starts from their previous versions with a
// WARN naming each, and serves what those held; with both versions of a file
// damaged it refuses to start and names both.
func TestDamagedStateFilesFallBackToPrevious(t *testing.T) {
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"--namesrv-listen", "", "--grpc-listen", "", "--data-dir", data}
	cfg := filepath.Join(data, "config")

	// Two runs, so that each file has a previous version: the first creates
	// Kept and commits 3, the second creates Later and commits 7.
	p := start(t, bin, args...)
	autoCreate(t, p.addr, "Kept")
	commitOffset(t, p.addr, "g", "Kept", 3)
	p.stop(t, syscall.SIGTERM)
	p = start(t, bin, args...)
	autoCreate(t, p.addr, "Later")
	commitOffset(t, p.addr, "g", "Kept", 7)
	p.stop(t, syscall.SIGTERM)

	// What the previous versions hold is what the broker must come back with.
	bakTopics, err := os.ReadFile(filepath.Join(cfg, "topics.json.bak"))
	if err != nil || !strings.Contains(string(bakTopics), `"Kept"`) {
		t.Fatalf("topics.json.bak: %v %s", err, bakTopics)
	}
	bakOffsets, err := os.ReadFile(filepath.Join(cfg, "consumerOffset.json.bak"))
	if err != nil {
		t.Fatal(err)
	}
	var w protocol.ConsumerOffsetSerializeWrapper
	if err := w.Decode(bakOffsets); err != nil {
		t.Fatal(err)
	}
	want, ok := w.OffsetTable["Kept@g"][0]
	if !ok || (want != 3 && want != 7) {
		t.Fatalf("consumerOffset.json.bak: %s", bakOffsets)
	}
	for _, name := range []string{"topics.json", "consumerOffset.json"} {
		path := filepath.Join(cfg, name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil { // torn in the middle
			t.Fatal(err)
		}
	}

	p = start(t, bin, args...)
	if code := route(t, p.addr, "Kept"); code != protocol.RespSuccess {
		t.Fatalf("route of Kept after the fallback: %d", code)
	}
	if got := committedOffset(t, p.addr, "g", "Kept"); got != want {
		t.Fatalf("committed offset %d, want %d (the previous version's)", got, want)
	}
	log := p.stop(t, syscall.SIGTERM)
	for _, name := range []string{"topics.json", "consumerOffset.json"} {
		found := false
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "state file damaged") &&
				strings.Contains(line, filepath.Join(cfg, name)) && strings.Contains(line, name+".bak") {
				found = true
			}
		}
		if !found {
			t.Errorf("no WARN for %s:\n%s", name, log)
		}
		if _, err := os.Stat(filepath.Join(cfg, name+".damaged")); err != nil {
			t.Errorf("damaged %s not kept aside: %v", name, err)
		}
	}

	// Both versions of a file damaged: no start, and both files named.
	sg := filepath.Join(cfg, "subscriptionGroup.json")
	for _, f := range []string{sg, sg + ".bak"} {
		if err := os.WriteFile(f, []byte(`{"subscriptionGroupTable":`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout) // a bound on a hung test only
	defer cancel()
	out, err := execOutput(ctx, bin, withListeners(args)...)
	if err == nil || !strings.Contains(out, sg+" does not parse") || !strings.Contains(out, sg+".bak") {
		t.Fatalf("start with both versions damaged: %v\n%s", err, out)
	}
}

// execOutput runs the binary to its end and returns its combined output.
func execOutput(ctx context.Context, bin string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}
