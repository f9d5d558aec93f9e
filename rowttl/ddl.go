package rowttl

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cloudspannerecosystem/memefish"
	"github.com/cloudspannerecosystem/memefish/ast"
	"github.com/ebbtable/ebbtable/table"
)

// Action is what a DDL statement does.
type Action int

// The actions.
const (
	// AddPolicy adds a policy (GoogleSQL ADD ROW DELETION POLICY,
	// PostgreSQL ADD TTL); refused if the table has one.
	AddPolicy Action = iota + 1
	// ReplacePolicy replaces the policy (REPLACE ROW DELETION POLICY,
	// ALTER TTL); refused if the table has none.
	ReplacePolicy
	// DropPolicy drops it (DROP ROW DELETION POLICY, DROP TTL).
	DropPolicy
	// CreateTable creates a table whose families are those of its
	// family:qualifier columns, with its ROW DELETION POLICY if given.
	CreateTable
	// SetSeparator declares the table's interleave separator
	// (ALTER TABLE t SET INTERLEAVE SEPARATOR '#').
	SetSeparator
	// DropSeparator removes it (ALTER TABLE t DROP INTERLEAVE SEPARATOR).
	DropSeparator
)

// Dialect is the SQL dialect a statement was written in.
type Dialect string

// The dialects.
const (
	GoogleSQL  Dialect = "googlesql"
	PostgreSQL Dialect = "postgresql"
)

// Statement is one parsed DDL statement.
type Statement struct {
	Dialect Dialect
	Action  Action
	Table   string
	// Policy for AddPolicy and ReplacePolicy; for CreateTable when HasPolicy.
	Policy    Policy
	HasPolicy bool
	// Families of CreateTable, in column order, each once.
	Families []string
	// Separator for SetSeparator.
	Separator string
}

// handWritten recognises the statements the hand-written parser takes: the
// PostgreSQL TTL clauses and ebbtable's interleave separator.
var handWritten = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+("(?:[^"]|"")*"|[^\s"]+)\s+(ADD\s+TTL|ALTER\s+TTL|DROP\s+TTL|SET\s+INTERLEAVE|DROP\s+INTERLEAVE)\b`)

// Parse parses one DDL statement in either dialect. GoogleSQL goes through
// memefish; the PostgreSQL TTL clauses and the interleave separator through
// a small hand-written parser. Errors wrap table.ErrInvalid.
func Parse(stmt string) (Statement, error) {
	if len(stmt) > 64<<10 {
		return Statement{}, fmt.Errorf("%w: DDL statement longer than 64 KiB", table.ErrInvalid)
	}
	if handWritten.MatchString(stmt) {
		return parseHand(stmt)
	}
	return parseGoogleSQL(stmt)
}

// memefishDDL calls memefish, turning its panics into errors: v0.8.1 panics
// on some malformed input (the fuzz test found `0"\0`, a slice out of range
// in its error recovery).
func memefishDDL(stmt string) (node ast.DDL, err error) {
	defer func() {
		if r := recover(); r != nil {
			node, err = nil, fmt.Errorf("cannot parse the statement (parser failure: %v)", r)
		}
	}()
	return memefish.ParseDDL("", stmt)
}

