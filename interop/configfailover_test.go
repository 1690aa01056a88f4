package interop

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// topicQueues returns the read and write queue counts of topic in the
// table of the broker at addr (GET_ALL_TOPIC_CONFIG, 21); ok is false when
// the table lacks it.
func topicQueues(t testing.TB, addr, topic string) (read, write int, ok bool) {
	rc := dialRaw(t, addr)
	defer rc.Close()
	resp := rc.Invoke(t, request(21, nil, nil))
	var w struct {
		TopicConfigTable map[string]struct {
			ReadQueueNums  int `json:"readQueueNums"`
			WriteQueueNums int `json:"writeQueueNums"`
		} `json:"topicConfigTable"`
	}
	if resp.Code != 0 || json.Unmarshal(resp.Body, &w) != nil {
		t.Fatalf("GET_ALL_TOPIC_CONFIG at %s: code %d %q", addr, resp.Code, resp.Remark)
	}
	cfg, ok := w.TopicConfigTable[topic]
	return cfg.ReadQueueNums, cfg.WriteQueueNums, ok
}

// TestFailoverRightAfterTopicCreation: a topic created on the master with 3
// queues (no default has 3), a message acknowledged on its queue 1 (every
// member of the SyncStateSet holds it: allAckInSyncStateSet), and the
// master SIGKILLed at once, well within the slaves' one-second table sync.
// The new master has the topic with 3 queues from its log (before the
// configuration followed the log it adopted the topic with the default
// queue count; adoption from the store alone would give 2) and takes a
// send to queue 2; the old master, back as a slave, has 3 queues too.
func TestFailoverRightAfterTopicCreation(t *testing.T) {
	g := newFailoverGroup(t, "allAckInSyncStateSet=true", "haMaxTimeSlaveNotCatchup=3000")
	g.waitFullSet(t)
	old := g.master(t)
	topic := uniq("TCfg")

	rc := dialRaw(t, old.addr)
	resp := rc.Invoke(t, request(17, map[string]string{"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "3",
		"writeQueueNums": "3", "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, nil))
	if resp.Code != 0 {
		t.Fatalf("UPDATE_AND_CREATE_TOPIC on the master: code %d %q", resp.Code, resp.Remark)
	}
	resp = rc.Invoke(t, request(10, sendHeader(topic, 1), []byte("acknowledged under 3 queues")))
	rc.Close()
	if resp.Code != 0 {
		t.Fatalf("send to queue 1 on the master: code %d %q", resp.Code, resp.Remark)
	}
	created := time.Now()
	old.stop(syscall.SIGKILL)
	t.Logf("master %s SIGKILLed %v after the SEND_OK", old.addr, time.Since(created).Round(time.Millisecond))

	var nm *ctlBroker
	wait.For(t, "a new master in the route", func() error {
		if addr := masterIn(t, g.ns.Addr, "TBW102"); addr != "" && addr != old.addr {
			if nm = brokerAt(g.brokers, addr); nm != nil {
				return nil
			}
		}
		return fmt.Errorf("no new master yet")
	})
	if r, w, ok := topicQueues(t, nm.addr, topic); !ok || r != 3 || w != 3 {
		t.Fatalf("the new master's %s: read %d write %d (in the table: %v), want 3 and 3", topic, r, w, ok)
	}
	wait.For(t, "a send to queue 2 on the new master", func() error {
		rc := dialRaw(t, nm.addr)
		defer rc.Close()
		if resp := rc.Invoke(t, request(10, sendHeader(topic, 2), []byte("after the failover"))); resp.Code != 0 {
			return fmt.Errorf("code %d %q", resp.Code, resp.Remark)
		}
		return nil
	})

	old.restart()
	wait.For(t, "the old master's table with the topic's 3 queues", func() error {
		r, w, ok := topicQueues(t, old.addr, topic)
		if !ok || r != 3 || w != 3 {
			return fmt.Errorf("read %d write %d (in the table: %v)", r, w, ok)
		}
		return nil
	})
}
