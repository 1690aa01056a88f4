package index

import (
	"math"
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
		{"invalid byte", "T#\xffa", 4567699}, // Java decodes 0xFF as U+FFFD
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := javaHash(tt.s); got != tt.want {
				t.Errorf("javaHash(%q) = %d, want %d", tt.s, got, tt.want)
			}
			if got := javaHashBytes(0, []byte(tt.s)); got != tt.want {
				t.Errorf("javaHashBytes(%q) = %d, want %d", tt.s, got, tt.want)
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
	}
}
