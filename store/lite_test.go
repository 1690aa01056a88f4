package store

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

func liteMsg(parent, lite string, q int32, body string) *Message {
	return msg(parent, q, body, message.PropertyLiteTopic, lite, message.PropTags, "T")
}

// waitLite waits until (parent, lite) holds n entries.
func waitLite(t testing.TB, s *Store, parent, lite string, n int64) {
	t.Helper()
	wait.For(t, fmt.Sprintf("lite %s/%s up to %d", parent, lite, n), func() error {
		if _, max, _ := s.LiteOffsets(parent, lite); max < n {
			return fmt.Errorf("max offset %d", max)
		}
		return nil
	})
}

// liteBodies reads (parent, lite) whole.
func liteBodies(t testing.TB, s *Store, parent, lite string) []string {
	t.Helper()
	var res GetResult
	defer res.Release()
	var out []string
	for off := int64(0); ; {
		if err := s.GetLite(parent, lite, off, 7, 0, &res); err != nil {
			t.Fatal(err)
		}
		if res.Status != Found {
			return out
		}
		out = append(out, bodies(t, &res)...)
		off = res.NextOffset
	}
}

// snapshotDir copies the store's directory as a process crash would leave it
// (the page cache's contents; the store idle), without its lock.
func snapshotDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if rel == "lock" {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLiteDispatchGetAndArrival(t *testing.T) {
	o := testOptions(t.TempDir())
	var mu sync.Mutex
	arrived := map[string]int64{}
	var order []string
	o.OnArrival = func(topic string, q int32, max int64) {
		mu.Lock()
		order = append(order, "queue")
		mu.Unlock()
	}
	o.OnLiteArrival = func(parent, lite string, max int64) {
		mu.Lock()
		arrived[parent+"/"+lite] = max
		order = append(order, "lite")
		mu.Unlock()
	}
	s := openStore(t, o)
	defer s.Close()
	var want = map[string][]string{}
	for i := range 60 {
		lite := fmt.Sprintf("L%d", i%3)
		body := fmt.Sprintf("m%d", i)
		r, err := s.Put(liteMsg("P", lite, int32(i%2), body))
		if err != nil {
			t.Fatal(err)
		}
		if r.QueueOffset != int64(i/2) {
			t.Fatalf("put %d: parent queue offset %d", i, r.QueueOffset)
		}
		want[lite] = append(want[lite], body)
	}
	s.Put(msg("P", 0, "plain"))
	s.Put(liteMsg("%DLQ%g", "L0", 0, "dead letter")) // a system topic: not indexed
	waitVisible(t, s, "%DLQ%g", 0, 1)
	for lite, bs := range want {
		waitLite(t, s, "P", lite, 20)
		if got := liteBodies(t, s, "P", lite); fmt.Sprint(got) != fmt.Sprint(bs) {
			t.Fatalf("%s: %v, want %v", lite, got, bs)
		}
	}
	// The parent's queues hold every record, lite or not.
	if s.MaxOffset("P", 0) != 31 || s.MaxOffset("P", 1) != 30 {
		t.Fatalf("parent queues: %d %d", s.MaxOffset("P", 0), s.MaxOffset("P", 1))
	}
	if s.LiteCount() != 3 {
		t.Fatalf("lite count %d", s.LiteCount())
	}
	wait.For(t, "lite arrivals", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range []string{"L0", "L1", "L2"} {
			if arrived["P/"+l] != 20 {
				return fmt.Errorf("arrivals %v", arrived)
			}
		}
		return nil
	})
	mu.Lock()
	if len(order) == 0 || order[0] != "queue" {
		t.Fatalf("a run's lite arrivals come after its queue arrivals: %v", order[:min(len(order), 8)])
	}
	mu.Unlock()

	// Statuses, as Get's.
	var res GetResult
	defer res.Release()
	for _, tc := range []struct {
		lite   string
		off    int64
		status GetStatus
		next   int64
	}{
		{"L0", 0, Found, 5},
		{"L0", 18, Found, 20},
		{"L0", 20, OffsetOverflowOne, 20},
		{"L0", 25, OffsetOverflowBadly, 20},
		{"nope", 0, NoMessageInQueue, 0},
		{"nope", 3, NoMessageInQueue, 0},
	} {
		if err := s.GetLite("P", tc.lite, tc.off, 5, 0, &res); err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.status || res.NextOffset != tc.next {
			t.Errorf("GetLite(%s, %d) = %v next %d, want %v next %d", tc.lite, tc.off, res.Status, res.NextOffset, tc.status, tc.next)
		}
	}
	// maxBytes: at least one message, then what fits.
	if err := s.GetLite("P", "L1", 0, 32, 1, &res); err != nil || len(res.Messages) != 1 || res.NextOffset != 1 {
		t.Fatalf("maxBytes 1: %d messages, next %d, %v", len(res.Messages), res.NextOffset, err)
	}
	if st := s.Stats(); st.Lite.Topics != 3 || st.Lite.Files != 1 {
		t.Fatalf("stats %+v", st.Lite)
	}
}

