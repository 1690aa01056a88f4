package litequeue

import (
	"os"
	"path/filepath"
	"testing"
)

// fuzzTemplate builds, once, an index of three lite topics over several
// blocks (two of them interleaved, one deleted and recreated), closed
// cleanly: its files are the fuzzers' starting point.
func fuzzTemplate(f *testing.F) (dir string, want map[string][]Entry) {
	dir = f.TempDir()
	x, _, err := Open(dir, Options{FileSize: testFileSize})
	if err != nil {
		f.Fatal(err)
	}
	var cl int64
	want = map[string][]Entry{}
	for i := 0; i < 60; i++ {
		for _, l := range []string{"a", "b", "c"} {
			cl += 100
			e := entry(cl)
			if _, err := x.Append([]byte("P"), []byte(l), e, cl); err != nil {
				f.Fatal(err)
			}
			want[l] = append(want[l], e)
		}
		if i == 30 {
			x.Delete("P", "c")
			want["c"] = nil
		}
	}
	x.CommitOffset("g", "P", "a", 3)
	if err := x.Close(); err != nil {
		f.Fatal(err)
	}
	return dir, want
}

func copyFiles(t *testing.T, from, to string) {
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// exercise runs every operation over x and checks what reads return:
// bounds that hold, never more entries than asked. (Entries carry no
// checksum: a damaged entry is served, and the store's check of its record
// refuses it.)
func exercise(t *testing.T, x *Index, want map[string][]Entry) {
	for l := range want {
		mn, mx, ok := x.Offsets("P", l)
		if !ok {
			continue
		}
		if mn < 0 || mn > mx {
			t.Fatalf("%s: bounds %d..%d", l, mn, mx)
		}
		for from := mn; from < mx; from += 7 {
			got, _, _, _, err := x.Read("P", l, from, make([]Entry, 0, 30))
			if err != nil {
				break // a broken chain is reported, not served
			}
			if int64(len(got)) > mx-from {
				t.Fatalf("%s: %d entries from %d, max %d", l, len(got), from, mx)
			}
		}
	}
	x.ForEach("", func(string, LiteInfo) bool { return true })
	x.Append([]byte("P"), []byte("a"), entry(1<<40), 1)
	x.Append([]byte("P"), []byte("new"), entry(1<<40+100), 1)
	x.Delete("P", "b")
	x.DeleteBelow(3000)
	x.TruncateFrom(1 << 40)
	x.Expire("P", 0, nil)
	x.Offset("g", "P", "a")
	if err := x.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
}

// FuzzBlockFile overwrites bytes of the template's block file (headers and
// entries) and opens it cleanly (TABLE kept: its checks must catch a
// damaged tail) or after a crash (TABLE gone: the rebuild reads every
// header). Nothing may panic, hang, or serve out of bounds.
func FuzzBlockFile(f *testing.F) {
	tmpl, want := fuzzTemplate(f)
	f.Add(uint16(0), []byte{0xFF}, false)
	f.Add(uint16(512+4), []byte{0, 0, 0, 1}, true)
	f.Add(uint16(512*3+24), []byte{0, 0, 0, 0}, true)
	f.Add(uint16(512*2+16), []byte{0, 0, 0, 0, 0, 0, 0, 24}, false)
	f.Fuzz(func(t *testing.T, at uint16, patch []byte, crashed bool) {
		dir := t.TempDir()
		copyFiles(t, tmpl, dir)
		if crashed {
			os.Remove(filepath.Join(dir, tableName))
		}
		path := filepath.Join(dir, fileName(0))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pos := int(at) % (8 * BlockSize)
		copy(b[pos:], patch)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		x, _, err := Open(dir, Options{FileSize: testFileSize})
		if err != nil {
			return
		}
		exercise(t, x, want)
	})
}

// FuzzJournal opens an index whose journal is the input (after the
// template's own journal, or alone).
func FuzzJournal(f *testing.F) {
	tmpl, want := fuzzTemplate(f)
	j, err := os.ReadFile(filepath.Join(tmpl, journalName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(j, true)
	f.Add(j[:len(j)-3], false)
	f.Add(appendCreate(nil, recCreate, 1<<30, 1, []byte("P"), []byte("x")), true)
	f.Add(appendOffset(nil, offKey{"g", "P", "a"}, -5), false)
	f.Fuzz(func(t *testing.T, journal []byte, keepBlocks bool) {
		dir := t.TempDir()
		if keepBlocks {
			copyFiles(t, tmpl, dir)
			os.Remove(filepath.Join(dir, tableName))
		}
		if err := os.WriteFile(filepath.Join(dir, journalName), journal, 0o644); err != nil {
			t.Fatal(err)
		}
		x, _, err := Open(dir, Options{FileSize: testFileSize})
		if err != nil {
			return
		}
		exercise(t, x, want)
	})
}

// FuzzParseHeader: a header that parses is one putHeader wrote.
func FuzzParseHeader(f *testing.F) {
	var b [BlockSize]byte
	putHeader(b[:], header{id: 3, gen: 2, first: 48, prev: 7, next: 9})
	f.Add(b[:HeaderSize])
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < HeaderSize {
			return
		}
		h, ok := parseHeader(in)
		if !ok {
			return
		}
		var out [HeaderSize]byte
		putHeader(out[:], h)
		// Bytes 28-31 (next) are outside the CRC; the rest must round-trip.
		if string(out[:28]) != string(in[:28]) || h.first%EntriesPerBlock != 0 || h.first < 0 {
			t.Fatalf("header %+v from %x re-encodes as %x", h, in[:HeaderSize], out)
		}
	})
}
