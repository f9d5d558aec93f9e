package rowttl

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/table"
)

// TestDDLSpec is the DDL this package reads, as examples, from
// testdata/ddl.txt (its head says the format).
func TestDDLSpec(t *testing.T) {
	const path = "testdata/ddl.txt"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range readBlocks(t, path, string(data)) {
		n++
		if len(b.keys) != 2 || (b.keys[1] != "want" && b.keys[1] != "error") {
			t.Fatalf("%s: a case is an input line (ddl:, interval: or policy:) and a want: or error: line", b.at)
		}
		in, wantErr := b.vals[0], b.keys[1] == "error"
		var got string
		var err error
		switch b.keys[0] {
		case "ddl":
			var st Statement
			if st, err = Parse(in); err == nil {
				got = renderStatement(st)
			}
		case "interval":
			var days int64
			if days, err = IntervalDays(in); err == nil {
				got = strconv.FormatInt(days, 10)
			}
		case "policy":
			var p Policy
			if p, err = ParsePolicy(in); err == nil {
				got = p.Expression()
			}
		default:
			t.Fatalf("%s: unknown input %q", b.at, b.keys[0])
		}
		switch {
		case wantErr && err == nil:
			t.Errorf("%s: %s %q = %s; want an error containing %q", b.at, b.keys[0], in, got, b.vals[1])
		case wantErr && (!errors.Is(err, table.ErrInvalid) || !strings.Contains(err.Error(), b.vals[1])):
			t.Errorf("%s: %s %q: error %v; want one wrapping ErrInvalid containing %q", b.at, b.keys[0], in, err, b.vals[1])
		case !wantErr && err != nil:
			t.Errorf("%s: %s %q: %v", b.at, b.keys[0], in, err)
		case !wantErr && got != b.vals[1]:
			t.Errorf("%s: %s %q\n got  %s\n want %s", b.at, b.keys[0], in, got, b.vals[1])
		}
	}
	if n < 50 {
		t.Fatalf("only %d cases read from %s", n, path)
	}
}

// renderStatement writes a statement as the spec's want: lines do.
func renderStatement(st Statement) string {
	names := map[Action]string{AddPolicy: "add-policy", ReplacePolicy: "replace-policy", DropPolicy: "drop-policy",
		CreateTable: "create-table", SetSeparator: "set-separator", DropSeparator: "drop-separator"}
	s := fmt.Sprintf("%s table=%s", names[st.Action], st.Table)
	if names[st.Action] == "" {
		s = fmt.Sprintf("action-%d table=%s", st.Action, st.Table)
	}
	if len(st.Families) > 0 {
		s += " families=" + strings.Join(st.Families, ",")
	}
	if st.HasPolicy {
		s += " policy=" + st.Policy.Expression()
	}
	if st.Separator != "" {
		s += " separator=" + strconv.Quote(st.Separator)
	}
	if st.Dialect != "" {
		s += " dialect=" + string(st.Dialect)
	}
	return s
}

// block is one case of a spec file: its "key: value" lines in order.
type block struct {
	at         string
	keys, vals []string
}

// readBlocks splits a spec into blocks of "key: value" lines separated by
// blank lines; lines starting with # are comments.
func readBlocks(t *testing.T, path, data string) []block {
	t.Helper()
	var out []block
	var cur *block
	for i, line := range strings.Split(strings.ReplaceAll(data, "\r\n", "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			cur = nil
			continue
		}
		at := fmt.Sprintf("%s:%d", path, i+1)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("%s: want \"key: value\", got %q", at, line)
		}
		if cur == nil {
			out = append(out, block{at: at})
			cur = &out[len(out)-1]
		}
		// One space after the colon is the separator; the rest is the
		// value, unquoted if it is a Go string literal.
		v = strings.TrimPrefix(v, " ")
		if strings.HasPrefix(v, `"`) {
			u, err := strconv.Unquote(v)
			if err != nil {
				t.Fatalf("%s: %v", at, err)
			}
			v = u
		}
		cur.keys, cur.vals = append(cur.keys, k), append(cur.vals, v)
	}
	return out
}
