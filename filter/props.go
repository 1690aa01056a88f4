package filter

import "bytes"

// The properties string is read the way the Java broker reads it before an
// SQL92 evaluation (MessageDecoder.string2messageProperties): items are
// separated by 0x02; an item is a pair when it holds a 0x01 that is neither
// its first nor its last byte; the key runs up to the first 0x01 and the
// value is everything after it. Items with an empty key or an empty value are
// skipped, so an empty value reads as a missing property. When a key repeats,
// the last pair wins (Java puts the pairs in a HashMap).

// lookupJava returns the value of name in props under the rules above. The
// value aliases props. It does not allocate. name must not contain 0x01 or
// 0x02 (property names in selectors and PropTags never do): then an item is
// the pair (name, value) exactly when it starts with name and a 0x01 and has
// something after it.
func lookupJava(props []byte, name string) ([]byte, bool) {
	var (
		val   []byte
		found bool
	)
	for len(props) > 0 {
		var item []byte
		if i := bytes.IndexByte(props, 0x02); i >= 0 {
			item, props = props[:i], props[i+1:]
		} else {
			item, props = props, nil
		}
		if len(item) > len(name)+1 && item[len(name)] == 0x01 && string(item[:len(name)]) == name {
			val, found = item[len(name)+1:], true
		}
	}
	return val, found
}
