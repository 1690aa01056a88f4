package broker

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

func TestWriteFileAtomicKeepsPreviousVersion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	bak := path + bakSuffix
	if err := writeFileAtomic(path, []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bak); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a first write made a .bak: %v", err)
	}
	for v := 2; v <= 3; v++ {
		if err := writeFileAtomic(path, []byte(`{"v":`+string(rune('0'+v))+`}`)); err != nil {
			t.Fatal(err)
		}
		if got, want := readFile(t, path), `{"v":`+string(rune('0'+v))+`}`; got != want {
			t.Fatalf("file after write %d: %s", v, got)
		}
		if got, want := readFile(t, bak), `{"v":`+string(rune('0'+v-1))+`}`; got != want {
			t.Fatalf(".bak after write %d: %s", v, got)
		}
	}
	// The .bak is a file of its own: replacing the file leaves it alone.
	if err := writeFileAtomic(path, []byte(`{"v":4}`)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, bak); got != `{"v":3}` {
		t.Fatalf(".bak: %s", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "state.json" && e.Name() != "state.json.bak" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	// (Without hard links the previous version is copied: internal/durable's
	// TestWriteFileBackupWithoutHardLinks.)
}

type stateV struct {
	V int `json:"v"`
}

func parseStateV(b []byte) (stateV, error) {
	var s stateV
	if err := json.Unmarshal(b, &s); err != nil {
		return s, err
	}
	if s.V <= 0 {
		return s, errors.New("v must be positive") // contents that parse but cannot be used
	}
	return s, nil
}

func TestLoadStateFileFallsBack(t *testing.T) {
	const (
		good    = `{"v":2}`
		older   = `{"v":1}`
		damaged = `{"v":2,"topicConfigTa`
	)
	for _, tc := range []struct {
		name        string
		cur, bak    *string // nil: absent
		want        int     // 0: not found
		fellBack    bool
		errHas      []string
		damagedCopy bool
		warn        string
	}{
		{name: "current", cur: ptr(good), bak: ptr(older), want: 2},
		{name: "current without bak", cur: ptr(good), want: 2},
		{name: "neither", want: 0},
		{name: "damaged", cur: ptr(damaged), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "empty", cur: ptr(""), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "unusable", cur: ptr(`{"v":-1}`), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "missing", bak: ptr(older), want: 1, fellBack: true, warn: "state file missing"},
		{name: "both damaged", cur: ptr(damaged), bak: ptr("garbage"), errHas: []string{"state.json does not parse", "state.json.bak"}},
		{name: "damaged without bak", cur: ptr(damaged), errHas: []string{"state.json does not parse", "no previous version", "state.json.bak"}},
		{name: "missing and bak damaged", bak: ptr("garbage"), errHas: []string{"state.json is missing", "state.json.bak"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			if tc.cur != nil {
				if err := os.WriteFile(path, []byte(*tc.cur), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.bak != nil {
				if err := os.WriteFile(path+bakSuffix, []byte(*tc.bak), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			logs := &logCounter{}
			v, found, fellBack, err := loadStateFile(path, slog.New(slog.NewTextHandler(logs, nil)), parseStateV)
			if len(tc.errHas) > 0 {
				if err == nil {
					t.Fatalf("loaded %+v", v)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				if _, serr := os.Stat(path + damagedSuffix); serr == nil {
					t.Error("a file was moved aside although the load failed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if found != (tc.want != 0) || v.V != tc.want || fellBack != tc.fellBack {
				t.Fatalf("got %+v found=%v fellBack=%v", v, found, fellBack)
			}
			wantLines := 0
			if tc.warn != "" {
				wantLines = 1
			}
			if len(logs.lines) != wantLines || wantLines == 1 && (logs.count("level=WARN") != 1 || logs.count(tc.warn) != 1) {
				t.Fatalf("log: %q", logs.lines)
			}
			_, serr := os.Stat(path + damagedSuffix)
			if tc.damagedCopy != (serr == nil) {
				t.Fatalf("damaged copy: %v", serr)
			}
			if tc.damagedCopy {
				if got := readFile(t, path+damagedSuffix); got != *tc.cur {
					t.Fatalf("damaged copy holds %q", got)
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatal("the damaged file is still in place")
				}
				// The next write does not make the damaged file the .bak.
				if err := writeFileAtomic(path, []byte(`{"v":3}`)); err != nil {
					t.Fatal(err)
				}
				if got := readFile(t, path+bakSuffix); got != *tc.bak {
					t.Fatalf(".bak after the next write: %q", got)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }

// fakeState is a state with a change count, persisted by counting writes.
type fakeState struct {
	mu        sync.Mutex
	changes   int
	persisted int
	writes    atomic.Int32
	fail      atomic.Bool
	block     chan struct{} // when set, a write waits for it
}

func (s *fakeState) change() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes++
	return s.changes
}

func (s *fakeState) persist() error {
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	c := s.changes
	s.mu.Unlock()
	if s.fail.Load() {
		return errors.New("injected")
	}
	s.writes.Add(1)
	s.mu.Lock()
	s.persisted = max(s.persisted, c)
	s.mu.Unlock()
	return nil
}

func (s *fakeState) covered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.persisted
}

func TestStateWriterCoalesces(t *testing.T) {
	s := &fakeState{}
	var errs atomic.Int32
	w := newStateWriter(s.persist, func(error) { errs.Add(1) })
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); w.run(stop) }()

	// Many changes in a burst: a handful of writes, the last covering all.
	const n = 2000
	for i := 0; i < n; i++ {
		s.change()
		w.request()
	}
	waitFor(t, "the burst to be written", func() bool { return s.covered() == n })
	if got := s.writes.Load(); got > 10 {
		t.Fatalf("%d writes for a burst of %d changes", got, n)
	}
	// sync returns only after a write that covers what was changed before it.
	c := s.change()
	if err := w.sync(); err != nil {
		t.Fatal(err)
	}
	if s.covered() < c {
		t.Fatalf("sync returned before change %d was written (covered %d)", c, s.covered())
	}

	// A failing write is reported, retried, and reported to sync.
	s.fail.Store(true)
	s.change()
	if err := w.sync(); err == nil {
		t.Fatal("sync: no error from a failing write")
	}
	waitFor(t, "a retry", func() bool { return errs.Load() >= 2 })
	s.fail.Store(false)
	c = s.change()
	waitFor(t, "recovery after failures", func() bool { return s.covered() >= c })

	close(stop)
	<-done
	// After run: finish writes, then sync writes by itself.
	c = s.change()
	if err := w.finish(s.persist); err != nil || s.covered() < c {
		t.Fatalf("finish: %v, covered %d of %d", err, s.covered(), c)
	}
	c = s.change()
	if err := w.sync(); err != nil || s.covered() < c {
		t.Fatalf("sync after finish: %v", err)
	}
}

// A request waits out the gap after a write; a sync does not.
func TestStateWriterSyncSkipsTheGap(t *testing.T) {
	s := &fakeState{}
	w := newStateWriter(s.persist, func(error) {})
	w.minGap = time.Hour
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); w.run(stop) }()
	defer func() { close(stop); <-done }()
	s.change()
	w.request() // the first write has no gap before it
	waitFor(t, "the first write", func() bool { return s.writes.Load() == 1 })
	c := s.change()
	w.request() // waits an hour
	for i := 0; i < 3; i++ {
		if err := w.sync(); err != nil {
			t.Fatal(err)
		}
	}
	if s.covered() < c || s.writes.Load() < 2 {
		t.Fatalf("sync did not write through the gap: %d writes, covered %d of %d", s.writes.Load(), s.covered(), c)
	}
}

// A sync that arrives while no writer runs any more is answered by finish.
func TestStateWriterFinishAnswersWaiters(t *testing.T) {
	s := &fakeState{}
	w := newStateWriter(s.persist, func(error) {})
	stop := make(chan struct{})
	close(stop)
	w.run(stop) // returns at once
	got := make(chan error, 1)
	c := s.change()
	go func() { got <- w.sync() }()
	waitFor(t, "the waiter", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.next != nil
	})
	if err := w.finish(s.persist); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil || s.covered() < c {
			t.Fatalf("sync: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sync not answered by finish")
	}
}

// Auto-created topics and groups are written in the background, many per
// write; Shutdown writes the rest; an admin request answers once written.
func TestTopicAndGroupCreationCoalesceWrites(t *testing.T) {
	var topicWrites, groupWrites atomic.Int32
	dir := t.TempDir()
	h := startHarness(t, testOptions(t, dir), func(o *Options) {
		o.WriteConfigFile = func(path string, data []byte) error {
			switch filepath.Base(path) {
			case topicsFileName:
				topicWrites.Add(1)
			case subscriptionGroupsName:
				groupWrites.Add(1)
			}
			return writeFileAtomic(path, data)
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
	if !strings.Contains(readFile(t, h.b.topics.path), `"AdminMade"`) {
		t.Fatal("admin-created topic not in topics.json when answered")
	}

	// Created just before a clean stop: written by Shutdown.
	if r := invoke(t, cl, sendRequest("LastMinute", 0, []byte("x"), "")); r.Code != 0 {
		t.Fatalf("send: %d", r.Code)
	}
	h.close()
	var w protocol.TopicConfigSerializeWrapper
	if err := w.Decode([]byte(readFile(t, h.b.topics.path))); err != nil {
		t.Fatal(err)
	}
	if w.TopicConfigTable["LastMinute"] == nil || w.TopicConfigTable["AutoA"] == nil || len(w.TopicConfigTable) < n {
		t.Fatalf("topics.json after Shutdown has %d topics", len(w.TopicConfigTable))
	}
	var gw protocol.SubscriptionGroupWrapper
	if err := gw.Decode([]byte(readFile(t, filepath.Join(dir, configDirName, subscriptionGroupsName)))); err != nil {
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
	h.b.offsets.commit([]byte("Kept1"), []byte("g"), 0, 1)
	if err := h.b.topics.persist(false); err != nil {
		t.Fatal(err)
	}
	if err := h.b.offsets.persist(false); err != nil {
		t.Fatal(err)
	}
	// The last writes (at Shutdown) hold offset 5; the ones before, offset 1.
	h.b.offsets.commit([]byte("Kept1"), []byte("g"), 0, 5)
	h.close()

	cfg := filepath.Join(dir, configDirName)
	for _, name := range []string{topicsFileName, consumerOffsetFileName} {
		if !strings.Contains(readFile(t, filepath.Join(cfg, name+bakSuffix)), "Kept1") {
			t.Fatalf("%s.bak lacks the last-but-one write", name)
		}
		p := filepath.Join(cfg, name)
		data := readFile(t, p)
		if err := os.WriteFile(p, []byte(data[:len(data)/2]), 0o644); err != nil { // torn
			t.Fatal(err)
		}
	}

	logs := &logCounter{}
	h2 := startHarness(t, testOptions(t, dir), func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	if n := logs.count("state file damaged; using its previous version"); n != 2 {
		t.Fatalf("%d fallback WARNs: %q", n, logs.lines)
	}
	for _, topic := range []string{"Kept1", "Kept2"} {
		if h2.b.topics.lookup(topic) == nil {
			t.Fatalf("%s lost", topic)
		}
	}
	if off, ok := h2.b.offsets.query([]byte("Kept1"), []byte("g"), 0); !ok || off != 1 {
		t.Fatalf("offset %d %v, want the last-but-one write's 1", off, ok)
	}
	// The damaged copies are kept aside, and topics.json is written again.
	for _, name := range []string{topicsFileName, consumerOffsetFileName} {
		if _, err := os.Stat(filepath.Join(cfg, name+damagedSuffix)); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(readFile(t, filepath.Join(cfg, topicsFileName)), "Kept2") {
		t.Fatal("topics.json not written again at start")
	}
	h2.close()

	// Both copies damaged: the broker refuses to start and names both.
	p := filepath.Join(cfg, subscriptionGroupsName)
	for _, f := range []string{p, p + bakSuffix} {
		if err := os.WriteFile(f, []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := testOptions(t, dir)
	opts.AdvertiseAddr = "127.0.0.1:1"
	b, err := New(opts)
	if err == nil {
		b.Shutdown(timeoutCtx(t))
		t.Fatal("started with both copies damaged")
	}
	if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), p+bakSuffix) {
		t.Fatalf("error does not name both files: %v", err)
	}
}
