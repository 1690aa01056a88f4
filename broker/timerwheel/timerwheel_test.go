package timerwheel

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
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
	"github.com/apogeemq/apogee/store"
)

func TestTagPacking(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixMilli()
	for _, c := range []struct{ store, deliver int64 }{
		{now, now + 1},
		{now, now + 40*24*3600*1000},
		{now, now + 45*24*3600*1000 - 61000},
		{now + 59_000, now}, // stored just after it came due
		{now + 999, now + 1000},
		{1<<42 - 1 - 10*24*3600*1000, 1<<42 - 1},
	} {
		tag := packTag(c.deliver, c.store)
		d, s := unpackTag(tag)
		if d != c.deliver || s != c.store/1000*1000 {
			t.Errorf("pack(%d, %d) = %d -> (%d, %d)", c.deliver, c.store, tag, d, s)
		}
	}
	w, err := New(fakehost.New(), Config{RollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if due, roll := w.dueOf(packTag(now+1000, now)); due != now+1000 || roll {
		t.Errorf("short timer: due %d roll %v", due, roll)
	}
	if due, roll := w.dueOf(packTag(now+2*3600*1000, now)); due != now+1000+3600*1000 || !roll {
		t.Errorf("long timer: due %d roll %v", due, roll)
	}
}

func TestDeliverTime(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	nowMs := now.UnixMilli()
	const maxDelay = 40 * 24 * time.Hour
	beyond := "timer message illegal, the delay time should not be bigger than the max delay 3456000000ms"
	for _, c := range []struct {
		name    string
		props   []string
		deliver int64
		isTimer bool
		remark  string // "" when legal
	}{
		{"none", nil, 0, false, ""},
		{"deliver ms", []string{message.PropTimerDeliverMS, strconv.FormatInt(nowMs+400, 10)}, nowMs + 400, true, ""},
		{"deliver ms past", []string{message.PropTimerDeliverMS, strconv.FormatInt(nowMs-1, 10)}, 0, false, ""},
		{"deliver ms now", []string{message.PropTimerDeliverMS, strconv.FormatInt(nowMs, 10)}, 0, false, ""},
		{"deliver ms malformed", []string{message.PropTimerDeliverMS, "tomorrow"}, 0, false, "the TIMER_DELIVER_MS property is not a number"},
		{"deliver ms beyond", []string{message.PropTimerDeliverMS, strconv.FormatInt(nowMs+maxDelay.Milliseconds()+1, 10)}, 0, false, beyond},
		{"delay sec", []string{message.PropTimerDelaySec, "5"}, nowMs + 5000, true, ""},
		{"delay sec beyond", []string{message.PropTimerDelaySec, strconv.Itoa(41 * 24 * 3600)}, 0, false, beyond},
		{"delay sec malformed", []string{message.PropTimerDelaySec, "5s"}, 0, false, beyond},
		{"delay ms", []string{message.PropTimerDelayMS, "150"}, nowMs + 150, true, ""},
		{"delay ms negative", []string{message.PropTimerDelayMS, "-5"}, 0, false, ""},
		{"delay ms malformed", []string{message.PropTimerDelayMS, "-"}, 0, false, beyond},
		{"deliver ms first", []string{message.PropTimerDelaySec, "9", message.PropTimerDeliverMS, strconv.FormatInt(nowMs+7, 10)}, nowMs + 7, true, ""},
		{"delay sec before ms", []string{message.PropTimerDelayMS, "9", message.PropTimerDelaySec, "2"}, nowMs + 2000, true, ""},
	} {
		var props []byte
		for i := 0; i < len(c.props); i += 2 {
			props = message.AppendProperty(props, c.props[i], c.props[i+1])
		}
		calls := 0
		clock := func() time.Time { calls++; return now }
		var sp message.SendProps
		if err := sp.Parse(props); err != nil {
			t.Fatal(err)
		}
		deliver, isTimer, err := DeliverTime(&sp, clock, maxDelay)
		if c.remark != "" {
			if !errors.Is(err, ErrIllegal) || err.Error() != c.remark {
				t.Errorf("%s: err %v, want %q", c.name, err, c.remark)
			}
			continue
		}
		if err != nil || deliver != c.deliver || isTimer != c.isTimer {
			t.Errorf("%s: (%d, %v, %v), want (%d, %v)", c.name, deliver, isTimer, err, c.deliver, c.isTimer)
		}
		if c.props == nil && calls != 0 {
			t.Errorf("%s: the clock was read without a timer property", c.name)
		}
	}
	var sp message.SendProps
	if err := sp.Parse(message.AppendProperty(nil, message.PropTimerDelayMS, "150")); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { DeliverTime(&sp, time.Now, maxDelay) }); n != 0 {
		t.Errorf("DeliverTime allocates %v times for a legal timer", n)
	}
}

func TestAppendRoute(t *testing.T) {
	m := store.Message{Topic: "T", QueueID: 3}
	props := AppendRoute([]byte("TAGS\x01a\x02"), &m, 12345)
	if m.Topic != Topic || m.QueueID != 0 {
		t.Errorf("routed to %s/%d", m.Topic, m.QueueID)
	}
	if got := string(props); got != "TAGS\x01a\x02REAL_TOPIC\x01T\x02REAL_QID\x013\x02TIMER_OUT_MS\x0112345\x02" {
		t.Errorf("properties %q", got)
	}
}

func TestNewRefusesNoRollInterval(t *testing.T) {
	if _, err := New(fakehost.New(), Config{}); err == nil {
		t.Fatal("New accepted a zero roll interval")
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

// newWheel returns a wheel on h, wired to h's hooks as the broker wires it
// to the store's, with its log in the returned buffer.
func newWheel(t *testing.T, h *fakehost.Host, roll time.Duration) (*Wheel, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	w, err := New(h, Config{RollInterval: roll, CheckpointInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h.TagCode = func(v message.View) (int64, bool) {
		if string(v.Topic()) == Topic {
			return w.TagCode(v), true
		}
		return 0, false
	}
	h.OnArrival = func(topic string, _ int32) {
		if topic == Topic {
			w.Arrived()
		}
	}
	return w, logs
}

// sendTimer stores a message for topic/0 due at at, routed as the broker
// routes a TIMER_DELIVER_MS send.
func sendTimer(t *testing.T, h *fakehost.Host, topic string, at time.Time, body string) {
	t.Helper()
	props := message.AppendProperty(nil, message.PropTimerDeliverMS, strconv.FormatInt(at.UnixMilli(), 10))
	props = message.AppendProperty(props, message.PropTags, "tag")
	m := store.Message{Topic: topic, Body: []byte(body), BornTimestamp: time.Now().UnixMilli()}
	m.Properties = AppendRoute(props, &m, at.UnixMilli())
	if _, err := h.Put(m); err != nil {
		t.Fatal(err)
	}
}

// delivered returns the bodies of a topic's queue 0, in order.
func delivered(h *fakehost.Host, topic string) []string {
	var out []string
	for _, v := range h.Messages(topic, 0, 0) {
		out = append(out, string(v.Body()))
	}
	return out
}

func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// TestFiresAtTheirTime: timers fire exactly at their delivery time, in
// that order, with the timer properties removed and WAIT=false.
func TestFiresAtTheirTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, _ := newWheel(t, h, 24*time.Hour)
		start := time.Now()
		rng := rand.New(rand.NewPCG(1, 2))
		dues := map[string]time.Time{}
		for i := range 100 {
			at := start.Add(time.Duration(1+rng.IntN(10_000)) * time.Millisecond)
			body := "t" + strconv.Itoa(i)
			dues[body] = at
			sendTimer(t, h, "W", at, body)
		}
		w.Start()
		defer w.Stop()
		synctest.Wait()
		if st := w.Stats(); st.Pending != 100 || st.Fired != 0 {
			t.Fatalf("before any is due: %+v", st)
		}
		advance(5 * time.Second)
		for _, v := range h.Messages("W", 0, 0) {
			if dues[string(v.Body())].After(time.Now()) {
				t.Errorf("%s fired before its time", v.Body())
			}
		}
		advance(5 * time.Second)
		got := h.Messages("W", 0, 0)
		if len(got) != 100 {
			t.Fatalf("%d of 100 fired", len(got))
		}
		var last int64
		for _, v := range got {
			body := string(v.Body())
			if v.StoreTimestamp() != dues[body].UnixMilli() {
				t.Errorf("%s stored at %d, due %d", body, v.StoreTimestamp(), dues[body].UnixMilli())
			}
			if v.StoreTimestamp() < last {
				t.Errorf("%s fired out of order", body)
			}
			last = v.StoreTimestamp()
			if _, ok := v.Property(message.PropTimerDeliverMS); ok {
				t.Errorf("%s keeps TIMER_DELIVER_MS", body)
			}
			if wait, _ := v.Property(message.PropWait); string(wait) != "false" {
				t.Errorf("%s: WAIT %q", body, wait)
			}
			if out, _ := v.Property(PropTimerOutMS); string(out) != strconv.FormatInt(dues[body].UnixMilli(), 10) {
				t.Errorf("%s: TIMER_OUT_MS %q", body, out)
			}
			if tag, _ := v.Property(message.PropTags); string(tag) != "tag" {
				t.Errorf("%s: TAGS %q", body, tag)
			}
		}
		if st := w.Stats(); st.Pending != 0 || st.Fired != 100 || st.Rolls != 0 {
			t.Errorf("after: %+v", st)
		}
		if n := h.Pinned(); n != 0 {
			t.Errorf("%d records still pinned", n)
		}
	})
}

// TestRoll: a timer due beyond the roll interval is written again to the
// timer topic every interval (plus the second the store time is rounded
// to), then delivered once, at its time.
func TestRoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, _ := newWheel(t, h, time.Hour)
		due := time.Now().Add(3*time.Hour + 30*time.Minute)
		sendTimer(t, h, "L", due, "long")
		w.Start()
		defer w.Stop()
		advance(time.Hour + time.Second)
		if st := w.Stats(); st.Rolls != 1 || st.Pending != 1 {
			t.Fatalf("after an hour: %+v", st)
		}
		advance(due.Sub(time.Now()) - time.Millisecond)
		if got := delivered(h, "L"); len(got) != 0 {
			t.Fatalf("delivered early: %q", got)
		}
		advance(time.Millisecond)
		got := h.Messages("L", 0, 0)
		if len(got) != 1 || got[0].StoreTimestamp() != due.UnixMilli() {
			t.Fatalf("delivered %d", len(got))
		}
		// Rolls at 1h1s, 2h2s and 3h3s (each a second after the previous
		// record's store second plus the interval); the fourth record's roll
		// time, 4h4s, is past the delivery time.
		if rolls, _ := got[0].Property(PropRollTimes); string(rolls) != "3" {
			t.Errorf("TIMER_ROLL_TIMES %q, want 3", rolls)
		}
		if st := w.Stats(); st.Rolls != 3 || st.Fired != 1 || st.Pending != 0 {
			t.Errorf("after: %+v", st)
		}
		if n := len(h.Entries(Topic, 0)); n != 4 {
			t.Errorf("the timer topic holds %d records, want the original and 3 rolls", n)
		}
	})
}

