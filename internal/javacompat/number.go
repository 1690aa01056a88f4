package javacompat

import (
	"math"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// This file holds Java's conversions of text to numbers as RocketMQ's Java
// code applies them to header values, message properties and SQL92 operands:
// Integer.parseInt, Long.parseLong, Double.valueOf, Boolean.valueOf and
// Double.compare. None of them allocates, except Double parsing of a value
// with more than maxNormDigits significant digits.

// Digit returns the value of r as a decimal digit the way Java's
// Character.digit(char, 10) sees it: ASCII digits and the other Unicode
// decimal digits (category Nd) of the Basic Multilingual Plane. A character
// outside the BMP is two UTF-16 units to Java, neither of them a digit.
func Digit(r rune) int {
	if r >= '0' && r <= '9' {
		return int(r - '0')
	}
	if r < 0x80 || r > 0xFFFF {
		return -1
	}
	// Nd characters come in runs of ten from a zero (a Unicode stability
	// guarantee); adjacent runs share one table range.
	for _, rg := range unicode.Nd.R16 {
		if uint16(r) < rg.Lo {
			return -1
		}
		if uint16(r) <= rg.Hi {
			if (uint16(r)-rg.Lo)%rg.Stride != 0 {
				return -1
			}
			return int((uint16(r) - rg.Lo) / rg.Stride % 10)
		}
	}
	return -1
}

// ParseInt parses s like Java's Integer.parseInt (bits 32) or
// Long.parseLong (bits 64): an optional sign, then one or more decimal
// digits (any Unicode decimal digit of the Basic Multilingual Plane, see
// Digit), nothing else (no spaces), within range. Leading zeros are allowed.
func ParseInt(s []byte, bits uint) (int64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	maxV := int64(1)<<(bits-1) - 1
	limit := -maxV
	neg := false
	i := 0
	if s[0] < '0' { // Java tests the first char against '0' too
		switch s[0] {
		case '-':
			neg = true
			limit = -maxV - 1
		case '+':
		default:
			return 0, false
		}
		if len(s) == 1 {
			return 0, false
		}
		i = 1
	}
	multmin := limit / 10
	var result int64 // accumulated negatively, as Java does, so MIN fits
	for i < len(s) {
		var d int
		if c := s[i]; c < utf8.RuneSelf {
			d = -1
			if isDigit(c) {
				d = int(c - '0')
			}
			i++
		} else {
			r, n := utf8.DecodeRune(s[i:])
			d = Digit(r) // RuneError (invalid UTF-8) is no digit
			i += n
		}
		if d < 0 || result < multmin {
			return 0, false
		}
		result *= 10
		if result < limit+int64(d) {
			return 0, false
		}
		result -= int64(d)
	}
	if neg {
		return result, true
	}
	return -result, true
}

// ParseInt64 is Long.parseLong: ParseInt(s, 64), with a fast path for the
// common case of an optional sign and at most 18 ASCII digits, which cannot
// overflow. (The fast path is written out here and in ParseInt32 rather than
// shared: a header decoder calls these for every number, and a second call
// per number costs more than the parsing.)
func ParseInt64(s []byte) (int64, bool) {
	i, neg := 0, false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		i, neg = 1, s[0] == '-'
	}
	if n := len(s) - i; n == 0 || n > 18 {
		return ParseInt(s, 64)
	}
	var v int64
	for ; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return ParseInt(s, 64)
		}
		v = v*10 + int64(d)
	}
	if neg {
		v = -v
	}
	return v, true
}

// ParseInt32 is Integer.parseInt: ParseInt(s, 32), with the fast path of
// ParseInt64 for at most 9 ASCII digits.
func ParseInt32(s []byte) (int32, bool) {
	i, neg := 0, false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		i, neg = 1, s[0] == '-'
	}
	if n := len(s) - i; n == 0 || n > 9 {
		v, ok := ParseInt(s, 32)
		return int32(v), ok
	}
	var v int32
	for ; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			v, ok := ParseInt(s, 32)
			return int32(v), ok
		}
		v = v*10 + int32(d)
	}
	if neg {
		v = -v
	}
	return v, true
}

// ParseBoolean is Java's Boolean.parseBoolean (and Boolean.valueOf(String)):
// true only for "true" in any letter case, false for anything else.
func ParseBoolean(s []byte) bool {
	return len(s) == 4 && s[0]|0x20 == 't' && s[1]|0x20 == 'r' && s[2]|0x20 == 'u' && s[3]|0x20 == 'e'
}

