package index

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpen patches a valid file (the newest, and so the one Open repairs)
// with arbitrary bytes at an arbitrary position. Open must accept it, and
// queries and puts on the result must work without panicking and within
// their bounds. Recovery must be a fixpoint: a second Open changes nothing.
func FuzzOpen(f *testing.F) {
	o := Options{SlotCount: 8, MaxEntries: 32}
	lay := newLayout(o)
	src := f.TempDir()
	x, err := Open(src, o)
	if err != nil {
		f.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "xAa", "xBB"}
	for i := range 25 {
		if err := x.Put("T", keys[i%len(keys)], int64(i)*100, ts0+int64(i)*1500); err != nil {
			f.Fatal(err)
		}
	}
	if err := x.Close(); err != nil {
		f.Fatal(err)
	}
	names := listFiles(f, src)
	name := names[0]
	base, err := os.ReadFile(filepath.Join(src, name))
	if err != nil {
		f.Fatal(err)
	}

	f.Add(uint16(0), []byte{})
	f.Add(uint16(hdrCount), []byte{0, 0, 0, 0})
	f.Add(uint16(hdrCount), []byte{0x7f, 0xff, 0xff, 0xff})
	f.Add(uint16(0), make([]byte, headerSize))
	f.Add(uint16(lay.slotPos(3)), []byte{0, 0, 0, 30})
	f.Add(uint16(lay.entryPos(10)+16), []byte{0, 0, 0, 10})
	f.Add(uint16(lay.entryPos(25)), bytes.Repeat([]byte{0xAB}, 100))
	f.Add(uint16(lay.entryPos(5)), make([]byte, 60))

	f.Fuzz(func(t *testing.T, at uint16, patch []byte) {
		b := bytes.Clone(base)
		copy(b[int(at)%len(b):], patch)
		dir := t.TempDir()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		x, err := Open(dir, o)
		if err != nil {
			t.Fatalf("Open of a corrupt file: %v", err)
		}
		exercise := func(x *Index) {
			var buf []int64
			for _, k := range keys {
				for _, max := range []int{1, 3, 1000} {
					buf, err = x.Query("T", k, 0, 1<<62, max, buf[:0])
					if err != nil || len(buf) > max {
						t.Fatalf("Query %s max %d: %d results, %v", k, max, len(buf), err)
					}
				}
			}
			_ = x.MaxCommitLogOffset()
			_, _ = x.LastUpdate()
		}
		exercise(x)
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		repaired, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		x, err = Open(dir, o)
		if err != nil {
			t.Fatalf("second Open: %v", err)
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		again, _ := os.ReadFile(path)
		if !bytes.Equal(repaired, again) {
			t.Fatalf("recovery is not a fixpoint: %s", firstDiff(repaired, again))
		}

		x, err = Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		from, err := x.TruncateAfter(1 << 40)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			if err := x.Put("T", keys[i%len(keys)], from+int64(i)*100, ts0+int64(i)*1500); err != nil {
				t.Fatal(err)
			}
		}
		exercise(x)
	})
}

func firstDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("byte %d: %#x then %#x", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(a), len(b))
}
