package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/message"
)

// props encodes key/value pairs as a properties string.
func props(kv ...string) []byte {
	var p []byte
	for i := 0; i+1 < len(kv); i += 2 {
		p = message.AppendProperty(p, kv[i], kv[i+1])
	}
	return p
}

func TestCompileValid(t *testing.T) {
	for _, src := range []string{
		// RocketMQ's own ParserTest and ExpressionTest expressions.
		"a=3 and b<>4 And c>5 AND d<=4",
		"a=3  and    b<>4 And c>5 AND d<=4",
		"a=3 or b<>4 Or c>5 OR d<=4",
		"a in ('3', '4', '5')",
		"(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
		"(a between 2 and 10) AND (b not between 6 and 9)",
		"a is null",
		"a is not null",
		"a <= now", // now is just a property name
		"a is not null and a='hello'",
		"a=TRUE OR b=FALSE",
		"a is null OR a='hello'",
		"TAGS is not null and TAGS='''''tag'''''",
		"a > 3.1E10",
		"a between up and low",
		// The rest of the language.
		"TRUE", "FALSE", "NULL", "a", "(a)", "NOT a",
		"a CONTAINS 'x' AND b NOT CONTAINS 'y'",
		"a STARTSWITH 'x' OR a NOT STARTSWITH 'y' OR a ENDSWITH 'z' OR a NOT ENDSWITH 'w'",
		"a BETWEEN -5 AND 5", "a BETWEEN 5 AND -5", // a negation is no constant: not checked
		"a NOT BETWEEN 10 AND 1", // only BETWEEN checks its bounds
		"a BETWEEN 1 AND 1", "a BETWEEN 1 AND 1.5", "a between 2147483648 and 2147483649",
		"a > 5L", "a > 9223372036854775807", "a > .5", "a > 5.", "a > 5e3", "a > 5.5E-3", "a > 1E+2",
		"a > 4.9E-324", "a > 1.7976931348623157E308",
		"$a_1 = 'x' AND _b$ = 'y'",
		"a = 'x' = TRUE", "5 = a", "'x' = TRUE", "a IS NULL IS NULL",
		"NOT NOT a = 'x'", "- - a > 5", "+a = 'x'", "+a IN ('x')", "(a) IN ('x')",
		"a = 1 -- comment\n AND b = 2",
		"/* lead */ a /* mid */ = 1 /**/",
		"a > --5", // no line break: "--" is two minus signs
		// The Java parser stops where the grammar does: trailing tokens that
		// cannot continue the expression are ignored.
		"a = 1 )", "a = 1 b = 2", "a = 007", "a = 1 b #",
		"\ta\n=\r1\f",
	} {
		if _, err := Compile(src); err != nil {
			t.Errorf("Compile(%q): %v", src, err)
		}
	}
}

func TestCompileInvalid(t *testing.T) {
	tests := []struct {
		src string
		pos int
		msg string // a substring of the message
	}{
		{"", 0, "end of expression"},
		{"   ", 3, "end of expression"},
		{"a >", 3, "end of expression"},
		{"a = ", 4, "end of expression"},
		{"a = 1 OR", 8, "end of expression"},
		{"a and between 2 and 10", 6, "unexpected BETWEEN"},
		{"a > 'x'", 4, "cannot be compared"},
		{"'x' > a", 0, "cannot be compared"},
		{"a > TRUE", 4, "cannot be compared"},
		{"a > NULL", 4, "cannot be compared"},
		{"(a = 1) > 2", 1, "condition cannot be compared"},
		{"a > b > c", 0, "condition cannot be compared"},
		{"a = NULL", 4, "IS NULL"},
		{"NULL = a", 0, "IS NULL"},
		{"a <> NULL", 5, "IS NULL"},
		{"TRUE = 1", 5, "cannot be compared with"},
		{"FALSE <> 'x'", 6, "cannot be compared with"},
		{" a between 10 and 0", 3, "above upper bound"},
		{"a BETWEEN 1.5 AND 1", 2, "above upper bound"},
		{"a BETWEEN 1 AND TRUE", 2, "above upper bound"},
		{"a BETWEEN NULL AND 5", 2, "NULL"},
		{"a BETWEEN 'a' AND 'b'", 10, "cannot be compared"},
		{"a BETWEEN 1 OR 2", 12, "want AND"},
		{"a IN ()", 6, "want string literal"},
		{"a IN (1)", 6, "want string literal"},
		{"a IN ('x'", 9, "want ')'"},
		{"a IN ('x' 'y')", 10, "want ')'"},
		{"'x' IN ('x')", 0, "property"},
		{"(a = 1) IN ('x')", 1, "property"},
		{"a NOT 5", 2, "NOT here"},
		{"a NOT LIKE 'x'", 2, "NOT here"},
		{"a = 1 AND 5", 10, "boolean"},
		{"'x' OR a", 0, "boolean"},
		{"5", 0, "boolean"},
		{"'x'", 0, "boolean"},
		{"-a", 0, "boolean"},
		{"NOT 5", 4, "boolean"},
		{"a.b = 1", 1, "unexpected character '.'"},
		{"a != 1", 2, "unexpected character '!'"},
		{"a == 1", 3, "unexpected '='"},
		{"a < > 1", 4, "unexpected '>'"},
		{"a = 'x", 4, "unterminated string"},
		{"a = 'x''", 4, "unterminated string"},
		{"a = 1 /* x", 6, "unterminated comment"},
		{"a = 1 #", 6, "unexpected character '#'"},
		{"a = é", 4, "unexpected character 'é'"},
		{"a = 99999999999999999999", 4, "range"},
		{"a > 1e400", 4, "MAX_VALUE"},
		{"a > 0.0", 4, "MIN_VALUE"},
		{"a > 1e-400", 4, "MIN_VALUE"},
		{"a IS 5", 5, "want NULL"},
		{"a IS NOT 5", 9, "want NULL"},
		{"a CONTAINS b", 11, "want string literal"},
		{"a NOT CONTAINS 5", 15, "want string literal"},
		{"a STARTSWITH", 12, "want string literal"},
		{"contains = 1", 0, "unexpected CONTAINS"},
		{"(a = 1", 6, "want ')'"},
		{"0L = a", 0, "boolean"}, // "0" then the identifier "L": the selector is "0"
		{strings.Repeat("(", 300) + "a" + strings.Repeat(")", 300), 256, "nested deeper"},
		{strings.Repeat("NOT ", 300) + "a", 1024, "nested deeper"},
		{"a" + strings.Repeat(" IS NULL", 300), 0, "nested deeper"},
	}
	for _, tc := range tests {
		name := tc.src
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			_, err := Compile(tc.src)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *ParseError", err)
			}
			if pe.Pos != tc.pos || !strings.Contains(pe.Msg, tc.msg) {
				t.Fatalf("got %v, want offset %d and %q", err, tc.pos, tc.msg)
			}
			if pe.Pos < 0 || pe.Pos > len(tc.src) {
				t.Fatalf("offset %d outside the expression", pe.Pos)
			}
		})
	}
}
