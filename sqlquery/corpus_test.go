package sqlquery_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected results in testdata/sql")

// The corpus in testdata/sql is a spec a reader can scan: each file sets
// up tables on a real engine (Pebble in a temporary directory, a fake
// clock) and runs queries against their expected results. Blocks are
// separated by blank lines:
//
//	table T FAM[:GCRULE] ...          create a table (cbt rule syntax)
//	set T ROW FAM:QUAL@MS=VALUE ...   write cells; MS is milliseconds,
//	                                  VALUE text, or int:N for 8 big-endian
//	                                  bytes; add ;ttl=DUR for a native TTL
//	ddl STATEMENT                     a row deletion policy statement
//	advance DUR                       move the clock
//	view NAME                         a logical view: its query follows
//	query [@p=TYPE:VALUE ...]         a query: SQL, "----", expected rows
//
// Expected results are a header of "name TYPE" columns and one line per
// row, values separated by " | "; or "error: MESSAGE". Rewrite them with
// go test ./sqlquery -run TestCorpus -rewrite.
func TestCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/sql/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runCorpus(t, f) })
	}
}

const inst = "projects/p/instances/i"

type corpusEnv struct {
	eng   *table.Engine
	clk   *clock.Fake
	views map[string]string
}

func (c *corpusEnv) catalog() sqlquery.Catalog {
	return sqlquery.EngineCatalog{Engine: c.eng, Instance: inst, Views: func(n string) (string, bool) {
		q, ok := c.views[n]
		return q, ok
	}}
}