// CompareDouble is Java's Double.compare: -0.0 < 0.0, and NaN equals NaN
// and is above +Inf.
func CompareDouble(a, b float64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	ab, bb := int64(math.Float64bits(a)), int64(math.Float64bits(b))
	if a != a {
		ab = 0x7ff8000000000000
	}
	if b != b {
		bb = 0x7ff8000000000000
	}
	switch {
	case ab < bb:
		return -1
	case ab > bb:
		return 1
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'f' }

// overflowDigits are the leading digits of the 309-digit number halfway
// between Double.MAX_VALUE and 2^1024, from which decimal input rounds to
// infinity. Its later digits are not all zero, so an input of at most
// maxNormDigits digits that equals this prefix rounds to MAX_VALUE.
const overflowDigits = "179769313486231580793728971405"

// maxNormDigits is the most significant digits ParseDouble hands to
// strconv through a string that stays on the stack (32 bytes with the sign
// and the exponent).
const maxNormDigits = 24

// ParseDouble parses s like Java's Double.valueOf(String): leading and
// trailing characters <= ' ' are trimmed; then an optional sign and "NaN",
// "Infinity", a decimal number (digits with an optional '.', at least one
// digit, an optional exponent) or a hexadecimal one ("0x1.8p3", the binary
// exponent required), either with an optional final f, F, d or D.
func ParseDouble(s []byte) (float64, bool) {
	for len(s) > 0 && s[0] <= ' ' {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1] <= ' ' {
		s = s[:len(s)-1]
	}
	if len(s) == 0 {
		return 0, false
	}
	neg := false
	switch s[0] {
	case '-':
		neg = true
		s = s[1:]
	case '+':
		s = s[1:]
	}
	if string(s) == "NaN" {
		return math.NaN(), true
	}
	if string(s) == "Infinity" {
		if neg {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	}
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'f', 'F', 'd', 'D':
			s = s[:n-1]
		}
	}
	if len(s) >= 2 && s[0] == '0' && s[1]|0x20 == 'x' {
		return parseHexDouble(s, neg)
	}

	// Decimal: collect the significant digits and the decimal exponent.
	var (
		digits  [maxNormDigits]byte
		nd      int  // significant digits kept in digits
		dropped bool // more than maxNormDigits significant digits
		seen    bool // any digit at all
		dp      int  // decimal point position relative to the digits kept
		sawDot  bool
		i       int
	)
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			if sawDot {
				return 0, false
			}
			sawDot = true
			continue
		}
		if !isDigit(c) {
			break
		}
		seen = true
		if c == '0' && nd == 0 && !dropped {
			if sawDot {
				dp--
			}
			continue // leading zero
		}
		if nd < maxNormDigits {
			digits[nd] = c
			nd++
		} else if c != '0' {
			dropped = true // zeros past the buffer change nothing; others do
		}
		if !sawDot {
			dp++
		}
	}
	if !seen {
		return 0, false
	}
	exp := 0
	if i < len(s) && s[i]|0x20 == 'e' {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		start := i
		for ; i < len(s) && isDigit(s[i]); i++ {
			if exp < 1_000_000 {
				exp = exp*10 + int(s[i]-'0')
			}
		}
		if i == start {
			return 0, false
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(s) {
		return 0, false
	}
	if dropped {
		// Rare: a value with more significant digits than the stack buffer
		// holds. Let strconv see the original text (this allocates).
		f, err := strconv.ParseFloat(string(s), 64)
		if err != nil && !isRange(err) {
			return 0, false
		}
		if neg {
			f = -f
		}
		return f, true
	}
	for nd > 0 && digits[nd-1] == '0' {
		nd--
	}
	var f float64
	switch e10 := dp + exp; {
	case nd == 0:
		f = 0
	case e10 > 309 || e10 == 309 && string(digits[:nd]) > overflowDigits[:nd]:
		f = math.Inf(1)
	case e10 < -330:
		f = 0
	default:
		// digits × 10^(e10-nd), written as "DDDDeX" on the stack.
		var buf [32]byte
		b := append(buf[:0], digits[:nd]...)
		b = append(b, 'e')
		b = strconv.AppendInt(b, int64(e10-nd), 10)
		var err error
		f, err = strconv.ParseFloat(string(b), 64)
		if err != nil && !isRange(err) {
			return 0, false
		}
	}
	if neg {
		f = -f
	}
	return f, true
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// parseHexDouble parses the hexadecimal form after the sign and without the
// suffix: 0x, then hex digits with an optional '.', at least one hex digit,
// then p or P, an optional sign and decimal digits.
func parseHexDouble(s []byte, neg bool) (float64, bool) {
	i := 2
	n := 0
	sawDot := false
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' && !sawDot {
			sawDot = true
			continue
		}
		if !isHex(c) {
			break
		}
		n++
	}
	if n == 0 || i >= len(s) || s[i]|0x20 != 'p' {
		return 0, false
	}
	i++
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	start := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == start || i != len(s) {
		return 0, false
	}
	// strconv accepts exactly this form (and '_' only between digits, which
	// the loop above has already refused).
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil && !isRange(err) {
		return 0, false
	}
	if neg {
		f = -f
	}
	return f, true
}
