package txn

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

func TestHalfProps(t *testing.T) {
	m := New(Config{Logger: discard}, nil)
	send := message.AppendProperty(nil, message.PropUniqKey, "U1")
	send = message.AppendProperty(send, message.PropTranMsg, "true")
	msg := store.Message{Topic: "T", QueueID: 3, SysFlag: message.TxPreparedType | message.FlagCompressed}
	props := m.HalfProps(append([]byte(nil), send...), parsed(t, send), []byte("pg"), &msg)
	v := message.ParseProperties(props)
	if msg.Topic != HalfTopic || msg.QueueID != 0 || message.TxType(msg.SysFlag) != message.TxNotType ||
		msg.SysFlag&message.FlagCompressed == 0 {
		t.Fatalf("half message: topic %s queue %d sysflag %#x", msg.Topic, msg.QueueID, msg.SysFlag)
	}
	if v[message.PropRealTopic] != "T" || v[message.PropRealQueueID] != "3" || v[message.PropTransactionID] != "U1" ||
		v[message.PropProducerGroup] != "pg" || v[message.PropUniqKey] != "U1" {
		t.Fatalf("half properties %v", v)
	}

	// A producer's own transaction id and PGROUP are kept, not repeated.
	send = message.AppendProperty(send[:0], message.PropUniqKey, "U2")
	send = message.AppendProperty(send, message.PropTransactionID, "TX2")
	send = message.AppendProperty(send, message.PropProducerGroup, "mine")
	msg = store.Message{Topic: "T"}
	props = m.HalfProps(append([]byte(nil), send...), parsed(t, send), []byte("pg"), &msg)
	if n := strings.Count(string(props), message.PropTransactionID); n != 1 {
		t.Errorf("%s appears %d times", message.PropTransactionID, n)
	}
	if v := message.ParseProperties(props); v[message.PropTransactionID] != "TX2" || v[message.PropProducerGroup] != "mine" {
		t.Errorf("producer's properties replaced: %v", v)
	}
	if got := m.Stats().HalfMessages; got != 2 {
		t.Errorf("HalfMessages = %d, want 2", got)
	}

	// The send path: no allocation once dst has room.
	dst := make([]byte, 0, 256)
	sp := parsed(t, send)
	allocs := testing.AllocsPerRun(100, func() {
		msg := store.Message{Topic: "T", QueueID: 1}
		dst = m.HalfProps(dst[:0], sp, []byte("pg"), &msg)
	})
	if allocs != 0 {
		t.Errorf("HalfProps allocates %.1f times", allocs)
	}
}

