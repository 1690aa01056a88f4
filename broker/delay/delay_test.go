package delay

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/broker/internal/fakehost"
	"github.com/apogeemq/apogee/broker/internal/reput"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

func TestParseLevels(t *testing.T) {
	const rocketmq = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
	got, err := ParseLevels(rocketmq)
	if err != nil || len(got) != 18 || got[0] != time.Second || got[4] != time.Minute || got[17] != 2*time.Hour {
		t.Fatalf("RocketMQ's levels: %v %v", got, err)
	}
	if got, err := ParseLevels(" 250ms  3s 1d "); err != nil || len(got) != 3 || got[0] != 250*time.Millisecond || got[2] != 24*time.Hour {
		t.Fatalf("levels %v %v", got, err)
	}
	for _, bad := range []string{"", "  ", "1x", "s", "-1s", "0s", "1.5s", "1000000d", strings.Repeat("1s ", MaxLevels+1)} {
		if _, err := ParseLevels(bad); err == nil {
			t.Errorf("%.20q accepted", bad)
		}
	}
}

func TestNewRefusesBadLevels(t *testing.T) {
	for _, levels := range [][]time.Duration{nil, {time.Second, 0}, {-time.Second}, make([]time.Duration, MaxLevels+1)} {
		if _, err := New(fakehost.New(), Config{Levels: levels}); err == nil {
			t.Errorf("New accepted %d levels %.3v", len(levels), levels)
		}
	}
}

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newScheduler returns a scheduler on h, wired to h's hooks as the broker
// wires it to the store's, with its log in the returned buffer.
func newScheduler(t *testing.T, h *fakehost.Host, levels ...time.Duration) (*Scheduler, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	s, err := New(h, Config{Levels: levels, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h.TagCode = func(v message.View) (int64, bool) {
		if string(v.Topic()) == Topic {
			return s.TagCode(v), true
		}
		return 0, false
	}
	h.OnArrival = func(topic string, queueID int32) {
		if topic == Topic {
			s.Arrived(queueID)
		}
	}
	return s, logs
}

// sendDelayed stores a message for topic/queueID with DELAY=level, routed
// as the broker routes it: DELAY kept, REAL_TOPIC and REAL_QID added, the
// schedule topic's queue level-1.
func sendDelayed(t *testing.T, h *fakehost.Host, s *Scheduler, topic string, queueID int32, level int64, body string) {
	t.Helper()
	props := message.AppendProperty(nil, message.PropDelay, strconv.FormatInt(level, 10))
	if len(body) < 64 {
		props = message.AppendProperty(props, message.PropTags, "tag-"+body)
	}
	props = message.AppendProperty(props, message.PropRealTopic, topic)
	props = reput.AppendPropInt(props, message.PropRealQueueID, int64(queueID))
	if _, err := h.Put(store.Message{Topic: Topic, QueueID: s.ClampLevel(level) - 1, Body: []byte(body),
		Properties: props, BornTimestamp: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
}

// bodies returns the bodies of a queue's messages, in order.
func bodies(h *fakehost.Host, topic string, queueID int32) []string {
	var out []string
	for _, v := range h.Messages(topic, queueID, 0) {
		out = append(out, string(v.Body()))
	}
	return out
}

// advance sleeps d in the bubble and waits until every goroutine in it is
// blocked again.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// TestDeliveryAtTheLevelsTime: each message reaches its real topic exactly
// its level's delay after it was stored, in level order, with DELAY
// removed, WAIT=false and its other properties kept.
func TestDeliveryAtTheLevelsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, _ := newScheduler(t, h, time.Second, 5*time.Second, 10*time.Second)
		start := time.Now()
		sendDelayed(t, h, s, "T", 1, 2, "a")
		sendDelayed(t, h, s, "T", 1, 1, "b")
		sendDelayed(t, h, s, "T", 0, 99, "c") // beyond the last level: clamped to 3
		sendDelayed(t, h, s, "T", 1, 1, "d")
		s.Start()
		defer s.Stop()
		synctest.Wait()
		advance(time.Second - time.Millisecond)
		if got := bodies(h, "T", 1); len(got) != 0 {
			t.Fatalf("delivered before their time: %q", got)
		}
		advance(time.Millisecond)
		if got := bodies(h, "T", 1); !slices.Equal(got, []string{"b", "d"}) {
			t.Fatalf("at 1 s: %q, want b and d", got)
		}
		advance(4 * time.Second)
		if got := bodies(h, "T", 1); !slices.Equal(got, []string{"b", "d", "a"}) {
			t.Fatalf("at 5 s: %q", got)
		}
		if got := bodies(h, "T", 0); len(got) != 0 {
			t.Fatalf("level 3 delivered at 5 s: %q", got)
		}
		advance(5 * time.Second)
		if got := bodies(h, "T", 0); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("at 10 s: %q", got)
		}
		wantDelay := map[string]time.Duration{"a": 5 * time.Second, "b": time.Second, "c": 10 * time.Second, "d": time.Second}
		for _, q := range []int32{0, 1} {
			for _, v := range h.Messages("T", q, 0) {
				body := string(v.Body())
				if got := time.UnixMilli(v.StoreTimestamp()).Sub(start); got != wantDelay[body] {
					t.Errorf("%s stored %v after the send, want %v", body, got, wantDelay[body])
				}
				if _, ok := v.Property(message.PropDelay); ok {
					t.Errorf("%s keeps DELAY", body)
				}
				if w, _ := v.Property(message.PropWait); string(w) != "false" {
					t.Errorf("%s: WAIT %q", body, w)
				}
				if tag, _ := v.Property(message.PropTags); string(tag) != "tag-"+body {
					t.Errorf("%s: TAGS %q", body, tag)
				}
				if v.QueueID() != q || string(v.Topic()) != "T" {
					t.Errorf("%s stored in %s/%d", body, v.Topic(), v.QueueID())
				}
			}
		}
		if got := s.Offsets(); !slices.Equal(got, []int64{2, 1, 1}) {
			t.Errorf("offsets %v, want [2 1 1]", got)
		}
		if st := s.Stats(); st.Delivered != 4 {
			t.Errorf("Delivered %d, want 4", st.Delivered)
		}
		if n := h.Pinned(); n != 0 {
			t.Errorf("%d records still pinned", n)
		}
	})
}