// TestCheckpointAndRestart: a new wheel resumes from the persisted
// checkpoint and fires each pending timer once, at its time, and none of
// those fired before.
func TestCheckpointAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, _ := newWheel(t, h, 24*time.Hour)
		start := time.Now()
		for i := 1; i <= 10; i++ {
			sendTimer(t, h, "S", start.Add(time.Duration(i)*time.Second), "t"+strconv.Itoa(i))
		}
		w.Start()
		advance(5*time.Second + time.Millisecond)
		w.Stop()
		if err := w.Persist(false); err != nil {
			t.Fatal(err)
		}
		data, _ := h.State(StateFile)
		var ck Checkpoint
		if err := json.Unmarshal(data, &ck); err != nil {
			t.Fatalf("%s: %s (%v)", StateFile, data, err)
		}
		// The last pass fired t5 at 5 s: everything due up to then is done.
		if want := (Checkpoint{LoadedOffset: 10, PendingOffset: 0, FiredBefore: start.Add(5*time.Second).UnixMilli() + 1}); ck != want {
			t.Fatalf("checkpoint %+v, want %+v", ck, want)
		}
		if got := delivered(h, "S"); len(got) != 5 {
			t.Fatalf("%d fired before the stop", len(got))
		}

		w2, _ := newWheel(t, h, 24*time.Hour)
		if err := w2.Load(); err != nil {
			t.Fatal(err)
		}
		w2.Start()
		defer w2.Stop()
		synctest.Wait()
		if st := w2.Stats(); st.Pending != 5 {
			t.Fatalf("restored %d pending, want 5", st.Pending)
		}
		advance(5 * time.Second)
		got := h.Messages("S", 0, 0)
		if len(got) != 10 {
			t.Fatalf("%d fired in all, want 10", len(got))
		}
		for i, v := range got {
			if want := "t" + strconv.Itoa(i+1); string(v.Body()) != want || v.StoreTimestamp() != start.Add(time.Duration(i+1)*time.Second).UnixMilli() {
				t.Errorf("delivery %d: %s at %d", i, v.Body(), v.StoreTimestamp())
			}
		}
		synctest.Wait()
		if ck := w2.Stats().Checkpoint; ck.PendingOffset != 10 || ck.LoadedOffset != 10 {
			t.Errorf("checkpoint when all are done: %+v", ck)
		}
	})
}

