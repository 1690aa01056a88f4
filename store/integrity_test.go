package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/message"
)

// Damage after a clean stop, at the store's level: the consume queues are
// checked against the log and rebuilt from it, lost messages are named, and
// nothing damaged or foreign is served.

// logBuffer collects log lines for assertions.
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

// logger writes to l (for a test that reads what was logged) and to t's log
// (printed if t fails).
func (l *logBuffer) logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewMultiHandler(slog.NewTextHandler(l, nil), testlog.New(t, "store").Handler()))
}

func integrityOptions(dir string) Options {
	o := testOptions(dir)
	o.ConsumeQueueEntries = 300_000 // one file per queue, as in the field
	o.SegmentSize = 4 << 20
	return o
}

// fillQueues puts n messages round-robin into queues 0..3 of topic T, with
// bodies "m-<i>", and closes the store cleanly. It returns each message's
// put result.
func fillQueues(t *testing.T, dir string, n int) []PutResult {
	t.Helper()
	s := openStore(t, integrityOptions(dir))
	var res []PutResult
	for i := 0; i < n; i++ {
		r, err := s.Put(msg("T", int32(i%4), fmt.Sprintf("m-%d-%s", i, strings.Repeat("x", 200))))
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return res
}

// readQueue returns the bodies of every message Get serves from queue q.
func readQueue(t *testing.T, s *Store, q int32) []string {
	t.Helper()
	var out []string
	var r GetResult
	for off := int64(0); ; {
		if err := s.Get("T", q, off, 32, 0, nil, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, bodies(t, &r)...)
		r.Release()
		if r.Status != Found && r.Status != NoMatchedMessage {
			return out
		}
		off = r.NextOffset
	}
}

func wantBody(i int) string { return fmt.Sprintf("m-%d-%s", i, strings.Repeat("x", 200)) }

func queueFile(dir string, q int) string {
	return filepath.Join(dir, "consumequeue", "T", fmt.Sprint(q), "00000000000000000000")
}

func patchAt(t *testing.T, path string, off int64, fn func(b []byte)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fn(b[off:])
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCleanStopDamagedConsumeQueueIsRebuilt(t *testing.T) {
	const n = 2000 // 500 per queue
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"200 bytes overwritten at offset 2,000", func(t *testing.T, path string) {
			patchAt(t, path, 2000, func(b []byte) { copy(b, bytes.Repeat([]byte{0x5C}, 200)) })
		}},
		{"200 bytes zeroed at offset 2,000", func(t *testing.T, path string) {
			patchAt(t, path, 2000, func(b []byte) { clear(b[:200]) })
		}},
		{"cut to 4,000 bytes", func(t *testing.T, path string) {
			if err := os.Truncate(path, 4000); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, path string) {
			if err := os.RemoveAll(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fillQueues(t, dir, n)
			tc.damage(t, queueFile(dir, 1))
			var logs logBuffer
			o := integrityOptions(dir)
			o.Logger = logs.logger(t)
			s := openStore(t, o)
			defer s.Close()
			if st := s.Stats(); st.QueuesRebuilt != 1 {
				t.Fatalf("%d queues rebuilt, want 1; log:\n%s", st.QueuesRebuilt, logs.String())
			}
			if !strings.Contains(logs.String(), "rebuilding it from the commit log") {
				t.Fatalf("the rebuild was not logged:\n%s", logs.String())
			}
			for q := int32(0); q < 4; q++ {
				got := readQueue(t, s, q)
				if len(got) != n/4 {
					t.Fatalf("queue %d serves %d messages, want %d", q, len(got), n/4)
				}
				for k, b := range got {
					if want := wantBody(k*4 + int(q)); b != want {
						t.Fatalf("queue %d message %d is %.12q, want %.12q", q, k, b, want)
					}
				}
				if s.MaxOffset("T", q) != n/4 {
					t.Fatalf("queue %d max offset %d", q, s.MaxOffset("T", q))
				}
			}
			// New messages continue the queue's offsets: none is reused.
			r, err := s.Put(msg("T", 1, "after"))
			if err != nil || r.QueueOffset != n/4 {
				t.Fatalf("next put at queue offset %d (%v), want %d", r.QueueOffset, err, n/4)
			}
		})
	}
}

// The newest segment cut after a clean stop (defect 1 of issue 14): the
// messages before the cut are all served, the lost ones are named, and new
// messages go after the kept ones.
func TestCleanStopShortenedSegment(t *testing.T) {
	dir := t.TempDir()
	res := fillQueues(t, dir, 1000)
	cut := res[700].CommitLogOffset + 50
	if err := os.Truncate(filepath.Join(dir, "commitlog", "00000000000000000000"), cut); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	o := integrityOptions(dir)
	o.Logger = logs.logger(t)
	s, rep, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rep.Verified || rep.End != res[700].CommitLogOffset || len(rep.Losses) != 1 {
		t.Fatalf("recovery %+v", rep)
	}
	if st := s.Stats(); st.LostMessages != 300 {
		t.Fatalf("%d messages reported lost, want 300; log:\n%s", st.LostMessages, logs.String())
	}
	for q := 0; q < 4; q++ {
		// Messages 700..999: queue q lost queue offsets from (700-q+3)/4 on.
		first := (700 - q + 3) / 4
		want := fmt.Sprintf("topic=T queue=%d fromQueueOffset=%d toQueueOffset=%d count=%d", q, first, 249, 250-first)
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}
	served := 0
	for q := int32(0); q < 4; q++ {
		for k, b := range readQueue(t, s, q) {
			if want := wantBody(k*4 + int(q)); b != want {
				t.Fatalf("queue %d message %d is %.12q, want %.12q", q, k, b, want)
			}
			served++
		}
	}
	if served != 700 {
		t.Fatalf("%d messages served, want the 700 before the cut", served)
	}
	r, err := s.Put(msg("T", 0, "after"))
	if err != nil || r.CommitLogOffset != res[700].CommitLogOffset || r.QueueOffset != 175 {
		t.Fatalf("next put %+v (%v), want offset %d, queue offset 175", r, err, res[700].CommitLogOffset)
	}
}

// Bytes flipped in one record of the newest segment after a clean stop: that
// message is never served, every other one is, and the loss is named.
func TestCleanStopFlippedBytesMidSegment(t *testing.T) {
	dir := t.TempDir()
	res := fillQueues(t, dir, 400)
	bad := res[123]
	patchAt(t, filepath.Join(dir, "commitlog", "00000000000000000000"), bad.CommitLogOffset+150, func(b []byte) { b[0] ^= 0xFF })
	var logs logBuffer
	o := integrityOptions(dir)
	o.Logger = logs.logger(t)
	s := openStore(t, o)
	defer s.Close()
	if !strings.Contains(logs.String(), "topic=T queue=3 fromQueueOffset=30 toQueueOffset=30 count=1") {
		t.Fatalf("the lost message is not named:\n%s", logs.String())
	}
	served := 0
	for q := int32(0); q < 4; q++ {
		k := 0
		for _, b := range readQueue(t, s, q) {
			i := k*4 + int(q)
			if i == 123 {
				k++
				i = k*4 + int(q)
			}
			if b != wantBody(i) {
				t.Fatalf("queue %d served %.12q, want %.12q", q, b, wantBody(i))
			}
			k++
			served++
		}
	}
	if served != 399 {
		t.Fatalf("%d messages served, want 399", served)
	}
	// Recovery marked its entry lost (markLost), so Get skips it as lost,
	// not as an entry whose record does not match.
	if st := s.Stats(); st.LostMessages != 1 || st.LostEntriesSkipped != 1 || st.BadEntries != 0 {
		t.Fatalf("stats %+v: want 1 lost message, its entry skipped once as lost", st)
	}
}

// A queue rebuilt from a log with a hole: the hole's queue offsets become
// lost-message entries, so offsets stay dense and Get steps over them.
func TestRebuildAcrossAHoleKeepsOffsetsDense(t *testing.T) {
	dir := t.TempDir()
	res := fillQueues(t, dir, 400)
	patchAt(t, filepath.Join(dir, "commitlog", "00000000000000000000"), res[201].CommitLogOffset+150, func(b []byte) { b[0] ^= 0xFF })
	if err := os.RemoveAll(filepath.Dir(queueFile(dir, 1))); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, integrityOptions(dir))
	defer s.Close()
	if got := s.MaxOffset("T", 1); got != 100 {
		t.Fatalf("rebuilt queue max %d, want 100", got)
	}
	got := readQueue(t, s, 1)
	if len(got) != 99 {
		t.Fatalf("%d messages served, want 99", len(got))
	}
	if got[49] != wantBody(197) || got[50] != wantBody(205) {
		t.Fatalf("around the hole: %.12q, %.12q", got[49], got[50])
	}
	var ents []QueueEntry
	ents, err := s.ReadEntries("T", 1, 50, make([]QueueEntry, 0, 1))
	if err != nil || len(ents) != 1 || ents[0].Size != 0 {
		t.Fatalf("ReadEntries of the lost message: %+v %v, want Size 0", ents, err)
	}
	if r, err := s.Put(msg("T", 1, "after")); err != nil || r.QueueOffset != 100 {
		t.Fatalf("next put %+v %v", r, err)
	}
	s.Close()
	// The lost-message entries survive a clean restart as valid entries.
	s2 := openStore(t, integrityOptions(dir))
	defer s2.Close()
	if st := s2.Stats(); st.QueuesRebuilt != 0 {
		t.Fatalf("restart rebuilt %d queues", st.QueuesRebuilt)
	}
	if got := readQueue(t, s2, 1); len(got) != 100 {
		t.Fatalf("%d messages after restart, want 100", len(got))
	}
}

// An entry that points at another message (a plausible value, so the queue
// file's own checks pass): Get skips it instead of serving a stranger.
func TestGetSkipsEntryPointingElsewhere(t *testing.T) {
	dir := t.TempDir()
	res := fillQueues(t, dir, 40)
	// Queue 1's entry 4 (message 17) now points at message 18, queue 2's.
	patchAt(t, queueFile(dir, 1), 4*consumequeue.EntrySize, func(b []byte) {
		binary.BigEndian.PutUint64(b, uint64(res[18].CommitLogOffset))
		binary.BigEndian.PutUint32(b[8:], uint32(res[18].Size))
	})
	s := openStore(t, integrityOptions(dir))
	defer s.Close()
	got := readQueue(t, s, 1)
	if len(got) != 9 || slicesContains(got, wantBody(18)) {
		t.Fatalf("queue 1 served %d messages (a stranger among them: %v)", len(got), slicesContains(got, wantBody(18)))
	}
	if st := s.Stats(); st.BadEntries != 1 {
		t.Fatalf("%d bad entries, want 1", st.BadEntries)
	}
	_ = message.MagicHole
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