func TestEndCommitAndRollback(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		m := h.start(t, Config{})
		commit := h.sendHalf(t, m, "TX", 2, "commit-me", "pg", "U1", "TAGS", "tx")
		roll := h.sendHalf(t, m, "TX", 2, "roll-me-back", "pg", "U2")
		synctest.Wait()
		if s := m.Stats(); s.Pending != 2 || s.HalfMessages != 2 {
			t.Fatalf("after two half messages: %+v", s)
		}
		if h.st.MaxOffset("TX", 2) != 0 {
			t.Fatal("a half message is visible in its real topic")
		}

		// Validation, as RocketMQ's EndTransactionProcessor.
		plain, err := h.st.PutBatch([]store.Message{{Topic: "TX", Body: []byte("plain")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			req  EndRequest
			want error
		}{
			{"wrong group", EndRequest{"other", commit.res.QueueOffset, commit.res.CommitLogOffset, true}, ErrWrongGroup},
			{"wrong table offset", EndRequest{"pg", 7, commit.res.CommitLogOffset, true}, ErrWrongTableOffset},
			{"nothing there", EndRequest{"pg", 0, 1 << 40, true}, ErrHalfNotFound},
			{"not a half message", EndRequest{"pg", 0, plain[0].CommitLogOffset, true}, ErrHalfNotFound},
		} {
			if _, err := m.End(c.req); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}

		e1, err := end(m, "pg", commit, true)
		if err != nil || e1 <= commit.res.CommitLogOffset {
			t.Fatalf("commit: end %d, %v", e1, err)
		}
		e2, err := end(m, "pg", roll, false)
		if err != nil || e2 <= e1 {
			t.Fatalf("rollback: end %d, %v", e2, err)
		}
		// Ending again (the check path racing the producer) stores nothing.
		for _, again := range []struct {
			s      sent
			commit bool
		}{{commit, true}, {commit, false}, {roll, true}} {
			if e, err := end(m, "pg", again.s, again.commit); e != 0 || err != nil {
				t.Fatalf("second end of %s: %d, %v", again.s.uniq, e, err)
			}
		}
		synctest.Wait()

		got := h.records(t, "TX", 2)
		if len(got) != 1 {
			t.Fatalf("%d records in the real queue, want the committed one", len(got))
		}
		c := got[0]
		if string(c.Body()) != "commit-me" || message.TxType(c.SysFlag()) != message.TxCommitType ||
			c.PreparedTransactionOffset() != commit.res.CommitLogOffset || c.QueueID() != 2 ||
			prop(c, message.PropUniqKey) != "U1" || prop(c, "TAGS") != "tx" || prop(c, message.PropProducerGroup) != "pg" ||
			prop(c, message.PropTranMsg) != "" || prop(c, message.PropRealTopic) != "" || prop(c, message.PropRealQueueID) != "" {
			t.Fatalf("committed record: body %q sysflag %d prepared %d props %q", c.Body(), c.SysFlag(),
				c.PreparedTransactionOffset(), c.Properties())
		}
		ops := h.records(t, OpHalfTopic, 0)
		if len(ops) != 2 || string(ops[0].Body()) != "0" || string(ops[1].Body()) != "1" || prop(ops[0], "TAGS") != "d" {
			t.Fatalf("op records: %d", len(ops))
		}
		if s := m.Stats(); s.Pending != 0 || s.Commits != 1 || s.Rollbacks != 1 {
			t.Fatalf("stats %+v", s)
		}
		// Resolved: never checked back.
		time.Sleep(10 * DefaultCheckInterval)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 0 {
			t.Fatalf("%d checks of ended transactions", len(c))
		}
	})
}

// A half message without REAL_TOPIC cannot be committed; the claim is
// undone, so a rollback still ends it.
func TestEndWithoutRealTopic(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		m := h.start(t, Config{})
		props := message.AppendProperty(nil, message.PropProducerGroup, "pg")
		res, err := h.st.PutBatch([]store.Message{{Topic: HalfTopic, Body: []byte("x"), Properties: props}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := sent{res: res[0]}
		if _, err := end(m, "pg", s, true); !errors.Is(err, ErrNoRealTopic) {
			t.Fatalf("commit: %v", err)
		}
		if e, err := end(m, "pg", s, false); err != nil || e == 0 {
			t.Fatalf("rollback after the failed commit: %d, %v", e, err)
		}
	})
}

// A failed put leaves the transaction pending: it is checked back, and a
// later End stores it.
func TestEndPutFailure(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		m := h.start(t, Config{})
		s := h.sendHalf(t, m, "TF", 0, "body", "pg", "UF")
		synctest.Wait()
		h.putErrs = []error{store.ErrDiskFull}
		if _, err := end(m, "pg", s, true); !errors.Is(err, store.ErrDiskFull) {
			t.Fatalf("commit with a full disk: %v", err)
		}
		if p := m.Stats().Pending; p != 1 {
			t.Fatalf("pending %d after a failed commit", p)
		}
		time.Sleep(DefaultTimeout + time.Millisecond)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 1 {
			t.Fatalf("%d checks of the transaction whose commit failed", len(c))
		}
		if e, err := end(m, "pg", s, true); err != nil || e == 0 {
			t.Fatalf("commit once the disk has room: %d, %v", e, err)
		}
		synctest.Wait()
		if got := h.records(t, "TF", 0); len(got) != 1 {
			t.Fatalf("%d committed records", len(got))
		}
	})
}