// TestStartAfterLostTail: a checkpoint beyond the queue's end (an
// async-flush crash lost entries) starts at the end.
func TestStartAfterLostTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, _ := newWheel(t, h, 24*time.Hour)
		sendTimer(t, h, "S", time.Now().Add(time.Second), "done-before")
		h.SetState(StateFile, []byte(`{"loadedOffset":50,"pendingOffset":40,"firedBefore":1}`))
		if err := w.Load(); err != nil {
			t.Fatal(err)
		}
		w.Start()
		defer w.Stop()
		sendTimer(t, h, "S", time.Now().Add(time.Second), "new")
		advance(time.Second)
		if got := delivered(h, "S"); !slices.Equal(got, []string{"new"}) {
			t.Fatalf("delivered %q", got)
		}
	})
}

func TestLoadRefusesAnInconsistentCheckpoint(t *testing.T) {
	for _, data := range []string{`{"loadedOffset":1,"pendingOffset":5}`, `{"pendingOffset":-1}`, `{`} {
		h := fakehost.New()
		w, _ := newWheel(t, h, time.Hour)
		h.SetState(StateFile, []byte(data))
		if err := w.Load(); err == nil {
			t.Errorf("Load accepted %s", data)
		}
	}
}

// TestFailedPutRetried: a failed put keeps its timers pending; they fire a
// second later, once, and the checkpoint then covers them (PendingOffset
// moves past their chunk).
func TestFailedPutRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, logs := newWheel(t, h, 24*time.Hour)
		at := time.Now().Add(time.Second)
		sendTimer(t, h, "F", at, "a")
		sendTimer(t, h, "F", at, "b")
		h.FailPuts(1)
		w.Start()
		defer w.Stop()
		advance(time.Second)
		if got := delivered(h, "F"); len(got) != 0 {
			t.Fatalf("delivered despite the failed put: %q", got)
		}
		if st := w.Stats(); st.Pending != 2 || st.Fired != 0 {
			t.Fatalf("after the failed put: %+v", st)
		}
		if !strings.Contains(logs.String(), "could not be delivered") {
			t.Errorf("the failure was not logged: %s", logs)
		}
		advance(retryAfter)
		if got := delivered(h, "F"); len(got) != 2 {
			t.Fatalf("after the retry: %q", got)
		}
		if st := w.Stats(); st.Pending != 0 || st.Fired != 2 || st.Checkpoint.PendingOffset != 2 || st.Checkpoint.LoadedOffset != 2 {
			t.Errorf("after the retry: %+v", st)
		}
	})
}

