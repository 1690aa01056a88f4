// Package javaprops reads text in the format of java.util.Properties, the
// format of RocketMQ's broker.conf and namesrv.properties. It is a leaf: the
// commands that accept a RocketMQ configuration file (-c FILE) parse it here
// and map its keys themselves.
package javaprops

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Property is one key=value of a file, with the line it starts on (1-based).
type Property struct {
	Key, Value string
	Line       int
	// Replaced are the earlier lines of the same key, first to last, whose
	// values this one replaced (nil: the key is given once).
	Replaced []Property
}

// Parse reads text in the format of java.util.Properties, which is
// how the Java broker and name server read their files:
//
//   - A line whose first non-blank character is '#' or '!' is a comment;
//     blank lines are skipped.
//   - A line ending in an odd number of backslashes continues on the next
//     line, whose leading blanks are dropped.
//   - The key runs to the first unescaped '=', ':' or blank; blanks around
//     the separator are skipped ("key = value", "key: value" and "key value"
//     all work), and the rest of the line is the value.
//   - Escapes: \t, \n, \r, \f, \uXXXX, and a backslash before any other
//     character stands for that character.
//
// Unlike Java, trailing blanks are trimmed from values (the Java broker
// trims string values, and a number with a trailing blank is a mistake
// nobody means). When a key repeats, the last line wins, as in Java: the
// result has one Property per key, at the place of its last line (the
// result is in the order of the lines that count), with the lines it
// replaced in Replaced, for a caller to warn about.
func Parse(text string) ([]Property, error) {
	var out []Property
	var dropped []bool
	index := map[string]int{}
	lines := splitLines(text)
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		for continues(line) && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		if continues(line) { // a continuation at the end of the file
			line = line[:len(line)-1]
		}
		rawKey, rawValue := splitKeyValue(line)
		key, err := unescape(rawKey)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", start, err)
		}
		value, err := unescape(rawValue)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", start, err)
		}
		value = strings.TrimRight(value, " \t\f")
		p := Property{Key: key, Value: value, Line: start}
		if j, ok := index[key]; ok {
			prev := out[j]
			p.Replaced = append(prev.Replaced, Property{Key: key, Value: prev.Value, Line: prev.Line})
			dropped[j] = true // the last line's place counts
		}
		index[key] = len(out)
		out = append(out, p)
		dropped = append(dropped, false)
	}
	kept := out[:0]
	for i, p := range out {
		if !dropped[i] {
			kept = append(kept, p)
		}
	}
	return kept, nil
}

// splitLines splits at \n, \r\n and \r.
func splitLines(text string) []string {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	return strings.Split(text, "\n")
}

// continues reports whether line ends in an odd number of backslashes.
func continues(line string) bool {
	n := 0
	for i := len(line) - 1; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// splitKeyValue splits a logical line (leading blanks removed) into its raw
// key and raw value.
func splitKeyValue(line string) (string, string) {
	end := len(line)
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == '\\' {
			i++ // the escaped character belongs to the key
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			end = i
			break
		}
	}
	key, rest := line[:end], line[end:]
	rest = strings.TrimLeft(rest, " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	return key, rest
}

// unescape resolves the escapes of the properties format.
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", fmt.Errorf("malformed \\uxxxx escape in %q", s)
			}
			r, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				return "", fmt.Errorf("malformed \\uxxxx escape in %q", s)
			}
			b.WriteRune(rune(r))
			i += 4
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}

// ReadFile reads and parses the file at path; errors name the file.
func ReadFile(path string) ([]Property, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	props, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return props, nil
}

// Closest returns the key of known nearest to key by edit distance (ignoring
// case) when it is close enough to be a likely typo (at most 2 edits), else
// "". Ties go to the smaller key, so the answer does not depend on the order
// of known.
func Closest(key string, known []string) string {
	best, bestD := "", 3
	lk := strings.ToLower(key)
	for _, k := range known {
		d := editDistance(lk, strings.ToLower(k))
		if d < bestD || (d == bestD && best != "" && k < best) {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
