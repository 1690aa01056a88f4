package filter

import (
	"errors"
	"strings"
	"testing"
)

// TestMatch is the evaluation table. Each expectation follows from
// RocketMQ's evaluator (filter/expression/*.java), as noted where it is not
// obvious.
func TestMatch(t *testing.T) {
	none := props()
	tests := []struct {
		src   string
		props []byte
		want  bool
	}{
		// Ordering against an Integer literal: the property string is parsed
		// with Integer.valueOf.
		{"a > 5", props("a", "10"), true},
		{"a > 5", props("a", "5"), false},
		{"a > 5", props("a", "3"), false},
		{"a > 5", none, false}, // NULL: unknown
		{"a >= 5", props("a", "5"), true},
		{"a < 5", props("a", "3"), true},
		{"a <= 5", props("a", "5"), true},
		{"a <= 5", props("a", "6"), false},
		{"a > 5", props("a", "+10"), true},   // Integer.valueOf takes a '+'
		{"a > 5", props("a", "010"), true},   // and leading zeros
		{"a > 5", props("a", "10.5"), false}, // Integer.valueOf throws: no match
		{"a > 5", props("a", " 10"), false},  // no spaces either
		{"a > 5", props("a", "abc"), false},
		{"a > 5", props("a", "4000000000"), false}, // out of int range: throws
		{"a > 3000000000", props("a", "4000000000"), true},
		{"a = 2147483648", props("a", "2147483648"), true}, // a Long literal
		{"a < -5", props("a", "-10"), true},
		{"a > -5", props("a", "-10"), false},
		{"a > 5L", props("a", "6"), true},
		{"a = 12", props("a", "١٢"), true}, // Character.digit knows Arabic-Indic digits
		// Against a Double literal: Double.valueOf.
		{"a > 5.0", props("a", "10.5"), true},
		{"a > 5.0", props("a", "1e2"), true},
		{"a > 5.0", props("a", " 7 "), true}, // Double.valueOf trims
		{"a > 5.0", props("a", "7d"), true},  // and takes a type suffix
		{"a > 5.0", props("a", "0x10p0"), true},
		{"a > 5.0", props("a", "NaN"), true}, // Double.compare puts NaN on top
		{"a > 5.0", props("a", "Infinity"), true},
		{"a < 5.0", props("a", "-Infinity"), true},
		{"a > 5.0", props("a", "abc"), false},
		{"a > 5.0", props("a", "1,5"), false},
		{"a >= 1.5E1", props("a", "15"), true},
		{"a = 5.0", props("a", "5"), true},
		{"5 = 5.0", none, true}, // Integer meets Double as a Double
		{"5.5 < a", props("a", "6"), true},
		{"5 = a", props("a", "5"), true},
		// Equality against an Integer: Integer.valueOf again, which can throw.
		{"a = 5", props("a", "5"), true},
		{"a = 5", props("a", "05"), true},
		{"a = 5", props("a", "5.0"), false},
		{"a = 5", props("a", "abc"), false},
		{"a <> 5", props("a", "abc"), false}, // the exception rejects even <>
		{"a <> 5", props("a", "6"), true},
		{"a <> 5", props("a", "5"), false},
		{"a <> 5", none, false}, // NOT unknown is unknown
		// Strings.
		{"a = 'x'", props("a", "x"), true},
		{"a = 'x'", props("a", "X"), false},
		{"a = 'x'", none, false},
		{"a <> 'x'", props("a", "y"), true},
		{"a <> 'x'", none, false},
		{"a = 'it''s'", props("a", "it's"), true},
		{"a = ''", props("a", ""), false}, // an empty value reads as missing
		{"a = '中文'", props("a", "中文"), true},
		{"TAGS is not null and TAGS='''''tag'''''", props("TAGS", "''tag''"), true},
		// Two properties: = compares strings, ordering parses both as doubles.
		{"a = b", props("a", "3.14", "b", "3.14"), true},
		{"a = b", props("a", "1.0", "b", "1"), false},
		{"a <> b", props("a", "3.14", "b", "3.141"), true},
		{"a = b", none, true}, // null = null is TRUE (that is how IS NULL works)
		{"a <> b", none, false},
		{"a = b", props("b", "1"), false}, // left null: unknown
		{"a = b", props("a", "1"), false}, // right null: FALSE
		{"NOT (a = b)", props("b", "1"), false},
		{"NOT (a = b)", props("a", "1"), true},
		{"a > b", props("a", "10", "b", "9"), true}, // as doubles, not as strings
		{"a > b", props("a", "10", "b", "20"), false},
		{"a > b", props("a", "abc", "b", "1"), false},
		// Booleans: a string meets TRUE/FALSE through Boolean.valueOf.
		{"a = TRUE", props("a", "true"), true},
		{"a = TRUE", props("a", "TRUE"), true},
		{"a = TRUE", props("a", "yes"), false},
		{"a = TRUE", none, false},
		{"a = FALSE", props("a", "false"), true},
		{"a = FALSE", props("a", "no"), true}, // Boolean.valueOf("no") is false
		{"a <> TRUE", props("a", "nope"), true},
		{"a=TRUE OR b=FALSE", props("a", "true", "b", "false"), true},
		{"a=TRUE OR b=FALSE", props("a", "false", "b", "true"), false},
		{"TRUE = a", props("a", "true"), false}, // Boolean on the left of a String: ClassCastException
		{"TRUE = a", none, false},
		{"'true' = TRUE", none, true},
		{"'x' = TRUE", none, false},
		{"TRUE", none, true},
		{"FALSE", none, false},
		{"NULL", none, false},
		{"TRUE = TRUE", none, true},
		{"a = 'x' = TRUE", props("a", "x"), true},
		{"a = 'x' = TRUE", props("a", "y"), false},
		{"a = 'x' = 'y'", props("a", "x"), false}, // Boolean = String throws
		// A bare property is cast to boolean: a String is never TRUE.
		{"a", props("a", "true"), false},
		{"a", none, false},
		{"NOT a", props("a", "true"), true}, // NOT FALSE
		{"NOT a", none, false},
		{"(a)", props("a", "true"), false},
		// NOT binds tighter than =: NOT a = 'x' is (NOT a) = 'x'.
		{"NOT a = 'x'", props("a", "x"), false}, // Boolean = String throws
		{"NOT a = 'x'", props("a", "y"), false},
		{"NOT (a = 'x')", props("a", "y"), true},
		{"NOT (a = 'x')", props("a", "x"), false},
		{"NOT (a = 'x')", none, false},
		{"NOT NOT (a = 'x')", props("a", "x"), true},
		{"NOT a IS NULL", none, true}, // (NOT a) IS NULL: NOT NULL is NULL
		{"NOT a IS NULL", props("a", "x"), false},
		{"NOT a CONTAINS 'x'", props("a", "x"), false}, // a Boolean contains nothing
		// IS [NOT] NULL.
		{"a IS NULL", none, true},
		{"a IS NULL", props("a", "1"), false},
		{"a IS NULL", props("a", ""), true}, // empty value: missing
		{"a IS NOT NULL", props("a", "1"), true},
		{"a IS NOT NULL", none, false},
		{"a is null OR a='hello'", none, true},
		{"a is null OR a='hello'", props("a", "hello"), true},
		{"a is null OR a='hello'", props("a", "abc"), false},
		{"5 IS NULL", none, false},
		{"a IS NULL IS NULL", none, false},
		// BETWEEN is (v >= low AND v <= high); NOT BETWEEN (v < low OR v > high).
		{"a between 2 and 10", props("a", "2"), true},
		{"a between 2 and 10", props("a", "10"), true},
		{"a between 2 and 10", props("a", "3"), true},
		{"a between 2 and 10", props("a", "1"), false},
		{"a between 2 and 10", props("a", "11"), false},
		{"a between 2 and 10", none, false},
		{"a between 2 and 10", props("a", "abc"), false},
		{"a not between 2 and 10", props("a", "1"), true},
		{"a not between 2 and 10", props("a", "11"), true},
		{"a not between 2 and 10", props("a", "5"), false},
		{"a not between 2 and 10", none, false},
		{"a BETWEEN -5 AND 5", props("a", "-5"), true},
		{"a BETWEEN 5 AND -5", props("a", "0"), false},
		{"a BETWEEN 1.5 AND 2.5", props("a", "2"), true},
		{"a BETWEEN 1 AND 2.5", props("a", "2.5"), false}, // Integer.valueOf("2.5") throws at >= 1
		{"a BETWEEN lo AND hi", props("a", "5", "lo", "1", "hi", "10"), true},
		{"a BETWEEN 1 AND 3 AND b = 'x'", props("a", "2", "b", "x"), true},
		// IN.
		{"a in ('3', '4', '5')", props("a", "4"), true},
		{"a in ('3', '4', '5')", props("a", "8"), false},
		{"a in ('3', '4', '5')", none, false},
		{"a not in ('3', '4', '5')", props("a", "8"), true},
		{"a not in ('3', '4', '5')", props("a", "3"), false},
		{"a not in ('3', '4', '5')", none, false}, // unknown
		{"a IN ('a','b','c','d','e','f')", props("a", "f"), true},
		{"a IN ('it''s')", props("a", "it's"), true},
		// CONTAINS, STARTSWITH, ENDSWITH: a missing or non-string operand and an
		// empty search string give FALSE for both forms, never unknown.
		{"a CONTAINS 'bc'", props("a", "abcd"), true},
		{"a CONTAINS 'bc'", props("a", "xyz"), false},
		{"a CONTAINS 'bc'", none, false},
		{"a NOT CONTAINS 'bc'", props("a", "xyz"), true},
		{"a NOT CONTAINS 'bc'", props("a", "abcd"), false},
		{"a NOT CONTAINS 'bc'", none, false},
		{"NOT (a CONTAINS 'bc')", none, true}, // NOT FALSE
		{"a CONTAINS ''", props("a", "x"), false},
		{"a NOT CONTAINS ''", props("a", "x"), false},
		{"a STARTSWITH 'ab'", props("a", "abc"), true},
		{"a STARTSWITH 'ab'", props("a", "cab"), false},
		{"a STARTSWITH 'abcd'", props("a", "abc"), false},
		{"a NOT STARTSWITH 'ab'", props("a", "cab"), true},
		{"a NOT STARTSWITH 'ab'", none, false},
		{"a ENDSWITH 'bc'", props("a", "abc"), true},
		{"a ENDSWITH 'bc'", props("a", "bca"), false},
		{"a NOT ENDSWITH 'bc'", props("a", "bca"), true},
		{"a NOT ENDSWITH 'bc'", props("a", "abc"), false},
		{"a NOT ENDSWITH ''", none, false},
		{"a contains '中'", props("a", "中文"), true},
		{"5 CONTAINS '5'", none, false},
		{"TAGS STARTSWITH 'Tag' AND KEYS CONTAINS 'order'", props("TAGS", "TagA", "KEYS", "order-1 x"), true},
		// AND binds tighter than OR; parentheses regroup.
		{"a = 1 OR b = 2 AND c = 3", props("a", "1", "b", "2", "c", "4"), true},
		{"a = 1 OR b = 2 AND c = 3", props("a", "0", "b", "2", "c", "4"), false},
		{"a = 1 OR b = 2 AND c = 3", props("a", "0", "b", "2", "c", "3"), true},
		{"(a = 1 OR b = 2) AND c = 3", props("a", "1", "b", "2", "c", "4"), false},
		{"(a = 1 OR b = 2) AND c = 3", props("a", "1", "c", "3"), true},
		{"a=3 and b<>4 And c>5 AND d<=4", props("a", "3", "b", "5", "c", "6", "d", "1"), true},
		{"a=3 and b<>4 And c>5 AND d<=4", props("a", "4", "b", "5", "c", "6", "d", "1"), false},
		{"a=3 or b<>4 Or c>5 OR d<=4", props("a", "4", "b", "4", "c", "3", "d", "2"), true},
		{"a=3 or b<>4 Or c>5 OR d<=4", props("a", "4", "b", "4", "c", "3", "d", "10"), false},
		// Three-valued logic.
		{"a = 1 OR b = 2", props("b", "2"), true},
		{"a = 1 AND b = 2", props("b", "2"), false}, // unknown
		{"NOT (a = 1 AND b = 2)", props("b", "3"), true},
		{"NOT (a = 1 AND b = 2)", props("b", "2"), false},
		{"NOT (a = 1 OR b = 2)", props("b", "3"), false},
		{"a = 1 AND NULL", props("a", "1"), false},
		{"a = 1 OR NULL", props("a", "1"), true},
		// An exception ends the evaluation unless a short-circuit skips it.
		{"a = 1 OR b > 5", props("a", "1", "b", "abc"), true},
		{"b > 5 OR a = 1", props("a", "1", "b", "abc"), false},
		{"a = 1 AND b > 5", props("a", "2", "b", "abc"), false},
		{"NOT (a = 2 AND b > 5)", props("a", "1", "b", "abc"), true},
		// Negation of a non-number is NULL.
		{"-a < 0", props("a", "5"), false},
		{"a = -'x'", props("a", "x"), false},
		{"a > - - 5", props("a", "6"), true},
		{"a > --5", props("a", "6"), true},
		// The brief's three-clause shape.
		{"a > 5 AND b = 'x' OR c IS NOT NULL", props("a", "10", "b", "x"), true},
		{"a > 5 AND b = 'x' OR c IS NOT NULL", props("a", "10", "b", "y"), false},
		{"a > 5 AND b = 'x' OR c IS NOT NULL", props("c", "1"), true},
		// Keywords in any case, comments, trailing tokens the grammar ignores.
		{"a BeTwEeN 1 aNd 3 oR b iS nUlL", props("a", "9"), true},
		{"a = 1 -- why\n AND b = 2", props("a", "1", "b", "2"), true},
		{"/* c */ a = 1", props("a", "1"), true},
		{"a = 1 b = 2", props("a", "1"), true},
		{"a = 007", props("a", "0"), true},
		// The properties string is read as the Java broker reads it.
		{"a = 'x'", props("a", "y", "a", "x"), true},          // last wins
		{"a = 'x'", []byte("a\x01x"), true},                   // no trailing 0x02
		{"a STARTSWITH 'x'", []byte("a\x01x\x01y\x02"), true}, // value runs to the 0x02
		{"a = 'x'", []byte("\x02\x02a\x01x\x02junk\x02\x01z\x02"), true},
		{"a IS NULL", []byte("a\x01\x02"), true},
		// Property names are case-sensitive and may hold $ and _.
		{"A = 'x'", props("a", "x"), false},
		{"$a_1 = 'x'", props("$a_1", "x"), true},
	}
	for _, tc := range tests {
		s, err := Compile(tc.src)
		if err != nil {
			t.Errorf("Compile(%q): %v", tc.src, err)
			continue
		}
		if got := s.Match(tc.props); got != tc.want {
			t.Errorf("%q over %q: got %v, want %v", tc.src, tc.props, got, tc.want)
		}
	}
}

