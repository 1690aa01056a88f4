package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

// rawBytes returns the log's bytes [from, to) as its segments hold them.
func rawBytes(t testing.TB, l *Log, from, to int64) []byte {
	t.Helper()
	var out []byte
	for _, s := range *l.segs.Load() {
		lo, hi := max(from, s.base), min(to, s.base+l.opts.SegmentSize)
		if lo < hi {
			out = append(out, s.data[lo-s.base:hi-s.base]...)
		}
	}
	if int64(len(out)) != to-from {
		t.Fatalf("raw bytes [%d, %d): got %d", from, to, len(out))
	}
	return out
}

// appendN appends n records of size bytes each (sync mode: each waits for
// its flush) and returns their offsets.
func appendN(t testing.TB, l *Log, first, n, size int) []int64 {
	t.Helper()
	offs := make([]int64, n)
	for i := range n {
		var res Result
		if err := l.Append(encode(t, "T", bodyOf(first+i, size)), nil, &res); err != nil {
			t.Fatal(err)
		}
		if err := l.WaitFlushed(res.End); err != nil {
			t.Fatal(err)
		}
		offs[i] = res.Offsets[0]
	}
	return offs
}

func cutFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, TruncatedDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTruncateKeepsOnlyTheBytesCut: the file a truncation keeps holds the
// log's bytes from the cut to the old end (across a segment end), named
// after that range, and nothing else is kept.
func TestTruncateKeepsOnlyTheBytesCut(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, FlushMode: FlushSync, PrefaultAhead: -1, RetentionInterval: -1})
	defer l.Close()
	offs := appendN(t, l, 0, 40, 3000) // about two 64 KiB segments
	off, end := offs[15], l.WrittenOffset()
	if off/MinSegmentSize == end/MinSegmentSize {
		t.Fatalf("the cut [%d, %d) does not cross a segment end", off, end)
	}
	want := rawBytes(t, l, off, end)
	tr, err := l.TruncateTo(off)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Kept == "" || tr.KeptBytes != cutHeaderSize+end-off {
		t.Fatalf("truncation %+v", tr)
	}
	c, got, err := ReadTruncated(nil, tr.Kept)
	if err != nil {
		t.Fatal(err)
	}
	if c.Start != off || c.End != end || !bytes.Equal(got, want) {
		t.Fatalf("kept [%d, %d) %d bytes; want [%d, %d) %d bytes", c.Start, c.End, len(got), off, end, len(want))
	}
	if want := fmt.Sprintf("%020d-%020d-", off, end); !strings.HasPrefix(filepath.Base(tr.Kept), want) {
		t.Fatalf("file %s not named after its range %s", tr.Kept, want)
	}
	if files := cutFiles(t, dir); len(files) != 1 || files[0] != tr.Kept {
		t.Fatalf("kept %v, want only %s", files, tr.Kept)
	}
	if st, _ := os.Stat(tr.Kept); st.Size() != tr.KeptBytes {
		t.Fatalf("file size %d, want %d", st.Size(), tr.KeptBytes)
	}
	// A byte flipped in the payload is found by ReadTruncated; a file cut
	// short is renamed by the next Open.
	l.Close()
	b, _ := os.ReadFile(tr.Kept)
	b[cutHeaderSize+10] ^= 1
	os.WriteFile(tr.Kept, b, 0o644)
	if _, _, err := ReadTruncated(nil, tr.Kept); !errors.Is(err, ErrTruncatedDamaged) {
		t.Fatalf("flipped byte: %v", err)
	}
	os.WriteFile(tr.Kept, b[:len(b)-1], 0o644)
	os.WriteFile(tr.Kept+tmpCutSuffix, b[:100], 0o644)
	l2 := openLog(t, Options{Dir: dir, PrefaultAhead: -1, RetentionInterval: -1})
	defer l2.Close()
	if files := cutFiles(t, dir); len(files) != 1 || files[0] != tr.Kept+damagedCutSuffix {
		t.Fatalf("after open: %v, want only the damaged file renamed", files)
	}
	if l2.WrittenOffset() != off {
		t.Fatalf("reopened log ends at %d, want %d", l2.WrittenOffset(), off)
	}
}

