package sqlquery

import (
	"strings"

	"github.com/cloudspannerecosystem/memefish"
	"github.com/cloudspannerecosystem/memefish/token"
)

// callKeywords are reserved words GoogleSQL also names functions with;
// memefish parses them only as keywords.
var callKeywords = map[token.TokenKind]bool{"LEFT": true, "RIGHT": true}

// quoteKeywordCalls quotes LEFT and RIGHT where memefish's lexer sees them
// directly before "(" (a call: a join's LEFT is followed by JOIN or
// OUTER), so that they parse as function names. Error columns after such
// a call on its line are two characters further right. On a lexing error
// the text is returned unchanged for the parser to report.
func quoteKeywordCalls(sql string) string {
	if !strings.Contains(strings.ToUpper(sql), "LEFT") && !strings.Contains(strings.ToUpper(sql), "RIGHT") {
		return sql
	}
	lx := &memefish.Lexer{File: &token.File{Buffer: sql}}
	var quote []token.Token
	var prev token.Token
	for {
		if err := lx.NextToken(); err != nil {
			return sql
		}
		t := lx.Token
		if t.Kind == "(" && callKeywords[prev.Kind] {
			quote = append(quote, prev)
		}
		if t.Kind == token.TokenEOF {
			break
		}
		prev = t
	}
	if len(quote) == 0 {
		return sql
	}
	var b strings.Builder
	last := 0
	for _, t := range quote {
		b.WriteString(sql[last:t.Pos])
		b.WriteString("`" + sql[t.Pos:t.End] + "`")
		last = int(t.End)
	}
	b.WriteString(sql[last:])
	return b.String()
}
