package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

var born = netip.MustParseAddrPort("10.0.0.1:5000")

func testOptions(dir string) Options {
	return Options{
		Dir:                 dir,
		SegmentSize:         1 << 20,
		ConsumeQueueEntries: 64,
		IndexSlots:          64,
		IndexMaxEntries:     256,
		MaxMessageSize:      64 << 10,
		CleanInterval:       -1,
	}
}

func openStore(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testlog.New(t, "store")
	}
	s, _, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func props(kv ...string) []byte {
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		b = message.AppendProperty(b, kv[i], kv[i+1])
	}
	return b
}

func msg(topic string, q int32, body string, kv ...string) *Message {
	return &Message{Topic: topic, QueueID: q, BornHost: born, BornTimestamp: time.Now().UnixMilli(), Body: []byte(body), Properties: props(kv...)}
}

// waitVisible waits until dispatch made (topic, q)'s first n messages
// visible: max offset ≥ n.
func waitVisible(t testing.TB, s *Store, topic string, q int32, n int64) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%s/%d visible up to %d", topic, q, n), func() error {
		if max := s.MaxOffset(topic, q); max < n {
			return fmt.Errorf("max offset %d", max)
		}
		return nil
	})
}

func bodies(t testing.TB, r *GetResult) []string {
	t.Helper()
	var out []string
	for _, v := range r.Messages {
		m, err := message.Decode(v.Bytes(), true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(m.Body()))
	}
	return out
}

func TestPutGetAndStatuses(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	for i := 0; i < 10; i++ {
		r, err := s.Put(msg("T", 1, fmt.Sprintf("m%d", i), message.PropTags, []string{"a", "b"}[i%2]))
		if err != nil {
			t.Fatal(err)
		}
		if r.QueueOffset != int64(i) || r.QueueID != 1 || r.Status != StatusOK {
			t.Fatalf("put %d: %+v", i, r)
		}
	}
	waitVisible(t, s, "T", 1, 10)
	var res GetResult
	defer res.Release()

	check := func(name string, topic string, q int32, off int64, max int, f Filter, status GetStatus, next int64, want ...string) {
		t.Helper()
		if err := s.Get(topic, q, off, max, 1<<20, f, &res); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := bodies(t, &res)
		if res.Status != status || res.NextOffset != next || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: status %v next %d bodies %v; want %v %d %v", name, res.Status, res.NextOffset, got, status, next, want)
		}
	}
	check("found", "T", 1, 0, 3, nil, Found, 3, "m0", "m1", "m2")
	check("tail", "T", 1, 8, 32, nil, Found, 10, "m8", "m9")
	check("at max", "T", 1, 10, 32, nil, OffsetOverflowOne, 10)
	check("past max", "T", 1, 15, 32, nil, OffsetOverflowBadly, 10)
	check("no such queue", "T", 2, 0, 32, nil, NoMatchedLogicQueue, 0)
	check("no such topic", "U", 0, 0, 32, nil, NoMatchedLogicQueue, 0)
	bCode := message.TagCode([]byte("b"))
	check("tag filter", "T", 1, 0, 2, &TagCodeFilter{Codes: []int64{bCode}}, Found, 4, "m1", "m3")
	check("tag filter none", "T", 1, 0, 32, &TagCodeFilter{Codes: []int64{12345}}, NoMatchedMessage, 10)
	if res.MinOffset != 0 || res.MaxOffset != 10 {
		t.Fatalf("bounds %d..%d", res.MinOffset, res.MaxOffset)
	}
	// maxBytes stops early but always returns one message.
	if err := s.Get("T", 1, 0, 32, 1, nil, &res); err != nil || len(res.Messages) != 1 || res.NextOffset != 1 {
		t.Fatalf("maxBytes=1: %d messages, next %d, %v", len(res.Messages), res.NextOffset, err)
	}
}

type propFilter struct{ key, value string }

func (f propFilter) MatchTagCode(int64) bool { return true }
func (f propFilter) NeedsRecord() bool       { return true }
func (f propFilter) MatchProperties(p []byte) bool {
	v, ok := message.LookupProperty(p, f.key)
	return ok && string(v) == f.value
}

