package message

import (
	"bytes"
	"testing"
)

func TestLookupDispatchPropertiesLite(t *testing.T) {
	for _, tc := range []struct {
		props            string
		tags, uniq, lite string
		haveLite         bool
	}{
		{"TAGS\x01T\x02__LITE_TOPIC\x01session-1\x02UNIQ_KEY\x01U\x02", "T", "U", "session-1", true},
		{"__LITE_TOPIC\x01a\x02__LITE_TOPIC\x01b\x02", "", "", "b", true}, // last duplicate wins
		{"__LITE_TOPIC\x01a\x01b\x02", "", "", "", false},                 // malformed: skipped
		{"__LITE_TOPICX\x01a\x02", "", "", "", false},
		{"__LITE_TOPIC\x01\x02", "", "", "", true}, // empty: found (the store does not index it)
	} {
		tags, _, uniq, lite := LookupDispatchPropertiesLite([]byte(tc.props))
		if string(tags) != tc.tags || string(uniq) != tc.uniq || string(lite) != tc.lite || (lite != nil) != tc.haveLite {
			t.Errorf("%q: tags %q uniq %q lite %q (nil %v)", tc.props, tags, uniq, lite, lite == nil)
		}
	}
}

func FuzzLookupDispatchPropertiesLite(f *testing.F) {
	f.Add([]byte("TAGS\x01T\x02__LITE_TOPIC\x01s\x02"))
	f.Add([]byte("__LITE_TOPIC\x01\x01\x02KEYS\x01a b\x02"))
	f.Fuzz(func(t *testing.T, props []byte) {
		tags, keys, uniq, lite := LookupDispatchPropertiesLite(props)
		for name, got := range map[string][]byte{PropTags: tags, PropKeys: keys, PropUniqKey: uniq, PropertyLiteTopic: lite} {
			if want, _ := LookupProperty(props, name); !bytes.Equal(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("%s = %q, LookupProperty gives %q", name, got, want)
			}
		}
	})
}
