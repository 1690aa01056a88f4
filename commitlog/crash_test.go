package commitlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/crashtest"
	"github.com/apogeemq/apogee/message"
)

// simulateCrash stops the log the way a killed process would: no final flush,
// no clean checkpoint. The mapped pages stay in the page cache, as they do
// when a process dies.
func (l *Log) simulateCrash() {
	l.mu.Lock()
	l.closed.Store(true)
	l.mu.Unlock()
	close(l.stop)
	l.wg.Wait()
	l.allocMu.Lock()
	if l.prepared != nil {
		l.prepared.release(false)
		l.prepared = nil
	}
	l.allocMu.Unlock()
	l.releaseAll()
}

func bodyHash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

const crashChildEnv = "APOGEE_COMMITLOG_CRASH_DIR"

// TestCrashChild is the child of TestCrashSIGKILL: it appends in sync mode
// from 8 goroutines and prints one line per acknowledged record until killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestCrashSIGKILL")
	}
	appendUntilKilled(Options{Dir: dir, SegmentSize: 256 << 10, FlushMode: FlushSync}, 8, nil)
}

// appendUntilKilled is a crash test's child: it opens the log with o and
// runs writers goroutines that append random records in sync mode, each
// waiting for its record to be flushed, and print "ack OFFSET SIZE HASH" per
// acknowledged record on stdout, until the parent kills the process.
// after, when set, runs on writer g after its i-th record (before the ack is
// printed).
func appendUntilKilled(o Options, writers int, after func(l *Log, g, i int)) {
	l, _, err := Open(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	fmt.Println(crashtest.Ready)
	var out sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			var res Result
			var buf []byte
			for i := 0; ; i++ {
				body := make([]byte, 1+rng.IntN(3000))
				for j := range body {
					body[j] = byte(rng.Uint32())
				}
				r := message.Record{Topic: "crash", QueueID: int32(g), BornHost: testHost, StoreHost: testHost, Body: body}
				buf, _ = message.AppendRecord(buf[:0], &r)
				res.Offsets = res.Offsets[:0]
				if err := l.Append(buf, nil, &res); err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				if err := l.WaitFlushed(res.End); err != nil {
					fmt.Fprintln(os.Stderr, "flush:", err)
					os.Exit(4)
				}
				if after != nil {
					after(l, g, i)
				}
				out.Lock()
				fmt.Fprintf(w, "ack %d %d %d\n", res.Offsets[0], len(buf), bodyHash(body))
				w.Flush()
				out.Unlock()
			}
		}(g)
	}
	wg.Wait()
}

type ack struct {
	offset int64
	size   int
	hash   uint64
}

// TestCrashSIGKILL kills a process appending in sync mode at random moments
// and checks after each kill that every acknowledged record survived intact
// and that nothing invalid is readable.
func TestCrashSIGKILL(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child")
	}
	rounds := 20
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	var all []ack
	for round := 0; round < rounds; round++ {
		acks := runCrashChild(t, dir, time.Duration(30+rng.IntN(200))*time.Millisecond)
		all = append(all, acks...)
		l, rep, err := Open(Options{Dir: dir, SegmentSize: 256 << 10, FlushMode: FlushSync, RetentionInterval: -1})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		if rep.Clean {
			t.Fatalf("round %d: a killed process left a clean checkpoint", round)
		}
		for _, a := range all {
			v, err := l.ReadRecord(a.offset)
			if err != nil {
				t.Fatalf("round %d: acknowledged record at %d lost: %v (%s)", round, a.offset, err, rep)
			}
			m, err := message.Decode(v.Bytes(), true)
			if err != nil || m.TotalSize() != a.size || bodyHash(m.Body()) != a.hash {
				t.Fatalf("round %d: acknowledged record at %d damaged: %v", round, a.offset, err)
			}
			v.Release()
		}
		checkAllValid(t, l)
		l.simulateCrash() // leave it for the next child to recover again
		t.Logf("round %d: %d acks this round, %d total; %s", round, len(acks), len(all), rep)
	}
	if len(all) == 0 {
		t.Fatal("no record was acknowledged in any round")
	}
}

