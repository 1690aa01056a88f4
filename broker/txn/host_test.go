package txn

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// fakeHost is a Host without a broker: records live in a real store in a
// temporary directory (it opens in milliseconds, and store.View cannot be
// made otherwise), everything else (producers, topics, state files,
// failures) is a table the test sets. Tests run it inside a synctest
// bubble, so the checker's time is fake.
type fakeHost struct {
	t  testing.TB
	st *store.Store
	m  atomic.Pointer[Manager] // woken when the half or op queue grows

	mu         sync.Mutex
	producers  map[string]bool    // groups with a live producer
	checks     []sentCheck        // every SendCheck with a live producer
	sendErr    error              // SendCheck fails with it (producer present)
	noProducer func(group string) // called (h.mu not held) by a SendCheck that finds no producer, before it returns ErrNoProducer
	topics     map[string]int32   // created by EnsureTopic
	files      map[string][]byte
	writes     int
	writeErr   error
	putErrs    []error                                  // the next Puts fail with these, in order
	waitErr    error                                    // WaitDurable's answer
	minOffset  map[string]int64                         // a queue minimum retention moved (ReadEntries below it fails)
	readErrs   int                                      // the next ReadEntries calls fail
	routeDelay func(*store.Message, []byte, int) []byte // nil: no delay
}

type sentCheck struct {
	group string
	c     Check
	rec   message.View // c.Record decoded
}

var discard = slog.New(slog.DiscardHandler)

