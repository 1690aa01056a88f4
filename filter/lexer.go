package filter

import (
	"fmt"
	"strings"
)

type tokKind uint8

const (
	tEOF tokKind = iota
	tIdent
	tDecimal // DECIMAL_LITERAL: 0 | [1-9][0-9]*[lL]?
	tFloat   // FLOATING_POINT_LITERAL
	tString  // 'text' with '' for a quote
	// keywords (case-insensitive)
	tNot
	tAnd
	tOr
	tBetween
	tIn
	tTrue
	tFalse
	tNull
	tIs
	tContains
	tStartsWith
	tEndsWith
	// punctuation
	tEq
	tNe
	tGt
	tGe
	tLt
	tLe
	tLParen
	tRParen
	tComma
	tPlus
	tMinus
)

var keywords = [...]struct {
	word string
	kind tokKind
}{
	{"NOT", tNot}, {"AND", tAnd}, {"OR", tOr}, {"BETWEEN", tBetween}, {"IN", tIn},
	{"TRUE", tTrue}, {"FALSE", tFalse}, {"NULL", tNull}, {"IS", tIs},
	{"CONTAINS", tContains}, {"STARTSWITH", tStartsWith}, {"ENDSWITH", tEndsWith},
}

var tokNames = [...]string{
	tEOF: "end of expression", tIdent: "identifier", tDecimal: "integer literal",
	tFloat: "floating-point literal", tString: "string literal",
	tNot: "NOT", tAnd: "AND", tOr: "OR", tBetween: "BETWEEN", tIn: "IN", tTrue: "TRUE",
	tFalse: "FALSE", tNull: "NULL", tIs: "IS", tContains: "CONTAINS",
	tStartsWith: "STARTSWITH", tEndsWith: "ENDSWITH",
	tEq: "'='", tNe: "'<>'", tGt: "'>'", tGe: "'>='", tLt: "'<'", tLe: "'<='",
	tLParen: "'('", tRParen: "')'", tComma: "','", tPlus: "'+'", tMinus: "'-'",
}

type token struct {
	kind     tokKind
	pos, end int // src[pos:end] is the token's text
}

// lexer cuts src into tokens on demand, with the token rules of RocketMQ's
// SelectorParser.jj (JavaCC: longest match, the earlier rule on a tie).
// Tokens are produced only as the parser asks for them, so, as in JavaCC, a
// lexical error past the last token the grammar looks at goes unnoticed.
type lexer struct {
	src string
	pos int
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$'
}

func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) }

// skip passes white space and comments. A "--" comment runs to the end of
// its line and needs the line break: without one, "--" is two minus signs.
// A "/*" comment needs its "*/"; without one, "/" is an error.
func (l *lexer) skip() *ParseError {
	s := l.src
	for l.pos < len(s) {
		c := s[l.pos]
		switch {
		case isSpace(c):
			l.pos++
		case c == '-' && strings.HasPrefix(s[l.pos:], "--"):
			i := strings.IndexAny(s[l.pos+2:], "\r\n")
			if i < 0 {
				return nil
			}
			l.pos += 2 + i + 1
		case c == '/' && strings.HasPrefix(s[l.pos:], "/*"):
			i := strings.Index(s[l.pos+2:], "*/")
			if i < 0 {
				return &ParseError{Pos: l.pos, Msg: "unterminated comment"}
			}
			l.pos += 2 + i + 2
		default:
			return nil
		}
	}
	return nil
}

// exponent returns the end of an exponent ("E" [+-]? digits) starting at i,
// or i when there is none.
func exponent(s string, i int) int {
	if i >= len(s) || (s[i] != 'e' && s[i] != 'E') {
		return i
	}
	j := i + 1
	if j < len(s) && (s[j] == '+' || s[j] == '-') {
		j++
	}
	k := j
	for k < len(s) && isDigit(s[k]) {
		k++
	}
	if k == j {
		return i
	}
	return k
}

func (l *lexer) next() (token, *ParseError) {
	if err := l.skip(); err != nil {
		return token{}, err
	}
	s, p := l.src, l.pos
	if p >= len(s) {
		return token{kind: tEOF, pos: p, end: p}, nil
	}
	tok := token{pos: p}
	c := s[p]
	switch {
	case isIdentStart(c):
		e := p + 1
		for e < len(s) && isIdentPart(s[e]) {
			e++
		}
		tok.kind, tok.end = tIdent, e
		word := s[p:e]
		for _, kw := range keywords {
			if strings.EqualFold(word, kw.word) {
				tok.kind = kw.kind
				break
			}
		}
	case isDigit(c):
		j := p
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		decEnd := p + 1 // "0" alone
		if c != '0' {
			decEnd = j
			if j < len(s) && (s[j] == 'l' || s[j] == 'L') {
				decEnd = j + 1
			}
		}
		floatEnd := p
		if j < len(s) && s[j] == '.' {
			k := j + 1
			for k < len(s) && isDigit(s[k]) {
				k++
			}
			floatEnd = exponent(s, k)
		} else if e := exponent(s, j); e > j {
			floatEnd = e
		}
		if floatEnd > decEnd {
			tok.kind, tok.end = tFloat, floatEnd
		} else {
			tok.kind, tok.end = tDecimal, decEnd
		}
	case c == '.' && p+1 < len(s) && isDigit(s[p+1]):
		k := p + 1
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		tok.kind, tok.end = tFloat, exponent(s, k)
	case c == '\'':
		i := p + 1
		for {
			if i >= len(s) {
				return token{}, &ParseError{Pos: p, Msg: "unterminated string literal"}
			}
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					i += 2
					continue
				}
				break
			}
			i++
		}
		tok.kind, tok.end = tString, i+1
	default:
		tok.end = p + 1
		switch c {
		case '=':
			tok.kind = tEq
		case '<':
			tok.kind = tLt
			if p+1 < len(s) && s[p+1] == '>' {
				tok.kind, tok.end = tNe, p+2
			} else if p+1 < len(s) && s[p+1] == '=' {
				tok.kind, tok.end = tLe, p+2
			}
		case '>':
			tok.kind = tGt
			if p+1 < len(s) && s[p+1] == '=' {
				tok.kind, tok.end = tGe, p+2
			}
		case '(':
			tok.kind = tLParen
		case ')':
			tok.kind = tRParen
		case ',':
			tok.kind = tComma
		case '+':
			tok.kind = tPlus
		case '-':
			tok.kind = tMinus
		default:
			return token{}, &ParseError{Pos: p, Msg: fmt.Sprintf("unexpected character %q", rune0(s[p:]))}
		}
	}
	l.pos = tok.end
	return tok, nil
}

// rune0 returns the first character of s for messages (U+FFFD if invalid).
func rune0(s string) rune {
	for _, r := range s {
		return r
	}
	return 0
}

// unquote decodes a string literal token: the outer quotes go and each
// doubled quote inside becomes one.
func unquote(lit string) string {
	return strings.ReplaceAll(lit[1:len(lit)-1], "''", "'")
}