// checkAllValid walks every readable record and validates it.
func checkAllValid(t *testing.T, l *Log) {
	t.Helper()
	c := l.NewCursor(l.MinOffset())
	defer c.Close()
	for {
		rec, off, err := c.Next()
		if errors.Is(err, ErrOffsetNotWritten) {
			return
		}
		if err != nil {
			t.Fatalf("walk at %d: %v", off, err)
		}
		m, err := message.Decode(rec, true)
		if err != nil || m.PhysicalOffset() != off {
			t.Fatalf("invalid record readable at %d: %v", off, err)
		}
	}
}

func runCrashChild(t *testing.T, dir string, after time.Duration) []ack {
	t.Helper()
	var acks []ack
	crashtest.KillAfter(t, "TestCrashChild", []string{crashChildEnv + "=" + dir}, after, 30*time.Second, func(line string) {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "ack" {
			return
		}
		off, _ := strconv.ParseInt(f[1], 10, 64)
		size, _ := strconv.Atoi(f[2])
		h, err := strconv.ParseUint(f[3], 10, 64)
		if err == nil {
			acks = append(acks, ack{off, size, h})
		}
	})
	return acks
}

// damage helpers ----------------------------------------------------------

// writeRecords appends n records, crashes the log, and returns the offsets,
// the directory and the end.
func crashedLog(t *testing.T, n int) (dir string, offsets []int64, end int64) {
	t.Helper()
	dir = t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentSize: 1 << 20})
	var res Result
	for i := 0; i < n; i++ {
		if err := l.Append(encode(t, "T", bodyOf(i, 700)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	offsets = res.Offsets
	end = l.WrittenOffset()
	l.simulateCrash()
	return dir, offsets, end
}

func patchFile(t *testing.T, dir string, base, off int64, fn func(b []byte)) {
	t.Helper()
	path := filepath.Join(dir, segmentName(base))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fn(b[off-base:])
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func reopenAfterDamage(t *testing.T, dir string) (*Log, Recovery) {
	t.Helper()
	l, rep, err := Open(Options{Dir: dir, SegmentSize: 1 << 20, RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, rep
}

func TestRecoverTornLastRecord(t *testing.T) {
	dir, offs, end := crashedLog(t, 100)
	last := offs[len(offs)-1]
	// The last record's second half never reached the disk.
	patchFile(t, dir, 0, last, func(b []byte) { clear(b[(end-last)/2 : end-last]) })
	l, rep := reopenAfterDamage(t, dir)
	if rep.End != last || rep.DroppedRecords != 1 || rep.DroppedBytes == 0 || rep.Clean {
		t.Fatalf("report %+v, want end %d with 1 record dropped", rep, last)
	}
	if got := len(readAll(t, l)); got != 99 {
		t.Fatalf("%d records readable, want 99", got)
	}
	checkAllValid(t, l)
}

func TestRecoverZeroedTail(t *testing.T) {
	dir, offs, end := crashedLog(t, 100)
	cut := offs[90]
	patchFile(t, dir, 0, cut, func(b []byte) { clear(b[:end-cut]) })
	l, rep := reopenAfterDamage(t, dir)
	if rep.End != cut || rep.DroppedBytes != 0 {
		t.Fatalf("report %+v, want end %d and nothing non-zero dropped", rep, cut)
	}
	if got := len(readAll(t, l)); got != 90 {
		t.Fatalf("%d records readable, want 90", got)
	}
	// New appends go where the zeroed tail began and survive another crash.
	var res Result
	if err := l.Append(encode(t, "T", []byte("new")), nil, &res); err != nil || res.Offsets[0] != cut {
		t.Fatalf("append after recovery at %v (%v), want %d", res.Offsets, err, cut)
	}
}

func TestRecoverFlippedByteMidSegment(t *testing.T) {
	dir, offs, _ := crashedLog(t, 100)
	bad := offs[40]
	var original []byte
	patchFile(t, dir, 0, bad, func(b []byte) {
		original = bytes.Clone(b[:offs[41]-bad])
		b[200] ^= 0x40 // inside the body: CRC mismatch
	})
	l, rep := reopenAfterDamage(t, dir)
	// The damaged record becomes a hole; the 59 records after it are kept.
	if len(rep.Losses) != 1 || rep.Losses[0].From != bad || rep.Losses[0].To != offs[41] {
		t.Fatalf("report %+v, want one loss [%d,%d)", rep, bad, offs[41])
	}
	if !strings.Contains(rep.Losses[0].Reason, "CRC") {
		t.Fatalf("reason %q does not name the CRC", rep.Losses[0].Reason)
	}
	saved, err := os.ReadFile(rep.Losses[0].Saved)
	if err != nil {
		t.Fatal(err)
	}
	original[200] ^= 0x40
	if !bytes.Equal(saved, original) {
		t.Fatal("the saved bytes are not the damaged record's")
	}
	if got := len(readAll(t, l)); got != 99 {
		t.Fatalf("%d records readable, want 99", got)
	}
	if _, err := l.ReadRecord(bad); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("ReadRecord of the hole: %v, want ErrNoRecord", err)
	}
	checkAllValid(t, l)
	// The hole stays a hole: a second recovery skips it and loses nothing.
	l.simulateCrash()
	l2, rep2 := reopenAfterDamage(t, dir)
	if rep2.Lost() || rep2.Holes != 1 || len(readAll(t, l2)) != 99 {
		t.Fatalf("second recovery %+v, want the hole skipped and nothing dropped", rep2)
	}
}

func TestRecoverStaleRecordAfterTruncation(t *testing.T) {
	// A record whose bytes are valid but whose PHYSICALOFFSET names another
	// position is stale data from before an earlier truncation.
	dir, offs, _ := crashedLog(t, 10)
	patchFile(t, dir, 0, offs[9], func(b []byte) { message.SetPhysicalOffset(b, 12345) })
	_, rep := reopenAfterDamage(t, dir)
	if rep.End != offs[9] || !strings.Contains(rep.Reason, "stale") {
		t.Fatalf("report %+v, want truncation at %d for a stale record", rep, offs[9])
	}
}

func TestRecoverStaleRecordMidLogIsAHole(t *testing.T) {
	dir, offs, end := crashedLog(t, 10)
	patchFile(t, dir, 0, offs[5], func(b []byte) { message.SetPhysicalOffset(b, 12345) })
	l, rep := reopenAfterDamage(t, dir)
	if rep.End != end || len(rep.Losses) != 1 || rep.Losses[0].From != offs[5] || !strings.Contains(rep.Losses[0].Reason, "stale") {
		t.Fatalf("report %+v, want a hole at %d", rep, offs[5])
	}
	if got := len(readAll(t, l)); got != 9 {
		t.Fatalf("%d records readable, want 9", got)
	}
}

func TestRecoverRemovesSegmentsAfterTruncation(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir})
	var res Result
	for l.WrittenOffset() < 2*MinSegmentSize+1000 {
		if err := l.Append(encode(t, "T", bodyOf(1, 3000)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	l.simulateCrash()
	// The second segment's pages never reached the disk, and the third holds
	// only garbage (torn records): the log ends at the second segment's base.
	patchFile(t, dir, MinSegmentSize, MinSegmentSize, func(b []byte) { clear(b) })
	patchFile(t, dir, 2*MinSegmentSize, 2*MinSegmentSize, func(b []byte) {
		for i := 0; i+8 < 4000; i += 64 {
			b[i+message.OffMagic] ^= 0xFF
		}
	})
	l2, rep, err := Open(Options{Dir: dir, SegmentSize: MinSegmentSize, RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if rep.End != MinSegmentSize || rep.DroppedSegments != 1 {
		t.Fatalf("report %+v", rep)
	}
	if segs := l2.Segments(); len(segs) != 2 {
		t.Fatalf("segments %v after truncation, want the first two", segs)
	}
	// The allocator may have prepared a fresh segment at that base again; the
	// old data must be gone either way.
	if b, err := os.ReadFile(filepath.Join(dir, segmentName(2*MinSegmentSize))); err == nil && lastNonZero(b) >= 0 {
		t.Fatal("data after the truncation point survived recovery")
	}
}

func TestRecoverIgnoresCorruptCheckpoint(t *testing.T) {
	dir, _, end := crashedLog(t, 50)
	if err := os.WriteFile(filepath.Join(dir, checkpointName), []byte("garbage garbage garbage garbage garbage!"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, rep := reopenAfterDamage(t, dir)
	if rep.Clean || rep.End != end || rep.ScannedFrom != 0 {
		t.Fatalf("report %+v, want a full scan to %d", rep, end)
	}
	if got := len(readAll(t, l)); got != 50 {
		t.Fatalf("%d records, want 50", got)
	}
}
