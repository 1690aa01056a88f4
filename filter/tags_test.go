package filter

import (
	"errors"
	"slices"
	"testing"

	"github.com/apogeemq/apogee/message"
)

func TestCompileTags(t *testing.T) {
	tests := []struct {
		sub     string
		all     bool
		tags    []string
		wantErr bool
	}{
		{sub: "", all: true},
		{sub: "*", all: true},
		{sub: " * ", tags: []string{"*"}}, // Java compares with "*" untrimmed
		{sub: "TagA", tags: []string{"TagA"}},
		{sub: "TagA || TagB", tags: []string{"TagA", "TagB"}},
		{sub: "  TagA||TagB  ||\tTagC\n", tags: []string{"TagA", "TagB", "TagC"}},
		{sub: "TagA || TagA || TagB", tags: []string{"TagA", "TagB"}},
		{sub: "TagA || || TagB ||", tags: []string{"TagA", "TagB"}},
		{sub: "||TagA", tags: []string{"TagA"}},
		{sub: "a|||b", tags: []string{"a", "|b"}},
		{sub: "Tag A", tags: []string{"Tag A"}},
		{sub: "*||TagA", tags: []string{"*", "TagA"}},
		{sub: "   ", tags: nil},    // blank items only: accepts nothing
		{sub: "|| ||", tags: nil},  // ["", " "]: not all empty
		{sub: "||", wantErr: true}, // Java's split yields nothing
		{sub: "||||", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.sub, func(t *testing.T) {
			f, err := CompileTags(tc.sub)
			if tc.wantErr {
				var pe *ParseError
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want *ParseError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.All() != tc.all || f.NeedsRecord() == tc.all {
				t.Fatalf("All = %v, NeedsRecord = %v, want all %v", f.All(), f.NeedsRecord(), tc.all)
			}
			if !slices.Equal(f.TagNames(), tc.tags) {
				t.Fatalf("tags %q, want %q", f.TagNames(), tc.tags)
			}
			var codes []int32
			for _, tag := range tc.tags {
				codes = append(codes, message.JavaHashCode(tag))
			}
			slices.Sort(codes)
			codes = slices.Compact(codes)
			if !slices.Equal(f.Codes(), codes) {
				t.Fatalf("codes %v, want %v", f.Codes(), codes)
			}
		})
	}
}

func TestTagCodes(t *testing.T) {
	// Java String.hashCode values (UTF-16 units), independent of
	// message.JavaHashCode: "TagA" = 2598919, "中文" = 20013*31+25991.
	tests := []struct {
		tag  string
		code int32
	}{
		{"TagA", 2598919},
		{"a", 97},
		{"中文", 20013*31 + 25991},
		{"é", 233},
		{"a\U0001F600", (97*31+0xD83D)*31 + 0xDE00},
		{"Hello World", -862545276},
	}
	for _, tc := range tests {
		f, err := CompileTags("x || " + tc.tag)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(f.Codes(), tc.code) {
			t.Errorf("%q: codes %v lack %d", tc.tag, f.Codes(), tc.code)
		}
		if tc.code != message.JavaHashCode(tc.tag) {
			t.Errorf("%q: message.JavaHashCode = %d, want %d", tc.tag, message.JavaHashCode(tc.tag), tc.code)
		}
		// The consume queue stores the sign-extended code.
		if !f.MatchTagCode(message.TagCode([]byte(tc.tag))) {
			t.Errorf("%q: MatchTagCode(TagCode) = false", tc.tag)
		}
	}
}

func TestTagsMatch(t *testing.T) {
	props := func(tags string) []byte {
		p := message.AppendProperty(nil, message.PropUniqKey, "0A0000010001")
		if tags != "-" {
			p = message.AppendProperty(p, message.PropTags, tags)
		}
		return message.AppendProperty(p, message.PropKeys, "k1 k2")
	}
	ab, _ := CompileTags("TagA || TagB")
	all, _ := CompileTags("*")
	many, _ := CompileTags("t0||t1||t2||t3||t4||t5||t6||t7||t8||t9||TagA")
	tests := []struct {
		f     *Tags
		code  int64
		props []byte
		cq    bool
		rec   bool
	}{
		{all, 0, props("-"), true, true},
		{all, 12345, props("Other"), true, true},
		{ab, message.TagCode([]byte("TagA")), props("TagA"), true, true},
		{ab, message.TagCode([]byte("TagB")), props("TagB"), true, true},
		{ab, message.TagCode([]byte("TagC")), props("TagC"), false, false},
		{ab, 0, props("-"), false, false}, // no tag: code 0, never passes
		{ab, 0, props(""), false, false},  // empty TAGS reads as missing
		{ab, message.TagCode([]byte("TagA")), props("TagA "), true, false},
		{ab, message.TagCode([]byte("TagA")) + 1<<32, props("TagA"), true, true}, // intValue()
		{many, message.TagCode([]byte("TagA")), props("TagA"), true, true},
		{many, message.TagCode([]byte("t5")), props("t5"), true, true},
		{many, message.TagCode([]byte("TagZ")), props("TagZ"), false, false},
	}
	for i, tc := range tests {
		if got := tc.f.MatchTagCode(tc.code); got != tc.cq {
			t.Errorf("%d: MatchTagCode(%d) = %v, want %v", i, tc.code, got, tc.cq)
		}
		if got := tc.f.MatchProperties(tc.props); got != tc.rec {
			t.Errorf("%d: MatchProperties(%q) = %v, want %v", i, tc.props, got, tc.rec)
		}
	}
	// Hash collision: "Aa" and "BB" share Java hash 2112. The consume-queue
	// check passes both; the record check tells them apart.
	aa, _ := CompileTags("Aa")
	if code := message.TagCode([]byte("BB")); !aa.MatchTagCode(code) || aa.MatchProperties(props("BB")) {
		t.Error("collision not caught by the record check")
	}
	// The last TAGS wins, as in Java's property map.
	dup := message.AppendProperty(props("TagC"), message.PropTags, "TagA")
	if !ab.MatchProperties(dup) {
		t.Error("last duplicate TAGS not used")
	}
}
