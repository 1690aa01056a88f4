package message

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestAppendPropertyGolden(t *testing.T) {
	got := AppendProperty(AppendProperty(nil, "TAGS", "TagA"), "KEYS", "k1 k2")
	if want := "TAGS\x01TagA\x02KEYS\x01k1 k2\x02"; string(got) != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestLookupAndParse(t *testing.T) {
	tests := []struct {
		name  string
		props string
		want  map[string]string
	}{
		{"empty", "", map[string]string{}},
		{"one", "TAGS\x01a\x02", map[string]string{"TAGS": "a"}},
		{"no trailing separator", "TAGS\x01a\x02KEYS\x01b", map[string]string{"TAGS": "a", "KEYS": "b"}},
		{"empty value kept", "TAGS\x01\x02", map[string]string{"TAGS": ""}},
		{"duplicate: last wins", "K\x011\x02K\x012\x02", map[string]string{"K": "2"}},
		{"two 0x01 skipped", "A\x01b\x01c\x02D\x01e\x02", map[string]string{"D": "e"}},
		{"no 0x01 skipped", "junk\x02D\x01e\x02", map[string]string{"D": "e"}},
		{"empty items skipped", "\x02\x02D\x01e\x02\x02", map[string]string{"D": "e"}},
		{"prefix key not confused", "TAGSX\x01no\x02TAG\x01no\x02TAGS\x01yes\x02", map[string]string{"TAGSX": "no", "TAG": "no", "TAGS": "yes"}},
		{"empty key", "\x01v\x02", map[string]string{"": "v"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseProperties([]byte(tc.props))
			if !maps.Equal(got, tc.want) {
				t.Fatalf("ParseProperties = %q, want %q", got, tc.want)
			}
			// Inside a larger buffer (as in a record): bytes on both sides.
			buf := []byte("\x01\x02head" + tc.props + "K\x01tail\x02")
			inner := buf[6 : 6+len(tc.props)]
			if got := ParseProperties(inner); !maps.Equal(got, tc.want) {
				t.Fatalf("ParseProperties of a subslice = %q, want %q", got, tc.want)
			}
			for k, v := range tc.want {
				gv, ok := LookupProperty([]byte(tc.props), k)
				if !ok || string(gv) != v {
					t.Errorf("LookupProperty(%q) = %q %v, want %q", k, gv, ok, v)
				}
			}
			if _, ok := LookupProperty([]byte(tc.props), "MISSING"); ok {
				t.Error("MISSING found")
			}
		})
	}
}

func TestForEachPropertyStops(t *testing.T) {
	n := 0
	ForEachProperty([]byte("a\x011\x02b\x012\x02c\x013\x02"), func(k, v []byte) bool {
		n++
		return string(k) != "b"
	})
	if n != 2 {
		t.Fatalf("visited %d, want 2", n)
	}
}

func TestEncodeProperties(t *testing.T) {
	got, err := EncodeProperties(map[string]string{"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "u"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "KEYS\x01k\x02TAGS\x01a\x02UNIQ_KEY\x01u\x02"; string(got) != want {
		t.Fatalf("got %q want %q", got, want)
	}
	if b, err := EncodeProperties(nil); b != nil || err != nil {
		t.Fatalf("nil map: %q %v", b, err)
	}
	bad := []map[string]string{
		{"": "v"},
		{"a\x01": "v"},
		{"a\x02": "v"},
		{"a": "v\x01"},
		{"a": "v\x02"},
	}
	for _, m := range bad {
		if _, err := EncodeProperties(m); !errors.Is(err, ErrBadProperty) {
			t.Errorf("%q: err = %v", m, err)
		}
	}
	if _, err := EncodeProperties(map[string]string{"k": strings.Repeat("v", MaxPropertiesSize)}); !errors.Is(err, ErrPropertiesTooLarge) {
		t.Errorf("too large: %v", err)
	}
}

func TestValidateProperties(t *testing.T) {
	tests := []struct {
		props string
		want  error
	}{
		{"", nil},
		{"TAGS\x01a\x02", nil},
		{"TAGS\x01a\x02KEYS\x01b", nil},
		{"TAGS\x01\x02", nil},
		{"\x02", ErrBadProperty},
		{"TAGS\x01a\x02\x02", ErrBadProperty},
		{"TAGS\x02", ErrBadProperty},
		{"\x01a\x02", ErrBadProperty},
		{"T\x01a\x01b\x02", ErrBadProperty},
		{strings.Repeat("a\x01b\x02", MaxPropertiesSize/4+1), ErrPropertiesTooLarge},
	}
	for _, tc := range tests {
		err := ValidateProperties([]byte(tc.props))
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("ValidateProperties(%.40q) = %v, want %v", tc.props, err, tc.want)
		}
	}
}

func TestLookupDispatchProperties(t *testing.T) {
	for _, tc := range []struct {
		props            string
		tags, keys, uniq string
		haveTags         bool
	}{
		{"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02", "TagA", "k1 k2", "ABC", true},
		{"KEYS\x01a\x02KEYS\x01b", "", "b", "", false},                      // last duplicate wins
		{"TAGS\x01\x02TAGSX\x01no\x02UNIQ_KEY\x01u\x01v", "", "", "", true}, // empty TAGS found; malformed UNIQ_KEY skipped
		{"", "", "", "", false},
	} {
		tags, keys, uniq := LookupDispatchProperties([]byte(tc.props))
		if string(tags) != tc.tags || string(keys) != tc.keys || string(uniq) != tc.uniq || (tags != nil) != tc.haveTags {
			t.Errorf("%q: tags %q (nil %v), keys %q, uniq %q", tc.props, tags, tags == nil, keys, uniq)
		}
	}
}