func TestRecordFilter(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	for i := 0; i < 20; i++ {
		if _, err := s.Put(msg("T", 0, fmt.Sprint(i), "color", []string{"red", "blue"}[i%2])); err != nil {
			t.Fatal(err)
		}
	}
	waitVisible(t, s, "T", 0, 20)
	var res GetResult
	defer res.Release()
	if err := s.Get("T", 0, 0, 3, 1<<20, propFilter{"color", "blue"}, &res); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(bodies(t, &res)); got != "[1 3 5]" || res.NextOffset != 6 {
		t.Fatalf("got %s next %d", got, res.NextOffset)
	}
}

func TestBatchPutConsecutive(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	batch := []Message{*msg("T", 0, "a"), *msg("T", 0, "b"), *msg("T", 3, "c")}
	res, err := s.PutBatch(batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].QueueOffset != 0 || res[1].QueueOffset != 1 || res[2].QueueOffset != 0 {
		t.Fatalf("results %+v", res)
	}
	if res[1].CommitLogOffset != res[0].CommitLogOffset+int64(res[0].Size) {
		t.Fatal("batch records are not consecutive in the log")
	}
	id := string(s.AppendMsgID(nil, &res[2]))
	host, off, err := message.ParseOffsetMsgID(id)
	if err != nil || off != res[2].CommitLogOffset || host != s.StoreHost() {
		t.Fatalf("msg id %s -> %v %d %v", id, host, off, err)
	}
}

func TestPreparedTransactionNotDispatched(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	m := msg("T", 0, "half", message.PropUniqKey, "U1")
	m.SysFlag = message.TxPreparedType
	r, err := s.Put(m)
	if err != nil || r.QueueOffset != -1 {
		t.Fatalf("prepared put: %+v %v", r, err)
	}
	r2, err := s.Put(msg("T", 0, "normal"))
	if err != nil || r2.QueueOffset != 0 {
		t.Fatalf("the next normal message got queue offset %d (%v), want 0", r2.QueueOffset, err)
	}
	waitVisible(t, s, "T", 0, 1)
	views, err := s.QueryByKey("T", "U1", 0, time.Now().UnixMilli()+1000, 10, nil)
	if err != nil || len(views) != 1 {
		t.Fatalf("prepared message not indexed: %d %v", len(views), err)
	}
	views[0].Release()
	rb := msg("T", 0, "rolled back", message.PropUniqKey, "U2")
	rb.SysFlag = message.TxRollbackType
	if _, err := s.Put(rb); err != nil {
		t.Fatal(err)
	}
	s.Put(msg("T", 0, "sync"))
	waitVisible(t, s, "T", 0, 2)
	if views, _ := s.QueryByKey("T", "U2", 0, time.Now().UnixMilli()+1000, 10, nil); len(views) != 0 {
		t.Fatal("rolled-back message was indexed")
	}
}

func TestQueryByKeyAndReadMessage(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	var offs []int64
	for i := 0; i < 300; i++ {
		r, err := s.Put(msg(fmt.Sprintf("T%d", i%3), 0, fmt.Sprint(i), message.PropKeys, fmt.Sprintf("k%d shared", i%50), message.PropUniqKey, fmt.Sprintf("U%03d", i)))
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, r.CommitLogOffset)
	}
	waitVisible(t, s, "T2", 0, 100)
	now := time.Now().UnixMilli()
	views, err := s.QueryByKey("T1", "k7", 0, now+1000, 32, nil)
	if err != nil {
		t.Fatal(err)
	}
	// k7 is on messages 7, 57, 107, ...; those with i%3 == 1: 7, 157, 307(no) -> 7, 157
	var got []string
	for _, v := range views {
		m, _ := message.Decode(v.Bytes(), true)
		got = append(got, string(m.Body()))
		v.Release()
	}
	if fmt.Sprint(got) != "[157 7]" {
		t.Fatalf("query k7 in T1 = %v, want [157 7] (newest first)", got)
	}
	views, _ = s.QueryByKey("T0", "U120", 0, now+1000, 5, nil)
	if len(views) != 1 {
		t.Fatalf("unique key query returned %d", len(views))
	}
	views[0].Release()
	if views, _ := s.QueryByKey("T0", "shared", 0, now+1000, 7, nil); len(views) != 7 {
		t.Fatalf("max not honoured: %d", len(views))
	} else {
		for _, v := range views {
			v.Release()
		}
	}
	v, err := s.ReadMessage(offs[42])
	if err != nil {
		t.Fatal(err)
	}
	m, _ := message.Decode(v.Bytes(), true)
	if string(m.Body()) != "42" {
		t.Fatalf("read by offset: %q", m.Body())
	}
	v.Release()
	if _, err := s.ReadMessage(offs[42] + 1); err == nil {
		t.Fatal("read at a non-record offset succeeded")
	}
}

