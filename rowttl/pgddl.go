package rowttl

import (
	"fmt"
	"math/big"
	"strings"
	"unicode"

	"github.com/ebbtable/ebbtable/table"
)

// The hand-written parser takes, keywords in any case, an optional ';' at
// the end:
//
//	ALTER TABLE name ADD TTL INTERVAL 'interval' ON column
//	ALTER TABLE name ALTER TTL INTERVAL 'interval' ON column
//	ALTER TABLE name DROP TTL
//	ALTER TABLE name SET INTERLEAVE SEPARATOR 'separator'
//	ALTER TABLE name DROP INTERLEAVE SEPARATOR
//
// name and column are bare identifiers or "double-quoted" ("" is a quote);
// strings are 'single-quoted' ('' is a quote). The column is family:qualifier
// (so it is double-quoted in practice).

type tokKind int

const (
	tokWord   tokKind = iota // bare identifier or keyword
	tokQuoted                // "identifier"
	tokString                // 'string'
	tokSemi
)

type token struct {
	kind tokKind
	text string
}

func lex(s string) ([]token, error) {
	var out []token
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == ';':
			out = append(out, token{tokSemi, ";"})
			i++
		case c == '"' || c == '\'':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, fmt.Errorf("%w: DDL: unterminated %c-quoted text at offset %d", table.ErrInvalid, c, i)
				}
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						b.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				b.WriteByte(s[j])
				j++
			}
			kind := tokString
			if c == '"' {
				kind = tokQuoted
			}
			out = append(out, token{kind, b.String()})
			i = j + 1
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r;\"'", rune(s[j])) {
				j++
			}
			out = append(out, token{tokWord, s[i:j]})
			i = j
		}
	}
	return out, nil
}

type handParser struct {
	toks []token
	pos  int
}

func (p *handParser) next() (token, bool) {
	if p.pos >= len(p.toks) {
		return token{}, false
	}
	t := p.toks[p.pos]
	p.pos++
	return t, true
}

// keyword consumes the given keywords in order.
func (p *handParser) keyword(words ...string) error {
	for _, w := range words {
		t, ok := p.next()
		if !ok || t.kind != tokWord || !strings.EqualFold(t.text, w) {
			got := "end of statement"
			if ok {
				got = fmt.Sprintf("%q", t.text)
			}
			return fmt.Errorf("%w: DDL: expected %s, got %s", table.ErrInvalid, w, got)
		}
	}
	return nil
}

func (p *handParser) ident(what string) (string, error) {
	t, ok := p.next()
	if !ok || (t.kind != tokWord && t.kind != tokQuoted) || t.text == "" {
		return "", fmt.Errorf("%w: DDL: expected %s", table.ErrInvalid, what)
	}
	return t.text, nil
}

func (p *handParser) str(what string) (string, error) {
	t, ok := p.next()
	if !ok || t.kind != tokString {
		return "", fmt.Errorf("%w: DDL: expected %s as a 'quoted string'", table.ErrInvalid, what)
	}
	return t.text, nil
}

func (p *handParser) end() error {
	if t, ok := p.next(); ok && t.kind == tokSemi {
		_, ok = p.next()
		if !ok {
			return nil
		}
	} else if !ok {
		return nil
	}
	return fmt.Errorf("%w: DDL: unexpected text after the statement", table.ErrInvalid)
}

// peekWord reports whether the next token is the keyword w.
func (p *handParser) peekWord(w string) bool {
	return p.pos < len(p.toks) && p.toks[p.pos].kind == tokWord && strings.EqualFold(p.toks[p.pos].text, w)
}

func parseHand(stmt string) (Statement, error) {
	toks, err := lex(stmt)
	if err != nil {
		return Statement{}, err
	}
	p := &handParser{toks: toks}
	st := Statement{Dialect: PostgreSQL}
	if err := p.keyword("ALTER", "TABLE"); err != nil {
		return Statement{}, err
	}
	if st.Table, err = p.ident("a table name"); err != nil {
		return Statement{}, err
	}
	verb, err := p.ident("ADD, ALTER, DROP or SET")
	if err != nil {
		return Statement{}, err
	}
	switch {
	case strings.EqualFold(verb, "ADD") || strings.EqualFold(verb, "ALTER"):
		st.Action = AddPolicy
		if strings.EqualFold(verb, "ALTER") {
			st.Action = ReplacePolicy
		}
		if err := p.keyword("TTL"); err != nil {
			return Statement{}, err
		}
		if st.Policy, err = p.ttlClause(); err != nil {
			return Statement{}, err
		}
		st.HasPolicy = true
	case strings.EqualFold(verb, "DROP") && p.peekWord("TTL"):
		st.Action = DropPolicy
		p.pos++
	case strings.EqualFold(verb, "DROP"):
		st.Action, st.Dialect = DropSeparator, ""
		if err := p.keyword("INTERLEAVE", "SEPARATOR"); err != nil {
			return Statement{}, err
		}
	case strings.EqualFold(verb, "SET"):
		st.Action, st.Dialect = SetSeparator, ""
		if err := p.keyword("INTERLEAVE", "SEPARATOR"); err != nil {
			return Statement{}, err
		}
		if st.Separator, err = p.str("the separator"); err != nil {
			return Statement{}, err
		}
		if st.Separator == "" {
			return Statement{}, fmt.Errorf("%w: DDL: the interleave separator must not be empty (DROP INTERLEAVE SEPARATOR removes it)", table.ErrInvalid)
		}
	default:
		return Statement{}, fmt.Errorf("%w: DDL: expected ADD, ALTER, DROP or SET after the table name, got %q", table.ErrInvalid, verb)
	}
	if err := p.end(); err != nil {
		return Statement{}, err
	}
	return st, nil
}