// TestMatchManyProperties covers expressions that read more properties than
// the single pass collects.
func TestMatchManyProperties(t *testing.T) {
	var terms []string
	var kv []string
	for i := range 12 {
		name := string(rune('a'+i)) + "x"
		terms = append(terms, name+" = '"+name+"'")
		kv = append(kv, name, name)
	}
	s, err := Compile(strings.Join(terms, " AND "))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Properties()) != 12 {
		t.Fatalf("Properties() = %q", s.Properties())
	}
	if !s.Match(props(kv...)) {
		t.Error("all twelve present: no match")
	}
	kv[len(kv)-1] = "other" // the twelfth, read by lookup
	if s.Match(props(kv...)) {
		t.Error("twelfth differs: match")
	}
	p := props(kv...)
	if n := testing.AllocsPerRun(100, func() { s.Match(p) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		typ, expr string
		sql       bool
	}{
		{"", "*", false},
		{"TAG", "a || b", false},
		{"SQL92", "a = 1", true},
	} {
		f, err := New(tc.typ, tc.expr)
		if err != nil {
			t.Fatalf("New(%q, %q): %v", tc.typ, tc.expr, err)
		}
		if _, isSQL := f.(*SQL); isSQL != tc.sql {
			t.Errorf("New(%q, %q) = %T", tc.typ, tc.expr, f)
		}
	}
	if _, err := New("sql92", "a = 1"); !errors.Is(err, ErrUnknownType) {
		t.Errorf("lower-case type: %v", err)
	}
	if _, err := New("SQL92", "a ="); err == nil {
		t.Error("bad SQL accepted")
	}
	if _, err := New("TAG", "||"); err == nil {
		t.Error("bad tags accepted")
	}
	f, _ := New("SQL92", "a = 1")
	if !f.MatchTagCode(0) || !f.NeedsRecord() || !f.MatchProperties(props("a", "1")) {
		t.Error("SQL92 Filter methods")
	}
}

// TestConcurrentMatch shares one compiled filter among goroutines (run with
// -race).
func TestConcurrentMatch(t *testing.T) {
	s, err := Compile(threeClause)
	if err != nil {
		t.Fatal(err)
	}
	tags, _ := CompileTags("TagA || TagB")
	hit, miss := realisticProps(), props("price", "1", "TAGS", "TagC")
	done := make(chan bool)
	for range 4 {
		go func() {
			ok := true
			for range 2000 {
				ok = ok && s.Match(hit) && !s.Match(miss) && tags.MatchProperties(hit) && !tags.MatchProperties(miss)
			}
			done <- ok
		}()
	}
	for range 4 {
		if !<-done {
			t.Error("wrong result under concurrency")
		}
	}
}