// TestTruncatedRetention: what truncations kept goes after
// TruncatedRetention, and the oldest go while the total is above
// TruncatedMaxBytes; a truncation larger than the limit keeps nothing.
// Whole-segment directories of earlier versions count too; RestartAt's
// discarded segments go by age alone.
func TestTruncatedRetention(t *testing.T) {
	dir := t.TempDir()
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	const limit = 24000
	l := openLog(t, Options{Dir: dir, FlushMode: FlushSync, PrefaultAhead: -1, RetentionInterval: -1,
		TruncatedRetention: 24 * time.Hour, TruncatedMaxBytes: limit, now: now})
	defer l.Close()
	// An old whole-segment directory as earlier versions left it.
	legacy := filepath.Join(dir, TruncatedDir, fmt.Sprint(now().UnixMilli()))
	os.MkdirAll(legacy, 0o755)
	os.WriteFile(filepath.Join(legacy, segmentName(0)), make([]byte, 5000), 0o644)
	// A restart's discarded segments, larger than the limit: they go by
	// age alone.
	discarded := filepath.Join(dir, DiscardedDir, fmt.Sprint(now().Add(-time.Hour).UnixMilli()))
	os.MkdirAll(discarded, 0o755)
	os.WriteFile(filepath.Join(discarded, segmentName(0)), make([]byte, 3*limit), 0o644)

	var kept []Truncation
	for i := range 3 {
		skew.Add(int64(time.Hour))
		offs := appendN(t, l, 100*i, 3, 2000)
		tr, err := l.TruncateTo(offs[1]) // two records, about 4 KB
		if err != nil {
			t.Fatal(err)
		}
		if tr.Kept == "" {
			t.Fatalf("truncation %d kept nothing", i)
		}
		kept = append(kept, tr)
	}
	if rm, err := l.RetainTruncated(); err != nil || len(rm) != 0 {
		t.Fatalf("retention under the limits removed %v, %v", rm, err)
	}
	// Over the size: the oldest (the legacy directory) goes first.
	offs := appendN(t, l, 500, 4, 2000)
	tr, err := l.TruncateTo(offs[0])
	if err != nil || tr.Kept == "" {
		t.Fatalf("%+v, %v", tr, err)
	}
	rm, err := l.RetainTruncated()
	if err != nil || len(rm) != 1 || rm[0].Path != legacy || rm[0].Expired || rm[0].Bytes != 5000 {
		t.Fatalf("size retention removed %+v, %v", rm, err)
	}
	fourth := tr.Kept
	// Larger than the limit: nothing kept.
	offs = appendN(t, l, 600, 12, 2000)
	tr, err = l.TruncateTo(offs[0])
	if err != nil || tr.Kept != "" || tr.KeptBytes != 0 {
		t.Fatalf("a cut over the limit: %+v, %v", tr, err)
	}
	// By age: a day later the first three files are expired, the last one
	// not yet (it was written three hours after the first).
	skew.Add(int64(23*time.Hour + 30*time.Minute))
	rm, err = l.RetainTruncated()
	if err != nil || len(rm) != 3 || rm[0].Path != discarded || rm[1].Path != kept[0].Kept || rm[2].Path != kept[1].Kept || !rm[0].Expired || !rm[2].Expired {
		t.Fatalf("age retention removed %+v, %v", rm, err)
	}
	if files := cutFiles(t, dir); len(files) != 2 || files[0] != kept[2].Kept || files[1] != fourth {
		t.Fatalf("left %v", files)
	}
	// Negative: nothing kept at all.
	l.Close()
	l3 := openLog(t, Options{Dir: dir, FlushMode: FlushSync, PrefaultAhead: -1, RetentionInterval: -1, TruncatedMaxBytes: -1})
	defer l3.Close()
	offs = appendN(t, l3, 700, 2, 100)
	if tr, err := l3.TruncateTo(offs[0]); err != nil || tr.Kept != "" {
		t.Fatalf("%+v, %v", tr, err)
	}
	if rm, err := l3.RetainTruncated(); err != nil || len(rm) != 2 {
		t.Fatalf("negative limit removed %+v, %v", rm, err)
	}
	if files := cutFiles(t, dir); len(files) != 0 {
		t.Fatalf("left %v", files)
	}
}

