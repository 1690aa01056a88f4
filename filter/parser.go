package filter

import (
	"fmt"
	"math"
	"strconv"
)

// maxDepth bounds the nesting of an expression (parentheses, unary
// operators, chained comparisons). The Java parser has no such limit but
// fails with a StackOverflowError, which RocketMQ reports as a parse failure
// too; the bound keeps compiling and matching cheap on stack.
const maxDepth = 256

type op uint8

const (
	opConst    op = iota // lit
	opProp               // slot
	opNeg                // -x
	opNot                // NOT x (x boolean)
	opBoolCast           // a property used as a condition
	opAnd                // kids, n-ary
	opOr                 // kids, n-ary
	opEq                 // x = y (also IS NULL: y is the NULL constant)
	opLt                 // x < y
	opLe                 // x <= y
	opGt                 // x > y
	opGe                 // x >= y
	opIn                 // x IN (strs); not for NOT IN
	opContains           // x CONTAINS search; not for NOT CONTAINS
	opStartsWith
	opEndsWith
)

// expr is a node of a compiled expression. The tree is built once by the
// parser and only read afterwards.
type expr struct {
	op    op
	not   bool // opIn, opContains, opStartsWith, opEndsWith: the NOT form
	pos   int  // byte offset of the node's first token, for errors
	depth int
	x, y  *expr
	kids  []*expr // opAnd, opOr
	lit   value   // opConst
	slot  int     // opProp: index into SQL.names
	strs  []string
	// search is the literal of the CONTAINS family, searchB the same bytes.
	search  string
	searchB []byte
}

// isBool reports whether e is what RocketMQ calls a BooleanExpression: a
// boolean constant (TRUE, FALSE, NULL) or an operator that yields a boolean.
func (e *expr) isBool() bool {
	switch e.op {
	case opConst:
		return e.lit.k == kBool || e.lit.k == kNull
	case opProp, opNeg:
		return false
	}
	return true
}

// SQL is a compiled SQL92 selector. It is immutable and safe for concurrent
// use; Match does not allocate.
type SQL struct {
	src   string
	root  *expr
	names []string  // property names, one slot each
	first [4]uint64 // bit c set: the first maxSlots names include one starting with byte c
}

// Compile parses an SQL92 selector with the grammar and the compile-time
// checks of RocketMQ's SelectorParser (see the package documentation). A
// malformed or rejected expression yields a *ParseError.
func Compile(src string) (s *SQL, err error) {
	p := &parser{lx: lexer{src: src}, slots: map[string]int{}}
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(*ParseError)
			if !ok {
				panic(r)
			}
			s, err = nil, pe
		}
	}()
	e := p.asBool(p.orExpr())
	// Like the JavaCC parser (JmsSelector has no <EOF>), the selector ends
	// where the grammar stops: trailing tokens that cannot continue it are
	// ignored.
	s = &SQL{src: src, root: e, names: p.names}
	for i, name := range s.names {
		if i == maxSlots {
			break
		}
		s.first[name[0]>>6] |= 1 << (name[0] & 63)
	}
	return s, nil
}

// String returns the source expression.
func (s *SQL) String() string { return s.src }

// Properties returns the names of the properties the expression reads, in
// order of first use. The caller must not modify the slice.
func (s *SQL) Properties() []string { return s.names }

type parser struct {
	lx    lexer
	buf   [2]token
	nbuf  int
	depth int
	names []string
	slots map[string]int
}

