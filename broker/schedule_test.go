package broker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/delay"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// TestBadDelayLevels: New refuses delay levels that do not parse (the
// syntax itself is package delay's, tested there).
func TestBadDelayLevels(t *testing.T) {
	if _, err := New(Options{Core: core.Options{DataDir: t.TempDir(), AdvertiseAddr: "127.0.0.1:1", DelayLevels: "1s x"}}); err == nil {
		t.Fatal("New accepted bad delay levels")
	}
}

// TestDelayLevels sends messages with every kind of DELAY and checks the
// schedule topic's records and their redelivery.
func TestDelayLevels(t *testing.T) {
	h := featureHarness(t, nil)
	cl := h.dial(nil)
	// Levels 6, 2, 4 on queue 1, plus one beyond the last level (clamped to 18).
	var sends []*protocol.Command
	for _, lv := range []string{"6", "2", "4", "99"} {
		r := mustSend(t, cl, sendRequest("D", 1, []byte("level-"+lv), props("DELAY", lv, "TAGS", "tag"+lv, "KEYS", "key"+lv)))
		if ext(r, "queueId") != "1" {
			t.Fatalf("delayed send answered queueId %s, want the producer's 1", ext(r, "queueId"))
		}
		sends = append(sends, r)
	}
	// The schedule queues hold them, each due at its record's store time
	// plus its level's delay. (That nothing reaches the real topic before
	// then is checked on the deliveries: a check of the real topic "right
	// after the sends" assumed the sends took less than level 2's 50 ms.)
	due := map[string]int64{} // body -> due time, ms
	for lv, q := range map[int]int32{6: 5, 2: 1, 4: 3, 18: 17} {
		h.waitMax(delay.Topic, q, 1)
		ents, err := h.b.Store().ReadEntries(delay.Topic, q, 0, make([]store.QueueEntry, 0, 4))
		if err != nil || len(ents) != 1 {
			t.Fatalf("level %d: entries %v %v", lv, ents, err)
		}
		v, err := h.b.Store().ReadMessage(ents[0].CommitLogOffset)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := message.Decode(v.Bytes(), true)
		if ents[0].TagCode != m.StoreTimestamp()+levelDelay(lv).Milliseconds() {
			t.Errorf("level %d: tag code %d, want store time %d + %v", lv, ents[0].TagCode, m.StoreTimestamp(), levelDelay(lv))
		}
		if prop(m, message.PropRealTopic) != "D" || prop(m, message.PropRealQueueID) != "1" {
			t.Errorf("level %d: REAL_TOPIC %q REAL_QID %q", lv, prop(m, message.PropRealTopic), prop(m, message.PropRealQueueID))
		}
		due[string(m.Body())] = m.StoreTimestamp() + levelDelay(lv).Milliseconds()
		v.Release()
	}

	// Each once, never before its due time. Deliveries follow the due
	// times across levels only as far as each level's scanner keeps time,
	// which a loaded machine does not promise; and the due times follow
	// the levels only if the sends took less than 50 ms (a level-4 message
	// stored 60 ms after a level-6 one is due after it). So the order is
	// not checked.
	got := pullN(t, cl, "D", 1, 0, 4, arrive)
	if len(got) != 4 {
		t.Fatalf("%d of 4 delayed messages delivered", len(got))
	}
	seen := map[string]int{}
	for _, v := range got {
		body := string(v.Body())
		seen[body]++
		d, ok := due[body]
		if !ok {
			t.Fatalf("delivered %q, which no schedule queue held", body)
		}
		if prop(v.View, "DELAY") != "" || prop(v.View, "WAIT") != "false" || prop(v.View, "TAGS") != "tag"+body[len("level-"):] {
			t.Errorf("%s: properties %q", body, v.Properties())
		}
		if early := d - v.StoreTimestamp(); early > 1 {
			t.Errorf("%s delivered %d ms before its due time", body, early)
		}
	}
	for body := range due {
		if seen[body] != 1 {
			t.Errorf("%s delivered %d times", body, seen[body])
		}
	}
	// Tag codes are restored and keys indexed.
	if tagged := pullSub(t, cl, "tg", "D", 1, 0, 1, arrive, "tag4", "TAG"); len(tagged) != 1 || string(tagged[0].Body()) != "level-4" {
		t.Fatal("delivered message not found by its tag")
	}
	q := goRequest(protocol.ReqQueryMessage)
	(&protocol.QueryMessageRequest{Topic: "D", Key: "key6", MaxNum: 4, BeginTimestamp: 0, EndTimestamp: time.Now().Add(time.Hour).UnixMilli()}).Encode(&q.Ext)
	if r := invoke(t, cl, q); r.Code != 0 {
		t.Fatalf("query by key of a delivered message: %d %s", r.Code, r.Remark)
	}

	// Progress is persisted.
	wait.For(t, "delayOffset.json", func() error {
		data, err := os.ReadFile(filepath.Join(h.opts.Core.DataDir, "config", "delayOffset.json"))
		if err != nil {
			return err
		}
		var w protocol.DelayOffsetSerializeWrapper
		if err := w.Decode(data); err != nil || w.OffsetTable[2] != 1 || w.OffsetTable[6] != 1 || w.OffsetTable[18] != 1 {
			return fmt.Errorf("%s (%v)", data, err)
		}
		return nil
	})

	// GET_ALL_DELAY_OFFSET reports the same.
	if r := invoke(t, cl, goRequest(protocol.ReqGetAllDelayOffset)); r.Code != 0 || !strings.Contains(string(r.Body), `"6":1`) {
		t.Fatalf("GET_ALL_DELAY_OFFSET: %d %s", r.Code, r.Body)
	}
	// Malformed DELAY values are refused; 0 and negative mean no delay.
	if r := invoke(t, cl, sendRequest("D", 0, []byte("x"), props("DELAY", "soon"))); r.Code != protocol.RespMessageIllegal {
		t.Fatalf("DELAY=soon: %d %s", r.Code, r.Remark)
	}
	mustSend(t, cl, sendRequest("D", 0, []byte("now"), props("DELAY", "0")))
	if got := pullN(t, cl, "D", 0, 0, 1, arrive); len(got) != 1 {
		t.Fatal("DELAY=0 not delivered at once")
	}
	// Producers may not write the schedule topic.
	if r := invoke(t, cl, sendRequest(delay.Topic, 0, []byte("x"), "")); r.Code != protocol.RespNoPermission {
		t.Fatalf("send to %s: %d", delay.Topic, r.Code)
	}
}

