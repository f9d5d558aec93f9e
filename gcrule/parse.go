package gcrule

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxParseDepth is how deeply Parse lets parentheses nest.
const MaxParseDepth = 100

// Parse reads the cbt text form of a rule (what `cbt setgcpolicy` and
// `cbt createtable ... families=f:<rule>` take):
//
//	never                                  no rule (only on its own)
//	maxage=30d                             units ms, s, m, h, d; one integer and one unit
//	maxversions=5
//	maxage=10d || maxversions=2            a union; "or" is a synonym of ||
//	maxage=30d && maxversions=1            an intersection; "and" is a synonym of &&
//	(maxage=30d && maxversions=1) || maxversions=10
//
// Whitespace may appear between any two tokens. Keywords are lowercase.
//
// Like cbt, && and || have the same precedence and group from the left:
// "a || b && c" is "(a || b) && c". Unlike cbt, which nests every operator
// in a new two-child node, a run of one operator becomes one node:
// "a || b || c" is a union of three (the same collection; the client prints it
// "(a || b || c)"). Parentheses always make a node of their own, so
// "(a || b) || c" is a union whose first child is a union.
//
// Parse accepts only valid rules (see Validate): unlike cbt it refuses
// maxage=0d and maxversions=0, and it takes max versions up to
// MaxVersionsLimit (cbt stops at 65535). Errors wrap ErrInvalid and say where
// the problem is.
func Parse(s string) (Rule, error) {
	if strings.TrimSpace(s) == "never" {
		return Rule{}, nil
	}
	p := &parser{src: s}
	if err := p.lex(); err != nil {
		return Rule{}, err
	}
	if p.peek().kind == tEOF {
		return Rule{}, p.errf(p.peek(), "empty rule: write never for no garbage collection, or a rule such as maxage=30d or maxversions=5")
	}
	r, err := p.expr(0)
	if err != nil {
		return Rule{}, err
	}
	if t := p.peek(); t.kind != tEOF {
		if t.kind == tRParen {
			return Rule{}, p.errf(t, "unmatched )")
		}
		return Rule{}, p.errf(t, "expected || or && before %s", t.desc())
	}
	if err := r.Validate(); err != nil {
		return Rule{}, fmt.Errorf("%w (in %q)", err, s)
	}
	return r, nil
}

// MustParse is Parse for rules known to be valid; it panics otherwise.
func MustParse(s string) Rule {
	r, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return r
}

type tokKind uint8

const (
	tEOF tokKind = iota
	tWord
	tEq
	tLParen
	tRParen
	tAnd
	tOr
)

type token struct {
	kind tokKind
	text string
	pos  int // byte offset in the source
}

func (t token) desc() string {
	if t.kind == tEOF {
		return "end of input"
	}
	return strconv.Quote(t.text)
}

type parser struct {
	src  string
	toks []token
	i    int
}

func (p *parser) errf(t token, format string, args ...any) error {
	return fmt.Errorf("%w: %s (in %q at column %d)", ErrInvalid, fmt.Sprintf(format, args...), p.src, t.pos+1)
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// lex splits the source the way cbt does: words are runs of letters and
// digits; the symbols are = ( ) && ||; "and" and "or" are operators.
func (p *parser) lex() error {
	s := p.src
	for i := 0; i < len(s); {
		c, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case unicode.IsSpace(c):
			i += n
		case c == '=':
			p.toks = append(p.toks, token{tEq, "=", i})
			i++
		case c == '(':
			p.toks = append(p.toks, token{tLParen, "(", i})
			i++
		case c == ')':
			p.toks = append(p.toks, token{tRParen, ")", i})
			i++
		case c == '&' || c == '|':
			if i+1 >= len(s) || s[i+1] != byte(c) {
				return p.errf(token{pos: i}, "expected %c%c", c, c)
			}
			k := tAnd
			if c == '|' {
				k = tOr
			}
			p.toks = append(p.toks, token{k, s[i : i+2], i})
			i += 2
		case unicode.IsLetter(c) || unicode.IsDigit(c):
			j := i
			for j < len(s) {
				c, n := utf8.DecodeRuneInString(s[j:])
				if !unicode.IsLetter(c) && !unicode.IsDigit(c) {
					break
				}
				j += n
			}
			t := token{tWord, s[i:j], i}
			switch t.text {
			case "and":
				t.kind = tAnd
			case "or":
				t.kind = tOr
			}
			p.toks = append(p.toks, t)
			i = j
		default:
			return p.errf(token{pos: i}, "unexpected character %q", c)
		}
	}
	p.toks = append(p.toks, token{tEOF, "", len(s)})
	return nil
}

// expr ::= term (op term)*, left to right, equal precedence.
func (p *parser) expr(depth int) (Rule, error) {
	acc, err := p.term(depth)
	if err != nil {
		return Rule{}, err
	}
	chain := KindNone // the kind of the node this loop built, if any
	for {
		var k Kind
		switch p.peek().kind {
		case tOr:
			k = KindUnion
		case tAnd:
			k = KindIntersection
		default:
			return acc, nil
		}
		p.next()
		t, err := p.term(depth)
		if err != nil {
			return Rule{}, err
		}
		if chain == k {
			acc.children = append(acc.children, t)
		} else {
			acc = Rule{kind: k, children: []Rule{acc, t}}
			chain = k
		}
	}
}

