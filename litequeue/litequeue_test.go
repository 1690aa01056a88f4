package litequeue

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// testFileSize is small so that tests cross block files.
const testFileSize = 64 << 10 // 128 blocks

func openT(t *testing.T, dir string) (*Index, Recovery) {
	t.Helper()
	x, rep, err := Open(dir, Options{FileSize: testFileSize})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return x, rep
}

// crash simulates a process crash after the last Flush: nothing more is
// written (no TABLE), the files are released.
func crash(t *testing.T, x *Index) {
	t.Helper()
	x.mu.Lock()
	x.closed = true
	x.release()
	x.mu.Unlock()
}

func entry(cl int64) Entry {
	return Entry{CommitLogOffset: cl, Size: int32(100 + cl%7), TagCode: cl * 3}
}

// fill appends n entries to each of lites under parent, round robin, with
// commit-log offsets from *cl on, and returns the entries per lite topic.
func fill(t *testing.T, x *Index, parent string, lites []string, n int, cl *int64) map[string][]Entry {
	t.Helper()
	got := map[string][]Entry{}
	base := map[string]int64{}
	for _, l := range lites {
		_, base[l], _ = x.Offsets(parent, l)
	}
	for i := 0; i < n; i++ {
		for _, l := range lites {
			*cl += 200
			e := entry(*cl)
			r, err := x.Append([]byte(parent), []byte(l), e, *cl)
			if err != nil {
				t.Fatalf("Append %s/%s: %v", parent, l, err)
			}
			got[l] = append(got[l], e)
			if r.Max != base[l]+int64(len(got[l])) {
				t.Fatalf("Append %s/%s: max %d, want %d", parent, l, r.Max, base[l]+int64(len(got[l])))
			}
		}
	}
	return got
}

// checkAll reads every lite topic from every offset and compares.
func checkAll(t *testing.T, x *Index, parent string, want map[string][]Entry, min int64) {
	t.Helper()
	for l, es := range want {
		mn, mx, ok := x.Offsets(parent, l)
		if !ok || mx != int64(len(es)) || mn != min {
			t.Fatalf("%s: offsets %d..%d (%v), want %d..%d", l, mn, mx, ok, min, len(es))
		}
		for from := min; from < int64(len(es)); from += 5 {
			got, _, _, ok, err := x.Read(parent, l, from, make([]Entry, 0, 60))
			if err != nil || !ok {
				t.Fatalf("%s: Read(%d): %v %v", l, from, ok, err)
			}
			wantN := min64(60, int64(len(es))-from)
			if int64(len(got)) != wantN {
				t.Fatalf("%s: Read(%d) = %d entries, want %d", l, from, len(got), wantN)
			}
			for i, e := range got {
				if e != es[from+int64(i)] {
					t.Fatalf("%s: entry %d = %+v, want %+v", l, from+int64(i), e, es[from+int64(i)])
				}
			}
		}
	}
}

func min64(a, b int64) int64 { return min(a, b) }

