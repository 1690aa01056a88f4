package filter

import (
	"errors"
	"fmt"
)

// Expression types, as consumers send them in heartbeats (subscriptionData
// expressionType) and pull requests. Like the Java broker, the names are
// case-sensitive; an empty type means TypeTag.
const (
	TypeTag   = "TAG"
	TypeSQL92 = "SQL92"
)

// ErrUnknownType is returned (wrapped) by New for an expression type other
// than "", TypeTag and TypeSQL92.
var ErrUnknownType = errors.New("filter: unknown expression type")

// Filter is a compiled subscription. The broker holds one per subscription
// version and calls it from any number of pulls at once: a Filter is
// immutable and safe for concurrent use, and none of its methods allocate.
//
// A pull first asks MatchTagCode with the tag code of each consume-queue
// entry; entries that pass are read from the commit log and, when
// NeedsRecord reports true, asked again with MatchProperties over the
// record's properties string.
type Filter interface {
	// MatchTagCode reports whether a consume-queue entry with this tag code
	// may match. SQL92 filters always return true.
	MatchTagCode(code int64) bool
	// MatchProperties reports whether a record whose encoded properties are
	// props matches: the exact TAGS re-check for tag filters, the evaluation
	// for SQL92 filters. props is only read, never retained.
	MatchProperties(props []byte) bool
	// NeedsRecord reports whether MatchProperties must be called at all. It
	// is false only for a tag filter that accepts everything ("*").
	NeedsRecord() bool
}

// New compiles expr as an expression of the given type: "" or TypeTag for a
// tag subscription ("*", "TagA || TagB"), TypeSQL92 for an SQL92 selector.
// A malformed expression yields a *ParseError (the broker answers
// SUBSCRIPTION_PARSE_FAILED, code 23, with its text); an unknown type yields
// an error wrapping ErrUnknownType.
func New(expressionType, expr string) (Filter, error) {
	switch expressionType {
	case "", TypeTag:
		t, err := CompileTags(expr)
		if err != nil {
			return nil, err
		}
		return t, nil
	case TypeSQL92:
		s, err := Compile(expr)
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		return nil, fmt.Errorf("filter: expression type %q: %w", expressionType, ErrUnknownType)
	}
}

// ParseError reports a malformed subscription expression.
type ParseError struct {
	Pos int    // byte offset in the expression where the problem was found
	Msg string // what is wrong
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("filter: invalid expression at offset %d: %s", e.Pos, e.Msg)
}