// term ::= "maxage" "=" duration | "maxversions" "=" integer | "(" expr ")".
func (p *parser) term(depth int) (Rule, error) {
	t := p.next()
	switch {
	case t.kind == tLParen:
		if depth >= MaxParseDepth {
			return Rule{}, p.errf(t, "parentheses nest deeper than %d", MaxParseDepth)
		}
		r, err := p.expr(depth + 1)
		if err != nil {
			return Rule{}, err
		}
		if c := p.next(); c.kind != tRParen {
			return Rule{}, p.errf(c, "expected ) to close the ( at column %d, found %s", t.pos+1, c.desc())
		}
		return r, nil
	case t.kind == tWord && (t.text == "maxage" || t.text == "maxversions"):
		if eq := p.next(); eq.kind != tEq {
			return Rule{}, p.errf(eq, "expected = after %s, found %s", t.text, eq.desc())
		}
		v := p.next()
		if v.kind != tWord {
			if t.text == "maxage" {
				return Rule{}, p.errf(v, "expected a duration after maxage= (like 30d; units ms, s, m, h, d), found %s", v.desc())
			}
			return Rule{}, p.errf(v, "expected a number after maxversions=, found %s", v.desc())
		}
		if t.text == "maxage" {
			d, err := p.duration(v)
			if err != nil {
				return Rule{}, err
			}
			return MaxAge(d), nil
		}
		n, err := p.versions(v)
		if err != nil {
			return Rule{}, err
		}
		return MaxVersions(n), nil
	case t.kind == tWord && t.text == "never":
		return Rule{}, p.errf(t, "never stands alone; it cannot be combined with other rules")
	default:
		return Rule{}, p.errf(t, "expected maxage=<duration>, maxversions=<n> or (, found %s", t.desc())
	}
}

var units = []struct {
	d      time.Duration
	suffix string
}{
	{24 * time.Hour, "d"},
	{time.Hour, "h"},
	{time.Minute, "m"},
	{time.Second, "s"},
	{time.Millisecond, "ms"},
}

func (p *parser) duration(v token) (time.Duration, error) {
	i := 0
	for i < len(v.text) && '0' <= v.text[i] && v.text[i] <= '9' {
		i++
	}
	digits, suffix := v.text[:i], v.text[i:]
	if digits == "" || suffix == "" {
		return 0, p.errf(v, "maxage=%s: a duration is a whole number followed by a unit (ms, s, m, h, d), like 30d", v.text)
	}
	var unit time.Duration
	for _, u := range units {
		if u.suffix == suffix {
			unit = u.d
		}
	}
	if unit == 0 {
		return 0, p.errf(v, "maxage=%s: unknown unit %q; use ms, s, m, h or d", v.text, suffix)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > math.MaxInt64/int64(unit) {
		return 0, p.errf(v, "maxage=%s is too long (the limit is about 292 years)", v.text)
	}
	if n == 0 {
		return 0, p.errf(v, "maxage=%s: the age must be greater than zero", v.text)
	}
	return time.Duration(n) * unit, nil
}

func (p *parser) versions(v token) (int, error) {
	for i := 0; i < len(v.text); i++ {
		if v.text[i] < '0' || v.text[i] > '9' {
			return 0, p.errf(v, "maxversions=%s: expected a whole number", v.text)
		}
	}
	n, err := strconv.ParseInt(v.text, 10, 64)
	if err != nil || n > MaxVersionsLimit {
		return 0, p.errf(v, "maxversions=%s is too large (the limit is %d)", v.text, MaxVersionsLimit)
	}
	if n == 0 {
		return 0, p.errf(v, "maxversions=0: keep at least 1 version, or write never to keep all")
	}
	return int(n), nil
}

// CbtString is r in the text Parse reads: "never", "maxage=30d",
// "maxversions=5", "maxage=10d || maxversions=2",
// "(maxage=30d && maxversions=1) || maxversions=10". Ages use the largest unit
// of d, h, m, s, ms that divides them ("90m", "1500ms"). A union or
// intersection inside another is parenthesized.
//
// For every rule Parse returns, Parse(r.CbtString()) is Equal to r. Shapes the
// text cannot say collapse to the same collection: a union or intersection of
// one child prints as that child. An invalid rule prints text Parse refuses.
func (r Rule) CbtString() string {
	if r.kind == KindNone {
		return "never"
	}
	var b strings.Builder
	r.cbt(&b, true)
	return b.String()
}

func (r Rule) cbt(b *strings.Builder, top bool) {
	switch r.kind {
	case KindNone:
		b.WriteString("never")
	case KindMaxAge:
		b.WriteString("maxage=")
		b.WriteString(cbtDuration(r.age))
	case KindMaxVersions:
		fmt.Fprintf(b, "maxversions=%d", r.versions)
	case KindUnion, KindIntersection:
		switch len(r.children) {
		case 0:
			b.WriteString("()")
			return
		case 1:
			r.children[0].cbt(b, top)
			return
		}
		sep := " || "
		if r.kind == KindIntersection {
			sep = " && "
		}
		if !top {
			b.WriteByte('(')
		}
		for i, c := range r.children {
			if i > 0 {
				b.WriteString(sep)
			}
			c.cbt(b, false)
		}
		if !top {
			b.WriteByte(')')
		}
	}
}

func cbtDuration(d time.Duration) string {
	if d != 0 {
		for _, u := range units {
			if d%u.d == 0 {
				return fmt.Sprintf("%d%s", d/u.d, u.suffix)
			}
		}
	}
	return d.String()
}
