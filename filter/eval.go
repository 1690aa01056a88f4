package filter

import (
	"bytes"
	"strconv"
)

// kind is the Java type of a value during evaluation.
type kind uint8

const (
	kNull   kind = iota // null: a missing property, NULL, an unknown result
	kBool               // java.lang.Boolean
	kInt                // java.lang.Integer (literals that fit 32 bits)
	kLong               // java.lang.Long
	kDouble             // java.lang.Double
	kString             // java.lang.String (property values are always strings)
)

type value struct {
	k kind
	b bool
	i int64
	f float64
	s []byte
}

func (v value) isNumber() bool { return v.k == kInt || v.k == kLong || v.k == kDouble }

func (v value) String() string {
	switch v.k {
	case kBool:
		if v.b {
			return "TRUE"
		}
		return "FALSE"
	case kInt, kLong:
		return strconv.FormatInt(v.i, 10)
	case kDouble:
		return strconv.FormatFloat(v.f, 'g', -1, 64)
	case kString:
		return "'" + string(bytes.ReplaceAll(v.s, []byte("'"), []byte("''"))) + "'"
	}
	return "NULL"
}

var (
	vNull  = value{}
	vTrue  = value{k: kBool, b: true}
	vFalse = value{k: kBool}
)

func boolValue(b bool) value {
	if b {
		return vTrue
	}
	return vFalse
}

