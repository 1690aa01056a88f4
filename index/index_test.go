package index

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/mmap"
	"golang.org/x/sys/unix"
)

const ts0 = int64(1_700_000_000_000)

func openT(t testing.TB, dir string, o Options) *Index {
	t.Helper()
	x, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := x.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return x
}

func listFiles(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestGoldenLayout(t *testing.T) {
	dir := t.TempDir()
	x := openT(t, dir, Options{SlotCount: 4, MaxEntries: 4})
	puts := []struct {
		key string
		off int64
		ts  int64
	}{
		{"k1", 100, ts0},        // keyHash 2539445, slot 1
		{"k2", 200, ts0 + 2500}, // keyHash 2539446, slot 2, diff 2 s
		{"k1", 300, ts0 + 5000}, // chains to entry 1, diff 5 s
	}
	for _, p := range puts {
		if err := x.Put("T", p.key, p.off, p.ts); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	names := listFiles(t, dir)
	if len(names) != 1 || !validName(names[0]) {
		t.Fatalf("files %q, want one yyyyMMddHHmmssSSS name", names)
	}
	got, err := os.ReadFile(filepath.Join(dir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		// header
		"0000018bcfe56800", // beginTimestamp ts0
		"0000018bcfe57b88", // endTimestamp ts0+5000
		"0000000000000064", // beginPhyOffset 100
		"000000000000012c", // endPhyOffset 300
		"00000002",         // hashSlotCount: slots 1 and 2
		"00000004",         // indexCount: entries 1..3 used
		// slots 0..3
		"00000000", "00000003", "00000002", "00000000",
		// entry 0, unused
		"00000000" + "0000000000000000" + "00000000" + "00000000",
		// entry 1: T#k1 @100, +0 s, no prev
		"0026bfb5" + "0000000000000064" + "00000000" + "00000000",
		// entry 2: T#k2 @200, +2 s, no prev
		"0026bfb6" + "00000000000000c8" + "00000002" + "00000000",
		// entry 3: T#k1 @300, +5 s, prev 1
		"0026bfb5" + "000000000000012c" + "00000005" + "00000001",
	}, "")
	if g := hex.EncodeToString(got); g != want {
		t.Fatalf("file bytes\n got %s\nwant %s", g, want)
	}

	// The file is full: the next Put starts a second file.
	x = openT(t, dir, Options{SlotCount: 4, MaxEntries: 4})
	if err := x.Put("T", "k3", 400, ts0+6000); err != nil {
		t.Fatal(err)
	}
	if n := len(listFiles(t, dir)); n != 2 {
		t.Fatalf("%d files after the 4th put, want 2", n)
	}
	offs, err := x.Query("T", "k1", 0, ts0+10_000, 10, nil)
	if err != nil || !slices.Equal(offs, []int64{300, 100}) {
		t.Fatalf("Query k1 = %v, %v; want [300 100]", offs, err)
	}
}

func TestFileName(t *testing.T) {
	x := &Index{}
	n1 := x.nextName()
	if !validName(n1) {
		t.Fatalf("name %q", n1)
	}
	x.lastName = n1
	n2 := x.nextName()
	if n2 <= n1 {
		t.Fatalf("second name %q not after %q", n2, n1)
	}
	x.lastName = "29991231235959999"
	if n := x.nextName(); n != "30000101000000000" {
		t.Fatalf("name after 29991231235959999 = %q", n)
	}
	x.lastName = "99999999999999998" // not a date: digits count up
	if n := x.nextName(); n != "99999999999999999" {
		t.Fatalf("name after 99999999999999998 = %q", n)
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		o   Options
		err bool
	}{
		{Options{}, false},
		{Options{SlotCount: 1, MaxEntries: 2}, false},
		{Options{SlotCount: -1}, true},
		{Options{MaxEntries: 1}, true},
		{Options{MaxEntries: -5}, true},
		{Options{SlotCount: 1 << 31}, true},
	}
	for _, tt := range tests {
		o, err := tt.o.withDefaults()
		if (err != nil) != tt.err {
			t.Errorf("%+v: err %v, want error %v", tt.o, err, tt.err)
		}
		if err != nil && !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: %v does not wrap ErrOptions", tt.o, err)
		}
		if err == nil && (o.SlotCount == 0 || o.MaxEntries == 0) {
			t.Errorf("%+v: defaults not applied: %+v", tt.o, o)
		}
	}
	def, _ := Options{}.withDefaults()
	if l := newLayout(def); l.size != 420_000_040 {
		t.Errorf("default file size %d, want 420000040", l.size)
	}
	if _, err := Open(t.TempDir(), Options{MaxEntries: 1}); !errors.Is(err, ErrOptions) {
		t.Errorf("Open with bad options: %v", err)
	}
}

// rec is one Put of the model.
type rec struct {
	key string
	off int64
	ts  int64
}

// model is what was put, for checking query results.
type model struct {
	recs   []rec
	byHash map[int32]map[int64]bool // offsets put under each keyHash
	keys   []string
}

func newModel() *model { return &model{byHash: map[int32]map[int64]bool{}} }

func (m *model) add(key string, off, ts int64) {
	m.recs = append(m.recs, rec{key, off, ts})
	h := keyHash("T", key)
	if m.byHash[h] == nil {
		m.byHash[h] = map[int64]bool{}
	}
	m.byHash[h][off] = true
}

// gen puts n messages with 1-3 keys each, drawn from nkeys keys, offsets
// increasing, one second apart.
func (m *model) gen(rng *rand.Rand, n, nkeys int) {
	for i := 0; i < nkeys; i++ {
		m.keys = append(m.keys, fmt.Sprintf("key-%d", i))
	}
	off := int64(0)
	for i := 0; i < n; i++ {
		ts := ts0 + int64(i)*1000
		k := 1 + rng.IntN(3)
		seen := map[string]bool{}
		for j := 0; j < k; j++ {
			key := m.keys[rng.IntN(nkeys)]
			if seen[key] {
				continue
			}
			seen[key] = true
			m.add(key, off, ts)
		}
		off += 100 + int64(rng.IntN(300))
	}
}

// putAll puts the records with offsets >= from.
func (m *model) putAll(t testing.TB, x *Index, from int64) {
	t.Helper()
	for _, r := range m.recs {
		if r.off < from {
			continue
		}
		if err := x.Put("T", r.key, r.off, r.ts); err != nil {
			t.Fatalf("Put %v: %v", r, err)
		}
	}
}

// exact returns the offsets put for key with stored time in [b, e], newest first.
func (m *model) exact(key string, b, e int64) []int64 {
	var out []int64
	for i := len(m.recs) - 1; i >= 0; i-- {
		r := m.recs[i]
		if r.key == key && r.ts >= b && r.ts <= e {
			out = append(out, r.off)
		}
	}
	return out
}

// check queries every key over all time. Results must be real offsets of
// the key's hash, newest first, without duplicates; if complete, they must
// include every offset put for the key.
func (m *model) check(t testing.TB, x *Index, complete bool) {
	t.Helper()
	var buf []int64
	for _, key := range m.keys {
		var err error
		buf, err = x.Query("T", key, 0, ts0+1e9, 1<<30, buf[:0])
		if err != nil {
			t.Fatalf("Query %s: %v", key, err)
		}
		allowed := m.byHash[keyHash("T", key)]
		for i, off := range buf {
			if !allowed[off] {
				t.Fatalf("Query %s returned %d, never put under its hash", key, off)
			}
			if i > 0 && off >= buf[i-1] {
				t.Fatalf("Query %s: %v not strictly newest first", key, buf)
			}
		}
		if complete {
			for _, off := range m.exact(key, 0, ts0+1e9) {
				if !slices.Contains(buf, off) {
					t.Fatalf("Query %s misses %d: got %v", key, off, buf)
				}
			}
		}
	}
}

func TestPutQueryAcrossFilesAndReopen(t *testing.T) {
	dir := t.TempDir()
	o := Options{SlotCount: 64, MaxEntries: 100}
	x := openT(t, dir, o)
	m := newModel()
	m.gen(rand.New(rand.NewPCG(1, 2)), 2000, 500)
	m.putAll(t, x, 0)
	if n := len(listFiles(t, dir)); n < 30 {
		t.Fatalf("%d files, want many (small MaxEntries)", n)
	}
	m.check(t, x, true)
	last := m.recs[len(m.recs)-1]
	if got := x.MaxCommitLogOffset(); got != last.off {
		t.Errorf("MaxCommitLogOffset = %d, want %d", got, last.off)
	}
	if ts, off := x.LastUpdate(); ts != last.ts || off != last.off {
		t.Errorf("LastUpdate = %d, %d; want %d, %d", ts, off, last.ts, last.off)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Query("T", "key-1", 0, 1, 1, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Query after Close: %v", err)
	}
	if err := x.Put("T", "key-1", 1<<40, ts0); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close: %v", err)
	}

	x = openT(t, dir, o)
	m.check(t, x, true)
	if got := x.MaxCommitLogOffset(); got != last.off {
		t.Errorf("after reopen MaxCommitLogOffset = %d, want %d", got, last.off)
	}
	// Keep writing after the reopen: into the same newest file, then new ones.
	base := last.off + 1000
	for i := range 300 {
		m.add(m.keys[i%len(m.keys)], base+int64(i)*10, last.ts+int64(i+1)*1000)
	}
	m.putAll(t, x, base)
	m.check(t, x, true)
	if err := x.Flush(); err != nil {
		t.Fatal(err)
	}
	x.Close()
	// Reopening with other sizes removes the files, to be re-indexed from
	// the commit log with the new layout.
	x2, err := Open(dir, Options{SlotCount: 65, MaxEntries: 100})
	if err != nil {
		t.Fatalf("Open with other SlotCount: %v", err)
	}
	defer x2.Close()
	if len(x2.Repaired()) != 1 || !strings.Contains(x2.Repaired()[0], ErrLayout.Error()) || x2.MaxCommitLogOffset() >= 0 && x2.MaxCommitLogOffset() != 0 {
		t.Fatalf("repaired %q, max offset %d: want the files removed", x2.Repaired(), x2.MaxCommitLogOffset())
	}
	if from, err := x2.TruncateAfter(1 << 50); err != nil || from != 0 {
		t.Fatalf("resume from %d (%v), want 0", from, err)
	}
}

func TestCollisions(t *testing.T) {
	x := openT(t, t.TempDir(), Options{SlotCount: 4, MaxEntries: 5000})
	m := newModel()
	m.gen(rand.New(rand.NewPCG(3, 4)), 1500, 300)
	// "Aa" and "BB" have the same Java hash: so do "T#xAa" and "T#xBB".
	off := m.recs[len(m.recs)-1].off + 100
	m.keys = append(m.keys, "xAa", "xBB")
	m.add("xAa", off, ts0+2_000_000)
	m.add("xBB", off+100, ts0+2_000_000)
	m.add("xAa", off+200, ts0+2_001_000)
	m.putAll(t, x, 0)
	m.check(t, x, true)
	for _, key := range []string{"xAa", "xBB"} {
		got, err := x.Query("T", key, 0, ts0+1e9, 10, nil)
		if err != nil || !slices.Equal(got, []int64{off + 200, off + 100, off}) {
			t.Errorf("Query %s = %v, %v; want both keys' offsets (same hash)", key, got, err)
		}
	}
}

func TestTimeRangeAndMax(t *testing.T) {
	x := openT(t, t.TempDir(), Options{SlotCount: 8, MaxEntries: 16})
	// "hot" every 10 s for 100 puts (7 files), "other" in between.
	for i := range 100 {
		ts := ts0 + int64(i)*10_000
		if err := x.Put("T", "hot", int64(i)*1000, ts); err != nil {
			t.Fatal(err)
		}
		if err := x.Put("T", "other", int64(i)*1000+500, ts+5000); err != nil {
			t.Fatal(err)
		}
	}
	offsets := func(from, to int) []int64 { // hot's offsets for puts from..to, newest first
		var out []int64
		for i := to; i >= from; i-- {
			out = append(out, int64(i)*1000)
		}
		return out
	}
	tests := []struct {
		name   string
		b, e   int64
		max    int
		want   []int64
		wantOf func() []int64
	}{
		{name: "all", b: 0, e: ts0 * 2, max: 1000, want: offsets(0, 99)},
		{name: "max 5 newest", b: 0, e: ts0 * 2, max: 5, want: offsets(95, 99)},
		{name: "window", b: ts0 + 200_000, e: ts0 + 400_000, max: 1000, want: offsets(20, 40)},
		{name: "window inner bounds", b: ts0 + 200_001, e: ts0 + 399_999, max: 1000, want: offsets(21, 39)},
		{name: "window max 3", b: ts0 + 200_000, e: ts0 + 400_000, max: 3, want: offsets(38, 40)},
		{name: "one", b: ts0 + 500_000, e: ts0 + 500_000, max: 10, want: offsets(50, 50)},
		{name: "before all", b: 0, e: ts0 - 1, max: 10, want: nil},
		{name: "after all", b: ts0 + 990_001, e: ts0 * 2, max: 10, want: nil},
		{name: "max 0", b: 0, e: ts0 * 2, max: 0, want: nil},
		{name: "inverted range", b: ts0 + 10, e: ts0, max: 10, want: nil},
	}
	for _, tt := range tests {
		got, err := x.Query("T", "hot", tt.b, tt.e, tt.max, nil)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	// dst is appended to.
	got, _ := x.QueryBytes("T", []byte("hot"), ts0, ts0, 10, []int64{-1})
	if !slices.Equal(got, []int64{-1, 0}) {
		t.Errorf("append to dst: %v", got)
	}
	// Stored times are whole seconds from the file's first entry.
	y := openT(t, t.TempDir(), Options{SlotCount: 8, MaxEntries: 16})
	y.Put("T", "k", 0, ts0)
	y.Put("T", "k", 10, ts0+1999) // stored as ts0+1000
	if got, _ := y.Query("T", "k", ts0+1500, ts0+3000, 10, nil); len(got) != 0 {
		t.Errorf("entry stored at its whole second matched a range after it: %v", got)
	}
	if got, _ := y.Query("T", "k", ts0+1000, ts0+1000, 10, nil); !slices.Equal(got, []int64{10}) {
		t.Errorf("query at the stored second: %v", got)
	}
}

func TestSkipAndDedup(t *testing.T) {
	dir := t.TempDir()
	o := Options{SlotCount: 4, MaxEntries: 3} // two entries per file: keys of one message span files
	x := openT(t, dir, o)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b", "c"} { // message @100 with three keys
		must(x.Put("T", k, 100, ts0))
	}
	must(x.Put("T", "a", 100, ts0)) // duplicate key of the last message: skipped
	must(x.Put("T", "z", 50, ts0))  // older offset: skipped
	files := len(listFiles(t, dir))
	must(x.Close())

	x = openT(t, dir, o)
	for _, k := range []string{"a", "b", "c", "d"} { // re-dispatch of @100 after a restart: only d is new
		must(x.Put("T", k, 100, ts0))
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		got, _ := x.Query("T", k, 0, ts0*2, 10, nil)
		if !slices.Equal(got, []int64{100}) {
			t.Errorf("Query %s = %v, want [100]", k, got)
		}
	}
	if got, _ := x.Query("T", "z", 0, ts0*2, 10, nil); len(got) != 0 {
		t.Errorf("older offset was indexed: %v", got)
	}
	if n := len(listFiles(t, dir)); n != files {
		t.Errorf("%d files, want %d (d fits the second file)", n, files)
	}
}

// counts returns the header indexCount of every file in dir, in name order.
func readFileBytes(t testing.TB, dir string) (string, []byte) {
	t.Helper()
	names := listFiles(t, dir)
	slices.Sort(names)
	p := filepath.Join(dir, names[len(names)-1])
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, n := range listFiles(t, src) {
		b, err := os.ReadFile(filepath.Join(src, n))
		if errors.Is(err, os.ErrNotExist) {
			continue // a .tmp renamed while copying
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestCrashRecovery(t *testing.T) {
	o := Options{SlotCount: 16, MaxEntries: 400}
	lay := newLayout(o)
	src := t.TempDir()
	m := newModel()
	m.gen(rand.New(rand.NewPCG(5, 6)), 500, 120)
	x := openT(t, src, o)
	m.putAll(t, x, 0)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	_, clean := readFileBytes(t, src)
	count := int32(be.Uint32(clean[hdrCount:]))
	if count < 100 {
		t.Fatalf("newest file has %d entries; the cases need more", count)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	garbage := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	zero := func(b []byte) { clear(b) }
	ent := func(b []byte, n int32) []byte { return b[lay.entryPos(n) : lay.entryPos(n)+entrySize] }

	tests := []struct {
		name     string
		lossless bool // every entry survives Open
		mutate   func(b []byte)
	}{
		{"clean", true, func(b []byte) {}},
		{"header counters zeroed", true, func(b []byte) { zero(b[hdrSlotsUsed:headerSize]) }},
		{"header lags entries", true, func(b []byte) {
			be.PutUint32(b[hdrCount:], uint32(count-10))
			be.PutUint64(b[hdrEndPhy:], uint64(readEntry(b, lay.entryPos(count-11)).off))
		}},
		{"header ahead of entries", true, func(b []byte) { be.PutUint32(b[hdrCount:], uint32(count+50)) }},
		{"header count huge", true, func(b []byte) { be.PutUint32(b[hdrCount:], 1<<31-1) }},
		{"put torn before its slot", true, func(b []byte) {
			// The last entry is written, its slot and the header are not.
			e := readEntry(b, lay.entryPos(count-1))
			storeSlot(b, lay.slotPos(int(e.hash)%lay.slots), e.prev)
			be.PutUint32(b[hdrCount:], uint32(count-1))
		}},
		{"garbage in the tail", true, func(b []byte) { garbage(b[lay.entryPos(count):lay.entryPos(count+30)]) }},
		{"garbage to the end", true, func(b []byte) { garbage(b[lay.entryPos(count):]) }},
		{"slots point past the end", true, func(b []byte) {
			for s := 0; s < lay.slots; s += 3 {
				be.PutUint32(b[lay.slotPos(s):], uint32(count+int32(s)))
			}
		}},
		{"slots negative", true, func(b []byte) { be.PutUint32(b[lay.slotPos(5):], 0xFFFFFFF0) }},
		{"stale slot page", true, func(b []byte) { zero(b[headerSize : headerSize+lay.slots*slotSize]) }},
		{"whole header zeroed", false, func(b []byte) { zero(b[:headerSize]) }},
		{"lost page in the middle", false, func(b []byte) {
			for n := count - 60; n < count-40; n++ {
				zero(ent(b, n))
			}
		}},
		{"torn entry", false, func(b []byte) { zero(ent(b, count-5)[10:]) }},
		{"garbage entry", false, func(b []byte) { garbage(ent(b, count-30)) }},
		{"chain loops", false, func(b []byte) { be.PutUint32(ent(b, count-3)[16:], uint32(count-3)) }},
		{"everything garbage", false, func(b []byte) { garbage(b) }},
		{"everything zero", false, zero},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, src)
			p, b := readFileBytes(t, dir)
			tt.mutate(b)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			x := openT(t, dir, o)
			m.check(t, x, tt.lossless)
			last := m.recs[len(m.recs)-1].off
			if tt.lossless != (x.MaxCommitLogOffset() == last) {
				t.Errorf("MaxCommitLogOffset = %d, last put %d, lossless case %v", x.MaxCommitLogOffset(), last, tt.lossless)
			}
			// The store re-dispatches from resumeFrom: the index is then exact.
			from, err := x.TruncateAfter(last + 1)
			if err != nil {
				t.Fatal(err)
			}
			if from > last {
				t.Fatalf("resumeFrom %d beyond the last offset %d", from, last)
			}
			m.putAll(t, x, from)
			m.checkExact(t, x)
			// And it stays so across a reopen.
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
			m.checkExact(t, openT(t, dir, o))
		})
	}
}

// checkExact requires complete results without duplicates.
func (m *model) checkExact(t testing.TB, x *Index) {
	t.Helper()
	m.check(t, x, true)
	for _, key := range m.keys {
		got, _ := x.Query("T", key, 0, ts0+1e9, 1<<30, nil)
		want := 0
		for off := range m.byHash[keyHash("T", key)] {
			_ = off
			want++
		}
		if len(got) != want {
			t.Fatalf("Query %s: %d offsets, want %d (duplicates?): %v", key, len(got), want, got)
		}
	}
}

func TestTruncateAfter(t *testing.T) {
	o := Options{SlotCount: 32, MaxEntries: 50}
	dir := t.TempDir()
	x := openT(t, dir, o)
	m := newModel()
	m.gen(rand.New(rand.NewPCG(9, 10)), 1000, 200)
	m.putAll(t, x, 0)
	nfiles := len(listFiles(t, dir))

	// The commit log was cut in the middle: keep the records below cut.
	cut := m.recs[len(m.recs)*2/3].off
	from, err := x.TruncateAfter(cut)
	if err != nil {
		t.Fatal(err)
	}
	if from >= cut || from < 0 {
		t.Fatalf("resumeFrom %d, want below the cut %d", from, cut)
	}
	if x.MaxCommitLogOffset() != from {
		t.Errorf("MaxCommitLogOffset %d, resumeFrom %d", x.MaxCommitLogOffset(), from)
	}
	if n := len(listFiles(t, dir)); n >= nfiles {
		t.Errorf("%d files after truncation, had %d", n, nfiles)
	}
	kept := newModel()
	kept.keys = m.keys
	for _, r := range m.recs {
		if r.off < cut {
			kept.add(r.key, r.off, r.ts)
		}
	}
	kept.putAll(t, x, from)
	kept.checkExact(t, x)

	// Nothing to cut: resumeFrom is the last indexed offset.
	last := kept.recs[len(kept.recs)-1].off
	if from, err := x.TruncateAfter(last + 1); err != nil || from != last {
		t.Errorf("TruncateAfter(end) = %d, %v; want %d", from, err, last)
	}
	// Cut everything: resumeFrom is where the oldest file began.
	if from, err := x.TruncateAfter(0); err != nil || from != 0 {
		t.Errorf("TruncateAfter(0) = %d, %v; want 0", from, err)
	}
	if n := len(listFiles(t, dir)); n != 0 || x.MaxCommitLogOffset() != 0 {
		t.Errorf("%d files, max %d after cutting everything", n, x.MaxCommitLogOffset())
	}
	kept.putAll(t, x, 0)
	kept.checkExact(t, x)

	// After DeleteBefore removed old files, cutting everything resumes from
	// the oldest remaining file's start, not 0.
	if n, err := x.DeleteBefore(kept.recs[len(kept.recs)/2].off); err != nil || n == 0 {
		t.Fatalf("DeleteBefore = %d, %v", n, err)
	}
	files := *x.files.Load()
	oldest := files[0].beginPhy.Load()
	if from, err := x.TruncateAfter(0); err != nil || from != oldest {
		t.Errorf("TruncateAfter(0) = %d, %v; want %d", from, err, oldest)
	}
}

func TestDeleteBefore(t *testing.T) {
	o := Options{SlotCount: 16, MaxEntries: 20}
	x := openT(t, t.TempDir(), o)
	for i := range 100 { // 19 per file: 6 files
		if err := x.Put("T", "k", int64(i)*10, ts0+int64(i)*1000); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := x.DeleteBefore(0); n != 0 || err != nil {
		t.Errorf("DeleteBefore(0) = %d, %v", n, err)
	}
	if n, err := x.DeleteBefore(190); n != 1 || err != nil { // file 1 ends at 180
		t.Errorf("DeleteBefore(190) = %d, %v; want 1", n, err)
	}
	got, _ := x.Query("T", "k", 0, ts0*2, 1000, nil)
	if len(got) != 100-19 || got[len(got)-1] != 190 {
		t.Errorf("after DeleteBefore: %d offsets, oldest %d", len(got), got[len(got)-1])
	}
	if n, err := x.DeleteBefore(1 << 40); n != 4 || err != nil { // never the newest
		t.Errorf("DeleteBefore(all) = %d, %v; want 4", n, err)
	}
	got, _ = x.Query("T", "k", 0, ts0*2, 1000, nil)
	if len(got) != 100-95 {
		t.Errorf("only the newest file should remain: %v", got)
	}
}

func TestRemoveLeftoverTmp(t *testing.T) {
	dir := t.TempDir()
	o := Options{SlotCount: 4, MaxEntries: 8}
	x := openT(t, dir, o)
	x.Put("T", "k", 1, ts0)
	x.Close()
	os.WriteFile(filepath.Join(dir, "20990101000000000.tmp"), []byte("partial"), 0o644)
	os.WriteFile(filepath.Join(dir, "README"), []byte("not ours"), 0o644)
	x = openT(t, dir, o)
	names := listFiles(t, dir)
	if len(names) != 2 || slices.Contains(names, "20990101000000000.tmp") {
		t.Errorf("files after Open: %v", names)
	}
	if got, _ := x.Query("T", "k", 0, ts0, 1, nil); !slices.Equal(got, []int64{1}) {
		t.Errorf("Query = %v", got)
	}
}

func TestEmptyNewestFileIsDropped(t *testing.T) {
	dir := t.TempDir()
	o := Options{SlotCount: 4, MaxEntries: 3}
	x := openT(t, dir, o)
	for i := range 4 {
		x.Put("T", "k", int64(i), ts0+int64(i)*1000)
	}
	x.Close()
	_, b := readFileBytes(t, dir)
	if !bytes.Equal(b[hdrEndPhy:hdrEndPhy+8], []byte{0, 0, 0, 0, 0, 0, 0, 3}) {
		t.Fatalf("newest endPhy % x", b[hdrEndPhy:hdrEndPhy+8])
	}
	p, _ := readFileBytes(t, dir)
	os.WriteFile(p, make([]byte, newLayout(o).size), 0o644) // its entries never reached the disk
	x = openT(t, dir, o)
	if n := len(listFiles(t, dir)); n != 1 {
		t.Errorf("%d files, want the empty newest one deleted", n)
	}
	if got := x.MaxCommitLogOffset(); got != 1 {
		t.Errorf("MaxCommitLogOffset %d, want 1", got)
	}
	if from, _ := x.TruncateAfter(100); from != 1 {
		t.Errorf("resumeFrom %d, want 1", from)
	}
	for i := 1; i < 4; i++ {
		x.Put("T", "k", int64(i), ts0+int64(i)*1000)
	}
	if got, _ := x.Query("T", "k", 0, ts0*2, 10, nil); !slices.Equal(got, []int64{3, 2, 1, 0}) {
		t.Errorf("Query = %v", got)
	}
}

func TestTimeDiff(t *testing.T) {
	tests := []struct {
		begin, ts int64
		want      int32
	}{
		{ts0, ts0, 0},
		{ts0, ts0 + 999, 0},
		{ts0, ts0 + 1000, 1},
		{ts0, ts0 - 5000, 0},                     // clock stepped back: clamped
		{ts0, ts0 + 1000*(1<<31) + 5, 1<<31 - 1}, // clamped to MaxInt32
		{0, ts0, 0},                              // no begin timestamp: 0, as RocketMQ
		{-1, ts0, 0},
	}
	for _, tt := range tests {
		if got := timeDiff(tt.begin, tt.ts); got != tt.want {
			t.Errorf("timeDiff(%d, %d) = %d, want %d", tt.begin, tt.ts, got, tt.want)
		}
	}
}

// An older file whose header was damaged after it was synced is re-derived
// from its entries.
func TestOlderFileBadHeader(t *testing.T) {
	o := Options{SlotCount: 8, MaxEntries: 50}
	src := t.TempDir()
	m := newModel()
	m.gen(rand.New(rand.NewPCG(11, 12)), 100, 30)
	x := openT(t, src, o)
	m.putAll(t, x, 0)
	x.Close()
	names := listFiles(t, src)
	slices.Sort(names)
	if len(names) < 3 {
		t.Fatalf("%d files", len(names))
	}
	for _, tt := range []struct {
		name   string
		mutate func(b []byte)
	}{
		{"counters zeroed", func(b []byte) { clear(b[hdrSlotsUsed:headerSize]) }},
		{"count too big", func(b []byte) { be.PutUint32(b[hdrCount:], 51) }},
		{"end before begin", func(b []byte) { be.PutUint64(b[hdrEndPhy:], 0) }},
		{"whole header zeroed", func(b []byte) { clear(b[:headerSize]) }},
		{"cut short", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, src)
			p := filepath.Join(dir, names[1])
			if tt.mutate == nil {
				os.Truncate(p, 1000)
			} else {
				b, _ := os.ReadFile(p)
				tt.mutate(b)
				os.WriteFile(p, b, 0o644)
			}
			// The damaged file and every later one are removed ...
			x := openT(t, dir, o)
			if len(x.Repaired()) != 1 || !slices.Equal(listFiles(t, dir), names[:1]) {
				t.Fatalf("repaired %q, files %v: want only %s left", x.Repaired(), listFiles(t, dir), names[0])
			}
			// ... and re-indexing from where the index now ends restores every key.
			from, err := x.TruncateAfter(math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			m.putAll(t, x, from)
			m.check(t, x, true)
		})
	}
}

// TestUnavailableBacksOff: when no file can be created, Put fails with
// ErrUnavailable and stops trying until the back-off has passed.
func TestUnavailableBacksOff(t *testing.T) {
	fsys := errorfs.New(vfs.Default)
	x := openT(t, t.TempDir(), Options{SlotCount: 8, MaxEntries: 50, FS: fsys})
	full := true
	fsys.FailWhen(func(op errorfs.Op, _ string) unix.Errno {
		if full && op == errorfs.OpAllocate {
			return unix.ENOSPC
		}
		return 0
	})
	err := x.Put("T", "k", 100, ts0)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Put with no file creatable: %v, want ErrUnavailable wrapping ENOSPC", err)
	}
	full = false
	// Within the back-off Put fails fast, even though a file could be made now.
	allocs := fsys.Counts()[errorfs.OpAllocate]
	if err := x.Put("T", "k", 200, ts0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Put within the back-off: %v", err)
	}
	if n := fsys.Counts()[errorfs.OpAllocate]; n != allocs {
		t.Fatalf("Put within the back-off tried to create a file")
	}
	x.mu.Lock()
	x.downUntil = time.Time{} // the back-off has passed
	x.mu.Unlock()
	if err := x.Put("T", "k", 300, ts0); err != nil {
		t.Fatalf("Put after the back-off: %v", err)
	}
}

// TestPutHash checks that KeyHash + SlotAddrs + PutHash index a key exactly as
// Put does, and that PutHash refuses a hash KeyHash cannot produce.
func TestPutHash(t *testing.T) {
	o := Options{SlotCount: 64, MaxEntries: 100}
	byPut := openT(t, t.TempDir(), o)
	byHash := openT(t, t.TempDir(), o)
	for i := 0; i < 250; i++ { // several files each
		key := fmt.Sprintf("key-%d", i%7)
		off, ts := int64(1000+i*100), ts0+int64(i)*10
		if err := byPut.Put("T", key, off, ts); err != nil {
			t.Fatal(err)
		}
		h := KeyHash("T", []byte(key))
		if h2 := KeyHashAfter(TopicHash("T"), []byte(key)); h2 != h {
			t.Fatalf("KeyHashAfter(TopicHash) = %d, KeyHash = %d", h2, h)
		}
		mmap.PrefetchAll(byHash.SlotAddrs([]int32{h}, nil))
		if err := byHash.PutHash(h, off, ts); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 7; i++ {
		key := fmt.Sprintf("key-%d", i)
		want, err := byPut.Query("T", key, 0, math.MaxInt64, 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := byHash.Query("T", key, 0, math.MaxInt64, 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Fatalf("%s: PutHash gives %v, Put gives %v", key, got, want)
		}
	}
	if err := byHash.PutHash(-1, 1<<40, ts0); err == nil {
		t.Error("PutHash(-1) succeeded")
	}
	byHash.Close()
	if a := byHash.SlotAddrs([]int32{1, 2, 3}, nil); len(a) != 0 {
		t.Errorf("SlotAddrs after Close = %v, want none", a)
	}
}

// A power loss can leave any of the newest file's dirty pages on disk, so
// entries put before it may survive past a gap of lost ones. The store then
// re-indexes the records the commit log kept and puts new messages at the
// offsets of the records it lost. Open must not let the stale entries past
// the gap join up with the new ones at the next Open: they did, and Put then
// skipped the new messages (their offsets lay below the highest stale one),
// whose keys were never found.
func TestStaleEntriesPastALostGap(t *testing.T) {
	o := Options{SlotCount: 16, MaxEntries: 400}
	lay := newLayout(o)
	dir := t.TempDir()
	put := func(x *Index, key string, i int) {
		t.Helper()
		if err := x.Put("T", key, int64(i)*100, ts0+int64(i)); err != nil {
			t.Fatalf("Put %s: %v", key, err)
		}
	}
	x := openT(t, dir, o)
	for i := 1; i <= 100; i++ {
		put(x, fmt.Sprintf("a%d", i), i)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	// The power loss: the pages of entries 61 to 80 never reached the disk,
	// those of 81 to 100 did.
	p, b := readFileBytes(t, dir)
	clear(b[lay.entryPos(61):lay.entryPos(81)])
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if problems, err := Check(dir, o); err != nil || len(problems) == 0 {
		t.Fatalf("Check before recovery: %v, %q; want the entries past the gap reported", err, problems)
	}
	// Recovery: the commit log kept the records up to offset 8000. The store
	// re-dispatches them, then a new message takes offset 8100.
	x = openT(t, dir, o)
	if problems, err := Check(dir, o); err != nil || len(problems) != 0 {
		t.Fatalf("Check after Open: %v, %q; want nothing left to repair", err, problems)
	}
	from, err := x.TruncateAfter(8050)
	if err != nil {
		t.Fatal(err)
	}
	for i := int(from / 100); i <= 80; i++ {
		put(x, fmt.Sprintf("a%d", i), i)
	}
	// Its key falls in a81's slot, so the stale entries' prevIndex chains
	// hold across it: only zeroing them keeps them out.
	b81 := "b81"
	for n := 0; keyHash("T", b81)%int32(lay.slots) != keyHash("T", "a81")%int32(lay.slots); n++ {
		b81 = fmt.Sprintf("b81-%d", n)
	}
	put(x, b81, 81)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	x = openT(t, dir, o)
	if got := x.MaxCommitLogOffset(); got != 8100 {
		t.Fatalf("after reopening, the index ends at %d, want 8100 (the entries past the gap came back)", got)
	}
	for i := 82; i <= 100; i++ {
		put(x, fmt.Sprintf("b%d", i), i)
	}
	for i := 81; i <= 100; i++ {
		for _, k := range []string{"a", "b"} {
			key := fmt.Sprintf("%s%d", k, i)
			want := []int64(nil)
			if k == "b" {
				want = []int64{int64(i) * 100}
			}
			if key == "b81" {
				key = b81
			}
			got, err := x.Query("T", key, 0, math.MaxInt64, 4, nil)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("Query %s: %v, %v; want %v", key, got, err, want)
			}
		}
	}
}
