package filter

import (
	"bytes"
	"strconv"

	"github.com/apogeemq/apogee/internal/javacompat"
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
			return javacompat.CompareDouble(l.f, r.f), true
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
			return javacompat.CompareDouble(float64(l.i), r.f), true
		case kString:
			bits := uint(64)
			if l.k == kInt {
				bits = 32
			}
			n, ok := javacompat.ParseInt(r.s, bits)
			if !ok {
				return 0, false
			}
			return cmpInt(l.i, n), true
		}
	case kDouble:
		switch r.k {
		case kInt, kLong:
			return javacompat.CompareDouble(l.f, float64(r.i)), true
		case kString:
			f, ok := javacompat.ParseDouble(r.s)
			if !ok {
				return 0, false
			}
			return javacompat.CompareDouble(l.f, f), true
		}
	case kString:
		switch r.k {
		case kBool:
			lb := javacompat.ParseBoolean(l.s)
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
			n, ok := javacompat.ParseInt(l.s, bits)
			if !ok {
				return 0, false
			}
			return cmpInt(n, r.i), true
		case kDouble:
			f, ok := javacompat.ParseDouble(l.s)
			if !ok {
				return 0, false
			}
			return javacompat.CompareDouble(f, r.f), true
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

// fill reads the values of the first e.n names in one pass over the
// properties, with the rules of lookupJava. A name holds no 0x01, so an item
// is the pair (name, value) exactly when it starts with the name and a 0x01
// and has something after it.
func (e *env) fill(names []string, first *[4]uint64) {
	p := e.props
	for len(p) > 0 {
		var item []byte
		if i := bytes.IndexByte(p, 0x02); i >= 0 {
			item, p = p[:i], p[i+1:]
		} else {
			item, p = p, nil
		}
		if len(item) == 0 || first[item[0]>>6]&(1<<(item[0]&63)) == 0 {
			continue // no name starts with this byte
		}
		for j, name := range names {
			if len(item) > len(name)+1 && item[len(name)] == 0x01 && string(item[:len(name)]) == name {
				e.vals[j] = slotVal{item[len(name)+1:], true}
				break
			}
		}
	}
}

// Match reports whether a message with the encoded properties props matches
// the selector, the way RocketMQ's broker decides it: the expression must
// evaluate to TRUE; FALSE, unknown (NULL) and an evaluation error (a value
// that does not parse as the number it is compared with) all reject the
// message. It does not allocate (see javacompat.ParseDouble for the two rare
// exceptions) and does not retain props.
func (s *SQL) Match(props []byte) bool {
	var e env
	e.props = props
	e.n = min(len(s.names), maxSlots)
	if e.n > 0 {
		e.fill(s.names[:e.n], &s.first)
	}
	return s.test(s.root, &e) == triTrue
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

// tri is the result of a condition: Java's Boolean.TRUE, Boolean.FALSE,
// null (unknown), or a thrown exception, which ends the whole evaluation
// (the message does not match) and so propagates straight up.
type tri uint8

const (
	triFalse tri = iota
	triTrue
	triNull
	triErr
)

func triOf(b bool) tri {
	if b {
		return triTrue
	}
	return triFalse
}

// value evaluates x as a value. ok is false when RocketMQ's evaluator would
// throw.
func (s *SQL) value(x *expr, e *env) (value, bool) {
	switch x.op {
	case opConst:
		return x.lit, true
	case opProp:
		return s.prop(x.slot, e), true
	case opNeg:
		v, ok := s.value(x.x, e)
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
	}
	return s.condValue(x, e)
}

// operand is value with the two common cases inlined.
func (s *SQL) operand(x *expr, e *env) (value, bool) {
	if x.op == opProp && x.slot < e.n {
		if sv := &e.vals[x.slot]; sv.ok {
			return value{k: kString, s: sv.v}, true
		}
		return value{}, true
	}
	if x.op == opConst {
		return x.lit, true
	}
	return s.value(x, e)
}

// condValue turns a condition into a value (TRUE, FALSE or NULL).
func (s *SQL) condValue(x *expr, e *env) (value, bool) {
	switch s.test(x, e) {
	case triTrue:
		return vTrue, true
	case triFalse:
		return vFalse, true
	case triNull:
		return vNull, true
	}
	return vNull, false
}

// test evaluates the condition x.
func (s *SQL) test(x *expr, e *env) tri {
	switch x.op {
	case opConst:
		switch x.lit.k {
		case kBool:
			return triOf(x.lit.b)
		case kNull:
			return triNull
		}
		return triErr // not reached: the parser admits no other constant here
	case opNot:
		t := s.test(x.x, e)
		if t <= triTrue {
			t ^= 1
		}
		return t
	case opBoolCast:
		v, ok := s.operand(x.x, e)
		switch {
		case !ok:
			return triErr
		case v.k == kNull:
			return triNull
		}
		return triOf(v.k == kBool && v.b)
	case opAnd, opOr:
		stop := triFalse // AND stops at FALSE, OR at TRUE
		if x.op == opOr {
			stop = triTrue
		}
		unknown := false
		for _, k := range x.kids {
			switch t := s.test(k, e); t {
			case stop, triErr:
				return t
			case triNull:
				unknown = true
			}
		}
		if unknown {
			return triNull
		}
		return stop ^ 1
	case opEq:
		l, ok := s.operand(x.x, e)
		if !ok {
			return triErr
		}
		r, ok := s.operand(x.y, e)
		if !ok {
			return triErr
		}
		switch {
		case l.k == kNull && r.k == kNull:
			return triTrue // null == null: how IS NULL works
		case l.k == kNull:
			return triNull
		case r.k == kNull:
			return triFalse
		}
		c, ok := javaCompare(l, r)
		if !ok {
			return triErr
		}
		return triOf(c == 0)
	case opLt, opLe, opGt, opGe:
		l, ok := s.operand(x.x, e)
		if !ok {
			return triErr
		}
		if l.k == kNull {
			return triNull
		}
		r, ok := s.operand(x.y, e)
		if !ok {
			return triErr
		}
		if r.k == kNull {
			return triNull
		}
		var c int
		if l.k == kString && r.k == kString {
			// Two strings are compared as doubles, or not at all.
			lf, lok := javacompat.ParseDouble(l.s)
			rf, rok := javacompat.ParseDouble(r.s)
			if !lok || !rok {
				return triErr
			}
			c = javacompat.CompareDouble(lf, rf)
		} else if c, ok = javaCompare(l, r); !ok {
			return triErr
		}
		switch x.op {
		case opLt:
			return triOf(c < 0)
		case opLe:
			return triOf(c <= 0)
		case opGt:
			return triOf(c > 0)
		}
		return triOf(c >= 0)
	case opIn:
		v, ok := s.operand(x.x, e)
		switch {
		case !ok:
			return triErr
		case v.k != kString:
			return triNull
		}
		found := false
		for _, str := range x.strs {
			if string(v.s) == str {
				found = true
				break
			}
		}
		return triOf(found != x.not)
	case opContains, opStartsWith, opEndsWith:
		if x.search == "" {
			return triFalse
		}
		v, ok := s.operand(x.x, e)
		if !ok {
			return triErr
		}
		if v.k != kString {
			return triFalse
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
		return triOf(hit != x.not)
	}
	return triErr // not reached: values are not conditions
}