// TestRetentionAndUnreadable: entries retention removed are skipped with a
// warning; an unreadable record or one without REAL_TOPIC is dropped with
// an error; blank entries are passed over.
func TestRetentionAndUnreadable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, logs := newWheel(t, h, 24*time.Hour)
		at := time.Now().Add(time.Second)
		sendTimer(t, h, "R", at, "expired")
		sendTimer(t, h, "R", at, "unreadable")
		h.AppendBlank(Topic, 0)
		if _, err := h.Put(store.Message{Topic: Topic, Body: []byte("no-real-topic"),
			Properties: reput.AppendPropInt(nil, PropTimerOutMS, at.UnixMilli())}); err != nil {
			t.Fatal(err)
		}
		sendTimer(t, h, "R", at, "good")
		h.Expire(Topic, 0, 1)
		h.Forget(h.Entries(Topic, 0)[1].CommitLogOffset)
		w.Start()
		defer w.Stop()
		advance(time.Second)
		if got := delivered(h, "R"); !slices.Equal(got, []string{"good"}) {
			t.Fatalf("delivered %q", got)
		}
		for _, want := range []string{"removed by retention", "unreadable", "without a valid REAL_TOPIC"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("no %q in the log: %s", want, logs)
			}
		}
		if st := w.Stats(); st.Pending != 0 || st.Fired != 1 {
			t.Errorf("after: %+v", st)
		}
	})
}