// TestDelayedSurviveRestart stops the broker with delayed messages pending
// and checks each is delivered once after the restart.
func TestDelayedSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	mutate := func(o *Options) {
		o.Core.DelayLevels = "100ms 300ms 600ms"
		o.Core.ProgressFlushInterval = 20 * time.Millisecond
	}
	h := startHarness(t, testOptions(t, dir), mutate)
	cl := h.dial(nil)
	for i := 0; i < 30; i++ {
		mustSend(t, cl, sendRequest("R", 0, []byte("m"+strconv.Itoa(i)), props("DELAY", strconv.Itoa(1+i%3))))
	}
	// Stopped once the level-1 messages are delivered, the rest (300 and
	// 600 ms) most likely pending.
	wait.Equal(t, "level 1's progress", 10, func() int64 { return h.b.core.Admin().DelayOffsets()[1] })
	h.close()
	data, err := os.ReadFile(filepath.Join(dir, "config", "delayOffset.json"))
	if err != nil {
		t.Fatal(err)
	}
	var w protocol.DelayOffsetSerializeWrapper
	if err := w.Decode(data); err != nil || w.OffsetTable[1] != 10 {
		t.Fatalf("delayOffset.json after shutdown: %s (%v)", data, err)
	}
	h2 := startHarness(t, testOptions(t, dir), mutate)
	cl2 := h2.dial(nil)
	got := pullN(t, cl2, "R", 0, 0, 30, arrive)
	pullNone(t, cl2, "R", 0, 30, 300*time.Millisecond) // no duplicate after them
	seen := map[string]int{}
	for _, v := range got {
		seen[string(v.Body())]++
	}
	for i := 0; i < 30; i++ {
		if n := seen["m"+strconv.Itoa(i)]; n != 1 {
			t.Errorf("m%d delivered %d times", i, n)
		}
	}
	// The file is RocketMQ's shape.
	var raw map[string]map[string]int64
	if err := json.Unmarshal(data, &raw); err != nil || len(raw["offsetTable"]) != 3 {
		t.Fatalf("delayOffset.json %s", data)
	}
}
