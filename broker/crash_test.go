package broker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/delay"
	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

const brokerCrashEnv = "APOGEE_BROKER_CRASH_DIR"

// crashOptions are the options of the broker the crash test kills and
// reopens.
func crashOptions(t testing.TB, dir string, sync bool) Options {
	return crashOptionsOn(testOptions(t, dir), sync)
}

// crashLog is the child broker's log, in its data directory: the child is
// killed, so nothing of its own (a test log in its temporary directory)
// would be printed or removed.
const crashLog = "child.log"

func crashOptionsOn(o Options, sync bool) Options {
	if sync {
		o.Core.Store.FlushMode = store.FlushSync
	}
	o.Core.DelayLevels = "200ms 400ms 600ms 800ms 1s 1200ms"
	o.Core.ProgressFlushInterval = 50 * time.Millisecond
	o.Core.TransactionTimeout = 300 * time.Millisecond
	o.Core.TransactionCheckInterval = 500 * time.Millisecond
	return o
}

// TestBrokerCrashChild runs a broker until it is killed (started by
// TestBrokerCrashSIGKILL).
func TestBrokerCrashChild(t *testing.T) {
	dir := os.Getenv(brokerCrashEnv)
	if dir == "" {
		t.Skip("run by TestBrokerCrashSIGKILL")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(2)
	}
	f, err := os.Create(filepath.Join(dir, crashLog))
	if err != nil {
		fmt.Fprintln(os.Stderr, "log:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := crashOptionsOn(loggedOptions(dir, log.With("logger", "broker"), log.With("logger", "remoting")), os.Getenv(brokerCrashEnv+"_SYNC") != "")
	o.Core.AdvertiseAddr = l.Addr().String()
	b, err := New(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "new:", err)
		os.Exit(2)
	}
	go b.Serve(l)
	fmt.Println("ready", l.Addr().String())
	select {}
}

// TestBrokerCrashSIGKILL kills a broker process holding delayed messages,
// timers and unresolved transactions, some due before the kill and some
// after, then reopens its data: every delayed message and timer is
// delivered at least once and never early, only those that the progress
// persisted before the kill does not count as done (delivered just before
// the kill) may be delivered twice, and every unresolved half message is
// checked back (committed ones are not).
func TestBrokerCrashSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker processes")
	}
	t.Run("async", func(t *testing.T) { testBrokerCrash(t, false) })
	t.Run("sync", func(t *testing.T) { testBrokerCrash(t, true) })
}

