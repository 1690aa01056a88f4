package protocol

import "github.com/apogeemq/apogee/internal/javacompat"

//go:generate go run ./internal/headergen

// Runtime support for the generated header codecs (headers_gen.go). The
// header structs themselves, with the rmq tags that are their tables, live in
// header_*.go; "Typed headers" in the package documentation states the rules.

// nonEmpty returns bit if v is not empty: an empty value counts as absent.
func nonEmpty(v []byte, bit uint32) uint32 {
	if len(v) == 0 {
		return 0
	}
	return bit
}

// checkRequired reports the first required key (bit i of want, named
// names[i]) that seen lacks.
func checkRequired(header string, seen, want uint32, names []string) error {
	if missing := want &^ seen; missing != 0 {
		for i := range names {
			if missing&(1<<i) != 0 {
				return missingField(header, names[i])
			}
		}
	}
	return nil
}

// decInt32 parses an int32 value; an empty one is def (and is reported missing if
// the key is required).
func decInt32(v []byte, def int32) (int32, bool) {
	if len(v) == 0 {
		return def, true
	}
	return javacompat.ParseInt32(v)
}

// decInt64 parses an int64 value; an empty one is def.
func decInt64(v []byte, def int64) (int64, bool) {
	if len(v) == 0 {
		return def, true
	}
	return javacompat.ParseInt64(v)
}
