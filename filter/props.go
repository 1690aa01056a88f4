package filter

import "bytes"

// The properties string is read the way the Java broker reads it before an
// SQL92 evaluation (MessageDecoder.string2messageProperties): items are
// separated by 0x02; an item is a pair when it holds a 0x01 that is neither
// its first nor its last byte; the key runs up to the first 0x01 and the
// value is everything after it. Items with an empty key or an empty value are
// skipped, so an empty value reads as a missing property. When a key repeats,
// the last pair wins (Java puts the pairs in a HashMap).

// nextPair returns the next key/value pair of p and the rest of p after it.
// ok is false when p holds no further pair.
func nextPair(p []byte) (key, val, rest []byte, ok bool) {
	for len(p) > 0 {
		var item []byte
		if i := bytes.IndexByte(p, 0x02); i >= 0 {
			item, p = p[:i], p[i+1:]
		} else {
			item, p = p, nil
		}
		k := bytes.IndexByte(item, 0x01)
		if k > 0 && k < len(item)-1 {
			return item[:k], item[k+1:], p, true
		}
	}
	return nil, nil, nil, false
}

// lookupJava returns the value of name in props under the rules above. The
// value aliases props. It does not allocate.
func lookupJava(props []byte, name string) ([]byte, bool) {
	var (
		val   []byte
		found bool
	)
	for {
		k, v, rest, ok := nextPair(props)
		if !ok {
			return val, found
		}
		if string(k) == name {
			val, found = v, true
		}
		props = rest
	}
}