// javaCompare is RocketMQ's ComparisonExpression.__compare with string
// conversion on (as SelectorParser always sets it): values of one type
// compare naturally; an Integer meets a Long as a Long and either meets a
// Double as a Double; a String meets a number by being parsed as that
// number's type, and a Boolean by Boolean.valueOf. A number meeting a String
// parses the String likewise. ok is false where Java throws: a string that
// does not parse as the number type, and a Boolean on the left of a String
// (a ClassCastException in RocketMQ). Other mixes compare as -1. Neither
// value is null.
func javaCompare(l, r value) (c int, ok bool) {
	if l.k == r.k {
		switch l.k {
		case kBool:
			switch {
			case l.b == r.b:
				return 0, true
			case l.b:
				return 1, true
			}
			return -1, true
		case kInt, kLong:
			return cmpInt(l.i, r.i), true
		case kDouble:
			return javaDoubleCompare(l.f, r.f), true
		case kString:
			// Only equality ever looks at the result of a string compare.
			return bytes.Compare(l.s, r.s), true
		}
		return 0, true
	}
	switch l.k {
	case kBool:
		if r.k == kString {
			return 0, false
		}
	case kInt, kLong:
		switch r.k {
		case kInt, kLong:
			return cmpInt(l.i, r.i), true
		case kDouble:
			return javaDoubleCompare(float64(l.i), r.f), true
		case kString:
			bits := uint(64)
			if l.k == kInt {
				bits = 32
			}
			n, ok := javaParseInt(r.s, bits)
			if !ok {
				return 0, false
			}
			return cmpInt(l.i, n), true
		}
	case kDouble:
		switch r.k {
		case kInt, kLong:
			return javaDoubleCompare(l.f, float64(r.i)), true
		case kString:
			f, ok := javaParseDouble(r.s)
			if !ok {
				return 0, false
			}
			return javaDoubleCompare(l.f, f), true
		}
	case kString:
		switch r.k {
		case kBool:
			lb := javaBool(l.s)
			switch {
			case lb == r.b:
				return 0, true
			case lb:
				return 1, true
			}
			return -1, true
		case kInt, kLong:
			bits := uint(64)
			if r.k == kInt {
				bits = 32
			}
			n, ok := javaParseInt(l.s, bits)
			if !ok {
				return 0, false
			}
			return cmpInt(n, r.i), true
		case kDouble:
			f, ok := javaParseDouble(l.s)
			if !ok {
				return 0, false
			}
			return javaDoubleCompare(f, r.f), true
		}
	}
	return -1, true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// maxSlots is how many distinct properties Match reads in its single pass
// over the properties string; an expression naming more looks the others up
// one at a time.
const maxSlots = 8

type slotVal struct {
	v  []byte
	ok bool
}

// env is the per-call evaluation state; it lives on Match's stack.
type env struct {
	props []byte
	n     int // slots filled by the single pass
	vals  [maxSlots]slotVal
}

// Match reports whether a message with the encoded properties props matches
// the selector, the way RocketMQ's broker decides it: the expression must
// evaluate to TRUE; FALSE, unknown (NULL) and an evaluation error (a value
// that does not parse as the number it is compared with) all reject the
// message. It does not allocate (see javaParseDouble for the two rare
// exceptions) and does not retain props.
func (s *SQL) Match(props []byte) bool {
	var e env
	e.props = props
	e.n = min(len(s.names), maxSlots)
	if e.n > 0 {
		names := s.names[:e.n]
		for p := props; ; {
			k, v, rest, ok := nextPair(p)
			if !ok {
				break
			}
			for i, name := range names {
				if string(k) == name {
					e.vals[i] = slotVal{v, true}
					break
				}
			}
			p = rest
		}
	}
	v, ok := s.eval(s.root, &e)
	return ok && v.k == kBool && v.b
}

// MatchTagCode returns true: an SQL92 filter decides on the record.
func (s *SQL) MatchTagCode(int64) bool { return true }

// MatchProperties is Match.
func (s *SQL) MatchProperties(props []byte) bool { return s.Match(props) }

// NeedsRecord returns true.
func (s *SQL) NeedsRecord() bool { return true }

func (s *SQL) prop(slot int, e *env) value {
	var sv slotVal
	if slot < e.n {
		sv = e.vals[slot]
	} else {
		sv.v, sv.ok = lookupJava(e.props, s.names[slot])
	}
	if !sv.ok {
		return vNull
	}
	return value{k: kString, s: sv.v}
}

// eval evaluates x. ok is false when RocketMQ's evaluator would throw; the
// exception ends the whole evaluation (the message does not match), so it
// propagates straight up.
func (s *SQL) eval(x *expr, e *env) (value, bool) {
	switch x.op {
	case opConst:
		return x.lit, true
	case opProp:
		return s.prop(x.slot, e), true
	case opNeg:
		v, ok := s.eval(x.x, e)
		if !ok {
			return v, false
		}
		switch v.k {
		case kInt:
			return value{k: kInt, i: int64(-int32(v.i))}, true
		case kLong:
			return value{k: kLong, i: -v.i}, true
		case kDouble:
			return value{k: kDouble, f: -v.f}, true
		}
		return vNull, true
	case opNot:
		v, ok := s.eval(x.x, e)
		if !ok || v.k != kBool {
			return v, ok // null stays null
		}
		return boolValue(!v.b), true
	case opBoolCast:
		v, ok := s.eval(x.x, e)
		if !ok || v.k == kNull {
			return v, ok
		}
		return boolValue(v.k == kBool && v.b), true
	case opAnd, opOr:
		stop := x.op == opOr // OR stops at TRUE, AND at FALSE
		unknown := false
		for _, k := range x.kids {
			v, ok := s.eval(k, e)
			if !ok {
				return v, false
			}
			if v.k == kNull {
				unknown = true
			} else if v.b == stop {
				return boolValue(stop), true
			}
		}
		if unknown {
			return vNull, true
		}
		return boolValue(!stop), true
	case opEq:
		l, ok := s.eval(x.x, e)
		if !ok {
			return l, false
		}
		r, ok := s.eval(x.y, e)
		if !ok {
			return r, false
		}
		switch {
		case l.k == kNull && r.k == kNull:
			return vTrue, true // null == null: how IS NULL works
		case l.k == kNull:
			return vNull, true
		case r.k == kNull:
			return vFalse, true
		}
		c, ok := javaCompare(l, r)
		return boolValue(c == 0), ok
	case opLt, opLe, opGt, opGe:
		l, ok := s.eval(x.x, e)
		if !ok || l.k == kNull {
			return l, ok
		}
		r, ok := s.eval(x.y, e)
		if !ok || r.k == kNull {
			return r, ok
		}
		var c int
		if l.k == kString && r.k == kString {
			// Two strings are compared as doubles, or not at all.
			lf, lok := javaParseDouble(l.s)
			rf, rok := javaParseDouble(r.s)
			if !lok || !rok {
				return vNull, false
			}
			c = javaDoubleCompare(lf, rf)
		} else if c, ok = javaCompare(l, r); !ok {
			return vNull, false
		}
		switch x.op {
		case opLt:
			return boolValue(c < 0), true
		case opLe:
			return boolValue(c <= 0), true
		case opGt:
			return boolValue(c > 0), true
		}
		return boolValue(c >= 0), true
	case opIn:
		v, ok := s.eval(x.x, e)
		if !ok || v.k != kString {
			return vNull, ok
		}
		found := false
		for _, str := range x.strs {
			if string(v.s) == str {
				found = true
				break
			}
		}
		return boolValue(found != x.not), true
	case opContains, opStartsWith, opEndsWith:
		if x.search == "" {
			return vFalse, true
		}
		v, ok := s.eval(x.x, e)
		if !ok {
			return v, false
		}
		if v.k != kString {
			return vFalse, true
		}
		var hit bool
		switch x.op {
		case opContains:
			hit = bytes.Contains(v.s, x.searchB)
		case opStartsWith:
			hit = len(v.s) >= len(x.search) && string(v.s[:len(x.search)]) == x.search
		default:
			hit = len(v.s) >= len(x.search) && string(v.s[len(v.s)-len(x.search):]) == x.search
		}
		return boolValue(hit != x.not), true
	}
	return vNull, false
}
