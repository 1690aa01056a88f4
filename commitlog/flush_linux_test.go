package commitlog

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"github.com/apogeemq/apogee/mmap"
)

// TestFlushDropsWrittenPageTableEntries checks dropWrittenPTEs: after a flush
// the fully written pages are no longer mapped in this process (so writeback
// had nothing to write-protect), and their bytes are intact through the
// mapping, in the file, and after a reopen.
func TestFlushDropsWrittenPageTableEntries(t *testing.T) {
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("no pagemap: %v", err)
	}
	defer pagemap.Close()
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, FlushMode: FlushSync, PrefaultAhead: -1})
	var recs [][]byte
	var res Result
	for i := 0; i < 40; i++ {
		rec := encode(t, "T", bodyOf(i, 1000))
		recs = append(recs, rec)
		res.Offsets = res.Offsets[:0]
		if err := l.Append(rec, nil, &res); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WaitFlushed(res.End); err != nil {
		t.Fatal(err)
	}
	seg, err := l.pin(0)
	if err != nil {
		t.Fatal(err)
	}
	data := seg.m.Bytes()
	page := mmap.PageSize()
	fullPages := int(res.End) / page
	if fullPages < 8 {
		t.Fatalf("only %d full pages written", fullPages)
	}
	present := 0
	for p := 0; p < fullPages; p++ {
		addr := uintptr(unsafe.Pointer(&data[p*page]))
		var e [8]byte
		if _, err := pagemap.ReadAt(e[:], int64(addr/uintptr(page))*8); err != nil {
			t.Fatal(err)
		}
		if binary.LittleEndian.Uint64(e[:])>>63 == 1 {
			present++
		}
	}
	if present != 0 {
		t.Errorf("%d of %d flushed pages still mapped", present, fullPages)
	}
	var want []byte
	for _, r := range recs {
		want = append(want, r...)
	}
	// Reading through the mapping maps the pages again, read-only.
	if !bytes.Equal(data[:len(want)], want) {
		t.Fatal("bytes differ through the mapping after the flush")
	}
	seg.m.Release()
	file, err := os.ReadFile(seg.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file[:len(want)], want) {
		t.Fatal("bytes differ in the file")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, Options{Dir: dir})
	defer l.Close()
	got := readAll(t, l)
	if len(got) != len(recs) {
		t.Fatalf("reopened log has %d records, want %d", len(got), len(recs))
	}
}
