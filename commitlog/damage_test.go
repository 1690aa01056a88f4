package commitlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/message"
)

// Damage after a clean shutdown: the paths a crash test never takes. Each
// test closes the log cleanly, damages a file as an operator, a broken copy
// or bit rot would, and checks that Open keeps every valid record, never
// writes over one, reports the loss and serves nothing damaged.

// cleanLog appends n records of about 700 bytes into segSize segments and
// closes the log cleanly. It returns the directory, the record offsets and
// the end.
func cleanLog(t *testing.T, n int, segSize int64) (dir string, offsets []int64, end int64) {
	t.Helper()
	dir = t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentSize: segSize})
	var res Result
	for i := 0; i < n; i++ {
		if err := l.Append(encode(t, "T", bodyOf(i, 700)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	end = l.WrittenOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, res.Offsets, end
}

func reopen(t *testing.T, dir string, segSize int64) (*Log, Recovery) {
	t.Helper()
	l, rep, err := Open(Options{Dir: dir, SegmentSize: segSize, RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, rep
}

func TestCleanShutdownIsVerified(t *testing.T) {
	dir, offs, end := cleanLog(t, 300, 1<<20)
	_, rep := reopen(t, dir, 1<<20)
	if !rep.Clean || !rep.Verified || rep.Lost() || rep.End != end {
		t.Fatalf("report %+v, want a verified clean start at %d", rep, end)
	}
	// The newest segment was validated record by record.
	newest := end - end%(1<<20)
	want := int64(0)
	for _, o := range offs {
		if o >= newest {
			want++
		}
	}
	if rep.ScannedFrom != newest || rep.ScannedRecords != want {
		t.Fatalf("scanned %d records from %d, want %d from %d", rep.ScannedRecords, rep.ScannedFrom, want, newest)
	}
}

// A segment cut short after a clean stop (truncate -s): every record before
// the cut stays readable, the loss is reported, and new records go after the
// kept ones, never over them.
func TestCleanShutdownShortenedSegment(t *testing.T) {
	dir, offs, end := cleanLog(t, 200, 1<<20)
	cut := offs[120] + 300 // inside record 120
	path := filepath.Join(dir, segmentName(0))
	if err := os.Truncate(path, cut); err != nil {
		t.Fatal(err)
	}
	l, rep := reopen(t, dir, 1<<20)
	if rep.Verified || rep.End != offs[120] || len(rep.Extended) != 1 {
		t.Fatalf("report %+v, want the end at %d and the segment reported extended", rep, offs[120])
	}
	if len(rep.Losses) != 1 || rep.Losses[0].From != offs[120] || rep.Losses[0].To != end || rep.Losses[0].Unsynced {
		t.Fatalf("losses %+v, want [%d,%d) of durable data", rep.Losses, offs[120], end)
	}
	saved, err := os.ReadFile(rep.Losses[0].Saved)
	if err != nil || len(saved) != 300 {
		t.Fatalf("saved bytes: %d (%v), want the 300 bytes of record 120 before the cut", len(saved), err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 1<<20 {
		t.Fatalf("segment size after recovery: %v %v", st, err)
	}
	bodies := readAll(t, l)
	if len(bodies) != 120 {
		t.Fatalf("%d records readable, want 120", len(bodies))
	}
	for i, b := range bodies {
		if !bytes.Equal(b, bodyOf(i, 700)) {
			t.Fatalf("record %d changed", i)
		}
	}
	var res Result
	if err := l.Append(encode(t, "T", []byte("after")), nil, &res); err != nil || res.Offsets[0] != offs[120] {
		t.Fatalf("next append at %v (%v), want %d", res.Offsets, err, offs[120])
	}
}

// Bytes flipped in the middle of the newest segment after a clean stop: the
// damaged record is never served, every other record is.
func TestCleanShutdownFlippedBytesNewestSegment(t *testing.T) {
	dir, offs, end := cleanLog(t, 200, 1<<20)
	patchFile(t, dir, 0, offs[100], func(b []byte) {
		for i := 150; i < 160; i++ {
			b[i] ^= 0x5A
		}
	})
	l, rep := reopen(t, dir, 1<<20)
	if rep.Verified || rep.End != end || len(rep.Losses) != 1 || rep.Losses[0].From != offs[100] || rep.Losses[0].To != offs[101] {
		t.Fatalf("report %+v, want one hole over record 100 and the end at %d", rep, end)
	}
	if rep.Losses[0].Unsynced || rep.Losses[0].Saved == "" {
		t.Fatalf("loss %+v: want durable data, saved aside", rep.Losses[0])
	}
	bodies := readAll(t, l)
	if len(bodies) != 199 {
		t.Fatalf("%d records readable, want 199", len(bodies))
	}
	for i, b := range bodies {
		j := i
		if i >= 100 {
			j++
		}
		if !bytes.Equal(b, bodyOf(j, 700)) {
			t.Fatalf("record %d changed", j)
		}
	}
	if _, err := l.ReadRecord(offs[100]); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("ReadRecord of the damaged record: %v", err)
	}
	checkAllValid(t, l)
}

// A damaged TOTALSIZE: the scan cannot step over the record and finds the
// next one by its magic code, offset and CRC.
func TestCleanShutdownDamagedSizeField(t *testing.T) {
	dir, offs, end := cleanLog(t, 50, 1<<20)
	patchFile(t, dir, 0, offs[10], func(b []byte) { b[0], b[1], b[2], b[3] = 0x7F, 0x00, 0x12, 0x34 })
	l, rep := reopen(t, dir, 1<<20)
	if rep.End != end || len(rep.Losses) != 1 || rep.Losses[0].From != offs[10] || rep.Losses[0].To != offs[11] {
		t.Fatalf("report %+v", rep)
	}
	if got := len(readAll(t, l)); got != 49 {
		t.Fatalf("%d records readable, want 49", got)
	}
}

// A middle segment whose data stops short (its last pages zeroed) while a
// later segment holds data: the segment is closed early with a blank-end
// marker and the later segments are kept.
func TestMiddleSegmentClosedEarly(t *testing.T) {
	const seg = MinSegmentSize
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentSize: seg})
	var res Result
	for l.WrittenOffset() < 2*seg+5000 {
		if err := l.Append(encode(t, "T", bodyOf(len(res.Offsets), 1000)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	end := l.WrittenOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Zero the second half of the first segment; the clean path scans only
	// the newest one, so make the start scan from the first segment by
	// cutting it (an operator's truncate).
	var cut int64
	for _, o := range res.Offsets {
		if o > seg/2 && o < seg {
			cut = o
			break
		}
	}
	if err := os.Truncate(filepath.Join(dir, segmentName(0)), cut); err != nil {
		t.Fatal(err)
	}
	l2, rep := reopen(t, dir, seg)
	if rep.End != end || len(rep.Losses) != 1 || rep.Losses[0].From != cut || rep.Losses[0].To != seg {
		t.Fatalf("report %+v, want the end at %d and one loss [%d,%d)", rep, end, cut, seg)
	}
	kept := 0
	for _, o := range res.Offsets {
		if o < cut || o >= seg {
			kept++
		}
	}
	if got := len(readAll(t, l2)); got != kept {
		t.Fatalf("%d records readable, want %d", got, kept)
	}
	checkAllValid(t, l2)
}

func TestMissingMiddleSegmentRefusedUnlessAccepted(t *testing.T) {
	const seg = MinSegmentSize
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentSize: seg})
	var res Result
	for l.WrittenOffset() < 3*seg+5000 {
		if err := l.Append(encode(t, "T", bodyOf(1, 1000)), nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	end := l.WrittenOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, segmentName(seg))); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(Options{Dir: dir, SegmentSize: seg, RetentionInterval: -1})
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), segmentName(seg)) || !strings.Contains(err.Error(), "AcceptLoss") {
		t.Fatalf("Open with a missing segment: %v, want ErrLayout naming %s and the option", err, segmentName(seg))
	}
	l2, rep, err := Open(Options{Dir: dir, SegmentSize: seg, RetentionInterval: -1, AcceptLoss: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.MinOffset() != 2*seg || rep.End != end || len(rep.SetAside) != 1 {
		t.Fatalf("min %d, report %+v: want the log from %d to %d with the first segment set aside", l2.MinOffset(), rep, 2*seg, end)
	}
	if _, err := os.Stat(rep.SetAside[0]); err != nil {
		t.Fatalf("set-aside segment: %v", err)
	}
}

func TestLongSegmentRefused(t *testing.T) {
	dir, _, _ := cleanLog(t, 10, MinSegmentSize)
	f, err := os.OpenFile(filepath.Join(dir, segmentName(0)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(2 * MinSegmentSize)
	f.Close()
	if _, _, err := Open(Options{Dir: dir, SegmentSize: MinSegmentSize, RetentionInterval: -1}); !errors.Is(err, ErrLayout) {
		t.Fatalf("Open with a long segment: %v, want ErrLayout", err)
	}
}

// Every segment deleted while the checkpoint records data: refused, never an
// empty log over offsets that consumers and queues still refer to.
func TestNoSegmentLeftRefused(t *testing.T) {
	dir, _, end := cleanLog(t, 10, MinSegmentSize)
	if err := os.Remove(filepath.Join(dir, segmentName(0))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(Options{Dir: dir, SegmentSize: MinSegmentSize, RetentionInterval: -1}); !errors.Is(err, ErrLayout) {
		t.Fatalf("Open with no segment: %v, want ErrLayout", err)
	}
	l, rep, err := Open(Options{Dir: dir, SegmentSize: MinSegmentSize, RetentionInterval: -1, AcceptLoss: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.WrittenOffset() < end || len(rep.Losses) != 1 {
		t.Fatalf("accepted: written %d, report %+v: want a new log after %d", l.WrittenOffset(), rep, end)
	}
}

// Garbage after the recorded end of a clean shutdown is not trusted, and not
// destroyed either: it is saved aside and zeroed.
func TestCleanShutdownGarbageAfterEnd(t *testing.T) {
	dir, _, end := cleanLog(t, 10, MinSegmentSize)
	patchFile(t, dir, 0, end, func(b []byte) { copy(b, "garbage after the end") })
	_, rep := reopen(t, dir, MinSegmentSize)
	if rep.Verified || rep.End != end || rep.Mismatch == "" || len(rep.Losses) != 1 || rep.Losses[0].Saved == "" {
		t.Fatalf("report %+v, want the end kept, a mismatch and the bytes saved", rep)
	}
	b, err := os.ReadFile(filepath.Join(dir, segmentName(0)))
	if err != nil || lastNonZero(b[end:]) >= 0 {
		t.Fatalf("bytes after the end not zeroed (%v)", err)
	}
	if !strings.Contains(rep.String(), "NOT confirmed") {
		t.Fatalf("report string %q does not say the clean shutdown was not confirmed", rep.String())
	}
	_ = message.MagicHole
}

// OpenReadOnly finds what recovery would, and changes nothing.
func TestOpenReadOnlyReportsWithoutWriting(t *testing.T) {
	dir, offs, end := cleanLog(t, 200, 1<<20)
	patchFile(t, dir, 0, offs[50], func(b []byte) { b[150] ^= 0x11 })
	cut := offs[150] + 100
	path := filepath.Join(dir, segmentName(0))
	if err := os.Truncate(path, cut); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	ckpt, _ := os.ReadFile(filepath.Join(dir, checkpointName))
	l, rep, err := OpenReadOnly(Options{Dir: dir, SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if rep.End != offs[150] || len(rep.Losses) != 2 || rep.Losses[0].From != offs[50] || rep.Losses[1].From != offs[150] || rep.Losses[1].To != end || len(rep.Extended) != 1 {
		t.Fatalf("report %+v", rep)
	}
	if got := len(readAll(t, l)); got != 149 {
		t.Fatalf("%d records readable, want 149", got)
	}
	if err := l.Append(encode(t, "T", []byte("x")), nil, &Result{}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Append on a read-only log: %v", err)
	}
	l.Close()
	after, _ := os.ReadFile(path)
	ckpt2, _ := os.ReadFile(filepath.Join(dir, checkpointName))
	if !bytes.Equal(before, after) || !bytes.Equal(ckpt, ckpt2) {
		t.Fatal("OpenReadOnly changed a file")
	}
	if _, err := os.Stat(filepath.Join(dir, DamagedDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenReadOnly created %s", DamagedDir)
	}
}
