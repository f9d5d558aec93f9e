package filter

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// Bigtable evaluates regexes with RE2 in Latin-1 mode: pattern and subject
// are byte strings and every byte is one character. Go's regexp works on
// UTF-8, so both sides are mapped byte-for-rune into U+0000..U+00FF: a
// pattern byte b becomes the rune b, and a subject containing bytes >= 0x80
// is transcoded the same way before matching (pure ASCII needs no copy).
// RE2's `\C` (any byte), which Go lacks, becomes `(?s:.)`, which after the
// mapping matches any one byte.

// matcher is a compiled full-match regex. Patterns that are plain literals
// are compared with bytes.Equal instead.
type matcher struct {
	re    *regexp.Regexp // anchored at both ends
	lit   []byte         // the literal, as bytes, when isLit
	isLit bool
	never bool // the pattern can match no byte string
}

// compileRegex compiles pattern for the filter field name.
func compileRegex(field, pattern string) (*matcher, error) {
	src := translateRegex(pattern)
	// Parse the pattern on its own first: it must be valid by itself, or
	// wrapping it could turn something like "a)|(b" into a valid regex.
	re, err := regexp.Compile(src)
	if err != nil {
		return nil, invalidf("%s %q: %s", field, pattern, regexError(err))
	}
	if lit, complete := re.LiteralPrefix(); complete {
		if b, ok := latin1Encode(lit); ok {
			return &matcher{lit: b, isLit: true}, nil
		}
		// A literal with a rune above U+00FF can never match a byte string.
		return &matcher{never: true}, nil
	}
	full, err := regexp.Compile(`\A(?:` + src + `)\z`)
	if err != nil {
		return nil, invalidf("%s %q: %s", field, pattern, regexError(err))
	}
	return &matcher{re: full}, nil
}

// regexError describes a regexp compile error without the regexp package's
// prefix and without showing the translated pattern.
func regexError(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return fmt.Sprintf("%s: %q", se.Code, se.Expr)
	}
	return err.Error()
}

// match reports whether b fully matches; buf is scratch space for the
// Latin-1 transcoding and is returned for reuse.
func (m *matcher) match(b []byte, buf []byte) (bool, []byte) {
	if m.never {
		return false, buf
	}
	if m.isLit {
		return bytes.Equal(b, m.lit), buf
	}
	if isASCII(b) {
		return m.re.Match(b), buf
	}
	buf = latin1Decode(buf[:0], b)
	return m.re.Match(buf), buf
}

// matchString is match for a string subject.
func (m *matcher) matchString(s string, buf []byte) (bool, []byte) {
	if m.never {
		return false, buf
	}
	if m.isLit {
		return s == string(m.lit), buf
	}
	if isASCIIString(s) {
		return m.re.MatchString(s), buf
	}
	buf = latin1Decode(buf[:0], []byte(s))
	return m.re.Match(buf), buf
}

// translateRegex maps an RE2 Latin-1 pattern onto Go's regexp syntax: every
// byte becomes the rune of the same value, `\C` outside a character class
// and outside \Q...\E becomes `(?s:.)`, and a \Q left open is closed.
// Everything else is copied, so Go's parser reports any syntax error the
// original has. The scanner tracks
// character classes the way Go's parser does: a `]` right after `[` or `[^`
// is a literal, and `[:name:]` is one unit.
func translateRegex(p string) string {
	var b strings.Builder
	b.Grow(len(p) + len(p)/4)
	put := func(s string) {
		for i := 0; i < len(s); i++ {
			b.WriteRune(rune(s[i]))
		}
	}
	inClass := false
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			n := p[i+1]
			switch {
			case !inClass && n == 'C':
				b.WriteString(`(?s:.)`)
				i += 2
			case !inClass && n == 'Q':
				k := strings.Index(p[i+2:], `\E`)
				if k < 0 {
					// Quoted to the end: close the quote so that it
					// cannot swallow the anchors wrapped around it.
					put(p[i:])
					b.WriteString(`\E`)
					return b.String()
				}
				put(p[i : i+2+k+2])
				i += 2 + k + 2
			default:
				put(p[i : i+2])
				i += 2
			}
		case !inClass && c == '[':
			inClass = true
			j := i + 1
			if j < len(p) && p[j] == '^' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			put(p[i:j])
			i = j
		case inClass && c == '[' && i+1 < len(p) && p[i+1] == ':':
			j := i + 1
			if k := strings.Index(p[i+2:], ":]"); k >= 0 {
				j = i + 2 + k + 2
			}
			put(p[i:j])
			i = j
		case inClass && c == ']':
			inClass = false
			put("]")
			i++
		default:
			b.WriteRune(rune(c))
			i++
		}
	}
	return b.String()
}

// latin1Decode appends b to dst with every byte turned into the UTF-8
// encoding of the rune of the same value.
func latin1Decode(dst, b []byte) []byte {
	for _, c := range b {
		if c < utf8.RuneSelf {
			dst = append(dst, c)
		} else {
			dst = append(dst, 0xC0|c>>6, 0x80|c&0x3F)
		}
	}
	return dst
}

// latin1Encode is the inverse of latin1Decode; ok is false when s holds a
// rune above U+00FF.
func latin1Encode(s string) (b []byte, ok bool) {
	b = make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xFF {
			return nil, false
		}
		b = append(b, byte(r))
	}
	return b, true
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func isASCIIString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
