package message

import "github.com/apogeemq/apogee/internal/javacompat"

// JavaHashCode returns Java's String.hashCode of the string that Java would
// decode from the UTF-8 bytes s: h = 31*h + c over UTF-16 code units, with
// int32 wrap-around, malformed UTF-8 replaced as the JDK's decoder replaces it
// (see javacompat.HashCode). It does not allocate.
func JavaHashCode(s string) int32 { return javacompat.HashCode(s) }

// JavaHashCodeBytes is JavaHashCode for a byte slice.
func JavaHashCodeBytes(b []byte) int32 { return javacompat.HashCode(b) }

// TagCode returns the consume-queue tag code of a TAGS value: its Java hash
// sign-extended to int64, or 0 when tags is empty.
func TagCode(tags []byte) int64 {
	if len(tags) == 0 {
		return 0
	}
	return int64(javacompat.HashCode(tags))
}