// newFakeHost opens a store in dir (call inside the bubble).
func newFakeHost(t testing.TB, dir string) *fakeHost {
	h := &fakeHost{t: t, producers: map[string]bool{}, topics: map[string]int32{}, files: map[string][]byte{},
		minOffset: map[string]int64{}}
	st, _, err := store.Open(store.Options{
		Dir: dir, SegmentSize: 1 << 20, MaxMessageSize: 64 << 10, ConsumeQueueEntries: 1024,
		IndexSlots: 128, IndexMaxEntries: 512, ScrubRate: -1, Logger: testlog.New(t, "store"),
		StoreHost: netip.MustParseAddrPort("127.0.0.1:10911"),
		OnArrival: func(topic string, _ int32, _ int64) {
			if topic == HalfTopic || topic == OpHalfTopic {
				if m := h.m.Load(); m != nil {
					m.Arrived()
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	return h
}

// start makes a manager on h, loads it and starts it; it is stopped (and
// the store closed, with close) when the test ends.
func (h *fakeHost) start(t testing.TB, cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = testlog.New(t, "txn")
	}
	m := New(cfg, h)
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	h.m.Store(m)
	m.Start()
	return m
}

func (h *fakeHost) close(t testing.TB) {
	if m := h.m.Load(); m != nil {
		m.Stop()
	}
	if err := h.st.Close(); err != nil {
		t.Error(err)
	}
}

func (h *fakeHost) ReadEntries(topic string, queueID int32, offset int64, dst []store.QueueEntry) ([]store.QueueEntry, error) {
	h.mu.Lock()
	fail := h.readErrs > 0
	if fail {
		h.readErrs--
	}
	floor, moved := h.minOffset[topic]
	h.mu.Unlock()
	if fail {
		return dst, errors.New("fake: read failure")
	}
	if moved && offset < floor {
		return dst, fmt.Errorf("fake: %s below %d: %w", topic, floor, store.ErrOffsetOutOfRange)
	}
	return h.st.ReadEntries(topic, queueID, offset, dst)
}

func (h *fakeHost) MinOffset(topic string, queueID int32) int64 {
	h.mu.Lock()
	floor, moved := h.minOffset[topic]
	h.mu.Unlock()
	if moved {
		return floor
	}
	return h.st.MinOffset(topic, queueID)
}

func (h *fakeHost) MaxOffset(topic string, queueID int32) int64 {
	return h.st.MaxOffset(topic, queueID)
}

func (h *fakeHost) ReadMessage(off int64) (store.View, error) { return h.st.ReadMessage(off) }

func (h *fakeHost) Put(msgs []store.Message, res []store.PutResult) ([]store.PutResult, error) {
	h.mu.Lock()
	var err error
	if len(h.putErrs) > 0 {
		err, h.putErrs = h.putErrs[0], h.putErrs[1:]
	}
	h.mu.Unlock()
	if err != nil {
		return res, err
	}
	for i := range msgs {
		msgs[i].NoWait = true
	}
	return h.st.PutBatch(msgs, res)
}

func (h *fakeHost) WaitDurable(end int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waitErr
}

func (h *fakeHost) TopicName(name []byte) string { return string(name) }

func (h *fakeHost) EnsureTopic(name string, queues int32) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.topics[name]; !ok {
		h.topics[name] = queues
	}
	return name, nil
}

func (h *fakeHost) RouteDelay(m *store.Message, props []byte, start int) []byte {
	if h.routeDelay != nil {
		return h.routeDelay(m, props, start)
	}
	return props
}

func (h *fakeHost) SendCheck(group string, c *Check) error {
	h.mu.Lock()
	if !h.producers[group] {
		hook := h.noProducer
		h.mu.Unlock()
		if hook != nil {
			hook(group)
		}
		return ErrNoProducer
	}
	defer h.mu.Unlock()
	rec, err := message.Decode(c.Record, true)
	if err != nil {
		h.t.Errorf("check record does not decode: %v", err)
	}
	h.checks = append(h.checks, sentCheck{group: group, c: *c, rec: rec})
	return h.sendErr
}

func (h *fakeHost) LoadState(name string, parse func([]byte) error) (bool, error) {
	h.mu.Lock()
	data, ok := h.files[name]
	h.mu.Unlock()
	if !ok {
		return false, nil
	}
	return true, parse(data)
}

func (h *fakeHost) WriteState(name string, data []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writeErr != nil {
		return h.writeErr
	}
	h.files[name] = append([]byte(nil), data...)
	h.writes++
	return nil
}

// ---- test helpers ----

func (h *fakeHost) setProducer(group string, live bool) {
	h.mu.Lock()
	h.producers[group] = live
	h.mu.Unlock()
}

// takeChecks returns the checks sent since the last call.
func (h *fakeHost) takeChecks() []sentCheck {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.checks
	h.checks = nil
	return c
}

// sent is a half message as the broker stored it.
type sent struct {
	uniq string
	res  store.PutResult
}

// sendHalf stores a half message the way the broker's send path does
// (HalfProps), for topic/queue, producer group and UNIQ_KEY uniq, with
// extra producer properties as key, value pairs.
func (h *fakeHost) sendHalf(t testing.TB, m *Manager, topic string, queue int32, body, group, uniq string, extra ...string) sent {
	t.Helper()
	sendProps := message.AppendProperty(nil, message.PropUniqKey, uniq)
	sendProps = message.AppendProperty(sendProps, message.PropTranMsg, "true")
	for i := 0; i+1 < len(extra); i += 2 {
		sendProps = message.AppendProperty(sendProps, extra[i], extra[i+1])
	}
	msg := store.Message{Topic: topic, QueueID: queue, SysFlag: message.TxPreparedType, Body: []byte(body),
		BornHost: netip.MustParseAddrPort("10.0.0.1:5000")}
	props := append([]byte(nil), sendProps...)
	msg.Properties = m.HalfProps(props, parsed(t, sendProps), []byte(group), &msg)
	res, err := h.st.PutBatch([]store.Message{msg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sent{uniq: uniq, res: res[0]}
}

// end ends the transaction of s the way the broker's handler does.
func end(m *Manager, group string, s sent, commit bool) (int64, error) {
	return m.End(EndRequest{ProducerGroup: group, TranStateTableOffset: s.res.QueueOffset,
		CommitLogOffset: s.res.CommitLogOffset, Commit: commit})
}

// records returns copies of the records of topic/queue.
func (h *fakeHost) records(t testing.TB, topic string, queue int32) []message.View {
	t.Helper()
	ents, err := h.st.ReadEntries(topic, queue, 0, make([]store.QueueEntry, 0, 64))
	if err != nil {
		t.Fatal(err)
	}
	var out []message.View
	for _, e := range ents {
		v, err := h.st.ReadMessage(e.CommitLogOffset)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := message.Decode(append([]byte(nil), v.Bytes()...), true)
		v.Release()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

func prop(v message.View, key string) string {
	p, _ := v.Property(key)
	return string(p)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// run runs f in a synctest bubble with a fake host on a fresh store.
func run(t *testing.T, f func(t *testing.T, h *fakeHost)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t, t.TempDir())
		defer h.close(t)
		f(t, h)
	})
}
