package mmap

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func newFile(t *testing.T, size int64) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "seg"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := Fallocate(f, 0, size); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestWriteThroughMappingReachesFile(t *testing.T) {
	size := 4 * PageSize()
	f := newFile(t, int64(size))
	m, err := Map(f, 0, size, ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Prefault(0, size); err != nil {
		t.Fatal(err)
	}
	want := []byte("apogee commitlog")
	copy(m.Bytes()[PageSize()+10:], want)
	if err := m.Sync(PageSize()+10, len(want)); err != nil {
		t.Fatal(err)
	}
	if err := Fdatasync(f); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, int64(PageSize()+10)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file has %q, want %q", got, want)
	}
	if err := m.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestReadOnlyMappingSeesFileWrites(t *testing.T) {
	size := PageSize()
	f := newFile(t, int64(size))
	m, err := Map(f, 0, size, ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if _, err := f.WriteAt([]byte("xyz"), 100); err != nil {
		t.Fatal(err)
	}
	if got := string(m.Bytes()[100:103]); got != "xyz" {
		t.Fatalf("mapping shows %q after pwrite, want xyz", got)
	}
	if err := m.Prefault(0, size); err != nil {
		t.Fatal(err)
	}
	if m.Mode() != ReadOnly {
		t.Fatal("mode not recorded")
	}
}

func TestFallocateExtendsFile(t *testing.T) {
	f := newFile(t, 0)
	if err := Fallocate(f, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 1<<20 {
		t.Fatalf("size %d after fallocate, want %d", st.Size(), 1<<20)
	}
	if err := fallocateByWrite(f, 0, 2<<20); err != nil {
		t.Fatal(err)
	}
	if st, _ = f.Stat(); st.Size() != 2<<20 {
		t.Fatalf("size %d after fallback fallocate, want %d", st.Size(), 2<<20)
	}
}

func TestReferenceCounting(t *testing.T) {
	f := newFile(t, int64(PageSize()))
	m, err := Map(f, 0, PageSize(), ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				if !m.Acquire() {
					t.Error("acquire failed while the owner holds a reference")
					return
				}
				_ = m.Bytes()[j%PageSize()]
				if err := m.Release(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := m.Refs(); got != 1 {
		t.Fatalf("refs = %d after balanced use, want 1", got)
	}
	if err := m.Release(); err != nil {
		t.Fatal(err)
	}
	if m.Acquire() {
		t.Fatal("acquire succeeded on an unmapped region")
	}
	if err := m.Release(); !errors.Is(err, ErrClosed) {
		t.Fatalf("extra release = %v, want ErrClosed", err)
	}
}

func TestRangeChecks(t *testing.T) {
	f := newFile(t, int64(PageSize()))
	m, err := Map(f, 0, PageSize(), ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if err := m.Sync(PageSize()-1, 2); err == nil {
		t.Fatal("sync past the end succeeded")
	}
	if err := m.Advise(-1, 2, Sequential); err == nil {
		t.Fatal("advise at a negative offset succeeded")
	}
	for _, a := range []Advice{Normal, Sequential, Random, WillNeed, DontNeed} {
		if err := m.Advise(0, PageSize(), a); err != nil {
			t.Fatalf("advise %d: %v", a, err)
		}
	}
	if _, err := Map(f, 1, PageSize(), ReadOnly); err == nil {
		t.Fatal("unaligned map succeeded")
	}
	if _, err := Map(f, 0, 0, ReadOnly); err == nil {
		t.Fatal("empty map succeeded")
	}
}

func TestLockUnlock(t *testing.T) {
	f := newFile(t, int64(PageSize()))
	m, err := Map(f, 0, PageSize(), ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if err := m.Lock(); err != nil {
		t.Skipf("mlock not permitted here: %v", err)
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
}

func TestZeroRangeThroughMapping(t *testing.T) {
	f := zeroPagesOneAndTwo(t, ZeroRange)
	if err := zeroByWrite(f, 0, 10); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 11)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if b[0] != 0 || b[10] != 0xAB {
		t.Fatal("zeroByWrite did not zero exactly the range")
	}
}

// zeroPagesOneAndTwo fills a 4-page file through a mapping, zeroes pages
// 1 and 2 with zero, and checks that the mapping sees exactly them zeroed.
// It returns the file, its blocks synced before the zeroing.
func zeroPagesOneAndTwo(t *testing.T, zero func(f *os.File, off, n int64) error) *os.File {
	t.Helper()
	ps := PageSize()
	size := 4 * ps
	f := newFile(t, int64(size))
	m, err := Map(f, 0, size, ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	b := m.Bytes()
	for i := range b {
		b[i] = 0xAB
	}
	if err := m.Sync(0, size); err != nil {
		t.Fatal(err)
	}
	if err := zero(f, int64(ps), int64(2*ps)); err != nil {
		t.Fatal(err)
	}
	for i, c := range b {
		inside := i >= ps && i < 3*ps
		if inside && c != 0 || !inside && c != 0xAB {
			t.Fatalf("byte %d = %#x after zeroing pages 1-2", i, c)
		}
	}
	return f
}

func TestAfterUnmapRunsOnLastRelease(t *testing.T) {
	f := newFile(t, int64(PageSize()))
	m, err := Map(f, 0, PageSize(), ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	m.AfterUnmap(func() { calls++ })
	m.Acquire()
	m.Release()
	if calls != 0 {
		t.Fatal("cleanup ran while a reference remained")
	}
	m.Release()
	if calls != 1 {
		t.Fatalf("cleanup ran %d times, want 1", calls)
	}
}

// TestPrefetchNeverFaults: PrefetchAll is a hint, harmless with no
// addresses, with zeros, on a live mapping and on a region that has been
// unmapped.
func TestPrefetchNeverFaults(t *testing.T) {
	PrefetchAll(nil)
	PrefetchAll([]uintptr{0, 0})
	if Addr(nil) != 0 {
		t.Fatal("Addr of an empty slice is not 0")
	}
	f := newFile(t, int64(4*PageSize()))
	m, err := Map(f, 0, 4*PageSize(), ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	b := m.Bytes()
	var addrs []uintptr
	for i := 0; i < len(b); i += 64 {
		addrs = append(addrs, Addr(b[i:]), 0)
	}
	PrefetchAll(addrs)
	b[0] = 1
	if err := m.Release(); err != nil {
		t.Fatal(err)
	}
	PrefetchAll(addrs) // unmapped now: a touch would fault, a prefetch must not
}