// ttlClause parses INTERVAL 'interval' ON column.
func (p *handParser) ttlClause() (Policy, error) {
	if err := p.keyword("INTERVAL"); err != nil {
		return Policy{}, err
	}
	iv, err := p.str("the interval")
	if err != nil {
		return Policy{}, err
	}
	days, err := IntervalDays(iv)
	if err != nil {
		return Policy{}, err
	}
	if err := p.keyword("ON"); err != nil {
		return Policy{}, err
	}
	col, err := p.ident("the timestamp column")
	if err != nil {
		return Policy{}, err
	}
	fam, q, err := parseColumn(col)
	if err != nil {
		return Policy{}, err
	}
	return Policy{Family: fam, Qualifier: q, Days: days}, nil
}

// intervalUnits are the units an interval may use, in microseconds. Months
// and years have no fixed length in days and are refused.
var intervalUnits = map[string]int64{
	"microsecond": 1, "microseconds": 1, "us": 1,
	"millisecond": 1000, "milliseconds": 1000, "ms": 1000,
	"second": 1e6, "seconds": 1e6, "sec": 1e6, "secs": 1e6, "s": 1e6,
	"minute": 60e6, "minutes": 60e6, "min": 60e6, "mins": 60e6, "m": 60e6,
	"hour": 3600e6, "hours": 3600e6, "hr": 3600e6, "hrs": 3600e6, "h": 3600e6,
	"day": microsPerDay, "days": microsPerDay, "d": microsPerDay,
	"week": 7 * microsPerDay, "weeks": 7 * microsPerDay, "w": 7 * microsPerDay,
}

// IntervalDays evaluates a PostgreSQL interval literal made of signed
// quantities with units ('4 DAYS 2 MINUTES - 2 MINUTES') and returns its
// length in whole days. The sum must be a whole, non-negative number of
// days. Quantities may be decimal ('1.5 days 12 hours').
func IntervalDays(s string) (int64, error) {
	bad := func(format string, args ...any) (int64, error) {
		return 0, fmt.Errorf("%w: TTL INTERVAL '%s': %s", table.ErrInvalid, s, fmt.Sprintf(format, args...))
	}
	if len(s) > 1024 {
		return bad("longer than 1024 characters")
	}
	total := new(big.Rat)
	r := []rune(s)
	i, n := 0, 0
	skip := func() {
		for i < len(r) && unicode.IsSpace(r[i]) {
			i++
		}
	}
	for {
		skip()
		if i >= len(r) {
			break
		}
		neg := false
		if r[i] == '+' || r[i] == '-' {
			neg = r[i] == '-'
			i++
			skip()
		}
		j := i
		for j < len(r) && (r[j] >= '0' && r[j] <= '9' || r[j] == '.') {
			j++
		}
		if j == i {
			return bad("expected a number at %q", string(r[i:]))
		}
		num := string(r[i:j])
		if len(num) > 30 {
			return bad("number %s too long", num)
		}
		q, ok := new(big.Rat).SetString(num)
		if !ok || strings.Count(num, ".") > 1 {
			return bad("%q is not a number", num)
		}
		i = j
		skip()
		j = i
		for j < len(r) && unicode.IsLetter(r[j]) {
			j++
		}
		unit := strings.ToLower(string(r[i:j]))
		if unit == "" {
			return bad("the quantity %s has no unit (DAYS, HOURS, MINUTES, …)", num)
		}
		mul, ok := intervalUnits[unit]
		if !ok {
			if strings.HasPrefix(unit, "mon") || strings.HasPrefix(unit, "y") || unit == "decade" || unit == "century" {
				return bad("%s have no fixed number of days; use DAYS", unit)
			}
			return bad("unknown unit %q", unit)
		}
		i = j
		q.Mul(q, new(big.Rat).SetInt64(mul))
		if neg {
			q.Neg(q)
		}
		total.Add(total, q)
		n++
	}
	if n == 0 {
		return bad("empty interval")
	}
	if total.Sign() < 0 {
		return bad("negative intervals are not allowed")
	}
	days := new(big.Rat).Quo(total, new(big.Rat).SetInt64(microsPerDay))
	if !days.IsInt() {
		return bad("must come to a whole number of days (it is %s days)", days.FloatString(6))
	}
	if !days.Num().IsInt64() || days.Num().Int64() > MaxDays {
		return bad("more than %d days", MaxDays)
	}
	return days.Num().Int64(), nil
}