func TestAppendReadAcrossBlocksAndFiles(t *testing.T) {
	dir := t.TempDir()
	x, _ := openT(t, dir)
	var cl int64
	lites := []string{"a", "b", "session-0042", "d"}
	want := fill(t, x, "P", lites, 200, &cl) // 9 blocks each, 36 blocks: with the others, several files
	more := fill(t, x, "Q", []string{"a"}, 3000, &cl)
	checkAll(t, x, "P", want, 0)
	checkAll(t, x, "Q", more, 0)
	if st := x.Stats(); st.Files < 2 || st.Topics != 5 || st.Parents != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Unknown lite topic and parent.
	if _, _, _, ok, _ := x.Read("P", "zz", 0, make([]Entry, 0, 4)); ok {
		t.Fatal("unknown lite topic found")
	}
	if _, _, ok := x.Offsets("R", "a"); ok {
		t.Fatal("unknown parent found")
	}
	// Re-dispatch of an entry already there changes nothing.
	r, err := x.Append([]byte("P"), []byte("a"), want["a"][3], 0)
	if err != nil || !r.Dup || r.Max != 200 {
		t.Fatalf("re-append: %+v %v", r, err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	x, rep := openT(t, dir)
	if !rep.Clean || rep.Topics != 5 {
		t.Fatalf("clean reopen: %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(dir, tableName)); !os.IsNotExist(err) {
		t.Fatalf("TABLE still there after Open: %v", err)
	}
	checkAll(t, x, "P", want, 0)
	checkAll(t, x, "Q", more, 0)
	// Appends go on after the reopen.
	want2 := fill(t, x, "P", lites, 30, &cl)
	for l := range want {
		want[l] = append(want[l], want2[l]...)
	}
	checkAll(t, x, "P", want, 0)
	x.Close()
}

func TestCrashRebuildAndTruncate(t *testing.T) {
	dir := t.TempDir()
	stored := map[int64]int64{}
	x, _, err := Open(dir, Options{FileSize: testFileSize})
	if err != nil {
		t.Fatal(err)
	}
	var cl int64
	lites := []string{"a", "b", "c"}
	want := fill(t, x, "P", lites, 100, &cl)
	if err := x.Flush(); err != nil {
		t.Fatal(err)
	}
	checkpoint := cl + 1
	after := fill(t, x, "P", append(lites, "new"), 10, &cl)
	crash(t, x)
	for _, es := range want {
		for _, e := range es {
			stored[e.CommitLogOffset] = e.CommitLogOffset + 5
		}
	}
	x, rep, err := Open(dir, Options{FileSize: testFileSize, StoreTime: func(e Entry) (int64, bool) {
		ms, ok := stored[e.CommitLogOffset]
		return ms, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	// "new" was created after the last Flush: the journal does not name it,
	// and re-dispatch creates it again.
	if rep.Clean || rep.Topics != 3 || rep.Rebuilt != 3 || rep.BrokenChains != 0 {
		t.Fatalf("rebuild: %+v", rep)
	}
	// The process crash kept the page cache: everything is there; the store
	// then truncates at its checkpoint and re-dispatches.
	if err := x.TruncateFrom(checkpoint); err != nil {
		t.Fatal(err)
	}
	checkAll(t, x, "P", want, 0)
	if _, mx, ok := x.Offsets("P", "new"); ok {
		t.Fatalf("new: max %d", mx)
	}
	var infos []LiteInfo
	x.ForEach("P", func(_ string, li LiteInfo) bool { infos = append(infos, li); return true })
	for _, li := range infos {
		if li.Lite == "a" && li.LastStoreMs != want["a"][99].CommitLogOffset+5 {
			t.Fatalf("a: last store %d", li.LastStoreMs)
		}
	}
	// Re-dispatch: the same records give the same offsets.
	for i := 0; i < 10; i++ {
		for _, l := range append(lites, "new") {
			e := after[l][i]
			if _, err := x.Append([]byte("P"), []byte(l), e, 1); err != nil {
				t.Fatal(err)
			}
			want[l] = append(want[l], e)
		}
	}
	checkAll(t, x, "P", want, 0)
	x.Close()
}

func TestDeleteExpireOffsets(t *testing.T) {
	dir := t.TempDir()
	now := int64(1_000_000)
	x, _, err := Open(dir, Options{FileSize: testFileSize, Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var cl int64
	var lites []string
	for i := range 300 {
		lites = append(lites, fmt.Sprintf("s%03d", i))
	}
	fill(t, x, "P", lites, 2, &cl)
	fill(t, x, "Q", []string{"q"}, 30, &cl)
	if err := x.CommitOffset("g", "P", "s001", 1); err != nil {
		t.Fatal(err)
	}
	if err := x.CommitOffset("g", "P", "s002", 2); err != nil {
		t.Fatal(err)
	}
	if off, ok := x.Offset("g", "P", "s001"); !ok || off != 1 {
		t.Fatalf("offset %d %v", off, ok)
	}
	ok, err := x.Delete("P", "s001")
	if err != nil || !ok {
		t.Fatalf("Delete: %v %v", ok, err)
	}
	if _, ok := x.Offset("g", "P", "s001"); ok {
		t.Fatal("offset survived its lite topic")
	}
	if _, _, ok := x.Offsets("P", "s001"); ok || x.Count() != 300 {
		t.Fatalf("after delete: count %d", x.Count())
	}
	// Expire the first half by store time (store time = commit-log offset
	// in fill).
	_, _, _ = x.Offsets("P", "s150")
	var cut int64
	x.ForEach("P", func(_ string, li LiteInfo) bool {
		if li.Lite == "s150" {
			cut = li.LastStoreMs
		}
		return true
	})
	var gone []string
	n, err := x.Expire("P", cut, func(l string) { gone = append(gone, l) })
	if err != nil || n != 149 || len(gone) != 149 {
		t.Fatalf("Expire: %d %v (%d names)", n, err, len(gone))
	}
	if x.Count() != 151 {
		t.Fatalf("count %d", x.Count())
	}
	// A deleted lite topic comes back at 0 (its id reused).
	r, err := x.Append([]byte("P"), []byte("s001"), entry(cl+200), cl+200)
	if err != nil || !r.Created || r.Max != 1 {
		t.Fatalf("recreate: %+v %v", r, err)
	}
	cl += 200
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	for _, clean := range []bool{true, false} {
		x, rep := openT(t, dir)
		if rep.Clean != clean || x.Count() != 152 {
			t.Fatalf("reopen (clean %v): %+v count %d", clean, rep, x.Count())
		}
		if off, ok := x.Offset("g", "P", "s002"); ok {
			t.Fatalf("s002 expired, offset %d kept", off)
		}
		if _, mx, ok := x.Offsets("P", "s001"); !ok || mx != 1 {
			t.Fatalf("s001: %d %v", mx, ok)
		}
		if _, mx, ok := x.Offsets("Q", "q"); !ok || mx != 30 {
			t.Fatalf("q: %d %v", mx, ok)
		}
		if err := x.CommitOffset("g", "Q", "q", 7); err != nil {
			t.Fatal(err)
		}
		if err := x.Flush(); err != nil {
			t.Fatal(err)
		}
		crash(t, x) // the second round opens after a crash
	}
	x, _ = openT(t, dir)
	if off, ok := x.Offset("g", "Q", "q"); !ok || off != 7 {
		t.Fatalf("offset after crash: %d %v", off, ok)
	}
	x.Close()
}

func TestRetention(t *testing.T) {
	x, _ := openT(t, t.TempDir())
	var cl int64
	want := fill(t, x, "P", []string{"a", "b"}, 100, &cl)
	// Everything of b below a's 50th entry goes.
	logMin := want["a"][50].CommitLogOffset
	if err := x.DeleteBelow(logMin); err != nil {
		t.Fatal(err)
	}
	mn, mx, _ := x.Offsets("P", "a")
	if mn != 50 || mx != 100 {
		t.Fatalf("a: %d..%d", mn, mx)
	}
	mn, _, _ = x.Offsets("P", "b")
	if mn != 50 {
		t.Fatalf("b: min %d", mn)
	}
	got, _, _, _, err := x.Read("P", "a", 50, make([]Entry, 0, 100))
	if err != nil || len(got) != 50 || got[0] != want["a"][50] {
		t.Fatalf("read after retention: %d %v", len(got), err)
	}
	if err := x.DeleteBelow(cl + 1); err != nil {
		t.Fatal(err)
	}
	if mn, mx, _ := x.Offsets("P", "a"); mn != 100 || mx != 100 {
		t.Fatalf("a all gone: %d..%d", mn, mx)
	}
	if st := x.Stats(); st.LiveBlocks != 2 {
		t.Fatalf("live blocks %d, want the two tails", st.LiveBlocks)
	}
	x.Close()
}

func TestManyLiteTopicsTable(t *testing.T) {
	x, _ := openT(t, t.TempDir())
	var cl int64
	n := 5000
	for i := range n {
		cl += 100
		if _, err := x.Append([]byte("P"), fmt.Appendf(nil, "L%d", i), entry(cl), cl); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i += 2 {
		if ok, err := x.Delete("P", fmt.Sprintf("L%d", i)); !ok || err != nil {
			t.Fatalf("delete %d: %v %v", i, ok, err)
		}
	}
	for i := range n {
		_, mx, ok := x.Offsets("P", fmt.Sprintf("L%d", i))
		if ok != (i%2 == 1) || ok && mx != 1 {
			t.Fatalf("L%d: %v %d", i, ok, mx)
		}
	}
	x.Close()
}

// TestUnjournaledCreationTwice: a lite topic created after the last Flush
// is unknown after a crash; created again by re-dispatch, it gets the same
// id and generation, and the stale blocks of the first creation must not
// break its chain after the next crash.
func TestUnjournaledCreationTwice(t *testing.T) {
	dir := t.TempDir()
	x, _ := openT(t, dir)
	var cl int64
	fill(t, x, "P", []string{"a"}, 10, &cl)
	if err := x.Flush(); err != nil {
		t.Fatal(err)
	}
	mark := cl
	fill(t, x, "P", []string{"b"}, 30, &cl) // two blocks, never journaled
	crash(t, x)
	for round := range 3 {
		x, rep := openT(t, dir)
		if rep.BrokenChains != 0 {
			t.Fatalf("round %d: %+v", round, rep)
		}
		if err := x.TruncateFrom(mark + 1); err != nil {
			t.Fatal(err)
		}
		c := mark
		want := fill(t, x, "P", []string{"b"}, 30, &c)
		checkAll(t, x, "P", want, 0)
		if round == 0 {
			if err := x.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		crash(t, x)
	}
}
