package mmap

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestResidentAndPrefaultData: the pages of a file written through one
// mapping are resident (page cache) as seen from another; after they are
// dropped from the cache PrefaultData brings them back writable, data
// intact.
func TestResidentAndPrefaultData(t *testing.T) {
	const size = 64 << 10
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Fallocate(f, 0, size); err != nil {
		t.Fatal(err)
	}
	w, err := Map(f, 0, size, ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.Bytes() {
		w.Bytes()[i] = byte(i * 7)
	}
	if err := w.Sync(0, size); err != nil {
		t.Fatal(err)
	}
	w.Release()
	m, err := Map(f, 0, size, ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	res, pages, err := m.Resident()
	if err != nil || pages != size/PageSize() || res != pages {
		t.Fatalf("resident %d of %d pages (%v), want all: the file was just written", res, pages, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if res, _, _ := m.Resident(); res == pages {
		t.Skip("the kernel kept the pages cached; nothing to observe")
	}
	if err := m.PrefaultData(0, size); err != nil {
		t.Fatal(err)
	}
	if res, _, _ := m.Resident(); res != pages {
		t.Fatalf("after PrefaultData %d of %d pages resident", res, pages)
	}
	for i, b := range m.Bytes() {
		if b != byte(i*7) {
			t.Fatalf("byte %d is %d after PrefaultData, want %d", i, b, byte(i*7))
		}
	}
}
