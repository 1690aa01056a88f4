package protocol

import (
	"fmt"
)

// quoteBareKeys rewrites the unquoted object keys that fastjson writes for maps with
// integer keys ({0:"addr"}, {"T@g":{0:12}}) as quoted ones, so that encoding/json can
// read the text. Everything else is copied unchanged; src itself is returned when there
// is nothing to quote. Malformed input is passed through for the JSON decoder to reject.
func quoteBareKeys(src []byte) []byte {
	var (
		out       []byte
		last      int
		stack     []bool // true = object
		expectKey bool
	)
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			// Skip the string, honouring escapes.
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			i = j
			expectKey = false
			continue
		case '{':
			stack = append(stack, true)
			expectKey = true
			continue
		case '[':
			stack = append(stack, false)
			expectKey = false
			continue
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			expectKey = false
			continue
		case ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1]
			continue
		}
		if !expectKey {
			continue
		}
		expectKey = false
		// A bare key: letters, digits and a few punctuation characters up to ':' or space.
		j := i
		for j < len(src) && isBareKeyByte(src[j]) {
			j++
		}
		if j == i {
			continue
		}
		out = append(out, src[last:i]...)
		out = append(out, '"')
		out = append(out, src[i:j]...)
		out = append(out, '"')
		last = j
		i = j - 1
	}
	if out == nil {
		return src
	}
	return append(out, src[last:]...)
}

func isBareKeyByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
		c == '-' || c == '+' || c == '_' || c == '.' || c == '$'
}

// bodyErr wraps a body decoding error so that errors.Is(err, ErrBadBody) holds.
func bodyErr(what string, err error) error {
	return fmt.Errorf("protocol: decode %s: %w: %w", what, ErrBadBody, err)
}
