package message

import "testing"

func TestJavaHashCode(t *testing.T) {
	// Expected values are Java's String.hashCode of the decoded string, worked
	// out with h = 31*h + c over UTF-16 code units.
	tests := []struct {
		name string
		in   string
		want int32
	}{
		{"empty", "", 0},
		{"a", "a", 97},
		{"TagA", "TagA", 2598919},                  // ((84*31+97)*31+103)*31+65
		{"hello", "hello", 99162322},               // java: "hello".hashCode()
		{"wraps", "Hello World", -862545276},       // int32 overflow
		{"latin-1", "é", 233},                      // U+00E9, 2 UTF-8 bytes, 1 unit
		{"CJK", "中文标签", 622041809},                 // 3-byte UTF-8, 1 unit each
		{"surrogate pair", "a\U0001F600", 1866116}, // 97*31 + 0xD83D, *31 + 0xDE00
		{"invalid byte", "\xff", 0xFFFD},
		{"two invalid bytes", "\xc0\x80", 0xFFFD*31 + 0xFFFD},
		{"truncated 3-byte then A", "\xe2\x82A", 0xFFFD*31 + 'A'},
		{"truncated at end", "a\xe2\x82", 97*31 + 0xFFFD},
		{"encoded surrogate", "\xed\xa0\x80", 0xFFFD},
		{"surrogate prefix then A", "\xed\xa0A", 0xFFFD*31 + 'A'},
		{"truncated 4-byte then A", "\xf0\x90\x80A", 0xFFFD*31 + 'A'},
		{"overlong E0 80", "\xe0\x80", 0xFFFD*31 + 0xFFFD},
		{"above U+10FFFF", "\xf4\x90\x80\x80", ((0xFFFD*31+0xFFFD)*31+0xFFFD)*31 + 0xFFFD},
		{"F5", "\xf5", 0xFFFD},
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
