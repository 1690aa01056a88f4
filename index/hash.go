package index

import (
	"math"
	"unicode/utf8"
)

// The hash of a key is Java's String.hashCode of topic + "#" + key, computed
// over the UTF-16 code units Java would hold: h = 31*h + c with int32
// wrap-around. The three parts are folded one after the other, which gives
// the hash of the concatenation without building it.
//
// UTF-8 is decoded to code points with the standard library's rules: a code
// point above U+FFFF counts as its two surrogates, and every byte that does
// not start a valid sequence counts as one U+FFFD.

// javaHashString continues the Java hash h over the characters of s.
func javaHashString(h int32, s string) int32 {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			h = 31*h + int32(c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		h = javaHashRune(h, r)
		i += n
	}
	return h
}

// javaHashBytes is javaHashString for a byte slice.
func javaHashBytes(h int32, b []byte) int32 {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			h = 31*h + int32(c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		h = javaHashRune(h, r)
		i += n
	}
	return h
}

// javaHashRune folds one code point, as one or two UTF-16 code units.
func javaHashRune(h int32, r rune) int32 {
	if r < 0x10000 {
		return 31*h + int32(r)
	}
	r -= 0x10000
	h = 31*h + int32(0xD800+(r>>10))
	return 31*h + int32(0xDC00+(r&0x3FF))
}

// javaHash returns Java's String.hashCode of s.
func javaHash(s string) int32 { return javaHashString(0, s) }

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
	h := javaHashString(0, topic)
	h = 31*h + '#'
	return positive(javaHashString(h, key))
}

// keyHashBytes is keyHash with the key as a byte slice.
func keyHashBytes(topic string, key []byte) int32 {
	h := javaHashString(0, topic)
	h = 31*h + '#'
	return positive(javaHashBytes(h, key))
}
