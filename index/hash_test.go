package index

import (
	"encoding/hex"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Expected values are JDK String.hashCode results (java 17, String.hashCode
// of the string decoded from these UTF-8 bytes), written down by hand.
func TestJavaHash(t *testing.T) {
	tests := []struct {
		name string
		s    string
		want int32
	}{
		{"empty", "", 0},
		{"a", "a", 97},
		{"hello", "hello", 99162322},
		{"T#k1", "T#k1", 2539445},
		{"T#k2", "T#k2", 2539446},
		{"collide Aa", "Aa", 2112},
		{"collide BB", "BB", 2112},
		{"negative", "TopicTest#KEY_0001", -792468989},
		{"latin1", "\u00e9", 233},
		{"cjk", "主题#键", 634204136},
		{"surrogate pair", "\U0001F600", 1772899},
		{"pair inside", "T#\U0001F600x", 133578438},
		{"min int32", "polygenelubricants", math.MinInt32},
		{"replacement char", "T#\uFFFD", 147342},
		{"invalid byte", "T#\xffa", 4567699},         // Java decodes 0xFF as U+FFFD
		{"cut short at the end", "\xe4\xb8", 65533},  // one U+FFFD, Go would give two
		{"encoded surrogate", "\xed\xa0\x80", 65533}, // one U+FFFD, Go would give three
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := javaHash(tt.s); got != tt.want {
				t.Errorf("javaHash(%q) = %d, want %d", tt.s, got, tt.want)
			}
			if got := javaHashOf(0, []byte(tt.s)); got != tt.want {
				t.Errorf("javaHashOf(bytes)(%q) = %d, want %d", tt.s, got, tt.want)
			}
		})
	}
}

func TestKeyHash(t *testing.T) {
	tests := []struct {
		topic, key string
		want       int32
	}{
		{"T", "k1", 2539445},
		{"TopicTest", "KEY_0001", 792468989}, // |-792468989|
		{"主题", "键", 634204136},
		{"T", "\U0001F600x", 133578438},
	}
	for _, tt := range tests {
		if got := keyHash(tt.topic, tt.key); got != tt.want {
			t.Errorf("keyHash(%q, %q) = %d, want %d", tt.topic, tt.key, got, tt.want)
		}
		if got := keyHashBytes(tt.topic, []byte(tt.key)); got != tt.want {
			t.Errorf("keyHashBytes(%q, %q) = %d, want %d", tt.topic, tt.key, got, tt.want)
		}
		if got := KeyHashAfter(TopicHash(tt.topic), []byte(tt.key)); got != tt.want {
			t.Errorf("KeyHashAfter(TopicHash(%q), %q) = %d, want %d", tt.topic, tt.key, got, tt.want)
		}
	}
	if got := positive(math.MinInt32); got != 0 {
		t.Errorf("positive(MinInt32) = %d, want 0", got)
	}
	if got := positive(-5); got != 5 {
		t.Errorf("positive(-5) = %d, want 5", got)
	}
}

func TestKeyHashFoldsLikeConcatenation(t *testing.T) {
	parts := [][2]string{{"", ""}, {"T", ""}, {"", "k"}, {"主题", "\U0001F600"}, {"a\xff", "\xe4\xb8"}, {"TopicTest", "KEY_0001"}}
	for _, p := range parts {
		want := positive(javaHash(p[0] + "#" + p[1]))
		if got := keyHash(p[0], p[1]); got != want {
			t.Errorf("keyHash(%q, %q) = %d, want %d", p[0], p[1], got, want)
		}
		if got := KeyHashAfter(TopicHash(p[0]), []byte(p[1])); got != want {
			t.Errorf("KeyHashAfter(TopicHash(%q), %q) = %d, want %d", p[0], p[1], got, want)
		}
	}
}

// TestJavaHashCorpus compares with String.hashCode as computed by a JDK
// (testdata/JavaHash.java) for byte strings built from the bytes that
// matter to a UTF-8 decoder: every string of up to two of them, and random
// longer ones. (Checked once against 511,737 such strings, including every
// two-byte string; javahash.txt keeps a sample.)
func TestJavaHashCorpus(t *testing.T) {
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
		if got := javaHashOf(0, b); got != int32(w) {
			t.Errorf("% x: got %d, java %d", b, got, w)
		}
		if got := javaHash(string(b)); got != int32(w) {
			t.Errorf("% x as string: got %d, java %d", b, got, w)
		}
		n++
	}
	if n < 800 {
		t.Fatalf("only %d cases", n)
	}
}