// A committed message goes through the host's delay routing.
func TestEndRoutesDelay(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.routeDelay = func(msg *store.Message, props []byte, start int) []byte {
			if _, ok := message.LookupProperty(props[start:], message.PropDelay); !ok {
				return props
			}
			props = message.AppendProperty(props, message.PropRealTopic, msg.Topic)
			msg.Topic, msg.QueueID = "DELAYED", 2
			return props
		}
		m := h.start(t, Config{})
		s := h.sendHalf(t, m, "TD", 0, "later", "pg", "UD", message.PropDelay, "3")
		plain := h.sendHalf(t, m, "TD", 0, "now", "pg", "UN")
		for _, x := range []sent{s, plain} {
			if _, err := end(m, "pg", x, true); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		d := h.records(t, "DELAYED", 2)
		if len(d) != 1 || string(d[0].Body()) != "later" || prop(d[0], message.PropRealTopic) != "TD" ||
			message.TxType(d[0].SysFlag()) != message.TxCommitType {
			t.Fatalf("delayed commit: %d records", len(d))
		}
		if got := h.records(t, "TD", 0); len(got) != 1 || string(got[0].Body()) != "now" {
			t.Fatalf("undelayed commit: %d records", len(got))
		}
	})
}

// TestCheckBackSchedule: a half message is checked first Timeout after it
// was stored, then every CheckInterval, until it is ended.
func TestCheckBackSchedule(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		h.setProducer("another", true)
		m := h.start(t, Config{Timeout: 6 * time.Second, CheckInterval: 30 * time.Second})
		s := h.sendHalf(t, m, "TC", 1, "checked", "pg", "UC")

		time.Sleep(6*time.Second - time.Millisecond)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 0 {
			t.Fatalf("checked before the timeout: %+v", c[0].c)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		c := h.takeChecks()
		if len(c) != 1 {
			t.Fatalf("%d checks at the timeout, want 1", len(c))
		}
		want := Check{TranStateTableOffset: 0, CommitLogOffset: s.res.CommitLogOffset, MsgID: "UC", TransactionID: "UC",
			OffsetMsgID: string(h.st.AppendMsgID(nil, &s.res)), Topic: "TC"}
		got := c[0].c
		got.Record = nil
		if !reflect.DeepEqual(got, want) || c[0].group != "pg" {
			t.Fatalf("check %+v to %s, want %+v to pg", got, c[0].group, want)
		}
		r := c[0].rec
		if string(r.Topic()) != "TC" || r.QueueID() != 1 || string(r.Body()) != "checked" || r.PhysicalOffset() != s.res.CommitLogOffset ||
			prop(r, message.PropProducerGroup) != "pg" || prop(r, message.PropUniqKey) != "UC" ||
			prop(r, message.PropTransactionCheckTimes) != "1" {
			t.Fatalf("check record: topic %s queue %d props %q", r.Topic(), r.QueueID(), r.Properties())
		}

		time.Sleep(30*time.Second - 2*time.Millisecond)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 0 {
			t.Fatal("checked again before the check interval")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		c = h.takeChecks()
		if len(c) != 1 || prop(c[0].rec, message.PropTransactionCheckTimes) != "2" {
			t.Fatalf("second check: %d", len(c))
		}
		// The producer answers from the check path.
		if _, err := end(m, "pg", s, true); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 0 {
			t.Fatalf("checked after the commit: %+v", c[0].c)
		}
		if s := m.Stats(); s.Checks != 2 || s.Pending != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// CHECK_IMMUNITY_TIME_IN_SECONDS replaces the timeout of one message.
func TestCheckImmunityTime(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		m := h.start(t, Config{Timeout: time.Second})
		h.sendHalf(t, m, "TI", 0, "x", "pg", "UI", message.PropCheckImmunityTimeInSeconds, "60")
		time.Sleep(60*time.Second - time.Millisecond)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 0 {
			t.Fatal("checked before its immunity time")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 1 {
			t.Fatalf("%d checks after its immunity time", len(c))
		}
	})
}

// TestCheckMaxGivesUp: a half message nobody answers is checked CheckMax
// times, then copied to CheckMaxTopic and resolved.
func TestCheckMaxGivesUp(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		m := h.start(t, Config{Timeout: time.Second, CheckInterval: 2 * time.Second, CheckMax: 3})
		s := h.sendHalf(t, m, "TM", 4, "forgotten", "pg", "UM")
		time.Sleep(time.Second + 3*2*time.Second + time.Millisecond)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 3 || prop(c[2].rec, message.PropTransactionCheckTimes) != "3" {
			t.Fatalf("%d checks before the give-up, want 3", len(c))
		}
		h.mu.Lock()
		q, ok := h.topics[CheckMaxTopic]
		h.mu.Unlock()
		if !ok || q != 1 {
			t.Fatalf("%s not ensured with one queue: %v", CheckMaxTopic, h.topics)
		}
		got := h.records(t, CheckMaxTopic, 0)
		if len(got) != 1 || string(got[0].Body()) != "forgotten" || prop(got[0], message.PropRealTopic) != "TM" ||
			prop(got[0], message.PropRealQueueID) != "4" || prop(got[0], message.PropTransactionCheckTimes) != "3" {
			t.Fatalf("%s: %d records", CheckMaxTopic, len(got))
		}
		if ops := h.records(t, OpHalfTopic, 0); len(ops) != 1 || string(ops[0].Body()) != "0" {
			t.Fatalf("op records: %d", len(ops))
		}
		if st := m.Stats(); st.CheckMaxed != 1 || st.Pending != 0 || st.Checks != 3 {
			t.Fatalf("stats %+v", st)
		}
		// Resolved: a late commit stores nothing, no check follows.
		if e, err := end(m, "pg", s, true); e != 0 || err != nil {
			t.Fatalf("late commit: %d, %v", e, err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 0 {
			t.Fatal("checked after the give-up")
		}
		if n := h.st.MaxOffset("TM", 4); n != 0 {
			t.Fatalf("late commit stored %d messages", n)
		}
	})
}

// A give-up whose append fails is tried again a second later.
func TestGiveUpRetries(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		m := h.start(t, Config{Timeout: time.Second, CheckInterval: time.Minute, CheckMax: 1})
		h.sendHalf(t, m, "TG", 0, "x", "pg", "UG")
		h.mu.Lock()
		h.putErrs = []error{store.ErrDiskFull}
		h.mu.Unlock()
		time.Sleep(time.Second + time.Minute + time.Millisecond) // checked once, then the give-up fails
		synctest.Wait()
		if st := m.Stats(); st.CheckMaxed != 0 || st.Pending != 1 {
			t.Fatalf("after a failed give-up: %+v", st)
		}
		time.Sleep(retryAfter)
		synctest.Wait()
		if st := m.Stats(); st.CheckMaxed != 1 || st.Pending != 0 {
			t.Fatalf("after the retry: %+v", st)
		}
		if got := h.records(t, CheckMaxTopic, 0); len(got) != 1 {
			t.Fatalf("%d records in %s", len(got), CheckMaxTopic)
		}
	})
}

