package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/internal/wait"
)

// scrubOptions spreads the messages over several small segments, so that
// damage can sit in a segment a restart does not re-validate.
func scrubOptions(dir string) Options {
	o := integrityOptions(dir)
	o.SegmentSize = 128 << 10
	o.MaxMessageSize = 4 << 10
	o.ScrubRate = -1 // passes are run by the tests
	return o
}

func fillScrub(t *testing.T, dir string, n int) []PutResult {
	t.Helper()
	s := openStore(t, scrubOptions(dir))
	var res []PutResult
	for i := 0; i < n; i++ {
		r, err := s.Put(msg("T", int32(i%4), wantBody(i), "KEYS", fmt.Sprint("k", i)))
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

func segmentPath(dir string, off, segSize int64) string {
	return filepath.Join(dir, "commitlog", fmt.Sprintf("%020d", off-off%segSize))
}

// A body flipped in an old segment after a clean stop: the restart checks
// only the newest segment, so the scrubber is what finds it; it sets the
// record aside as a hole and names the lost message, and Get never serves it
// again.
func TestScrubSetsADamagedOldRecordAside(t *testing.T) {
	dir := t.TempDir()
	res := fillScrub(t, dir, 1000)
	bad := res[10]
	path := segmentPath(dir, bad.CommitLogOffset, 128<<10)
	patchAt(t, path, bad.CommitLogOffset%(128<<10)+150, func(b []byte) { b[0] ^= 0x01 })
	var logs logBuffer
	o := scrubOptions(dir)
	o.Logger = logs.logger(t)
	s := openStore(t, o)
	defer s.Close()
	rep, err := s.Scrub(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.BadRecords != 1 || rep.Holes != 1 || rep.Records != 999 || rep.EntriesRepaired != 0 {
		t.Fatalf("scrub report %+v", rep)
	}
	if !strings.Contains(logs.String(), "topic=T queue=2 fromQueueOffset=2 toQueueOffset=2 count=1") {
		t.Fatalf("the lost message is not named:\n%s", logs.String())
	}
	got := readQueue(t, s, 2)
	if len(got) != 249 || slicesContains(got, wantBody(10)) {
		t.Fatalf("queue 2 serves %d messages after the scrub", len(got))
	}
	// A second pass finds nothing new; a restart skips the hole.
	if rep2, err := s.Scrub(context.Background()); err != nil || !rep2.OK() {
		t.Fatalf("second pass: %+v %v", rep2, err)
	}
	s.Close()
	s2, rec, err := Open(scrubOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if !rec.Verified {
		t.Fatalf("restart after the scrub: %s", rec)
	}
	if got := readQueue(t, s2, 2); len(got) != 249 {
		t.Fatalf("%d messages after restart", len(got))
	}
}

// An entry rewritten to point at another message (plausible, so no check of
// the queue file's own catches it): Get skips it, the scrubber rewrites it
// from the record, and then Get serves the message again.
func TestScrubRepairsAnEntryFromItsRecord(t *testing.T) {
	dir := t.TempDir()
	res := fillScrub(t, dir, 400)
	patchAt(t, queueFile(dir, 1), 4*consumequeue.EntrySize, func(b []byte) {
		binary.BigEndian.PutUint64(b, uint64(res[18].CommitLogOffset))
		binary.BigEndian.PutUint32(b[8:], uint32(res[18].Size))
	})
	s := openStore(t, scrubOptions(dir))
	defer s.Close()
	if got := readQueue(t, s, 1); len(got) != 99 {
		t.Fatalf("%d messages before the scrub, want 99 (the stranger skipped)", len(got))
	}
	rep, err := s.Scrub(context.Background())
	if err != nil || rep.EntriesRepaired != 1 || rep.BadRecords != 0 {
		t.Fatalf("scrub %+v %v", rep, err)
	}
	got := readQueue(t, s, 1)
	if len(got) != 100 || got[4] != wantBody(17) {
		t.Fatalf("%d messages after the scrub; entry 4 = %.10q", len(got), got[4])
	}
	if st := s.Stats(); st.ScrubRepairedEntries != 1 || st.ScrubPasses != 1 || st.LastScrub.IsZero() {
		t.Fatalf("stats %+v", st)
	}
}

// The background scrubber runs by itself and keeps to its rate.
func TestScrubLoopRunsAtItsRate(t *testing.T) {
	dir := t.TempDir()
	fillScrub(t, dir, 3000) // about 750 KiB of records
	o := scrubOptions(dir)
	o.ScrubRate = 2 << 20
	o.scrubDelay = time.Millisecond
	s := openStore(t, o)
	defer s.Close()
	start := time.Now()
	wait.Until(t, "a scrub pass", func() bool { return s.Stats().ScrubPasses > 0 })
	st := s.Stats()
	if st.ScrubBytes < 700<<10 || st.ScrubBadRecords != 0 {
		t.Fatalf("stats %+v", st)
	}
	// At 2 MiB/s, pacing every 256 KiB, 750 KiB take at least 0.25 s.
	if took := st.LastScrub.Sub(start); took < 250*time.Millisecond {
		t.Fatalf("a pass over %d bytes at 2 MiB/s took %v", st.ScrubBytes, took)
	}
	_ = os.Getpid
}