func TestTagCode(t *testing.T) {
	h := fakehost.New()
	s, _ := newScheduler(t, h, time.Second, 5*time.Second, 10*time.Second)
	const stored = 1_000_000
	for _, c := range []struct {
		queue int32
		delay string // "" for none
		want  int64
	}{
		{0, "1", stored + 1000},
		{2, "2", stored + 5000}, // DELAY wins over the queue
		{0, "99", stored + 10000},
		{1, "", stored + 5000},   // no DELAY: the queue's level
		{2, "x", stored + 10000}, // not a number: the queue's level
		{0, "-3", stored + 1000},
	} {
		var props []byte
		if c.delay != "" {
			props = message.AppendProperty(nil, message.PropDelay, c.delay)
		}
		r, err := h.PutAt(store.Message{Topic: Topic, QueueID: c.queue, Properties: props}, stored)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Entries(Topic, c.queue)[r.QueueOffset].TagCode; got != c.want {
			t.Errorf("queue %d DELAY %q: tag code %d, want %d", c.queue, c.delay, got, c.want)
		}
	}
	rec, _ := message.AppendRecord(nil, &message.Record{Topic: Topic, StoreTimestamp: stored, Properties: []byte("DELAY\x012\x02")})
	v, _ := message.Decode(rec, false)
	if n := testing.AllocsPerRun(100, func() { s.TagCode(v) }); n != 0 {
		t.Errorf("TagCode allocates %v times", n)
	}
}

// TestArrivalWakesAnIdleScanner: a scanner with an empty queue sleeps
// without a timer until the store reports an arrival.
func TestArrivalWakesAnIdleScanner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, _ := newScheduler(t, h, time.Second)
		s.Start()
		defer s.Stop()
		advance(time.Hour)
		sent := time.Now()
		sendDelayed(t, h, s, "T", 0, 1, "late")
		advance(time.Second)
		got := h.Messages("T", 0, 0)
		if len(got) != 1 || time.UnixMilli(got[0].StoreTimestamp()).Sub(sent) != time.Second {
			t.Fatalf("after an idle hour: %d delivered", len(got))
		}
	})
}

