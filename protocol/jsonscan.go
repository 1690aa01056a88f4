package protocol

import (
	"math"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of JSON values skipped inside a header.
const maxJSONDepth = 64

// scanner is a minimal JSON tokenizer over a byte slice. It never allocates; strings are
// returned raw (between the quotes) and unescaped on demand by appendUnescaped.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next returns the byte at the cursor after skipping whitespace, or 0 at the end.
func (s *scanner) next() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// expect consumes c (after whitespace) or fails.
func (s *scanner) expect(c byte, what string) error {
	if s.next() != c {
		return errHeader("expected "+what, s.i)
	}
	s.i++
	return nil
}

// str scans a string starting at the opening quote. It returns the raw bytes between the
// quotes and whether they contain escapes. Escapes are validated here.
func (s *scanner) str() (raw []byte, esc bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, errHeader("expected string", s.i)
	}
	start := s.i + 1
	b := s.b
	for j := start; j < len(b); {
		c := b[j]
		if c != '"' && c != '\\' {
			j++
			continue
		}
		if c == '"' {
			s.i = j + 1
			return b[start:j], esc, nil
		}
		esc = true
		k := j + 1 // the escaped character
		if k >= len(b) {
			break
		}
		switch b[k] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j = k + 1
		case 'u':
			if hex4(b[k+1:]) < 0 {
				return nil, false, errHeader("invalid \\u escape", k)
			}
			j = k + 5
		default:
			return nil, false, errHeader("invalid escape", k)
		}
	}
	return nil, false, errHeader("unterminated string", start-1)
}

// integer scans a JSON number that must be an integer fitting int64.
func (s *scanner) integer() (int64, error) {
	start := s.i
	j := s.i
	neg := false
	if j < len(s.b) && s.b[j] == '-' {
		neg = true
		j++
	}
	digits := j
	var u uint64
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		d := uint64(s.b[j] - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, errHeader("integer overflow", start)
		}
		u = u*10 + d
		j++
	}
	if j == digits {
		return 0, errHeader("expected integer", start)
	}
	if j < len(s.b) {
		switch s.b[j] {
		case '.', 'e', 'E':
			return 0, errHeader("expected integer, got fraction or exponent", start)
		}
	}
	s.i = j
	if neg {
		if u > 1<<63 {
			return 0, errHeader("integer overflow", start)
		}
		return -int64(u), nil
	}
	if u > math.MaxInt64 {
		return 0, errHeader("integer overflow", start)
	}
	return int64(u), nil
}

// int32Value scans an integer that fits int32; null counts as 0.
func (s *scanner) int32Value() (int32, error) {
	if s.next() == 'n' {
		return 0, s.lit("null")
	}
	start := s.i
	n, err := s.integer()
	if err != nil {
		return 0, err
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, errHeader("integer out of int32 range", start)
	}
	return int32(n), nil
}

// lit consumes the literal word (null, true, false).
func (s *scanner) lit(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return errHeader("invalid literal", s.i)
	}
	s.i += len(word)
	return nil
}

// number scans any JSON number.
func (s *scanner) number() error {
	start := s.i
	j := s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	d := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == d {
		return errHeader("invalid number", start)
	}
	if j < len(s.b) && s.b[j] == '.' {
		j++
		d = j
		for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
			j++
		}
		if j == d {
			return errHeader("invalid number", start)
		}
	}
	if j < len(s.b) && (s.b[j] == 'e' || s.b[j] == 'E') {
		j++
		if j < len(s.b) && (s.b[j] == '+' || s.b[j] == '-') {
			j++
		}
		d = j
		for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
			j++
		}
		if j == d {
			return errHeader("invalid number", start)
		}
	}
	s.i = j
	return nil
}

// skip consumes one JSON value of any kind.
func (s *scanner) skip(depth int) error {
	if depth > maxJSONDepth {
		return errHeader("nesting too deep", s.i)
	}
	switch s.next() {
	case '"':
		_, _, err := s.str()
		return err
	case '{':
		s.i++
		if s.next() == '}' {
			s.i++
			return nil
		}
		for {
			if s.next() != '"' {
				return errHeader("expected object key", s.i)
			}
			if _, _, err := s.str(); err != nil {
				return err
			}
			if err := s.expect(':', "':'"); err != nil {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			switch s.next() {
			case ',':
				s.i++
			case '}':
				s.i++
				return nil
			default:
				return errHeader("expected ',' or '}'", s.i)
			}
		}
	case '[':
		s.i++
		if s.next() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			switch s.next() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return errHeader("expected ',' or ']'", s.i)
			}
		}
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return s.number()
	case 0:
		return errHeader("unexpected end of input", s.i)
	}
	return errHeader("unexpected character", s.i)
}

func unhex(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return rune(c-'A') + 10
	}
	return -1
}

// hex4 decodes four hex digits at b[0:4]; -1 if invalid or short.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		h := unhex(c)
		if h < 0 {
			return -1
		}
		r = r<<4 | h
	}
	return r
}

// appendUnescaped appends the decoded form of a raw JSON string body (as returned by
// scanner.str) to dst. Lone surrogates decode to U+FFFD, as encoding/json does.
func appendUnescaped(dst, raw []byte) ([]byte, error) {
	for i := 0; i < len(raw); {
		j := i
		for j < len(raw) && raw[j] != '\\' {
			j++
		}
		dst = append(dst, raw[i:j]...)
		if j >= len(raw) {
			break
		}
		if j+1 >= len(raw) {
			return dst, errHeader("truncated escape", -1)
		}
		c := raw[j+1]
		i = j + 2
		switch c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(raw[i:])
			if r < 0 {
				return dst, errHeader("invalid \\u escape", -1)
			}
			i += 4
			if 0xD800 <= r && r < 0xDC00 {
				// High surrogate: combine with a following low surrogate if there is one.
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if r2 := hex4(raw[i+2:]); 0xDC00 <= r2 && r2 < 0xE000 {
						r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
						i += 6
						dst = utf8.AppendRune(dst, r)
						continue
					}
				}
				r = utf8.RuneError
			} else if 0xDC00 <= r && r < 0xE000 {
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, errHeader("invalid escape", -1)
		}
	}
	return dst, nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a quoted JSON string. It escapes '"', '\\' and control
// characters (properties use 0x01 and 0x02 as separators); other bytes, including
// non-ASCII UTF-8, are copied as they are.
func appendJSONString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
