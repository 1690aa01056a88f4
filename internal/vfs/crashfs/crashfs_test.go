package crashfs

import (
	"bytes"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

func newFS(t *testing.T) *FS {
	t.Helper()
	f, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func clone(t *testing.T, f *FS, o CloneOptions) (string, CloneStats) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "clone")
	st, err := f.CrashClone(dst, o)
	if err != nil {
		t.Fatal(err)
	}
	return dst, st
}

func write(t *testing.T, f *FS, path string, data []byte, sync bool) vfs.File {
	t.Helper()
	fl, err := f.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fl.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := fl.Datasync(); err != nil {
			t.Fatal(err)
		}
	}
	return fl
}

func mustSyncDir(t *testing.T, f *FS, dir string) {
	t.Helper()
	if err := f.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}

// readOr returns the clone's file, or "(absent)".
func readOr(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "(absent)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A file's entry survives only through its directory's fsync, its contents
// only through its own sync.
func TestStrictKeepsOnlyWhatWasSynced(t *testing.T) {
	f := newFS(t)
	root := f.Root()
	a := write(t, f, filepath.Join(root, "a"), []byte("synced"), true)
	defer a.Close()
	dst, _ := clone(t, f, CloneOptions{})
	if got := readOr(t, filepath.Join(dst, "a")); got != "(absent)" {
		t.Fatalf("a file whose directory was never synced survived: %q", got)
	}

	mustSyncDir(t, f, root)
	if _, err := a.WriteAt([]byte("SYNCED, then more"), 0); err != nil {
		t.Fatal(err)
	}
	b := write(t, f, filepath.Join(root, "b"), []byte("never synced"), false)
	defer b.Close()
	mustSyncDir(t, f, root)
	dst, st := clone(t, f, CloneOptions{})
	if got := readOr(t, filepath.Join(dst, "a")); got != "synced" {
		t.Fatalf("a = %q, want its synced contents", got)
	}
	if got := readOr(t, filepath.Join(dst, "b")); got != "" {
		t.Fatalf("b = %q, want an empty file (its entry synced, its data not)", got)
	}
	if st.LostBytes == 0 || st.UnsyncedBytes == 0 {
		t.Fatalf("stats %v: the clone says it lost nothing", st)
	}
}

// Renames, removals and new directories are undone without a directory
// fsync; the classic bug (rename a file whose data was never synced over a
// good one) leaves an empty file in a Torn clone that keeps the rename.
func TestDirectoryOperations(t *testing.T) {
	f := newFS(t)
	root := f.Root()
	write(t, f, filepath.Join(root, "state"), []byte("v1"), true).Close()
	mustSyncDir(t, f, root)

	write(t, f, filepath.Join(root, "state.tmp"), []byte("v2"), false).Close()
	if err := f.Rename(filepath.Join(root, "state.tmp"), filepath.Join(root, "state")); err != nil {
		t.Fatal(err)
	}
	if err := f.MkdirAll(filepath.Join(root, "sub", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst, _ := clone(t, f, CloneOptions{})
	if got := readOr(t, filepath.Join(dst, "state")); got != "v1" {
		t.Fatalf("state = %q after an unsynced rename, want v1", got)
	}
	if _, err := os.Stat(filepath.Join(dst, "sub")); !os.IsNotExist(err) {
		t.Fatalf("an unsynced mkdir survived: %v", err)
	}

	// Some torn clone keeps the rename: the new name then holds the
	// temporary file's durable contents, which are nothing.
	sawEmpty := false
	for seed := uint64(0); seed < 32 && !sawEmpty; seed++ {
		dst, _ := clone(t, f, CloneOptions{Mode: Torn, Seed: seed})
		switch got := readOr(t, filepath.Join(dst, "state")); got {
		case "":
			sawEmpty = true
		case "v1":
		default:
			t.Fatalf("seed %d: state = %q, want v1 or empty", seed, got)
		}
	}
	if !sawEmpty {
		t.Fatal("no torn clone kept the rename of an unsynced file")
	}

	// Synced: the rename and the directories stay; removal likewise.
	mustSyncDir(t, f, root)
	mustSyncDir(t, f, filepath.Join(root, "sub"))
	if err := f.Remove(filepath.Join(root, "state")); err != nil {
		t.Fatal(err)
	}
	dst, _ = clone(t, f, CloneOptions{})
	if got := readOr(t, filepath.Join(dst, "state")); got != "" {
		t.Fatalf("state = %q, want the renamed (empty: never synced) file, its removal unsynced", got)
	}
	if _, err := os.Stat(filepath.Join(dst, "sub", "dir")); err != nil {
		t.Fatalf("synced mkdir: %v", err)
	}
}

// Stores through a shared mapping are durable only where an msync covered
// them (whole pages), together with the file's size.
func TestMappedStoresAndMSync(t *testing.T) {
	f := newFS(t)
	root := f.Root()
	ps := mmap.PageSize()
	path := filepath.Join(root, "seg")
	fl, err := f.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	if err := fl.Allocate(0, int64(4*ps)); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, f, root)
	m, err := fl.Map(0, 4*ps, mmap.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	b := m.Bytes()
	copy(b[10:], "first page")
	copy(b[2*ps+10:], "third page")
	if err := f.MSync(path, m, 10, 5); err != nil {
		t.Fatal(err)
	}
	dst, _ := clone(t, f, CloneOptions{})
	got, err := os.ReadFile(filepath.Join(dst, "seg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4*ps {
		t.Fatalf("clone is %d bytes, want the size msync made durable, %d", len(got), 4*ps)
	}
	if string(got[10:20]) != "first page" {
		t.Fatalf("the msync'd page lost its bytes: %q", got[10:20])
	}
	if !allZero(got[2*ps : 3*ps]) {
		t.Fatal("a page no msync covered survived a strict crash")
	}
}

// Torn clones never lose a byte a sync made durable, and keep some of the
// unsynced ones; garbage appears only where nothing durable was.
func TestTornNeverLosesSyncedBytes(t *testing.T) {
	f := newFS(t)
	root := f.Root()
	synced := bytes.Repeat([]byte("S"), 3000)
	fl := write(t, f, filepath.Join(root, "log"), synced, true)
	defer fl.Close()
	mustSyncDir(t, f, root)
	tail := bytes.Repeat([]byte("U"), 5000)
	if _, err := fl.WriteAt(tail, 3000); err != nil {
		t.Fatal(err)
	}
	keptSome, lostSome := false, false
	for seed := uint64(0); seed < 64; seed++ {
		dst, st := clone(t, f, CloneOptions{Mode: Torn, Seed: seed})
		got, err := os.ReadFile(filepath.Join(dst, "log"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < 3000 || !bytes.Equal(got[:2560], synced[:2560]) {
			t.Fatalf("seed %d: the synced prefix was lost (%d bytes)", seed, len(got))
		}
		// The sector holding the boundary (2560..3072) is old or new whole:
		// its synced part always survives.
		if !bytes.Equal(got[2560:3000], synced[2560:]) {
			t.Fatalf("seed %d: the boundary sector lost synced bytes", seed)
		}
		if len(got) > 3072 && bytes.Contains(got[3072:], []byte("U")) {
			keptSome = true
		}
		if st.LostBytes > 0 {
			lostSome = true
		}
	}
	if !keptSome || !lostSome {
		t.Fatalf("64 torn clones: kept some unsynced %v, lost some %v; want both", keptSome, lostSome)
	}
}

// Hard links stay links; a file unlinked after its sync keeps its synced
// contents under the names its durable directory still has.
func TestLinksAndUnlinkedFiles(t *testing.T) {
	f := newFS(t)
	root := f.Root()
	fl := write(t, f, filepath.Join(root, "x"), []byte("one"), true)
	if err := f.Link(filepath.Join(root, "x"), filepath.Join(root, "x.bak")); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, f, root)
	if _, err := fl.WriteAt([]byte("two"), 0); err != nil {
		t.Fatal(err)
	}
	fl.Close()
	if err := f.Remove(filepath.Join(root, "x")); err != nil {
		t.Fatal(err)
	}
	dst, _ := clone(t, f, CloneOptions{})
	for _, n := range []string{"x", "x.bak"} {
		if got := readOr(t, filepath.Join(dst, n)); got != "one" {
			t.Fatalf("%s = %q, want one", n, got)
		}
	}
	a, _ := os.Stat(filepath.Join(dst, "x"))
	b, _ := os.Stat(filepath.Join(dst, "x.bak"))
	if !os.SameFile(a, b) {
		t.Fatal("the hard link became two files")
	}
}

// What was under the root at New is durable; a clone of a clone's model is
// the clone.
func TestExistingFilesAreDurable(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d", "f"), []byte("there"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	dst, st := clone(t, f, CloneOptions{})
	if got := readOr(t, filepath.Join(dst, "d", "f")); got != "there" {
		t.Fatalf("d/f = %q", got)
	}
	if st.UnsyncedBytes != 0 || st.UnsyncedEntries != 0 {
		t.Fatalf("stats %v for an untouched tree", st)
	}
	// A path outside the root is passed through and noted.
	out := filepath.Join(t.TempDir(), "elsewhere")
	write(t, f, out, []byte("x"), true).Close()
	if len(f.Outside()) == 0 {
		t.Fatal("an operation outside the root was not noted")
	}
}

// A sector a sync covered is durable even when what it made durable is
// zeros (a record ending in a zero length field, with nothing after it
// yet): a torn clone holds it old or new, never garbage. The model once
// took every all-zero durable sector for one never written and put
// garbage over such synced bytes.
func TestTornKeepsSyncedZeroSectors(t *testing.T) {
	f := newFS(t)
	root := f.Root()
	// 1000 non-zero bytes, then 24 zeros the sync covers: the second sector
	// (512..1024) is synced, its last bytes zero; the third (1024..1536)
	// is synced and all zero.
	first := bytes.Repeat([]byte("R"), 1000)
	fl := write(t, f, filepath.Join(root, "log"), append(first, make([]byte, 536)...), true)
	defer fl.Close()
	mustSyncDir(t, f, root)
	// Unsynced: the next record, from 1024 on.
	next := bytes.Repeat([]byte("N"), 700)
	if _, err := fl.WriteAt(next, 1024); err != nil {
		t.Fatal(err)
	}
	sawNew := false
	for seed := uint64(0); seed < 64; seed++ {
		dst, _ := clone(t, f, CloneOptions{Mode: Torn, Seed: seed})
		got, err := os.ReadFile(filepath.Join(dst, "log"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:1000], first) {
			t.Fatalf("seed %d: synced bytes lost", seed)
		}
		switch sec := got[1024:1536]; {
		case allZero(sec):
		case bytes.Equal(sec, next[:512]):
			sawNew = true
		default:
			t.Fatalf("seed %d: a synced all-zero sector holds neither its synced nor its current bytes: %q", seed, sec[:16])
		}
		// The sector past the sync (1536..) was never synced: anything goes.
	}
	if !sawNew {
		t.Fatal("no torn clone kept the unsynced sector")
	}
}

// holdFirstMSync is an inner file system whose first MSync waits for
// release (after closing entered).
type holdFirstMSync struct {
	vfs.FS
	held             atomic.Bool
	entered, release chan struct{}
}

func (h *holdFirstMSync) MSync(name string, m *mmap.Mapping, off, n int) error {
	if h.held.CompareAndSwap(false, true) {
		close(h.entered)
		<-h.release
	}
	return h.FS.MSync(name, m, off, n)
}

// Two syncs of one page running at once: the one called later read the
// newer bytes, and they are what survives, whichever returns last. (The
// model once applied each sync's bytes as it returned, so an older sync
// finishing last took back what a later one had made durable: an index
// file's periodic flush raced its final sync and lost its last entry.)
func TestConcurrentSyncsKeepTheLatest(t *testing.T) {
	inner := &holdFirstMSync{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
	f, err := Wrap(inner, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := f.Root()
	path := filepath.Join(root, "file")
	fl, err := f.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	ps := mmap.PageSize()
	if err := fl.Allocate(0, int64(ps)); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, f, root)
	m, err := fl.Map(0, ps, mmap.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	copy(m.Bytes(), "older")
	first := make(chan error, 1)
	go func() { first <- f.MSync(path, m, 0, 5) }()
	<-inner.entered // it has read "older" and waits in the real msync
	copy(m.Bytes(), "newer")
	if err := f.MSync(path, m, 0, 5); err != nil {
		t.Fatal(err)
	}
	close(inner.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	dst, _ := clone(t, f, CloneOptions{})
	if got := readOr(t, filepath.Join(dst, "file")); got[:5] != "newer" {
		t.Fatalf("after two syncs, the later with %q, the clone holds %q", "newer", got[:5])
	}
}