func runCorpus(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	eng, clk := enginetest.Open(t, table.Options{})
	eng.SetRowExpiry(rowttl.RowExpired)
	env := &corpusEnv{eng: eng, clk: clk, views: map[string]string{}}
	blocks := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n\n")
	var out []string
	changed := false
	for _, b := range blocks {
		trimmed := strings.Trim(b, "\n")
		if trimmed == "" {
			continue
		}
		lines := strings.Split(trimmed, "\n")
		var cmd string
		for _, l := range lines {
			if !strings.HasPrefix(l, "#") {
				cmd = l
				break
			}
		}
		if cmd == "" {
			out = append(out, trimmed)
			continue
		}
		fields := strings.Fields(cmd)
		switch fields[0] {
		case "table":
			var fams []table.FamilySpec
			for _, f := range fields[2:] {
				name, rule, _ := strings.Cut(f, ":")
				fs := table.FamilySpec{Name: name}
				if rule != "" {
					if fs.GC, err = gcrule.Parse(rule); err != nil {
						t.Fatalf("%s: %v", cmd, err)
					}
				}
				fams = append(fams, fs)
			}
			if _, err := eng.CreateTable(inst, fields[1], table.TableSpec{Families: fams}); err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
		case "set":
			for _, c := range fields[3:] {
				m, err := parseSet(c)
				if err != nil {
					t.Fatalf("%s: %v", cmd, err)
				}
				if err := eng.MutateRow(inst, fields[1], []byte(fields[2]), []table.Mutation{m}); err != nil {
					t.Fatalf("%s: %v", cmd, err)
				}
			}
		case "ddl":
			if _, err := rowttl.Exec(eng, inst, strings.TrimPrefix(cmd, "ddl ")); err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
		case "advance":
			d, err := time.ParseDuration(fields[1])
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			clk.Advance(d)
		case "view":
			env.views[fields[1]] = strings.Join(lines[indexOf(lines, cmd)+1:], "\n")
		case "query":
			at := indexOf(lines, cmd)
			sep := indexOf(lines, "----")
			if sep < 0 {
				t.Fatalf("query without ----: %s", trimmed)
			}
			sql := strings.Join(lines[at+1:sep], "\n")
			got := env.query(t, fields[1:], sql)
			want := strings.Join(lines[sep+1:], "\n")
			if got != want {
				if !*rewrite {
					t.Errorf("%s\nquery:\n%s\ngot:\n%s\nwant:\n%s", path, sql, got, want)
				}
				changed = true
			}
			trimmed = strings.Join(append(lines[:sep+1:sep+1], got), "\n")
		default:
			t.Fatalf("unknown command %q", cmd)
		}
		out = append(out, trimmed)
	}
	if *rewrite && changed {
		if err := os.WriteFile(path, []byte(strings.Join(out, "\n\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func indexOf(lines []string, s string) int {
	for i, l := range lines {
		if l == s {
			return i
		}
	}
	return -1
}

// parseSet reads FAM:QUAL@MS=VALUE[;ttl=DUR].
func parseSet(s string) (table.Mutation, error) {
	m := table.Mutation{Kind: table.SetCell}
	s, ttl, hasTTL := strings.Cut(s, ";ttl=")
	col, val, ok := strings.Cut(s, "=")
	if !ok {
		return m, fmt.Errorf("no value in %q", s)
	}
	col, ts, ok := strings.Cut(col, "@")
	if !ok {
		return m, fmt.Errorf("no timestamp in %q", s)
	}
	fam, q, ok := strings.Cut(col, ":")
	if !ok {
		return m, fmt.Errorf("no family in %q", s)
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return m, err
	}
	m.Family, m.Qualifier, m.Timestamp = fam, []byte(q), ms*1000
	if n, ok := strings.CutPrefix(val, "int:"); ok {
		i, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return m, err
		}
		m.Value = binary.BigEndian.AppendUint64(nil, uint64(i))
	} else {
		m.Value = []byte(val)
	}
	if hasTTL {
		d, err := time.ParseDuration(ttl)
		if err != nil {
			return m, err
		}
		m.TTLMicros = d.Microseconds()
	}
	return m, nil
}

// parseParam reads @name=TYPE:VALUE (scalars only).
func parseParam(s string) (string, *sqlquery.Type, sqlquery.Value, error) {
	name, rest, _ := strings.Cut(strings.TrimPrefix(s, "@"), "=")
	typ, val, _ := strings.Cut(rest, ":")
	switch typ {
	case "STRING":
		return name, sqlquery.TString, val, nil
	case "BYTES":
		return name, sqlquery.TBytes, []byte(val), nil
	case "INT64":
		n, err := strconv.ParseInt(val, 10, 64)
		return name, sqlquery.TInt64, n, err
	case "FLOAT64":
		f, err := strconv.ParseFloat(val, 64)
		return name, sqlquery.TFloat64, f, err
	case "BOOL":
		return name, sqlquery.TBool, val == "true", nil
	case "TIMESTAMP":
		tm, err := time.Parse(time.RFC3339Nano, val)
		return name, sqlquery.TTimestamp, tm, err
	case "NULLINT64":
		return name, sqlquery.TInt64, nil, nil
	case "ARRAYBYTES":
		var a sqlquery.Array
		for _, p := range strings.Split(val, ",") {
			a = append(a, []byte(p))
		}
		return name, sqlquery.ArrayOf(sqlquery.TBytes), a, nil
	}
	return "", nil, nil, fmt.Errorf("unknown parameter type %q", typ)
}

func (c *corpusEnv) query(t *testing.T, args []string, sql string) string {
	types := map[string]*sqlquery.Type{}
	vals := map[string]sqlquery.Value{}
	for _, a := range args {
		name, typ, v, err := parseParam(a)
		if err != nil {
			t.Fatalf("parameter %s: %v", a, err)
		}
		types[name], vals[name] = typ, v
	}
	plan, err := sqlquery.Prepare(c.catalog(), sql, types)
	if err != nil {
		return "error: " + err.Error()
	}
	var hdr []string
	for _, col := range plan.Columns {
		hdr = append(hdr, col.Name+" "+col.Type.String())
	}
	lines := []string{strings.Join(hdr, " | ")}
	err = plan.Run(context.Background(), c.catalog(), vals, c.clk.Now(), func(row []sqlquery.Value) error {
		parts := make([]string, len(row))
		for i, v := range row {
			parts[i] = sqlquery.Format(v)
		}
		lines = append(lines, strings.Join(parts, " | "))
		return nil
	})
	if err != nil {
		return "error: " + err.Error()
	}
	if plan.Positioned() {
		c.checkResume(t, plan, vals, sql, lines[1:])
	}
	return strings.Join(lines, "\n")
}

// checkResume checks a positioned query's resumption on unchanged data:
// RunFrom gives Run's rows, and resumed from the position after any row
// gives exactly the rows after it.
func (c *corpusEnv) checkResume(t *testing.T, plan *sqlquery.Plan, vals map[string]sqlquery.Value, sql string, want []string) {
	t.Helper()
	format := func(row []sqlquery.Value) string {
		parts := make([]string, len(row))
		for i, v := range row {
			parts[i] = sqlquery.Format(v)
		}
		return strings.Join(parts, " | ")
	}
	run := func(from *sqlquery.Position) ([]string, [][]byte) {
		var rows []string
		var toks [][]byte
		if err := plan.RunFrom(context.Background(), c.catalog(), vals, c.clk.Now(), from, func(at *sqlquery.Position, row []sqlquery.Value) error {
			rows = append(rows, format(row))
			toks = append(toks, at.Encode())
			return nil
		}); err != nil {
			t.Errorf("%s: RunFrom: %v", sql, err)
		}
		return rows, toks
	}
	rows, toks := run(nil)
	if !slices.Equal(rows, want) {
		t.Errorf("%s: RunFrom gave %q, Run %q", sql, rows, want)
		return
	}
	for i, tok := range toks {
		from, err := sqlquery.DecodePosition(tok)
		if err != nil {
			t.Fatal(err)
		}
		if rest, _ := run(from); !slices.Equal(rest, rows[i+1:]) {
			t.Errorf("%s: resumed after row %d: %q, want %q", sql, i, rest, rows[i+1:])
		}
	}
}