// TestProgressPersistedAndRestored: Persist writes RocketMQ's
// delayOffset.json only when the offsets changed (always with force); a
// new scheduler loads it and delivers only what was not delivered.
func TestProgressPersistedAndRestored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, _ := newScheduler(t, h, time.Second, 5*time.Second)
		for i := range 3 {
			sendDelayed(t, h, s, "T", 0, 1, "one-"+strconv.Itoa(i))
		}
		sendDelayed(t, h, s, "T", 0, 2, "five-0")
		sendDelayed(t, h, s, "T", 0, 2, "five-1")
		s.Start()
		advance(time.Second)
		if err := s.Persist(false); err != nil {
			t.Fatal(err)
		}
		data, writes := h.State(StateFile)
		var w protocol.DelayOffsetSerializeWrapper
		if err := w.Decode(data); err != nil || w.OffsetTable[1] != 3 || w.OffsetTable[2] != 0 || len(w.OffsetTable) != 2 {
			t.Fatalf("%s: %s (%v)", StateFile, data, err)
		}
		if err := s.Persist(false); err != nil {
			t.Fatal(err)
		}
		if _, n := h.State(StateFile); n != writes {
			t.Errorf("Persist without a change wrote the file")
		}
		if err := s.Persist(true); err != nil {
			t.Fatal(err)
		}
		if _, n := h.State(StateFile); n != writes+1 {
			t.Errorf("Persist(force) did not write the file")
		}
		s.Stop()

		s2, _ := newScheduler(t, h, time.Second, 5*time.Second)
		if err := s2.Load(); err != nil {
			t.Fatal(err)
		}
		if got := s2.Offsets(); !slices.Equal(got, []int64{3, 0}) {
			t.Fatalf("loaded offsets %v", got)
		}
		s2.Start()
		defer s2.Stop()
		advance(4 * time.Second)
		got := bodies(h, "T", 0)
		if !slices.Equal(got, []string{"one-0", "one-1", "one-2", "five-0", "five-1"}) {
			t.Fatalf("after the restart: %q", got)
		}
	})
}

// TestStartClampsToTheQueueEnd: progress beyond a queue's end (an
// async-flush crash lost entries) restarts at the end, and a level the file
// names beyond the configured ones is ignored.
func TestStartClampsToTheQueueEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, _ := newScheduler(t, h, time.Second)
		sendDelayed(t, h, s, "T", 0, 1, "kept")
		h.SetState(StateFile, []byte(`{"offsetTable":{1:100,7:5}}`)) // Java's bare keys
		if err := s.Load(); err != nil {
			t.Fatal(err)
		}
		s.Start()
		defer s.Stop()
		if got := s.Offsets(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("offsets after Start %v, want [1]", got)
		}
		sendDelayed(t, h, s, "T", 0, 1, "new")
		advance(time.Second)
		if got := bodies(h, "T", 0); !slices.Equal(got, []string{"new"}) {
			t.Fatalf("delivered %q, want the new message only", got)
		}
	})
}

func TestLoadRefusesAnUnparsableFile(t *testing.T) {
	h := fakehost.New()
	s, _ := newScheduler(t, h, time.Second)
	h.SetState(StateFile, []byte(`{"offsetTable":`))
	if err := s.Load(); err == nil {
		t.Fatal("Load accepted a truncated file")
	}
}

// TestRetentionRemovedEntries: entries retention removed before their
// delivery are skipped with a warning.
func TestRetentionRemovedEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, logs := newScheduler(t, h, time.Second)
		for _, b := range []string{"gone-0", "gone-1", "kept"} {
			sendDelayed(t, h, s, "T", 0, 1, b)
		}
		h.Expire(Topic, 0, 2)
		s.Start()
		defer s.Stop()
		advance(time.Second)
		if got := bodies(h, "T", 0); !slices.Equal(got, []string{"kept"}) {
			t.Fatalf("delivered %q", got)
		}
		if got := s.Offsets(); !slices.Equal(got, []int64{3}) {
			t.Errorf("offsets %v", got)
		}
		if !strings.Contains(logs.String(), "removed by retention") {
			t.Errorf("no warning: %s", logs)
		}
	})
}

// TestFailedPutRetried: a failed put is retried a second later; nothing is
// lost or delivered twice, and the offset moves only after the put.
func TestFailedPutRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, logs := newScheduler(t, h, time.Second)
		sendDelayed(t, h, s, "T", 0, 1, "a")
		sendDelayed(t, h, s, "T", 0, 1, "b")
		h.FailPuts(1)
		s.Start()
		defer s.Stop()
		advance(time.Second)
		if got := bodies(h, "T", 0); len(got) != 0 || s.Offsets()[0] != 0 {
			t.Fatalf("after a failed put: delivered %q, offset %d", got, s.Offsets()[0])
		}
		if n := h.Pinned(); n != 0 {
			t.Errorf("%d records pinned after the failed put", n)
		}
		advance(retryAfter)
		if got := bodies(h, "T", 0); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("after the retry: %q", got)
		}
		if s.Offsets()[0] != 2 || s.Stats().Delivered != 2 {
			t.Errorf("offset %d, delivered %d", s.Offsets()[0], s.Stats().Delivered)
		}
		if !strings.Contains(logs.String(), "could not be delivered") {
			t.Errorf("the failure was not logged: %s", logs)
		}
	})
}

// TestFailedReadRetried: a failed read of the queue is logged and retried
// a second later.
func TestFailedReadRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, logs := newScheduler(t, h, time.Second)
		sendDelayed(t, h, s, "T", 0, 1, "a")
		h.FailReads(1)
		s.Start()
		defer s.Stop()
		synctest.Wait()
		if !strings.Contains(logs.String(), "cannot read its queue") {
			t.Fatalf("the failed read was not logged: %s", logs)
		}
		advance(time.Second)
		if got := bodies(h, "T", 0); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("delivered %q", got)
		}
	})
}