// TestTruncatePowerLoss takes a crash copy (strict and torn) before every
// file operation of a truncation: each opens, holds every acknowledged
// record below the cut (and a prefix of those past it), and under the
// .cut name holds only complete files with the bytes cut; no temporary file
// is left once open.
func TestTruncatePowerLoss(t *testing.T) {
	root := t.TempDir()
	cfs, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	efs := errorfs.New(cfs)
	dir := filepath.Join(root, "log")
	l := openLog(t, Options{Dir: dir, FS: efs, FlushMode: FlushSync, PrefaultAhead: -1, RetentionInterval: -1})
	offs := appendN(t, l, 0, 40, 3000)
	off, end := offs[15], l.WrittenOffset()
	want := rawBytes(t, l, off, end)

	var clones []string
	seed := uint64(1)
	efs.FailWhen(func(op errorfs.Op, path string) unix.Errno {
		if !strings.HasPrefix(path, dir) {
			return 0
		}
		for _, mode := range []crashfs.Mode{crashfs.Strict, crashfs.Torn} {
			dst := filepath.Join(t.TempDir(), "c")
			seed++
			if _, err := cfs.CrashClone(dst, crashfs.CloneOptions{Mode: mode, Seed: seed}); err != nil {
				t.Errorf("clone: %v", err)
			}
			clones = append(clones, fmt.Sprintf("%s|%s/%s %s seed %d", dst, op, mode, path, seed))
		}
		return 0
	})
	tr, err := l.TruncateTo(off)
	efs.FailWhen(nil)
	if err != nil || tr.Kept == "" {
		t.Fatalf("%+v, %v", tr, err)
	}
	l.Close()
	withFile, without := 0, 0
	for _, c := range clones {
		dst, what, _ := strings.Cut(c, "|")
		cl, _, err := Open(Options{Dir: filepath.Join(dst, "log"), SegmentSize: MinSegmentSize, PrefaultAhead: -1,
			RetentionInterval: -1, Logger: testlog.New(t, "commitlog")})
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		if w := cl.WrittenOffset(); w < off || w > end {
			t.Errorf("%s: the log ends at %d, want within [%d, %d]", what, w, off, end)
		}
		files := cutFiles(t, filepath.Join(dst, "log"))
		for _, f := range files {
			if strings.HasSuffix(f, tmpCutSuffix) {
				t.Errorf("%s: a temporary file left after open: %s", what, f)
				continue
			}
			if strings.HasSuffix(f, damagedCutSuffix) {
				continue // found and renamed: never taken as complete
			}
			c, got, err := ReadTruncated(nil, f)
			if err != nil || c.Start != off || c.End != end || !bytes.Equal(got, want) {
				t.Errorf("%s: %s under the complete name: %v", what, f, err)
			}
			withFile++
		}
		if len(files) == 0 {
			without++
			if cl.WrittenOffset() != end {
				t.Errorf("%s: the log was cut with no file kept", what)
			}
		}
		cl.Close()
	}
	if withFile == 0 || without == 0 {
		t.Fatalf("%d copies with the file, %d without: the crash points miss the save", withFile, without)
	}
}

// TestTruncateFaults fails each file operation of a truncation in turn
// (once, and from then on): the truncation either succeeds, with its file
// complete, or fails; then the directory, reopened on the real file
// system, opens, ends between the cut and the old end, and holds under the .cut
// name only complete files.
func TestTruncateFaults(t *testing.T) {
	modes := []errorfs.Mode{errorfs.Once, errorfs.Stop}
	errorfs.Walk(t, vfs.Default, modes, func(t *testing.T, fsys *errorfs.FS, dir string) {
		o := Options{Dir: filepath.Join(dir, "log"), SegmentSize: MinSegmentSize, FlushMode: FlushSync, PrefaultAhead: -1,
			RetentionInterval: -1, Logger: testlog.New(t, "commitlog"), TruncatedMaxBytes: 1 << 20}
		setup := o
		l, _, err := Open(setup) // the setup runs on the real file system
		if err != nil {
			t.Fatal(err)
		}
		offs := appendN(t, l, 0, 30, 3000)
		off, end := offs[10], l.WrittenOffset()
		want := rawBytes(t, l, off, end)
		l.Close()

		o.FS = fsys
		l, _, err = Open(o)
		if err == nil {
			tr, terr := l.TruncateTo(off)
			if terr == nil && tr.Kept == "" {
				t.Fatalf("a truncation that succeeded kept nothing")
			}
			if _, err := l.RetainTruncated(); err != nil && terr == nil && fsys.Fired() == nil {
				t.Fatal(err)
			}
			l.Close()
		}
		fsys.Disarm()
		r, _, err := Open(setup)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer r.Close()
		if w := r.WrittenOffset(); w < off || w > end {
			t.Fatalf("the log ends at %d, want within [%d, %d]", w, off, end)
		}
		for _, f := range cutFiles(t, o.Dir) {
			if strings.HasSuffix(f, tmpCutSuffix) {
				t.Fatalf("temporary file left after open: %s", f)
			}
			if strings.HasSuffix(f, damagedCutSuffix) {
				continue
			}
			if c, got, err := ReadTruncated(nil, f); err != nil || c.Start != off || !bytes.Equal(got, want) {
				t.Fatalf("%s: %v", f, err)
			}
		}
	})
}
