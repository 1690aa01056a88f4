package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// committed returns the group's committed offset per queue as the broker
// answers QUERY_CONSUMER_OFFSET (14); -1 for a queue with none (code 22).
func committed(t testing.TB, b *Broker, topic, group string, queues int) []int64 {
	t.Helper()
	rc := dialRaw(t, b.Addr)
	defer rc.Close()
	out := make([]int64, queues)
	for q := range out {
		resp := rc.Invoke(t, request(14, map[string]string{"consumerGroup": group, "topic": topic, "queueId": fmt.Sprint(q)}, nil))
		switch resp.Code {
		case 0:
			if _, err := fmt.Sscan(resp.ExtFields["offset"], &out[q]); err != nil {
				t.Fatalf("QUERY_CONSUMER_OFFSET %s/%d: offset %q", topic, q, resp.ExtFields["offset"])
			}
		case 22:
			out[q] = -1
		default:
			t.Fatalf("QUERY_CONSUMER_OFFSET %s/%d: code %d %q (the client accepts only 0 and 22)", topic, q, resp.Code, resp.Remark)
		}
	}
	return out
}

// waitCommitted waits until the group's committed offsets add up to want
// and returns them. The client commits on Shutdown with one-way
// UPDATE_CONSUMER_OFFSET requests on its own connection, so they may be
// processed a moment after a query on another connection.
func waitCommitted(t testing.TB, b *Broker, topic, group string, queues int, want int64) []int64 {
	t.Helper()
	var offs []int64
	wait.For(t, fmt.Sprintf("group %s's committed offsets on %s to add up to %d", group, topic, want), func() error {
		if offs = committed(t, b, topic, group, queues); sum(offs) != want {
			return fmt.Errorf("committed %v", offs)
		}
		return nil
	})
	return offs
}

func sum(offs []int64) (n int64) {
	for _, o := range offs {
		if o > 0 {
			n += o
		}
	}
	return n
}

// consumeExactly starts a push consumer in group, waits for every wanted
// body, then for a moment more, and fails on any forbidden body or any
// body delivered twice. It shuts the consumer down before returning.
func consumeExactly(t *testing.T, b *Broker, group, topic string, want, forbid []string) {
	t.Helper()
	rec := newRecorder()
	stop := startPush(t, b, group, topic, all, rec)
	wait.Until(t, fmt.Sprintf("%d messages in group %s", len(want), group), func() bool {
		return rec.distinct() >= len(want)
	})
	// A span for anything extra to show up (an absence is checked over a
	// span), which also lets the client record the offsets of what it
	// consumed before Shutdown commits them (the client's state is not
	// observable).
	time.Sleep(time.Second)
	stop()
	if m := missing(rec, want); m != "" {
		t.Fatalf("group %s did not receive: %s", group, m)
	}
	got := rec.snapshot()
	for _, f := range forbid {
		if got[f] > 0 {
			t.Fatalf("group %s received %q again: it did not resume from its committed offsets", group, f)
		}
	}
	for body, n := range got {
		if n > 1 {
			t.Errorf("group %s received %q %d times", group, body, n)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("group %s received %d distinct messages, want %d", group, len(got), len(want))
	}
}

func TestResumeAfterConsumerRestart(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic, group := uniq("TResume"), uniq("GResume")
	createTopic(t, b, topic, 4)
	first := bodies("first", 60)
	sendAll(t, p, topic, "", first)
	consumeExactly(t, b, group, topic, first, nil)
	waitCommitted(t, b, topic, group, 4, int64(len(first)))
	second := bodies("second", 40)
	sendAll(t, p, topic, "", second)
	consumeExactly(t, b, group, topic, second, first)
}

func TestResumeAfterBrokerStop(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic, group := uniq("TStop"), uniq("GStop")
	createTopic(t, b, topic, 4)
	first := bodies("first", 60)
	sendAll(t, p, topic, "", first)
	consumeExactly(t, b, group, topic, first, nil)
	before := waitCommitted(t, b, topic, group, 4, int64(len(first)))

	// SIGTERM: the broker persists offsets on the way out.
	b.Stop()
	b.Restart()
	if after := committed(t, b, topic, group, 4); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("committed offsets %v before SIGTERM, %v after restart", before, after)
	}
	// The same producer reconnects to the restarted broker.
	second := bodies("second", 40)
	sendAll(t, p, topic, "", second)
	consumeExactly(t, b, group, topic, second, first)
	// Nothing was lost: a new group reads all 100 from the start.
	consumeExactly(t, b, uniq("GStopAll"), topic, append(append([]string{}, first...), second...), nil)
}

func TestResumeAfterBrokerKill(t *testing.T) {
	b := startBroker(t, "--flush", "sync")
	if !strings.Contains(b.Line, ", flush sync") {
		t.Fatalf("start line %q does not report sync flush", b.Line)
	}
	p := newProducer(t, b)
	topic, group := uniq("TKill"), uniq("GKill")
	createTopic(t, b, topic, 4)
	first := bodies("first", 60)
	sendAll(t, p, topic, "", first)
	consumeExactly(t, b, group, topic, first, nil)
	before := waitCommitted(t, b, topic, group, 4, int64(len(first)))
	// Committed offsets reach the disk on the broker's offset flush (every
	// 5 s, as RocketMQ's): wait for the group to be in the file before the
	// kill, since offsets committed after the last flush are lost in a
	// crash by design.
	offsetFile := filepath.Join(b.DataDir(), "config", "consumerOffset.json")
	wait.Until(t, "the group's offsets in "+offsetFile, func() bool {
		data, err := os.ReadFile(offsetFile)
		return err == nil && strings.Contains(string(data), group)
	})
	// Acknowledged under sync flush just before the kill: must survive it.
	unconsumed := bodies("unconsumed", 30)
	sendAll(t, p, topic, "", unconsumed)

	b.Kill()
	b.Restart()
	if after := committed(t, b, topic, group, 4); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("committed offsets %v before SIGKILL, %v after restart", before, after)
	}
	second := bodies("second", 20)
	sendAll(t, p, topic, "", second)
	consumeExactly(t, b, group, topic, append(append([]string{}, unconsumed...), second...), first)
	everything := append(append(append([]string{}, first...), unconsumed...), second...)
	consumeExactly(t, b, uniq("GKillAll"), topic, everything, nil)
}