// TestManyTimers: more timers than one load step, in random order, fire
// in the order of their times, in batches within reput's bounds.
func TestManyTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, _ := newWheel(t, h, 24*time.Hour)
		start := time.Now()
		rng := rand.New(rand.NewPCG(3, 4))
		const n = 3*loadBatch + 17
		for i := range n {
			sendTimer(t, h, "M", start.Add(time.Duration(1+rng.IntN(60_000))*time.Millisecond), strconv.Itoa(i))
		}
		w.Start()
		defer w.Stop()
		synctest.Wait()
		if st := w.Stats(); st.Pending != n {
			t.Fatalf("loaded %d of %d", st.Pending, n)
		}
		advance(time.Minute)
		got := h.Messages("M", 0, 0)
		if len(got) != n {
			t.Fatalf("%d of %d fired", len(got), n)
		}
		seen := map[string]bool{}
		for i, v := range got {
			out, _, _ := reput.PropInt(v.Properties(), PropTimerOutMS)
			if v.StoreTimestamp() != out || (i > 0 && v.StoreTimestamp() < got[i-1].StoreTimestamp()) || seen[string(v.Body())] {
				t.Fatalf("delivery %d (%s): stored %d, due %d", i, v.Body(), v.StoreTimestamp(), out)
			}
			seen[string(v.Body())] = true
		}
		for _, c := range h.PutCalls() {
			if c > reput.MaxBatchLength {
				t.Fatalf("a batch of %d", c)
			}
		}
	})
}

// TestArrivalWakesAnIdleWheel: with nothing pending the wheel sleeps
// without a timer until the store reports an arrival.
func TestArrivalWakesAnIdleWheel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, _ := newWheel(t, h, 24*time.Hour)
		w.Start()
		defer w.Stop()
		advance(time.Hour)
		at := time.Now().Add(150 * time.Millisecond)
		sendTimer(t, h, "I", at, "x")
		advance(150 * time.Millisecond)
		if got := h.Messages("I", 0, 0); len(got) != 1 || got[0].StoreTimestamp() != at.UnixMilli() {
			t.Fatalf("delivered %d", len(got))
		}
	})
}

// TestPersist: Persist writes only a changed checkpoint (always with
// force), reports a failed write, and writes again after it.
func TestPersist(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		w, _ := newWheel(t, h, 24*time.Hour)
		sendTimer(t, h, "P", time.Now().Add(time.Second), "a")
		w.Start()
		defer w.Stop()
		advance(time.Second)
		h.FailWrites(1)
		if err := w.Persist(false); !errors.Is(err, fakehost.ErrInjected) || !strings.Contains(err.Error(), StateFile) {
			t.Fatalf("Persist with a failing write: %v", err)
		}
		if err := w.Persist(false); err != nil {
			t.Fatal(err)
		}
		data, writes := h.State(StateFile)
		var ck Checkpoint
		if err := json.Unmarshal(data, &ck); err != nil || ck.LoadedOffset != 1 || ck.PendingOffset != 1 {
			t.Fatalf("%s: %s (%v)", StateFile, data, err)
		}
		if err := w.Persist(false); err != nil {
			t.Fatal(err)
		}
		if _, n := h.State(StateFile); n != writes {
			t.Errorf("Persist without a change wrote the file")
		}
		if err := w.Persist(true); err != nil {
			t.Fatal(err)
		}
		if _, n := h.State(StateFile); n != writes+1 {
			t.Errorf("Persist(force) did not write")
		}
	})
}

// TestStop: Stop returns at once, may be repeated, and is harmless without
// Start; nothing fires after it.
func TestStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakehost.New()
		idle, _ := newWheel(t, h, time.Hour)
		idle.Stop()
		w, _ := newWheel(t, h, time.Hour)
		sendTimer(t, h, "X", time.Now().Add(time.Minute), "later")
		w.Start()
		advance(time.Second)
		stopped := time.Now()
		w.Stop()
		w.Stop()
		if d := time.Since(stopped); d != 0 {
			t.Errorf("Stop took %v of fake time", d)
		}
		advance(time.Hour)
		if got := delivered(h, "X"); len(got) != 0 {
			t.Fatalf("fired after Stop: %q", got)
		}
	})
}
