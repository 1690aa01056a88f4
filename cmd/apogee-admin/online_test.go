package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
)

// The online commands through the binaries: an apogee-broker process, and
// apogee-admin run as a script would run mqadmin, every command in both
// output forms.

// brokerProc is an apogee-broker process (package proctest: every listener
// on a port from :0, read from its ready file; its log printed if the test
// fails).
type brokerProc struct {
	*proctest.Proc
	ns   string // its embedded name server
	addr string // its address in routes
}

// binDir holds the binaries; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds apogee-broker and apogee-admin once per test binary.
var binaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "apogee-admin-test")
	if err != nil {
		return "", err
	}
	binDir = dir
	for _, b := range []struct{ out, pkg string }{{"apogee-broker", "../apogee-broker"}, {"apogee-admin", "."}} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg).CombinedOutput(); err != nil {
			return "", &buildError{string(out), err}
		}
	}
	return dir, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// startBroker starts a broker for a test or a benchmark; it is stopped
// with SIGTERM (and must exit 0) when the test ends.
func startBroker(t testing.TB, extra ...string) *brokerProc {
	t.Helper()
	dir, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0",
		"--grpc-listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, extra...)
	p := proctest.Start(t, "apogee-broker", filepath.Join(dir, "apogee-broker"), args...)
	t.Cleanup(p.StopClean)
	return &brokerProc{Proc: p, ns: p.Ready.Namesrv, addr: p.Ready.Advertise}
}

// admin runs apogee-admin with args (NAMESRV_ADDR set to ns) and returns its
// standard output, standard error and exit status.
func admin(t *testing.T, ns string, args ...string) (string, string, int) {
	t.Helper()
	dir, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "apogee-admin"), args...)
	cmd.Env = append(os.Environ(), "NAMESRV_ADDR="+ns)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// ok runs a command that must succeed; it returns the text output and the
// JSON document of the same command with --json.
func ok(t *testing.T, ns string, args ...string) (string, map[string]any) {
	t.Helper()
	text, errText, code := admin(t, ns, args...)
	if code != 0 {
		t.Fatalf("apogee-admin %v: exit %d\n%s%s", args, code, text, errText)
	}
	return text, jsonOf(t, ns, args...)
}

func jsonOf(t *testing.T, ns string, args ...string) map[string]any {
	t.Helper()
	out, errText, code := admin(t, ns, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("apogee-admin %v --json: exit %d\n%s%s", args, code, out, errText)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var doc map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &doc); err != nil {
		t.Fatalf("apogee-admin %v --json: last line %q: %v", args, lines[len(lines)-1], err)
	}
	return doc
}

func mustContain(t *testing.T, what, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Fatalf("%s: %q missing from\n%s", what, s, text)
		}
	}
}

func TestOnlineCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	b := startBroker(t)
	ns := b.ns
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Topics and groups. Command names match without regard to case, as
	// mqadmin's scripts spell them either way.
	text, doc := ok(t, ns, "updateTopic", "-c", "DefaultCluster", "-t", "OpsTopic", "-r", "2", "-w", "2", "-p", "6")
	mustContain(t, "updateTopic", text, "create topic to "+b.addr+" success.")
	if doc["topic"] != "OpsTopic" {
		t.Fatalf("updateTopic json %v", doc)
	}
	ok(t, ns, "UPDATETOPIC", "-b", b.addr, "-t", "Doomed", "-r", "1", "-w", "1")
	text, _ = ok(t, ns, "updateSubGroup", "-c", "DefaultCluster", "-g", "OpsGroup", "-r", "3")
	mustContain(t, "updateSubGroup", text, "create subscription group to "+b.addr+" success.")
	_, doc = ok(t, ns, "topicList")
	if !strings.Contains(toJSON(doc["topics"]), `"OpsTopic"`) {
		t.Fatalf("topicList json %v", doc)
	}
	ok(t, ns, "topicList", "-c")
	text, doc = ok(t, ns, "topicRoute", "-t", "OpsTopic")
	mustContain(t, "topicRoute", text, "broker-a", b.addr)
	if qd := doc["queueDatas"]; qd == nil {
		t.Fatalf("topicRoute json %v", doc)
	}

	// Messages.
	text, doc = ok(t, ns, "sendMessage", "-t", "OpsTopic", "-p", "hello ops", "-k", "opskey", "-c", "TagA", "-b", "broker-a", "-i", "1")
	mustContain(t, "sendMessage", text, "SEND_OK")
	uniq, _ := doc["msgId"].(string)
	offID, _ := doc["offsetMsgId"].(string)
	if uniq == "" || offID == "" || doc["queueId"].(float64) != 1 {
		t.Fatalf("sendMessage json %v", doc)
	}

	// A consumer of OpsGroup in this process (Apogee's client), which
	// answers GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY.
	var consumed, direct atomic.Int64
	c, err := client.NewPushConsumer(client.NameServer(ns), client.ConsumerGroup("OpsGroup"), client.Subscribe("OpsTopic", "*"),
		client.InstanceName("ops-consumer"), client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				if string(m.Body) == "hello ops" {
					direct.Add(1) // once by the push, then once per CONSUME_MESSAGE_DIRECTLY
				}
			}
			consumed.Add(int64(len(msgs)))
			return client.ConsumeSuccess
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	wait.Until(t, "the message consumed", func() bool { return consumed.Load() >= 1 })
	// The offset is committed on the consumer's next persist (5 s); wait for
	// consumerProgress to see it.
	wait.Equal(t, "consumerProgress's diffTotal", 0.0, func() float64 {
		_, doc := ok(t, ns, "consumerProgress", "-g", "OpsGroup", "-t", "OpsTopic")
		return doc["diffTotal"].(float64)
	})
	text, doc = ok(t, ns, "consumerProgress", "-g", "OpsGroup", "-t", "OpsTopic")
	mustContain(t, "consumerProgress -g", text, "#Topic", "#Broker Offset", "Consume Diff Total: 0")
	if qs := doc["queues"].([]any); len(qs) != 2 || doc["diffTotal"].(float64) != 0 {
		t.Fatalf("consumerProgress json %v", doc)
	}
	ok(t, ns, "consumerProgress", "-g", "OpsGroup", "-s", "true")
	text, doc = ok(t, ns, "consumerProgress")
	mustContain(t, "consumerProgress", text, "OpsGroup", "PUSH", "CLUSTERING")
	text, doc = ok(t, ns, "consumerConnection", "-g", "OpsGroup")
	mustContain(t, "consumerConnection", text, c.ClientID(), "OpsTopic", "CONSUME_PASSIVELY")
	text, doc = ok(t, ns, "getConsumerStatus", "-g", "OpsGroup", "-t", "OpsTopic")
	mustContain(t, "getConsumerStatus", text, c.ClientID(), "#offset")
	if offs := doc["offsets"].([]any); len(offs) != 2 {
		t.Fatalf("getConsumerStatus json %v", doc)
	}
	text, doc = ok(t, ns, "consumerStatus", "-g", "OpsGroup")
	mustContain(t, "consumerStatus", text, c.ClientID(), "OpsTopic", "#Consume OK TPS")
	if !strings.Contains(toJSON(doc), `"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"`) {
		t.Fatalf("consumerStatus json %v", toJSON(doc))
	}
	// A live producer group: its connection is listed; a group without one
	// is the broker's SYSTEM_ERROR (exit 1), as mqadmin reports it.
	prod, err := client.NewProducer(client.NameServer(ns), client.ProducerGroup("OpsProducers"), client.InstanceName("ops-producer"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	if _, err := prod.SendSync(ctx, &client.Message{Topic: "OpsTopic", Body: []byte("from a live producer")}); err != nil {
		t.Fatal(err)
	}
	text, doc = ok(t, ns, "producerConnection", "-g", "OpsProducers", "-t", "OpsTopic")
	mustContain(t, "producerConnection", text, prod.ClientID(), "GO")
	if _, _, code := admin(t, ns, "producerConnection", "-g", "NoProducers", "-t", "OpsTopic"); code != 1 {
		t.Fatalf("producerConnection of a group without producers: exit %d", code)
	}
	text, doc = ok(t, ns, "queryMsgById", "-i", offID)
	mustContain(t, "queryMsgById", text, "hello ops", "opskey")
	before := direct.Load()
	text, doc = ok(t, ns, "queryMsgById", "-i", offID, "-g", "OpsGroup", "-d", c.ClientID())
	mustContain(t, "queryMsgById consume directly", text, "consumeResult=CR_SUCCESS")
	if direct.Load() < before+2 {
		t.Fatalf("the consumer ran its listener %d times on request, want 2 more", direct.Load()-before)
	}
	text, doc = ok(t, ns, "queryMsgByKey", "-t", "OpsTopic", "-k", "opskey")
	mustContain(t, "queryMsgByKey", text, uniq)
	text, doc = ok(t, ns, "queryMsgByUniqueKey", "-t", "OpsTopic", "-i", uniq)
	mustContain(t, "queryMsgByUniqueKey", text, "hello ops")
	text, doc = ok(t, ns, "queryMsgByOffset", "-t", "OpsTopic", "-b", "broker-a", "-i", "1", "-o", "0")
	mustContain(t, "queryMsgByOffset", text, "hello ops")
	text, doc = ok(t, ns, "consumeMessage", "-t", "OpsTopic", "-c", "5")
	mustContain(t, "consumeMessage", text, "hello ops", "from a live producer", "3 messages") // sendMessage ran twice: text and --json
	text, doc = ok(t, ns, "topicStatus", "-t", "OpsTopic")
	mustContain(t, "topicStatus", text, "#Max Offset")
	if qs := doc["queues"].([]any); len(qs) != 2 {
		t.Fatalf("topicStatus json %v", doc)
	}

	// Offsets.
	text, doc = ok(t, ns, "resetOffsetByTime", "-g", "OpsGroup", "-t", "OpsTopic", "-s", "0")
	mustContain(t, "resetOffsetByTime", text, "broker-a")
	text, _ = ok(t, ns, "cloneGroupOffset", "-s", "OpsGroup", "-d", "OpsGroupCopy", "-t", "OpsTopic", "-o", "true")
	mustContain(t, "cloneGroupOffset", text, "clone group offset success")

	// Broker.
	text, doc = ok(t, ns, "clusterList")
	mustContain(t, "clusterList", text, "DefaultCluster", "broker-a", b.addr, "V4_9_4")
	ok(t, ns, "clusterList", "-m")
	text, doc = ok(t, ns, "brokerStatus", "-b", b.addr)
	mustContain(t, "brokerStatus", text, "putTps", "commitLogDiskRatio", "msgPutTotalTodayMorning")
	text, doc = ok(t, ns, "getBrokerConfig", "-b", b.addr)
	mustContain(t, "getBrokerConfig", text, "brokerName", "broker-a", "brokerPermission")
	ok(t, ns, "updateBrokerConfig", "-b", b.addr, "-k", "brokerPermission", "-v", "4")
	if _, errText, code := admin(t, ns, "sendMessage", "-t", "OpsTopic", "-p", "refused"); code != 1 {
		t.Fatalf("send to a read-only broker: exit %d (%s)", code, errText)
	}
	ok(t, ns, "updateBrokerConfig", "-b", b.addr, "-k", "brokerPermission", "-v", "6")
	if _, errText, code := admin(t, ns, "updateBrokerConfig", "-b", b.addr, "-k", "flushDiskType", "-v", "SYNC_FLUSH"); code != 1 ||
		!strings.Contains(errText, "cannot be changed while the broker runs") {
		t.Fatalf("a key that cannot change at run time: exit %d (%s)", code, errText)
	}
	text, doc = ok(t, ns, "wipeWritePerm", "-b", "broker-a")
	mustContain(t, "wipeWritePerm", text, "wipe write perm of broker[broker-a]")
	text, doc = ok(t, ns, "addWritePerm", "-b", "broker-a")
	mustContain(t, "addWritePerm", text, "add write perm of broker[broker-a]")
	text, doc = ok(t, ns, "statsAll", "-t", "OpsTopic")
	mustContain(t, "statsAll", text, "OpsTopic", "OpsGroup", "#InTPS")

	// Deletions last.
	ok(t, ns, "deleteSubGroup", "-c", "DefaultCluster", "-g", "OpsGroupCopy")
	ok(t, ns, "deleteTopic", "-c", "DefaultCluster", "-t", "Doomed")

	// Errors: exit 1 with the broker's refusal, 2 for usage.
	if _, errText, code := admin(t, ns, "topicStatus", "-t", "NoSuchTopic"); code != 1 || errText == "" {
		t.Fatalf("unknown topic: exit %d %q", code, errText)
	}
	if _, _, code := admin(t, ns, "updateTopic", "-t", "X"); code != 2 {
		t.Fatalf("updateTopic without -b or -c: exit %d", code)
	}
	if _, _, code := admin(t, "", "clusterList", "-n", ""); code != 2 {
		t.Fatalf("no name server: exit %d", code)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