func TestOffsetByTime(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	var times []int64
	for i := 0; i < 5; i++ {
		r, err := s.Put(msg("T", 0, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, r.StoreTimestamp)
		// The next message is stored in a later millisecond.
		wait.Until(t, "the next millisecond", func() bool { return time.Now().UnixMilli() > r.StoreTimestamp })
	}
	waitVisible(t, s, "T", 0, 5)
	for i, ts := range times {
		off, err := s.OffsetByTime("T", 0, ts)
		if err != nil || off != int64(i) {
			t.Fatalf("offset at time of %d = %d (%v)", i, off, err)
		}
	}
	if off, _ := s.OffsetByTime("T", 0, times[0]-10_000); off != 0 {
		t.Fatalf("before everything = %d, want min 0", off)
	}
	if off, _ := s.OffsetByTime("T", 0, times[4]+10_000); off != 5 {
		t.Fatalf("after everything = %d, want max 5", off)
	}
	if ts, err := s.EarliestStoreTime("T", 0); err != nil || ts != times[0] {
		t.Fatalf("earliest = %d %v", ts, err)
	}
}

func TestArrivalNotification(t *testing.T) {
	o := testOptions(t.TempDir())
	var mu sync.Mutex
	seen := map[string]int64{}
	o.OnArrival = func(topic string, q int32, max int64) {
		mu.Lock()
		seen[fmt.Sprintf("%s/%d", topic, q)] = max
		mu.Unlock()
	}
	s := openStore(t, o)
	defer s.Close()
	for i := 0; i < 5; i++ {
		s.Put(msg("A", 0, "x"))
		s.Put(msg("B", 2, "y"))
	}
	waitVisible(t, s, "B", 2, 5)
	wait.For(t, "both queues' arrivals reported", func() error {
		mu.Lock()
		defer mu.Unlock()
		if a, b := seen["A/0"], seen["B/2"]; a != 5 || b != 5 {
			return fmt.Errorf("arrivals %v", seen)
		}
		return nil
	})
}

func TestValidation(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	big := msg("T", 0, "")
	big.Body = make([]byte, 65<<10)
	if _, err := s.Put(big); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversized = %v", err)
	}
	if _, err := s.Put(msg("", 0, "x")); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("empty topic = %v", err)
	}
	if _, err := s.Put(msg("T", -1, "x")); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("negative queue = %v", err)
	}
	if _, err := s.PutBatch(nil, nil); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("empty batch = %v", err)
	}
}

func TestDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, testOptions(dir))
	if _, _, err := Open(testOptions(dir)); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open = %v, want ErrLocked", err)
	}
	s.Close()
	s2 := openStore(t, testOptions(dir))
	s2.Close()
}