func parseGoogleSQL(stmt string) (Statement, error) {
	node, err := memefishDDL(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(stmt), ";")))
	if err != nil {
		return Statement{}, fmt.Errorf("%w: DDL: %s", table.ErrInvalid, firstLine(err.Error()))
	}
	st := Statement{Dialect: GoogleSQL}
	switch n := node.(type) {
	case *ast.AlterTable:
		if st.Table, err = tableName(n.Name); err != nil {
			return Statement{}, err
		}
		switch a := n.TableAlteration.(type) {
		case *ast.AddRowDeletionPolicy:
			st.Action = AddPolicy
			st.Policy, err = googlePolicy(a.RowDeletionPolicy.ColumnName, a.RowDeletionPolicy.NumDays)
		case *ast.ReplaceRowDeletionPolicy:
			st.Action = ReplacePolicy
			st.Policy, err = googlePolicy(a.RowDeletionPolicy.ColumnName, a.RowDeletionPolicy.NumDays)
		case *ast.DropRowDeletionPolicy:
			st.Action = DropPolicy
		default:
			return Statement{}, fmt.Errorf("%w: DDL: only ADD, REPLACE and DROP ROW DELETION POLICY are supported in ALTER TABLE", table.ErrInvalid)
		}
		if err != nil {
			return Statement{}, err
		}
		st.HasPolicy = st.Action != DropPolicy
		return st, nil
	case *ast.CreateTable:
		st.Action = CreateTable
		if st.Table, err = tableName(n.Name); err != nil {
			return Statement{}, err
		}
		seen := map[string]bool{}
		for _, c := range n.Columns {
			fam, _, err := parseColumn(c.Name.Name)
			if err != nil {
				return Statement{}, fmt.Errorf("%w: CREATE TABLE column %q: columns are written family:qualifier", table.ErrInvalid, c.Name.Name)
			}
			if !seen[fam] {
				seen[fam] = true
				st.Families = append(st.Families, fam)
			}
		}
		if p := n.RowDeletionPolicy; p != nil {
			if st.Policy, err = googlePolicy(p.RowDeletionPolicy.ColumnName, p.RowDeletionPolicy.NumDays); err != nil {
				return Statement{}, err
			}
			st.HasPolicy = true
			if !seen[st.Policy.Family] {
				return Statement{}, fmt.Errorf("%w: CREATE TABLE: the row deletion policy's column %s is not among the table's columns", table.ErrInvalid, st.Policy.Column())
			}
		}
		return st, nil
	}
	return Statement{}, fmt.Errorf("%w: DDL: unsupported statement (supported: CREATE TABLE, ALTER TABLE … ADD/REPLACE/DROP ROW DELETION POLICY, ADD/ALTER/DROP TTL, SET/DROP INTERLEAVE SEPARATOR)", table.ErrInvalid)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func tableName(p *ast.Path) (string, error) {
	if len(p.Idents) != 1 {
		return "", fmt.Errorf("%w: DDL: table name %q must be one identifier", table.ErrInvalid, p.SQL())
	}
	return p.Idents[0].Name, nil
}

func googlePolicy(col *ast.Ident, days *ast.IntLiteral) (Policy, error) {
	fam, q, err := parseColumn(col.Name)
	if err != nil {
		return Policy{}, err
	}
	v := days.Value
	if days.Base == 16 {
		v = strings.TrimPrefix(strings.TrimPrefix(v, "0x"), "0X")
	}
	n, err := strconv.ParseInt(v, days.Base, 64)
	if err != nil || n < 0 || n > MaxDays {
		return Policy{}, fmt.Errorf("%w: INTERVAL %s DAY: the number of days must be between 0 and %d", table.ErrInvalid, days.Value, MaxDays)
	}
	return Policy{Family: fam, Qualifier: q, Days: n}, nil
}

// ParsePolicy parses a policy on its own, as `ttl plan` takes it: GoogleSQL
// OLDER_THAN(col, INTERVAL n DAY) (parenthesised or not) or PostgreSQL
// INTERVAL '…' ON col.
func ParsePolicy(s string) (Policy, error) {
	t := strings.TrimSpace(s)
	if len(t) >= 8 && strings.EqualFold(t[:8], "INTERVAL") && strings.HasPrefix(strings.TrimSpace(t[8:]), "'") {
		st, err := parseHand("ALTER TABLE t ADD TTL " + t)
		return st.Policy, err
	}
	if !strings.HasPrefix(t, "(") {
		t = "(" + t + ")"
	}
	st, err := parseGoogleSQL("ALTER TABLE t ADD ROW DELETION POLICY " + t)
	return st.Policy, err
}