func TestLiteOffsetsExpiryAndRestarts(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(dir)
	s := openStore(t, o)
	for i := range 30 {
		if _, err := s.Put(liteMsg("P", fmt.Sprintf("L%d", i%10), 0, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	waitVisible(t, s, "P", 0, 30)
	waitLite(t, s, "P", "L9", 3)
	if err := s.CommitLiteOffset("g", "P", "L1", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitLiteOffset("g", "P", "L2", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLite("P", "L2"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.LiteOffset("g", "P", "L2"); ok || s.LiteCount() != 9 {
		t.Fatalf("L2 deleted: count %d", s.LiteCount())
	}
	var names []string
	s.LiteTopics("P", func(lite string, min, max, last int64) bool {
		names = append(names, lite)
		if max != 3 || min != 0 || last <= 0 {
			t.Errorf("%s: %d..%d last %d", lite, min, max, last)
		}
		return true
	})
	if len(names) != 9 {
		t.Fatalf("LiteTopics: %v", names)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Clean restart: everything there, offsets too; new messages continue
	// the lite offsets.
	s = openStore(t, o)
	if off, ok := s.LiteOffset("g", "P", "L1"); !ok || off != 2 {
		t.Fatalf("offset after restart: %d %v", off, ok)
	}
	if got := liteBodies(t, s, "P", "L3"); fmt.Sprint(got) != "[3 13 23]" {
		t.Fatalf("L3 after restart: %v", got)
	}
	s.Put(liteMsg("P", "L3", 0, "33"))
	s.Put(liteMsg("P", "L2", 0, "again")) // recreated at 0
	waitLite(t, s, "P", "L2", 1)
	if got := liteBodies(t, s, "P", "L3"); fmt.Sprint(got) != "[3 13 23 33]" {
		t.Fatalf("L3: %v", got)
	}
	if err := s.CommitLiteOffset("g", "P", "L3", 4); err != nil {
		t.Fatal(err)
	}
	// Flush (as the maintainer does every FlushInterval), then a process
	// crash: the directory as it is, no clean close.
	if err := s.flushDerived(); err != nil {
		t.Fatal(err)
	}
	crashed := t.TempDir()
	snapshotDir(t, dir, crashed)
	// Expiry: everything stored before now+1 s goes; deleting the parent
	// topic takes the rest.
	gone := 0
	n, err := s.ExpireLite("P", time.Now().Add(time.Second).UnixMilli(), func(string) { gone++ })
	if err != nil || n != 10 || gone != 10 || s.LiteCount() != 0 {
		t.Fatalf("ExpireLite: %d %v (%d reported), %d left", n, err, gone, s.LiteCount())
	}
	s.Close()

	oc := testOptions(crashed)
	s = openStore(t, oc)
	defer s.Close()
	if got := liteBodies(t, s, "P", "L3"); fmt.Sprint(got) != "[3 13 23 33]" {
		t.Fatalf("L3 after a crash: %v", got)
	}
	if got := liteBodies(t, s, "P", "L2"); fmt.Sprint(got) != "[again]" {
		t.Fatalf("L2 after a crash: %v", got)
	}
	if off, ok := s.LiteOffset("g", "P", "L3"); !ok || off != 4 {
		t.Fatalf("offset after a crash: %d %v", off, ok)
	}
	if err := s.DeleteTopic("P"); err != nil {
		t.Fatal(err)
	}
	if s.LiteCount() != 0 {
		t.Fatalf("parent deleted, %d lite topics left", s.LiteCount())
	}
}

// TestLiteRebuiltFromLog removes the lite-topic index: Open rebuilds it from
// the whole log, with the same offsets.
func TestLiteRebuiltFromLog(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(dir)
	s := openStore(t, o)
	for i := range 100 {
		s.Put(liteMsg("P", fmt.Sprintf("L%d", i%4), 0, fmt.Sprint(i)))
	}
	waitLite(t, s, "P", "L3", 25)
	before := liteBodies(t, s, "P", "L2")
	s.Close()
	if err := os.RemoveAll(filepath.Join(dir, liteDirName)); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, o)
	defer s.Close()
	if got := liteBodies(t, s, "P", "L2"); fmt.Sprint(got) != fmt.Sprint(before) || len(got) != 25 {
		t.Fatalf("rebuilt: %v, want %v", got, before)
	}
}

// TestLiteRetention: when the log's old segments go, lite topics' mins rise.
func TestLiteRetention(t *testing.T) {
	o := testOptions(t.TempDir())
	o.SegmentSize = 128 << 10
	o.MaxMessageSize = 1 << 10
	o.RetentionTime = time.Nanosecond
	s := openStore(t, o)
	defer s.Close()
	body := string(make([]byte, 900))
	for i := range 300 {
		if _, err := s.Put(liteMsg("P", fmt.Sprintf("L%d", i%2), 0, body)); err != nil {
			t.Fatal(err)
		}
	}
	waitLite(t, s, "P", "L1", 150)
	if err := s.Log().Flush(); err != nil { // only synced segments may go
		t.Fatal(err)
	}
	if _, err := s.Clean(); err != nil {
		t.Fatal(err)
	}
	mn, mx, _ := s.LiteOffsets("P", "L0")
	if mn == 0 || mx != 150 {
		t.Fatalf("after retention: %d..%d", mn, mx)
	}
	var res GetResult
	defer res.Release()
	if err := s.GetLite("P", "L0", 0, 4, 0, &res); err != nil || res.Status != OffsetTooSmall || res.NextOffset != mn {
		t.Fatalf("GetLite below min: %v next %d (%v)", res.Status, res.NextOffset, err)
	}
	if err := s.GetLite("P", "L0", mn, 4, 0, &res); err != nil || res.Status != Found {
		t.Fatalf("GetLite at min: %v (%v)", res.Status, err)
	}
}
