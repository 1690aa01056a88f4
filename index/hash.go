package index

import (
	"math"

	"github.com/apogeemq/apogee/internal/javacompat"
)

// The hash of a key is Java's String.hashCode of topic + "#" + key
// (javacompat.HashCode: the 31*h + c recurrence over the UTF-16 code units of
// the String Java decodes from the UTF-8 bytes, malformed input replaced as
// the JDK replaces it). The parts are folded one after the other
// (javacompat.HashCodeFrom), which gives the hash of the concatenation without
// building it.

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
	h := javacompat.HashCode(topic)
	h = 31*h + '#'
	return positive(javacompat.HashCodeFrom(h, key))
}

// keyHashBytes is keyHash with the key as a byte slice.
func keyHashBytes(topic string, key []byte) int32 { return KeyHashAfter(TopicHash(topic), key) }
