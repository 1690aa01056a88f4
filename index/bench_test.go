package index

import (
	"fmt"
	"testing"
)

func TestZeroAllocs(t *testing.T) {
	x := openT(t, t.TempDir(), Options{SlotCount: 1024, MaxEntries: 100_000})
	if err := x.Put("T", "warm", 0, ts0); err != nil { // creates the file
		t.Fatal(err)
	}
	keyB := []byte("key-bytes")
	off := int64(1)
	if a := testing.AllocsPerRun(1000, func() {
		x.Put("T", "key-string", off, ts0+off)
		off++
	}); a != 0 {
		t.Errorf("Put: %v allocs", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		x.PutBytes("T", keyB, off, ts0+off)
		off++
	}); a != 0 {
		t.Errorf("PutBytes: %v allocs", a)
	}
	dst := make([]int64, 0, 64)
	if a := testing.AllocsPerRun(1000, func() {
		dst, _ = x.Query("T", "key-string", 0, ts0*2, 32, dst[:0])
	}); a != 0 {
		t.Errorf("Query: %v allocs", a)
	}
	if len(dst) != 32 {
		t.Errorf("Query found %d, want 32", len(dst))
	}
}

// benchKeys returns n distinct keys, formatted outside the timed loop.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("ORDER_%08d", i)
	}
	return keys
}

// BenchmarkPut puts into a file of the default size (420 MB, 5M slots):
// every Put touches a random slot of the 20 MB table and appends an entry.
func BenchmarkPut(b *testing.B) {
	x := openT(b, b.TempDir(), Options{})
	keys := benchKeys(1 << 20)
	if err := x.Put("TopicTest", "warm", 0, ts0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		off := int64(i+1) * 100
		if err := x.Put("TopicTest", keys[i&(1<<20-1)], off, ts0+int64(i)/100); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuery looks up random keys among 1M entries (100k keys with 10
// entries each) in a default-size file, collecting up to 32 offsets.
func BenchmarkQuery(b *testing.B) {
	x := openT(b, b.TempDir(), Options{})
	keys := benchKeys(100_000)
	for i := range 1_000_000 {
		if err := x.Put("TopicTest", keys[i%len(keys)], int64(i)*100, ts0+int64(i)/100); err != nil {
			b.Fatal(err)
		}
	}
	dst := make([]int64, 0, 32)
	b.ReportAllocs()
	b.ResetTimer()
	found := 0
	for i := 0; b.Loop(); i++ {
		var err error
		dst, err = x.Query("TopicTest", keys[(i*7919)%len(keys)], 0, ts0*2, 32, dst[:0])
		if err != nil {
			b.Fatal(err)
		}
		found += len(dst)
	}
	if found == 0 {
		b.Fatal("nothing found")
	}
}

// BenchmarkOpen measures Open's validation of the newest file (default
// size) holding 2M entries: one pass over the entries and the slot table.
// The cost grows linearly with the entries, to ~10x this for a full file.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	x, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	keys := benchKeys(200_000)
	for i := range 2_000_000 {
		if err := x.Put("TopicTest", keys[i%len(keys)], int64(i)*100, ts0+int64(i)/100); err != nil {
			b.Fatal(err)
		}
	}
	if err := x.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		x, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := x.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
