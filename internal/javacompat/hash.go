package javacompat

// HashCode returns Java's String.hashCode of the String that Java decodes
// from the UTF-8 bytes s (new String(s, UTF_8)): h = 31*h + c over its UTF-16
// code units, with int32 wrap-around. A character outside the Basic
// Multilingual Plane counts as its two surrogates. It does not allocate.
//
// Invalid UTF-8 is replaced by U+FFFD the way the JDK's UTF-8 decoder does it
// (JDK 8 and later): one U+FFFD per maximal ill-formed subsequence, so that a
// valid prefix of a sequence cut short by a bad byte is one U+FFFD and the
// bad byte is decoded afresh; a 3-byte encoded surrogate (ED A0..BF xx) is one
// U+FFFD; a sequence cut short by the end of the input is one U+FFFD. Go's
// utf8 package differs: it replaces each bad byte (ED A0 80 is three U+FFFD
// to Go, one to Java).
func HashCode[T string | []byte](s T) int32 { return HashCodeFrom(0, s) }

// HashCodeFrom continues the hash h over the characters of s: for any a and
// b, HashCodeFrom(HashCode(a), b) is the hash of the concatenation when a
// ends on a character boundary (it does when a is valid UTF-8), which lets a
// caller hash topic + "#" + key without building it.
func HashCodeFrom[T string | []byte](h int32, s T) int32 {
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			h = 31*h + int32(c)
			i++
			continue
		}
		r, n := decodeRune(s[i:])
		i += n
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
		} else {
			h = 31*h + int32(r)
		}
	}
	return h
}

const replacementChar = 0xFFFD

func isCont(b byte) bool { return b&0xC0 == 0x80 }

// decodeRune decodes the first character of s (len(s) > 0, s[0] >= 0x80)
// as the JDK's UTF-8 decoder would, returning U+FFFD and the length of the
// ill-formed subsequence it replaces for bad input.
func decodeRune[T string | []byte](s T) (rune, int) {
	b0 := s[0]
	switch {
	case b0 >= 0xC2 && b0 <= 0xDF:
		if len(s) < 2 || !isCont(s[1]) {
			return replacementChar, 1
		}
		return rune(b0&0x1F)<<6 | rune(s[1]&0x3F), 2
	case b0 >= 0xE0 && b0 <= 0xEF:
		// Java, unlike the Unicode table, accepts ED A0..BF as a prefix and
		// then replaces the whole encoded surrogate by one U+FFFD.
		lo := byte(0x80)
		if b0 == 0xE0 {
			lo = 0xA0
		}
		if len(s) < 2 || s[1] < lo || s[1] > 0xBF {
			return replacementChar, 1
		}
		if len(s) < 3 || !isCont(s[2]) {
			return replacementChar, 2
		}
		r := rune(b0&0x0F)<<12 | rune(s[1]&0x3F)<<6 | rune(s[2]&0x3F)
		if r >= 0xD800 && r <= 0xDFFF {
			return replacementChar, 3
		}
		return r, 3
	case b0 >= 0xF0 && b0 <= 0xF4:
		lo, hi := byte(0x80), byte(0xBF)
		switch b0 {
		case 0xF0:
			lo = 0x90
		case 0xF4:
			hi = 0x8F
		}
		if len(s) < 2 || s[1] < lo || s[1] > hi {
			return replacementChar, 1
		}
		if len(s) < 3 || !isCont(s[2]) {
			return replacementChar, 2
		}
		if len(s) < 4 || !isCont(s[3]) {
			return replacementChar, 3
		}
		return rune(b0&0x07)<<18 | rune(s[1]&0x3F)<<12 | rune(s[2]&0x3F)<<6 | rune(s[3]&0x3F), 4
	default:
		return replacementChar, 1
	}
}