func (p *parser) fail(pos int, format string, args ...any) {
	panic(&ParseError{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) fill(n int) {
	for p.nbuf < n {
		t, err := p.lx.next()
		if err != nil {
			panic(err)
		}
		p.buf[p.nbuf] = t
		p.nbuf++
	}
}

func (p *parser) peek() token  { p.fill(1); return p.buf[0] }
func (p *parser) peek2() token { p.fill(2); return p.buf[1] }

func (p *parser) take() token {
	p.fill(1)
	t := p.buf[0]
	p.buf[0] = p.buf[1]
	p.nbuf--
	return t
}

func (p *parser) expect(k tokKind) token {
	t := p.take()
	if t.kind != k {
		p.unexpected(t, tokNames[k])
	}
	return t
}

func (p *parser) unexpected(t token, want string) {
	if t.kind == tEOF {
		p.fail(t.pos, "unexpected end of expression, want %s", want)
	}
	p.fail(t.pos, "unexpected %s %q, want %s", tokNames[t.kind], p.lx.src[t.pos:t.end], want)
}

func (p *parser) text(t token) string { return p.lx.src[t.pos:t.end] }

// node finishes a new node: it computes its depth and enforces maxDepth.
func (p *parser) node(e *expr) *expr {
	d := 0
	for _, c := range [...]*expr{e.x, e.y} {
		if c != nil && c.depth > d {
			d = c.depth
		}
	}
	for _, c := range e.kids {
		if c.depth > d {
			d = c.depth
		}
	}
	e.depth = d + 1
	if e.depth > maxDepth {
		p.fail(e.pos, "expression nested deeper than %d", maxDepth)
	}
	return e
}

// enter and leave bound the parser's own recursion.
func (p *parser) enter(pos int) {
	p.depth++
	if p.depth > maxDepth {
		p.fail(pos, "expression nested deeper than %d", maxDepth)
	}
}

func (p *parser) leave() { p.depth-- }

// asBool is SelectorParser.asBooleanExpression: a boolean expression stays,
// a property becomes a boolean cast, anything else is an error.
func (p *parser) asBool(e *expr) *expr {
	if e.isBool() {
		return e
	}
	if e.op == opProp {
		return p.node(&expr{op: opBoolCast, pos: e.pos, x: e})
	}
	p.fail(e.pos, "expression will not result in a boolean value")
	return nil
}

// logic builds AND/OR, flattening chains of the same operator. Java
// evaluates a chain left to right with short-circuits, and the n-ary form
// evaluates the same operands in the same order with the same three-valued
// result.
func (p *parser) logic(o op, l, r *expr) *expr {
	e := &expr{op: o, pos: l.pos}
	for _, c := range [...]*expr{l, r} {
		if c.op == o {
			e.kids = append(e.kids, c.kids...)
		} else {
			e.kids = append(e.kids, c)
		}
	}
	return p.node(e)
}

// orExpr: andExpr { OR andExpr }
func (p *parser) orExpr() *expr {
	l := p.andExpr()
	for p.peek().kind == tOr {
		p.take()
		r := p.andExpr()
		l = p.logic(opOr, p.asBool(l), p.asBool(r))
	}
	return l
}

// andExpr: equalityExpr { AND equalityExpr }
func (p *parser) andExpr() *expr {
	l := p.equalityExpr()
	for p.peek().kind == tAnd {
		p.take()
		r := p.equalityExpr()
		l = p.logic(opAnd, p.asBool(l), p.asBool(r))
	}
	return l
}

var nullConst = &expr{op: opConst, lit: value{k: kNull}, depth: 1}

// equalityExpr: comparisonExpr { "=" comparisonExpr | "<>" comparisonExpr
// | IS NULL | IS NOT NULL }
func (p *parser) equalityExpr() *expr {
	l := p.comparisonExpr()
	for {
		t := p.peek()
		switch t.kind {
		case tEq, tNe:
			p.take()
			r := p.comparisonExpr()
			checkEqualOperand(p, l)
			checkEqualOperand(p, r)
			if l.op == opConst && r.op == opConst && l.isBool() && !r.isBool() {
				p.fail(t.pos, "%s cannot be compared with %s", p.describe(l), p.describe(r))
			}
			l = p.node(&expr{op: opEq, pos: l.pos, x: l, y: r})
			if t.kind == tNe {
				l = p.node(&expr{op: opNot, pos: l.pos, x: l})
			}
		case tIs:
			p.take()
			not := false
			if p.peek().kind == tNot {
				p.take()
				not = true
			}
			p.expect(tNull)
			l = p.node(&expr{op: opEq, pos: l.pos, x: l, y: nullConst})
			if not {
				l = p.node(&expr{op: opNot, pos: l.pos, x: l})
			}
		default:
			return l
		}
	}
}

// checkEqualOperand: NULL cannot be an operand of = or <> (use IS NULL).
func checkEqualOperand(p *parser, e *expr) {
	if e.op == opConst && e.lit.k == kNull {
		p.fail(e.pos, "NULL cannot be compared with = or <>; use IS NULL")
	}
}

// checkOrderOperand: only numeric constants, properties and negations can
// be operands of < <= > >= (and of BETWEEN).
func checkOrderOperand(p *parser, e *expr) {
	if e.op == opConst {
		if !e.lit.isNumber() {
			p.fail(e.pos, "%s cannot be compared with < <= > >=", p.describe(e))
		}
		return
	}
	if e.isBool() {
		p.fail(e.pos, "a condition cannot be compared with < <= > >=")
	}
}

func (p *parser) describe(e *expr) string {
	if e.op == opConst {
		return e.lit.String()
	}
	return "expression"
}

func (p *parser) order(o op, l, r *expr) *expr {
	checkOrderOperand(p, l)
	checkOrderOperand(p, r)
	return p.node(&expr{op: o, pos: l.pos, x: l, y: r})
}

// comparisonExpr: unaryExpr { (">" | ">=" | "<" | "<=") unaryExpr
// | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
// | [NOT] BETWEEN unaryExpr AND unaryExpr
// | [NOT] IN "(" string { "," string } ")" }
func (p *parser) comparisonExpr() *expr {
	l := p.unaryExpr()
	for {
		t := p.peek()
		not := false
		kind := t.kind
		switch kind {
		case tGt, tGe, tLt, tLe:
			p.take()
			r := p.unaryExpr()
			l = p.order(orderOp(kind), l, r)
			continue
		case tNot:
			switch p.peek2().kind {
			case tContains, tStartsWith, tEndsWith, tBetween, tIn:
			default:
				p.fail(t.pos, "NOT here must be followed by BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH")
			}
			p.take()
			not = true
			kind = p.peek().kind
		case tContains, tStartsWith, tEndsWith, tBetween, tIn:
		default:
			return l
		}
		p.take()
		switch kind {
		case tContains, tStartsWith, tEndsWith:
			s := p.expect(tString)
			lit := unquote(p.text(s))
			l = p.node(&expr{op: stringOp(kind), not: not, pos: l.pos, x: l, search: lit, searchB: []byte(lit)})
		case tBetween:
			low := p.unaryExpr()
			p.expect(tAnd)
			high := p.unaryExpr()
			l = p.between(t, not, l, low, high)
		case tIn:
			p.expect(tLParen)
			var list []string
			for {
				s := p.expect(tString)
				list = append(list, unquote(p.text(s)))
				if p.peek().kind != tComma {
					break
				}
				p.take()
			}
			p.expect(tRParen)
			if l.op != opProp {
				p.fail(l.pos, "IN needs a property on its left")
			}
			l = p.node(&expr{op: opIn, not: not, pos: l.pos, x: l, strs: list})
		}
	}
}

func orderOp(k tokKind) op {
	switch k {
	case tGt:
		return opGt
	case tGe:
		return opGe
	case tLt:
		return opLt
	}
	return opLe
}

func stringOp(k tokKind) op {
	switch k {
	case tContains:
		return opContains
	case tStartsWith:
		return opStartsWith
	}
	return opEndsWith
}

// between builds BETWEEN as (v >= low AND v <= high) and NOT BETWEEN as
// (v < low OR v > high), as RocketMQ does. With two constant bounds, RocketMQ
// requires them non-NULL and low <= high (only for BETWEEN).
func (p *parser) between(t token, not bool, v, low, high *expr) *expr {
	if not {
		return p.logic(opOr, p.order(opLt, v, low), p.order(opGt, v, high))
	}
	if low.op == opConst && high.op == opConst {
		if low.lit.k == kNull || high.lit.k == kNull {
			p.fail(t.pos, "BETWEEN bounds cannot be NULL")
		}
		c, ok := javaCompare(high.lit, low.lit)
		if !ok {
			p.fail(t.pos, "BETWEEN bounds %s and %s cannot be compared", low.lit.String(), high.lit.String())
		}
		if c < 0 {
			p.fail(t.pos, "BETWEEN lower bound %s is above upper bound %s", low.lit.String(), high.lit.String())
		}
	}
	return p.logic(opAnd, p.order(opGe, v, low), p.order(opLe, v, high))
}

// unaryExpr: "+" unaryExpr | "-" unaryExpr | NOT unaryExpr | primaryExpr
//
// As in RocketMQ (and ActiveMQ, where the grammar comes from), NOT binds
// tighter than comparisons: NOT a = 'x' is (NOT a) = 'x'.
func (p *parser) unaryExpr() *expr {
	t := p.peek()
	switch t.kind {
	case tPlus:
		p.take()
		p.enter(t.pos)
		e := p.unaryExpr()
		p.leave()
		return e
	case tMinus:
		p.take()
		p.enter(t.pos)
		e := p.unaryExpr()
		p.leave()
		return p.node(&expr{op: opNeg, pos: t.pos, x: e})
	case tNot:
		p.take()
		p.enter(t.pos)
		e := p.unaryExpr()
		p.leave()
		return p.node(&expr{op: opNot, pos: t.pos, x: p.asBool(e)})
	}
	return p.primaryExpr()
}

// primaryExpr: literal | identifier | "(" orExpr ")"
func (p *parser) primaryExpr() *expr {
	t := p.take()
	switch t.kind {
	case tLParen:
		p.enter(t.pos)
		e := p.orExpr()
		p.leave()
		p.expect(tRParen)
		return e
	case tIdent:
		name := p.text(t)
		slot, ok := p.slots[name]
		if !ok {
			slot = len(p.names)
			p.slots[name] = slot
			p.names = append(p.names, name)
		}
		return p.node(&expr{op: opProp, pos: t.pos, slot: slot})
	case tString:
		return p.constant(t, value{k: kString, s: []byte(unquote(p.text(t)))})
	case tTrue:
		return p.constant(t, value{k: kBool, b: true})
	case tFalse:
		return p.constant(t, value{k: kBool})
	case tNull:
		return p.constant(t, value{k: kNull})
	case tDecimal:
		text := p.text(t)
		if c := text[len(text)-1]; c == 'l' || c == 'L' {
			text = text[:len(text)-1]
		}
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			p.fail(t.pos, "integer literal %s is out of the range of a Java long", text)
		}
		if n >= math.MinInt32 && n <= math.MaxInt32 {
			return p.constant(t, value{k: kInt, i: n})
		}
		return p.constant(t, value{k: kLong, i: n})
	case tFloat:
		f, err := strconv.ParseFloat(p.text(t), 64)
		if err != nil && !isRange(err) {
			p.fail(t.pos, "bad floating-point literal %s", p.text(t))
		}
		// RocketMQ's ConstantExpression.createFloat refuses values above
		// Double.MAX_VALUE and below Double.MIN_VALUE (4.9e-324), which
		// includes 0.0.
		if math.IsInf(f, 0) {
			p.fail(t.pos, "floating-point literal %s is greater than Double.MAX_VALUE", p.text(t))
		}
		if f < math.SmallestNonzeroFloat64 {
			p.fail(t.pos, "floating-point literal %s is less than Double.MIN_VALUE (RocketMQ refuses 0.0)", p.text(t))
		}
		return p.constant(t, value{k: kDouble, f: f})
	}
	p.unexpected(t, "a literal, a property name or '('")
	return nil
}

func (p *parser) constant(t token, v value) *expr {
	return p.node(&expr{op: opConst, pos: t.pos, lit: v})
}

// isRange reports whether err is strconv's out-of-range error (the value is
// then ±Inf or 0, which the callers judge themselves).
func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
