package filter

import (
	"bytes"
	"errors"
	"testing"
)

var fuzzSeeds = []string{
	"a > 5 AND b = 'x' OR c IS NOT NULL",
	"a BETWEEN 1 AND 10 AND b NOT IN ('x', 'y')",
	"a NOT BETWEEN -5 AND 5.5 OR NOT (b CONTAINS 'x')",
	"a STARTSWITH 'ab' AND a NOT ENDSWITH 'yz'",
	"TAGS = 'TagA' OR KEYS IS NULL",
	"a = TRUE OR b = FALSE OR c = b",
	"NOT a = 'x' = TRUE -- c\n",
	"/* x */ a >= 1.5E3L",
	"a > 0x10",
	"((a))",
	"TagA || TagB",
	"*",
}

// FuzzCompile checks that Compile never panics and only fails with a
// *ParseError inside the expression, and that a compiled selector matches
// any properties string without panicking, deterministically. The tag
// compiler gets the same input.
func FuzzCompile(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, realisticProps())
		f.Add(s, []byte("a\x0110\x02b\x01x\x02c\x01\x02"))
	}
	f.Fuzz(func(t *testing.T, src string, props []byte) {
		if tags, err := CompileTags(src); err == nil {
			tags.MatchTagCode(int64(len(props)))
			tags.MatchProperties(props)
		}
		s, err := Compile(src)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Compile(%q): %T %v", src, err, err)
			}
			if pe.Pos < 0 || pe.Pos > len(src) {
				t.Fatalf("Compile(%q): offset %d", src, pe.Pos)
			}
			return
		}
		got := s.Match(props)
		if s.Match(props) != got {
			t.Fatal("Match is not deterministic")
		}
		// Give each property of the selector a value cut from props, so the
		// evaluation reaches the comparisons.
		var p []byte
		vals := bytes.FieldsFunc(props, func(r rune) bool { return r == 1 || r == 2 || r == ' ' })
		for i, name := range s.Properties() {
			if i < len(vals) {
				p = append(append(append(append(p, name...), 1), vals[i]...), 2)
			}
		}
		s.Match(p)
	})
}