func testBrokerCrash(t *testing.T, sync bool) {
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			testlog.Print(t, filepath.Join(dir, crashLog))
		}
	})
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokerCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), brokerCrashEnv+"="+dir)
	if sync {
		cmd.Env = append(cmd.Env, brokerCrashEnv+"_SYNC=1")
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("child: %q %v\n%s", line, err, stderr.String())
	}
	h := &harness{t: t, addr: strings.TrimSpace(strings.TrimPrefix(line, "ready "))}
	cl := h.dial(nil)
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@7", "", nil))

	start := time.Now()
	due := map[string]time.Time{}
	for i := 0; i < 60; i++ {
		lv := 1 + i%6
		body := "delay-" + strconv.Itoa(i)
		sentAt := time.Now() // the broker's store time is later: its due time too
		mustSend(t, cl, sendRequest("CD", 0, []byte(body), props("DELAY", strconv.Itoa(lv))))
		due[body] = sentAt.Add(time.Duration(lv) * 200 * time.Millisecond)
	}
	for i := 0; i < 60; i++ {
		at := start.Add(time.Duration(100+25*i) * time.Millisecond)
		body := "timer-" + strconv.Itoa(i)
		mustSend(t, cl, sendRequest("CT", 0, []byte(body), props("TIMER_DELIVER_MS", strconv.FormatInt(at.UnixMilli(), 10))))
		due[body] = at
	}
	var committed []string
	pending := map[string]bool{}
	for i := 0; i < 6; i++ {
		uniq := fmt.Sprintf("CRASHTX%02d", i)
		r := mustSend(t, cl, halfSend("CH", 0, "tx-"+strconv.Itoa(i), uniq, "pg"))
		if i < 2 {
			if res := invoke(t, cl, endTx(t, "pg", r, protocol.TransactionCommitType, false)); res.Code != 0 {
				t.Fatalf("commit: %d", res.Code)
			}
			committed = append(committed, uniq)
		} else {
			pending[uniq] = true
		}
	}
	// Killed once the first delayed messages and timers were delivered,
	// with the others (due up to 1.6 s after the start) most likely
	// pending: a kill between deliveries is what the test is about.
	wait.For(t, "the child's first deliveries", func() error {
		for _, topic := range []string{"CD", "CT"} {
			if len(pullAll(t, cl, topic, 0)) == 0 {
				return fmt.Errorf("nothing delivered to %s yet", topic)
			}
		}
		return nil
	})
	cmd.Process.Kill()
	cmd.Wait()
	killed = true
	// What the child persisted of its progress is what the reopened broker
	// resumes from: a message it counts as done must not come again.
	delayDone, timerDone := crashProgress(t, dir)

	h2 := startHarness(t, crashOptions(t, dir, sync), nil)
	rec := newCheckRecorder()
	cl2 := h2.dial(rec)
	invoke(t, cl2, heartbeatRequest(t, "127.0.0.1@7", "", nil))
	deadline := time.After(wait.DefaultTimeout)
	for len(pending) > 0 {
		select {
		case c := <-rec.ch:
			for _, u := range committed {
				if c.hdr.MsgID == u {
					t.Errorf("committed transaction %s checked back after the crash", u)
				}
			}
			if pending[c.hdr.MsgID] {
				delete(pending, c.hdr.MsgID)
				invoke(t, cl2, endTxAt("pg", c.hdr.TranStateTableOffset, c.hdr.CommitLogOffset, c.hdr.MsgID, protocol.TransactionCommitType, true))
			}
		case <-deadline:
			t.Fatalf("half messages never checked back after the crash: %v", pending)
		}
	}

	var delivered []pulled
	seen := map[string]int{}
	wait.For(t, "every delayed message, timer and transaction delivered after the restart", func() error {
		delivered, seen = delivered[:0], map[string]int{}
		for _, topic := range []string{"CD", "CT", "CH"} {
			for _, v := range pullAll(t, cl2, topic, 0) {
				delivered = append(delivered, v)
				seen[string(v.Body())]++
			}
		}
		missing := 0
		for body := range due {
			if seen[body] == 0 {
				missing++
			}
		}
		for i := 0; i < 6; i++ {
			if seen["tx-"+strconv.Itoa(i)] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d missing", missing, len(due)+6)
		}
		return nil
	})
	for _, v := range delivered {
		body := string(v.Body())
		if d, ok := due[body]; ok && time.UnixMilli(v.StoreTimestamp()).Before(d.Add(-5*time.Millisecond)) {
			t.Errorf("%s delivered %v before its time", body, d.Sub(time.UnixMilli(v.StoreTimestamp())))
		}
	}
	// A message the persisted progress counts as done comes once; one it
	// does not (delivered after the last progress write before the kill)
	// may come twice.
	st := h2.b.Store()
	delayAt := map[string][2]int64{} // body -> level, offset in its schedule queue
	for q := int32(0); q < 6; q++ {
		for body, off := range queueBodies(t, st, delay.Topic, q) {
			delayAt[body] = [2]int64{int64(q) + 1, off}
		}
	}
	timerAt := queueBodies(t, st, timerwheel.Topic, 0)
	dups := 0
	for body := range due {
		var done bool
		if at, ok := delayAt[body]; ok {
			done = at[1] < delayDone[int32(at[0])]
		} else if q, ok := timerAt[body]; ok {
			done = q < timerDone.PendingOffset || q < timerDone.LoadedOffset && due[body].UnixMilli() < timerDone.FiredBefore
		} else {
			done = true // a timer already due when sent: delivered at once, never through the wheel
		}
		switch n := seen[body]; {
		case n > 1 && done:
			t.Errorf("%s delivered %d times, though the progress persisted before the kill counts it done", body, n)
		case n > 1:
			dups++
		}
	}
	for i := 0; i < 6; i++ {
		if n := seen["tx-"+strconv.Itoa(i)]; n != 1 {
			t.Errorf("transaction %d delivered %d times", i, n)
		}
	}
	t.Logf("%d delayed/timer messages, %d delivered twice around the kill", len(due), dups)
}

// crashProgress reads the delay levels' and the timer wheel's progress as
// the killed broker left them in dir (none yet: zero).
func crashProgress(t *testing.T, dir string) (map[int32]int64, timerwheel.Checkpoint) {
	t.Helper()
	var w protocol.DelayOffsetSerializeWrapper
	if data, err := os.ReadFile(filepath.Join(dir, core.ConfigDir, "delayOffset.json")); err == nil {
		if err := w.Decode(data); err != nil {
			t.Fatalf("delayOffset.json: %v\n%s", err, data)
		}
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ck timerwheel.Checkpoint
	if data, err := os.ReadFile(filepath.Join(dir, core.ConfigDir, timerwheel.StateFile)); err == nil {
		if err := json.Unmarshal(data, &ck); err != nil {
			t.Fatalf("%s: %v\n%s", timerwheel.StateFile, err, data)
		}
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return w.OffsetTable, ck
}

// queueBodies maps the body of each record in (topic, q) to its queue
// offset.
func queueBodies(t *testing.T, st *store.Store, topic string, q int32) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for off := int64(0); ; {
		ents, err := st.ReadEntries(topic, q, off, make([]store.QueueEntry, 0, 256))
		if err != nil {
			t.Fatalf("%s/%d at %d: %v", topic, q, off, err)
		}
		if len(ents) == 0 {
			return out
		}
		for _, e := range ents {
			v, err := st.ReadMessage(e.CommitLogOffset)
			if err != nil {
				t.Fatal(err)
			}
			m, err := message.Decode(v.Bytes(), true)
			if err != nil {
				t.Fatal(err)
			}
			out[string(m.Body())] = off
			v.Release()
			off++
		}
	}
}