// TestSkippedEntries: blank entries, unreadable records and records
// without a valid REAL_TOPIC / REAL_QID are passed over.
func TestSkippedEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, logs := newScheduler(t, h, time.Second)
		h.AppendBlank(Topic, 0)
		if _, err := h.Put(store.Message{Topic: Topic, QueueID: 0, Body: []byte("no-real-topic"),
			Properties: []byte("DELAY\x011\x02REAL_QID\x010\x02")}); err != nil {
			t.Fatal(err)
		}
		sendDelayed(t, h, s, "T", 0, 1, "lost")
		h.Forget(h.Entries(Topic, 0)[2].CommitLogOffset)
		sendDelayed(t, h, s, "T", 0, 1, "good")
		s.Start()
		defer s.Stop()
		advance(time.Second)
		if got := bodies(h, "T", 0); !slices.Equal(got, []string{"good"}) {
			t.Fatalf("delivered %q", got)
		}
		if got := s.Offsets(); got[0] != 4 {
			t.Errorf("offset %d, want 4", got[0])
		}
		for _, want := range []string{"without a valid REAL_TOPIC", "unreadable"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("no %q in the log: %s", want, logs)
			}
		}
	})
}

// TestClockWentBack: an entry due further away than its level's delay (the
// clock went back since it was stored) is delivered at once rather than
// late.
func TestClockWentBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, _ := newScheduler(t, h, time.Second)
		props := []byte("DELAY\x011\x02REAL_TOPIC\x01T\x02REAL_QID\x010\x02")
		if _, err := h.PutAt(store.Message{Topic: Topic, Body: []byte("future"), Properties: props},
			time.Now().Add(time.Hour).UnixMilli()); err != nil {
			t.Fatal(err)
		}
		s.Start()
		defer s.Stop()
		synctest.Wait()
		if got := bodies(h, "T", 0); !slices.Equal(got, []string{"future"}) {
			t.Fatalf("delivered %q, want the message at once", got)
		}
	})
}

// TestBatchBounds: a re-put holds at most reput.MaxBatchLength records and
// reput.MaxBatchBytes bytes (at least one record).
func TestBatchBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, _ := newScheduler(t, h, time.Second, 2*time.Second)
		for i := range 70 {
			sendDelayed(t, h, s, "Small", 0, 1, strconv.Itoa(i))
		}
		s.Start()
		defer s.Stop()
		advance(time.Second)
		if got := h.PutCalls(); !slices.Equal(got, []int{32, 32, 6}) {
			t.Fatalf("batches %v, want [32 32 6]", got)
		}
		big := strings.Repeat("x", reput.MaxBatchBytes/2)
		for range 3 {
			sendDelayed(t, h, s, "Big", 0, 2, big)
		}
		advance(2 * time.Second)
		if got := h.PutCalls()[3:]; !slices.Equal(got, []int{1, 1, 1}) {
			t.Fatalf("batches of half-limit records %v, want [1 1 1]", got)
		}
		if got := len(bodies(h, "Small", 0)) + len(bodies(h, "Big", 0)); got != 73 {
			t.Errorf("%d delivered, want 73", got)
		}
	})
}

// TestStopWhileWaiting: Stop returns at once while scanners sleep towards a
// due time or wait for arrivals, and nothing is delivered after it.
func TestStopWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, _ := newScheduler(t, h, time.Second, 10*time.Second)
		sendDelayed(t, h, s, "T", 0, 2, "later")
		s.Start()
		advance(time.Second)
		stopped := time.Now()
		s.Stop()
		if d := time.Since(stopped); d != 0 {
			t.Errorf("Stop took %v of fake time", d)
		}
		s.Stop() // a second Stop is harmless
		advance(time.Minute)
		if got := bodies(h, "T", 0); len(got) != 0 {
			t.Fatalf("delivered after Stop: %q", got)
		}
	})
}

func TestPersistFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		s, _ := newScheduler(t, h, time.Second)
		sendDelayed(t, h, s, "T", 0, 1, "a")
		s.Start()
		defer s.Stop()
		advance(time.Second)
		h.FailWrites(1)
		if err := s.Persist(false); !errors.Is(err, fakehost.ErrInjected) || !strings.Contains(err.Error(), StateFile) {
			t.Fatalf("Persist with a failing write: %v", err)
		}
		if err := s.Persist(false); err != nil {
			t.Fatal(err)
		}
		if data, _ := h.State(StateFile); !strings.Contains(string(data), `"1":1`) {
			t.Fatalf("the write after a failure did not happen: %s", data)
		}
	})
}