// TestCheckWaitsForProducer: a check that finds no live producer is not
// counted (so the message is never given up for it) and is sent as soon as
// a producer of the group joins.
func TestCheckWaitsForProducer(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		m := h.start(t, Config{Timeout: time.Second, CheckInterval: time.Second, CheckMax: 2})
		h.sendHalf(t, m, "TW", 0, "orphan", "pg", "UW")
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := m.Stats(); st.Waiting != 1 || st.Checks != 0 || st.Pending != 1 || st.CheckMaxed != 0 {
			t.Fatalf("without a producer: %+v", st)
		}
		h.setProducer("other", true)
		m.ProducerJoined("other")
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 0 {
			t.Fatal("another group's producer was asked")
		}
		h.setProducer("pg", true)
		m.ProducerJoined("pg")
		synctest.Wait()
		c := h.takeChecks()
		if len(c) != 1 || c[0].c.MsgID != "UW" || prop(c[0].rec, message.PropTransactionCheckTimes) != "1" {
			t.Fatalf("checks when the producer joined: %d", len(c))
		}
		if st := m.Stats(); st.Waiting != 0 || st.Checks != 1 {
			t.Fatalf("after the check: %+v", st)
		}
	})
}

// A producer whose heartbeat lands while a check of its group is failing
// for want of one (after the failed send, before the checker's bookkeeping)
// is asked at once, not a check interval later. It was asked an interval
// later: the join found no orphan yet, or its reset of the next check time
// was overwritten (broker TestTransactionCheckWaitsForProducer saw it under
// load).
func TestProducerJoinsDuringACheck(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		m := h.start(t, Config{Timeout: time.Second, CheckInterval: time.Hour, CheckMax: 2})
		var joins int
		h.noProducer = func(group string) {
			if joins++; joins == 1 {
				h.setProducer(group, true)
				m.ProducerJoined(group)
			}
		}
		h.sendHalf(t, m, "TW", 0, "orphan", "pg", "UJ")
		time.Sleep(time.Minute)
		synctest.Wait()
		c := h.takeChecks()
		if joins != 1 || len(c) != 1 || c[0].c.MsgID != "UJ" || prop(c[0].rec, message.PropTransactionCheckTimes) != "1" {
			t.Fatalf("%d failed sends, then %d checks in a minute (check interval an hour)", joins, len(c))
		}
		if st := m.Stats(); st.Waiting != 0 || st.Checks != 1 {
			t.Fatalf("after the check: %+v", st)
		}
	})
}

