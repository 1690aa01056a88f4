package message

import "testing"

// The hash itself is javacompat's, tested there against a JDK; these check
// that message's names reach it, for both argument types.
func TestJavaHashCode(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int32
	}{
		{"empty", "", 0},
		{"TagA", "TagA", 2598919},
		{"wraps", "Hello World", -862545276},
		{"CJK", "中文标签", 622041809},
		{"surrogate pair", "a\U0001F600", 1866116},
		{"encoded surrogate", "\xed\xa0\x80", 0xFFFD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := JavaHashCode(tc.in); got != tc.want {
				t.Errorf("JavaHashCode(%q) = %d, want %d", tc.in, got, tc.want)
			}
			if got := JavaHashCodeBytes([]byte(tc.in)); got != tc.want {
				t.Errorf("JavaHashCodeBytes(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestTagCode(t *testing.T) {
	if TagCode(nil) != 0 || TagCode([]byte{}) != 0 {
		t.Error("empty tag code not 0")
	}
	if got := TagCode([]byte("TagA")); got != 2598919 {
		t.Errorf("TagCode(TagA) = %d", got)
	}
	if got := TagCode([]byte("Hello World")); got != -862545276 {
		t.Errorf("TagCode not sign-extended: %d", got)
	}
}
