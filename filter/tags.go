package filter

import (
	"slices"
	"strings"

	"github.com/apogeemq/apogee/message"
)

// SubAll is the tag subscription that accepts every message.
const SubAll = "*"

// Tags is a compiled tag subscription ("*", or tags joined by "||"). It is
// immutable and safe for concurrent use.
type Tags struct {
	all   bool
	codes []int32  // Java String.hashCode of each tag, sorted, no duplicates
	tags  []string // the tags, in subscription order, no duplicates
}

// CompileTags compiles a tag subscription the way the Java client's
// FilterAPI.buildSubscriptionData does: "" and "*" (exactly, not trimmed)
// accept everything; anything else is split on "||", each item is trimmed of
// the characters Java's String.trim removes (bytes <= 0x20), and empty items
// are dropped. The tag codes are computed here with Java's String.hashCode
// (message.JavaHashCode); a client's codeSet is never trusted, since the Go
// client hashes UTF-8 bytes instead of UTF-16 units.
//
// Like Java's String.split, which drops trailing empty strings, a
// subscription made only of "||" separators is an error. A subscription
// whose items are all blank ("  ") compiles to a filter that accepts nothing,
// again as in Java.
func CompileTags(sub string) (*Tags, error) {
	if sub == "" || sub == SubAll {
		return &Tags{all: true}, nil
	}
	t := &Tags{}
	any := false
	for item := range strings.SplitSeq(sub, "||") {
		if item != "" {
			any = true
		}
		tag := javaTrim(item)
		if tag == "" || slices.Contains(t.tags, tag) {
			continue
		}
		t.tags = append(t.tags, tag)
		code := message.JavaHashCode(tag)
		if i, found := slices.BinarySearch(t.codes, code); !found {
			t.codes = slices.Insert(t.codes, i, code)
		}
	}
	if !any {
		return nil, &ParseError{Pos: 0, Msg: `tag subscription holds only "||" separators`}
	}
	return t, nil
}

// javaTrim removes leading and trailing characters <= U+0020, like Java's
// String.trim. In UTF-8 those are exactly the bytes <= 0x20.
func javaTrim(s string) string {
	i, j := 0, len(s)
	for i < j && s[i] <= ' ' {
		i++
	}
	for j > i && s[j-1] <= ' ' {
		j--
	}
	return s[i:j]
}

// All reports whether t accepts every message ("*" or "").
func (t *Tags) All() bool { return t.all }

// TagNames returns the subscribed tags in subscription order, without
// duplicates (nil for "*"). The caller must not modify the slice.
func (t *Tags) TagNames() []string { return t.tags }

// Codes returns the sorted, distinct tag codes (Java String.hashCode of each
// tag) the consume-queue check looks for. The caller must not modify the
// slice.
func (t *Tags) Codes() []int32 { return t.codes }

// MatchTagCode reports whether a consume-queue entry with tag code code
// passes, as the Java broker's ExpressionMessageFilter.isMatchedByConsumeQueue
// decides it: always for "*", otherwise when the code, truncated to 32 bits
// (Java's tagsCode.intValue()), is one of the subscribed tags' codes. A
// message without tags is stored with code 0 and so does not pass (unless a
// subscribed tag happens to hash to 0, in which case MatchProperties rejects
// it). The Java broker also passes a null tag code, which only arises for
// consume-queue extension addresses; Apogee's consume queues have none.
func (t *Tags) MatchTagCode(code int64) bool {
	if t.all {
		return true
	}
	c := int32(code)
	if len(t.codes) <= 8 {
		for _, x := range t.codes {
			if x == c {
				return true
			}
		}
		return false
	}
	_, found := slices.BinarySearch(t.codes, c)
	return found
}

// MatchProperties reports whether the record's TAGS property is exactly one
// of the subscribed tags: the check the Java and Go clients make after a
// pull (tagsSet.contains(msg.getTags())), done on the broker so that hash
// collisions are not shipped. A missing or empty TAGS never matches a tag
// list. It always returns true for "*". The property string is read the way
// the Java broker reads it (see the package documentation).
func (t *Tags) MatchProperties(props []byte) bool {
	if t.all {
		return true
	}
	v, ok := lookupJava(props, message.PropTags)
	if !ok {
		return false
	}
	for _, tag := range t.tags {
		if string(v) == tag {
			return true
		}
	}
	return false
}

// NeedsRecord reports whether MatchProperties has anything to check: false
// for "*", true otherwise.
func (t *Tags) NeedsRecord() bool { return !t.all }