// A check the connection failed to send counts all the same (as RocketMQ).
func TestCheckSendFailureCounts(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		h.sendErr = errors.New("connection closed")
		m := h.start(t, Config{Timeout: time.Second, CheckInterval: time.Second})
		h.sendHalf(t, m, "TS", 0, "x", "pg", "US")
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		c := h.takeChecks()
		if len(c) != 2 || prop(c[1].rec, message.PropTransactionCheckTimes) != "2" {
			t.Fatalf("%d checks", len(c))
		}
	})
}

// TestRestart: the checkpoint keeps the check counts of pending half
// messages, and half messages ended before the restart are not checked.
func TestRestart(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		cfg := Config{Timeout: time.Second, CheckInterval: 10 * time.Second}
		m := h.start(t, cfg)
		done := h.sendHalf(t, m, "TR", 0, "done", "pg", "UD")
		h.sendHalf(t, m, "TR", 0, "survivor", "pg", "UR")
		if _, err := end(m, "pg", done, true); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 1 || c[0].c.MsgID != "UR" {
			t.Fatalf("%d checks before the restart", len(c))
		}
		m.Stop()
		if err := m.Persist(false); err != nil {
			t.Fatal(err)
		}
		var ck checkpoint
		if err := json.Unmarshal(h.files[CheckpointFileName], &ck); err != nil {
			t.Fatal(err)
		}
		if ck.HalfOffset != 1 || ck.OpOffset != 1 || ck.Checks["1"] != 1 || len(ck.Checks) != 1 {
			t.Fatalf("checkpoint %+v", ck)
		}

		m2 := h.start(t, cfg)
		if st := m2.Stats(); st.Pending != 1 {
			t.Fatalf("pending after the restart: %+v", st)
		}
		// Checked again no sooner than min(interval, timeout) after the start.
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		if c := h.takeChecks(); len(c) != 0 {
			t.Fatal("checked at once after the restart")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		c := h.takeChecks()
		if len(c) != 1 || c[0].c.MsgID != "UR" || prop(c[0].rec, message.PropTransactionCheckTimes) != "2" {
			t.Fatalf("checks after the restart: %d", len(c))
		}
		// Ending the one that ended before the restart stores nothing.
		if e, err := end(m2, "pg", done, false); e != 0 || err != nil {
			t.Fatalf("second end after the restart: %d, %v", e, err)
		}
	})
}

