package javacompat

import (
	"encoding/hex"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Expected values are JDK String.hashCode results of the string decoded from
// these UTF-8 bytes (java 17), or worked out by hand with h = 31*h + c over
// UTF-16 code units.
func TestHashCode(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int32
	}{
		{"empty", "", 0},
		{"a", "a", 97},
		{"TagA", "TagA", 2598919}, // ((84*31+97)*31+103)*31+65
		{"hello", "hello", 99162322},
		{"T#k1", "T#k1", 2539445},
		{"T#k2", "T#k2", 2539446},
		{"collide Aa", "Aa", 2112},
		{"collide BB", "BB", 2112},
		{"wraps", "Hello World", -862545276},
		{"negative", "TopicTest#KEY_0001", -792468989},
		{"min int32", "polygenelubricants", math.MinInt32},
		{"latin-1", "\u00e9", 233}, // 2 UTF-8 bytes, 1 unit
		{"CJK", "中文标签", 622041809}, // 3-byte UTF-8, 1 unit each
		{"cjk key", "主题#键", 634204136},
		{"surrogate pair", "\U0001F600", 1772899},
		{"a then pair", "a\U0001F600", 1866116}, // 97*31 + 0xD83D, *31 + 0xDE00
		{"pair inside", "T#\U0001F600x", 133578438},
		{"replacement char", "T#\uFFFD", 147342},
		{"invalid byte", "\xff", 0xFFFD},
		{"invalid byte inside", "T#\xffa", 4567699},
		{"two invalid bytes", "\xc0\x80", 0xFFFD*31 + 0xFFFD},
		{"truncated 3-byte then A", "\xe2\x82A", 0xFFFD*31 + 'A'},
		{"truncated at end", "a\xe2\x82", 97*31 + 0xFFFD},
		{"cut short at the end", "\xe4\xb8", 65533},   // one U+FFFD, Go would give two
		{"encoded surrogate", "\xed\xa0\x80", 0xFFFD}, // one U+FFFD, Go would give three
		{"surrogate prefix then A", "\xed\xa0A", 0xFFFD*31 + 'A'},
		{"truncated 4-byte then A", "\xf0\x90\x80A", 0xFFFD*31 + 'A'},
		{"overlong E0 80", "\xe0\x80", 0xFFFD*31 + 0xFFFD},
		{"above U+10FFFF", "\xf4\x90\x80\x80", ((0xFFFD*31+0xFFFD)*31+0xFFFD)*31 + 0xFFFD},
		{"F5", "\xf5", 0xFFFD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := HashCode(tc.in); got != tc.want {
				t.Errorf("HashCode(%q) = %d, want %d", tc.in, got, tc.want)
			}
			if got := HashCode([]byte(tc.in)); got != tc.want {
				t.Errorf("HashCode([]byte(%q)) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

// TestHashCodeCorpus compares with String.hashCode as computed by a JDK
// (testdata/java/JavaHash.java) for byte strings built from the bytes that
// matter to a UTF-8 decoder: every string of up to two of them, and random
// longer ones. (Checked once against 511,737 such strings, including every
// two-byte string; javahash.txt keeps a sample.)
func TestHashCodeCorpus(t *testing.T) {
	data, err := os.ReadFile("testdata/javahash.txt")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hx, want, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		if hx == "-" {
			hx = ""
		}
		b, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		w, err := strconv.ParseInt(want, 10, 32)
		if err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		if got := HashCode(b); got != int32(w) {
			t.Errorf("% x: got %d, java %d", b, got, w)
		}
		if got := HashCode(string(b)); got != int32(w) {
			t.Errorf("% x as string: got %d, java %d", b, got, w)
		}
		n++
	}
	if n < 800 {
		t.Fatalf("only %d cases", n)
	}
}

// FuzzHashCode: the string and byte forms agree, folding over a split at an
// ASCII byte equals hashing the whole (what index's topic + "#" + key relies
// on), and the hash is the 31*h + c recurrence over the UTF-16 units of what
// the decoder yields.
func FuzzHashCode(f *testing.F) {
	for _, s := range []string{"", "TagA", "T#\U0001F600x", "a\xff", "\xe4\xb8", "\xed\xa0\x80", "\xf0\x90\x80A", "\xf4\x90\x80\x80", "主题#键"} {
		f.Add(s, "k")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		h := HashCode(a)
		if hb := HashCode([]byte(a)); hb != h {
			t.Fatalf("%q: string %d, bytes %d", a, h, hb)
		}
		if got, want := HashCodeFrom(31*h+'#', b), HashCode(a+"#"+b); got != want {
			t.Fatalf("fold of %q # %q = %d, whole %d", a, b, got, want)
		}
		var ref int32
		for i := 0; i < len(a); {
			if a[i] < 0x80 {
				ref = 31*ref + int32(a[i])
				i++
				continue
			}
			r, n := decodeRune(a[i:])
			if n < 1 || n > 4 || n > len(a)-i || r > 0x10FFFF || r >= 0xD800 && r <= 0xDFFF {
				t.Fatalf("decodeRune(% x) = %U, %d", a[i:], r, n)
			}
			i += n
			for _, u := range utf16Units(r) {
				ref = 31*ref + int32(u)
			}
		}
		if ref != h {
			t.Fatalf("%q: %d, recurrence over its units %d", a, h, ref)
		}
	})
}

func utf16Units(r rune) []uint16 {
	if r < 0x10000 {
		return []uint16{uint16(r)}
	}
	r -= 0x10000
	return []uint16{uint16(0xD800 + r>>10), uint16(0xDC00 + r&0x3FF)}
}

func TestHashCodeAllocs(t *testing.T) {
	b := []byte("T#\U0001F600x\xed\xa0\x80")
	if n := testing.AllocsPerRun(100, func() { HashCode(b); HashCode("TagA||TagB") }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

func BenchmarkHashCode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = HashCode("TagA||TagB")
	}
}
