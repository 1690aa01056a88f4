package index

import (
	"math"
	"testing"

	"github.com/apogeemq/apogee/internal/javacompat"
)

// The Java hash itself is javacompat's, checked there against a JDK; these
// check RocketMQ's keyHash on top of it.
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
		want := positive(javacompat.HashCode(p[0] + "#" + p[1]))
		if got := keyHash(p[0], p[1]); got != want {
			t.Errorf("keyHash(%q, %q) = %d, want %d", p[0], p[1], got, want)
		}
		if got := KeyHashAfter(TopicHash(p[0]), []byte(p[1])); got != want {
			t.Errorf("KeyHashAfter(TopicHash(%q), %q) = %d, want %d", p[0], p[1], got, want)
		}
	}
}