// Without a checkpoint the queues are read from their start: op records
// resolve their half messages again.
func TestRestartWithoutCheckpoint(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		m := h.start(t, Config{Timeout: time.Second})
		a := h.sendHalf(t, m, "TN", 0, "a", "pg", "UA")
		h.sendHalf(t, m, "TN", 0, "b", "pg", "UB")
		if _, err := end(m, "pg", a, false); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		m.Stop() // crash: nothing persisted
		m2 := h.start(t, Config{Timeout: time.Second})
		if st := m2.Stats(); st.Pending != 1 {
			t.Fatalf("pending after the restart: %+v", st)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		for _, c := range h.takeChecks() {
			if c.c.MsgID != "UB" {
				t.Fatalf("checked %s, rolled back before the crash", c.c.MsgID)
			}
		}
	})
}

// A checkpoint below what retention kept moves the loaders up to the
// queue's minimum.
func TestLoadAfterRetention(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		m := h.start(t, Config{Timeout: time.Second})
		h.sendHalf(t, m, "TL", 0, "gone", "pg", "U0")
		h.sendHalf(t, m, "TL", 0, "kept", "pg", "U1")
		synctest.Wait()
		m.Stop()
		h.mu.Lock()
		h.minOffset[HalfTopic] = 1
		h.mu.Unlock()
		m2 := h.start(t, Config{Timeout: time.Second})
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := m2.Stats(); st.Pending != 1 {
			t.Fatalf("pending %+v", st)
		}
		for _, c := range h.takeChecks() {
			if c.c.MsgID != "U1" {
				t.Fatalf("checked %s, below the queue's minimum", c.c.MsgID)
			}
		}
	})
}

// A failed read of the queues is retried a second later.
func TestLoadFailureRetried(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		m := h.start(t, Config{})
		synctest.Wait() // the checker's first reads are done
		h.mu.Lock()
		h.readErrs = 1
		h.mu.Unlock()
		h.sendHalf(t, m, "TE", 0, "x", "pg", "UE")
		synctest.Wait()
		if st := m.Stats(); st.Pending != 0 {
			t.Fatalf("loaded despite the failed read: %+v", st)
		}
		time.Sleep(retryAfter)
		synctest.Wait()
		if st := m.Stats(); st.Pending != 1 {
			t.Fatalf("not loaded after the retry: %+v", st)
		}
	})
}

func TestPersist(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		m := h.start(t, Config{})
		if err := m.Persist(false); err != nil || h.writes != 0 {
			t.Fatalf("nothing changed: %d writes, %v", h.writes, err)
		}
		if err := m.Persist(true); err != nil || h.writes != 1 {
			t.Fatalf("forced: %d writes, %v", h.writes, err)
		}
		s := h.sendHalf(t, m, "TP", 0, "x", "pg", "UP")
		synctest.Wait()
		if _, err := end(m, "pg", s, true); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the op record is read back (a change too)
		h.writeErr = errors.New("disk on fire")
		if err := m.Persist(false); err == nil || !errors.Is(err, h.writeErr) {
			t.Fatalf("failed write: %v", err)
		}
		h.writeErr = nil
		if err := m.Persist(false); err != nil || h.writes != 2 {
			t.Fatalf("after the failed write: %d writes, %v", h.writes, err)
		}
		if err := m.Persist(false); err != nil || h.writes != 2 {
			t.Fatalf("nothing changed since: %d writes, %v", h.writes, err)
		}
	})
}

// A damaged checkpoint is the host's to report; Load passes its error on.
func TestLoadBadCheckpoint(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.files[CheckpointFileName] = []byte("{not json")
		m := New(Config{Logger: discard}, h)
		if err := m.Load(); err == nil {
			t.Fatal("a damaged checkpoint loaded")
		}
		m.Stop() // never started: returns at once
	})
}

