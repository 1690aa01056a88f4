package index

import "math"

// The hash of a key is Java's String.hashCode of topic + "#" + key: the
// 31*h + c recurrence over the UTF-16 code units of the String that Java
// would decode from the UTF-8 bytes, with int32 wrap-around. The parts are
// folded one after the other, which gives the hash of the concatenation
// without building it. A code point above U+FFFF counts as its two
// surrogates.
//
// Invalid UTF-8 is replaced by U+FFFD the way the JDK's String decoder does
// (new String(bytes, UTF_8), JDK 9 and later): a valid prefix of a sequence
// cut short by a bad byte becomes one U+FFFD and the bad byte is decoded
// afresh; a 3-byte encoded surrogate becomes one U+FFFD; any other bad lead
// byte becomes one U+FFFD; a sequence cut short by the end of the input
// becomes one U+FFFD. This differs from Go's utf8 package, which replaces
// each bad byte (ED A0 80 is three U+FFFD to Go, one to Java).

const replacement = 0xFFFD

// javaHashOf continues the Java hash h over the characters of s.
func javaHashOf[T string | []byte](h int32, s T) int32 {
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			h = 31*h + int32(c)
			i++
			continue
		}
		r, n := decodeJava(s, i)
		i += n
		if r < 0x10000 {
			h = 31*h + int32(r)
			continue
		}
		r -= 0x10000
		h = 31*h + int32(0xD800+(r>>10))
		h = 31*h + int32(0xDC00+(r&0x3FF))
	}
	return h
}

// cont reports whether b is a UTF-8 continuation byte.
func cont(b byte) bool { return b&0xC0 == 0x80 }

// decodeJava decodes the character starting at s[i], a byte >= 0x80, as the
// JDK does, and returns it (or U+FFFD) with the number of bytes consumed.
func decodeJava[T string | []byte](s T, i int) (rune, int) {
	b1 := s[i]
	rest := len(s) - i - 1 // bytes after b1
	switch {
	case b1 >= 0xC2 && b1 <= 0xDF: // 2 bytes
		if rest < 1 || !cont(s[i+1]) {
			return replacement, 1
		}
		return rune(b1&0x1F)<<6 | rune(s[i+1]&0x3F), 2

	case b1 >= 0xE0 && b1 <= 0xEF: // 3 bytes
		if rest >= 2 {
			b2, b3 := s[i+1], s[i+2]
			if bad2 := b1 == 0xE0 && b2&0xE0 == 0x80 || !cont(b2); bad2 || !cont(b3) {
				if bad2 {
					return replacement, 1
				}
				return replacement, 2
			}
			r := rune(b1&0x0F)<<12 | rune(b2&0x3F)<<6 | rune(b3&0x3F)
			if r >= 0xD800 && r <= 0xDFFF {
				return replacement, 3 // an encoded surrogate: one U+FFFD
			}
			return r, 3
		}
		if rest == 1 && (b1 == 0xE0 && s[i+1]&0xE0 == 0x80 || !cont(s[i+1])) {
			return replacement, 1
		}
		return replacement, rest + 1 // cut short by the end

	case b1 >= 0xF0 && b1 <= 0xF7: // 4 bytes
		if rest >= 3 {
			b2, b3, b4 := s[i+1], s[i+2], s[i+3]
			r := rune(b1&0x07)<<18 | rune(b2&0x3F)<<12 | rune(b3&0x3F)<<6 | rune(b4&0x3F)
			if cont(b2) && cont(b3) && cont(b4) && r >= 0x10000 && r <= 0x10FFFF {
				return r, 4
			}
			if bad4Second(b1, b2) {
				return replacement, 1
			}
			if !cont(b3) {
				return replacement, 2
			}
			return replacement, 3
		}
		if b1 > 0xF4 || rest >= 1 && bad4Second(b1, s[i+1]) {
			return replacement, 1
		}
		if rest >= 2 && !cont(s[i+2]) {
			return replacement, 2
		}
		return replacement, rest + 1 // cut short by the end
	}
	return replacement, 1 // a continuation byte, C0, C1 or F8..FF
}

// bad4Second reports whether b2 cannot follow the 4-byte lead b1.
func bad4Second(b1, b2 byte) bool {
	return b1 > 0xF4 ||
		b1 == 0xF0 && (b2 < 0x90 || b2 > 0xBF) ||
		b1 == 0xF4 && b2&0xF0 != 0x80 ||
		!cont(b2)
}

// javaHash returns Java's String.hashCode of the String decoded from s.
func javaHash(s string) int32 { return javaHashOf(0, s) }

// positive maps a Java hash to RocketMQ's keyHash: Math.abs, with
// Integer.MIN_VALUE (whose abs is itself) mapped to 0.
func positive(h int32) int32 {
	if h == math.MinInt32 {
		return 0
	}
	if h < 0 {
		return -h
	}
	return h
}

// keyHash returns the keyHash of topic + "#" + key.
func keyHash(topic, key string) int32 {
	h := javaHashOf(0, topic)
	h = 31*h + '#'
	return positive(javaHashOf(h, key))
}

// keyHashBytes is keyHash with the key as a byte slice.
func keyHashBytes(topic string, key []byte) int32 { return KeyHashAfter(TopicHash(topic), key) }