// snapshot captures every queue's entries and every key's query results.
func snapshot(t *testing.T, s *Store, topics []string, queues int32, keys []string) string {
	t.Helper()
	var b bytes.Buffer
	var res GetResult
	defer res.Release()
	for _, topic := range topics {
		for q := int32(0); q < queues; q++ {
			fmt.Fprintf(&b, "%s/%d [%d,%d):", topic, q, s.MinOffset(topic, q), s.MaxOffset(topic, q))
			for off := s.MinOffset(topic, q); off < s.MaxOffset(topic, q); off = res.NextOffset {
				if err := s.Get(topic, q, off, 32, 1<<30, nil, &res); err != nil || res.Status != Found {
					t.Fatalf("get %s/%d@%d: %v %v", topic, q, off, res.Status, err)
				}
				for _, v := range res.Messages {
					m, _ := message.Decode(v.Bytes(), true)
					fmt.Fprintf(&b, " %d@%d", m.QueueOffset(), m.PhysicalOffset())
				}
			}
			b.WriteByte('\n')
		}
		for _, k := range keys {
			views, err := s.QueryByKey(topic, k, 0, time.Now().UnixMilli()+1000, 1000, nil)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s key %s:", topic, k)
			for _, v := range views {
				m, _ := message.Decode(v.Bytes(), true)
				fmt.Fprintf(&b, " %d", m.PhysicalOffset())
				v.Release()
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func fill(t *testing.T, s *Store, topics []string, queues int32, n int, keys []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < n; i++ {
		topic := topics[rng.IntN(len(topics))]
		q := int32(rng.IntN(int(queues)))
		k := keys[rng.IntN(len(keys))]
		body := bytes.Repeat([]byte{byte(i)}, 50+rng.IntN(2000))
		if _, err := s.Put(&Message{Topic: topic, QueueID: q, BornHost: born, Body: body, Properties: props(message.PropKeys, k, message.PropTags, fmt.Sprint("tag", i%3))}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRebuildDerivedFromCommitLog(t *testing.T) {
	dir := t.TempDir()
	topics := []string{"A", "B", "C"}
	keys := []string{"k1", "k2", "k3", "k4"}
	s := openStore(t, testOptions(dir))
	fill(t, s, topics, 4, 1500, keys)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, testOptions(dir))
	before := snapshot(t, s, topics, 4, keys)
	s.Close()
	for _, sub := range []string{"consumequeue", "index"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, testOptions(dir))
	defer s.Close()
	after := snapshot(t, s, topics, 4, keys)
	if before != after {
		t.Fatalf("rebuilt store differs:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// Counters continue after the rebuild.
	maxBefore := s.MaxOffset("A", 0)
	r, err := s.Put(msg("A", 0, "next"))
	if err != nil || r.QueueOffset != maxBefore {
		t.Fatalf("put after rebuild got queue offset %d, max before it %d (%v)", r.QueueOffset, maxBefore, err)
	}
}

func TestGetEveryRangeMatchesModel(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	const queues = 5
	model := make([][]string, queues)
	var batch []Message
	for i := 0; i < 600; i++ {
		q := int32(rng.IntN(queues))
		body := fmt.Sprintf("q%d-%d-%s", q, i, bytes.Repeat([]byte("x"), rng.IntN(300)))
		model[q] = append(model[q], body)
		batch = append(batch, *msg("P", q, body))
		if rng.IntN(4) == 0 || i == 599 {
			if _, err := s.PutBatch(batch, nil); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	for q := int32(0); q < queues; q++ {
		waitVisible(t, s, "P", q, int64(len(model[q])))
	}
	var res GetResult
	defer res.Release()
	for q := int32(0); q < queues; q++ {
		n := int64(len(model[q]))
		for off := int64(0); off <= n; off++ {
			for _, max := range []int{1, 2, 7, 32} {
				if err := s.Get("P", q, off, max, 1<<30, nil, &res); err != nil {
					t.Fatal(err)
				}
				want := model[q][off:min(off+int64(max), n)]
				got := bodies(t, &res)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("q%d off %d max %d: got %d messages, want %d", q, off, max, len(got), len(want))
				}
				wantNext := off + int64(len(want))
				if off == n {
					if res.Status != OffsetOverflowOne {
						t.Fatalf("at max: %v", res.Status)
					}
				} else if res.Status != Found || res.NextOffset != wantNext {
					t.Fatalf("q%d off %d: %v next %d", q, off, res.Status, res.NextOffset)
				}
			}
		}
	}
}

func TestSyncModePutIsDurableAndConcurrent(t *testing.T) {
	o := testOptions(t.TempDir())
	o.FlushMode = commitlog.FlushSync
	s := openStore(t, o)
	defer s.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				r, err := s.Put(msg("S", int32(g%4), "x"))
				if err != nil || r.Status != StatusOK {
					t.Errorf("put: %+v %v", r, err)
					return
				}
				if s.Log().FlushedOffset() < r.CommitLogOffset+int64(r.Size) {
					t.Errorf("put returned before its flush")
					return
				}
			}
		}(g)
	}
	wg.Wait()
	for q := int32(0); q < 4; q++ {
		waitVisible(t, s, "S", q, 100)
	}
}

func TestCleanRemovesExpired(t *testing.T) {
	o := testOptions(t.TempDir())
	o.RetentionTime = time.Millisecond
	s := openStore(t, o)
	defer s.Close()
	body := string(bytes.Repeat([]byte("z"), 4000))
	for i := 0; i < 800; i++ {
		if _, err := s.Put(msg("R", 0, body)); err != nil {
			t.Fatal(err)
		}
	}
	waitVisible(t, s, "R", 0, 800)
	wait.For(t, "clean to remove the expired segments", func() error { // once older than RetentionTime
		n, err := s.Clean()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return errors.New("clean removed nothing")
		}
		return nil
	})
	min := s.Log().MinOffset()
	var res GetResult
	defer res.Release()
	if err := s.Get("R", 0, 0, 32, 1<<30, nil, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status == Found {
		m, _ := message.Decode(res.Messages[0].Bytes(), true)
		if m.PhysicalOffset() < min {
			t.Fatal("a message below the log's min offset was served")
		}
	}
	if s.MinOffset("R", 0) == 0 {
		t.Fatalf("consume queue min offset did not advance (log min %d)", min)
	}
}

func TestReadEntries(t *testing.T) {
	tagOf := func(v message.View) (int64, bool) {
		if string(v.Topic()) == "Timed" {
			return 1000 + int64(len(v.Body())), true
		}
		return 0, false
	}
	o := testOptions(t.TempDir())
	o.TagCode = tagOf
	s := openStore(t, o)
	defer s.Close()
	for i := 0; i < 5; i++ {
		if _, err := s.Put(msg("Timed", 0, string(make([]byte, i)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(msg("Plain", 0, "x", "TAGS", "a")); err != nil {
		t.Fatal(err)
	}
	waitVisible(t, s, "Timed", 0, 5)
	waitVisible(t, s, "Plain", 0, 1)

	got, err := s.ReadEntries("Timed", 0, 1, make([]QueueEntry, 0, 3))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d entries, want 3 (capacity)", len(got))
	}
	for i, e := range got {
		if e.TagCode != 1000+int64(i+1) || e.Size <= 0 {
			t.Fatalf("entry %d = %+v", i, e)
		}
		v, err := s.ReadMessage(e.CommitLogOffset)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := message.Decode(v.Bytes(), true); m.QueueOffset() != int64(i+1) {
			t.Fatalf("entry %d points at queue offset %d", i, m.QueueOffset())
		}
		v.Release()
	}
	if got, _ := s.ReadEntries("Plain", 0, 0, make([]QueueEntry, 0, 8)); len(got) != 1 || got[0].TagCode != int64(message.JavaHashCode("a")) {
		t.Fatalf("plain entries %+v", got)
	}
	for _, c := range []struct {
		topic string
		off   int64
	}{{"Timed", 5}, {"Timed", 9}, {"Nope", 0}} {
		if got, err := s.ReadEntries(c.topic, 0, c.off, make([]QueueEntry, 0, 8)); err != nil || len(got) != 0 {
			t.Fatalf("%s@%d: %v %v", c.topic, c.off, got, err)
		}
	}
	if _, err := s.ReadEntries("Timed", 0, -1, make([]QueueEntry, 0, 8)); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("negative offset: %v", err)
	}
	buf := make([]QueueEntry, 0, 8)
	if n := testing.AllocsPerRun(100, func() { buf, _ = s.ReadEntries("Timed", 0, 0, buf[:0]) }); n != 0 {
		t.Fatalf("ReadEntries allocates %v times", n)
	}
}