// The checkpoint's floor stays below a half message whose op record has not
// been read back yet (it may still be lost), and passes it once it has.
func TestCheckpointFloor(t *testing.T) {
	run(t, func(t *testing.T, h *fakeHost) {
		h.setProducer("pg", true)
		m := h.start(t, Config{})
		h.sendHalf(t, m, "TK", 0, "a", "pg", "UA")
		h.sendHalf(t, m, "TK", 0, "b", "pg", "UB")
		synctest.Wait()
		hf, ok := m.claim(0)
		if !ok || hf == nil {
			t.Fatal("claim of a pending half message refused")
		}
		if ck, _ := m.snapshot(); ck.HalfOffset != 0 {
			t.Fatalf("floor %d passes a claimed half message whose op record was not read", ck.HalfOffset)
		}
		m.unclaim(0, hf)
		if e, err := m.End(EndRequest{ProducerGroup: "pg", TranStateTableOffset: 0,
			CommitLogOffset: h.records(t, HalfTopic, 0)[0].PhysicalOffset(), Commit: false}); err != nil || e == 0 {
			t.Fatalf("rollback: %d, %v", e, err)
		}
		synctest.Wait()
		if ck, _ := m.snapshot(); ck.HalfOffset != 1 || ck.OpOffset != 1 {
			t.Fatalf("checkpoint %+v once the op record was read", ck)
		}
	})
}

// The give-up counts once its append is durable: a flush timeout counts
// (the records are stored); a failed wait does not, and the half message is
// pending again until its op record, stored all the same, is read back
// (then it is not moved a second time).
func TestGiveUpWaitsDurable(t *testing.T) {
	for _, c := range []struct {
		err   error
		maxed int64
	}{{store.ErrFlushTimeout, 1}, {store.ErrLogFailed, 0}} {
		t.Run(c.err.Error(), func(t *testing.T) {
			run(t, func(t *testing.T, h *fakeHost) {
				h.setProducer("pg", true)
				h.waitErr = c.err
				m := h.start(t, Config{Timeout: time.Second, CheckInterval: time.Minute, CheckMax: 1})
				h.sendHalf(t, m, "TW", 0, "x", "pg", "UW")
				time.Sleep(time.Second + time.Minute + 2*retryAfter)
				synctest.Wait()
				if st := m.Stats(); st.CheckMaxed != c.maxed || st.Pending != 0 {
					t.Fatalf("give-up with a durability wait answering %v: %+v", c.err, st)
				}
				if got := h.records(t, CheckMaxTopic, 0); len(got) != 1 {
					t.Fatalf("%d records in %s", len(got), CheckMaxTopic)
				}
			})
		})
	}
}

// TestLoadHalvesDoNotAllocate: the checker's loading of half messages
// allocates nothing per message (pending entries come in chunks, the
// producer group is interned), so a stream of transactions costs no
// garbage beyond the chunks.
func TestLoadHalvesDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h := newFakeHost(t, t.TempDir())
	defer h.close(t)
	h.setProducer("pg", true)
	m := New(Config{Timeout: time.Hour, CheckInterval: time.Hour, Logger: discard}, h)
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		h.sendHalf(t, m, "TR", 0, "body", "pg", fmt.Sprintf("U%05d", i))
	}
	waitDispatched(t, h, n)
	if err := m.loadHalves(); err != nil { // the first: the scratch and the group
		t.Fatal(err)
	}
	for i := range n {
		h.sendHalf(t, m, "TR", 0, "body", "pg", fmt.Sprintf("V%05d", i))
	}
	waitDispatched(t, h, 2*n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := m.loadHalves(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if st := m.Stats(); st.Pending != 2*n {
		t.Fatalf("pending %d, want %d", st.Pending, 2*n)
	}
	// n/halfChunk chunks and the pending map's growth.
	if per := float64(after.Mallocs-before.Mallocs) / n; per > 0.1 {
		t.Fatalf("%.3f allocations per half message loaded", per)
	}
}

// waitDispatched waits until the half queue holds n entries.
func waitDispatched(t *testing.T, h *fakeHost, n int64) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%d half messages dispatched", n), func() error {
		if got := h.MaxOffset(HalfTopic, 0); got < n {
			return fmt.Errorf("the half queue holds %d", got)
		}
		return nil
	})
}
