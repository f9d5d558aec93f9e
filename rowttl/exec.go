package rowttl

import (
	"fmt"

	"github.com/ebbtable/ebbtable/table"
)

// Result says what Exec did.
type Result struct {
	Table string
	// Done is one line for people: "added row deletion policy OLDER_THAN(…)".
	Done string
	// Expression is the table's policy after the statement ("" for none).
	Expression string
}

// Exec parses stmt and applies it to a table of instance. A second policy,
// or replacing or dropping a policy that is not there, fails with
// table.ErrPrecondition.
func Exec(eng Schema, instance, stmt string) (Result, error) {
	st, err := Parse(stmt)
	if err != nil {
		return Result{}, err
	}
	return Apply(eng, instance, st)
}

// Apply applies a parsed statement.
func Apply(eng Schema, instance string, st Statement) (Result, error) {
	res := Result{Table: st.Table}
	var m *table.Meta
	var err error
	switch st.Action {
	case AddPolicy:
		m, err = eng.SetRowPolicy(instance, st.Table, table.PolicyAdd, st.Policy.Table())
		res.Done = "added row deletion policy " + st.Policy.Expression()
	case ReplacePolicy:
		m, err = eng.SetRowPolicy(instance, st.Table, table.PolicyReplace, st.Policy.Table())
		res.Done = "replaced row deletion policy with " + st.Policy.Expression()
	case DropPolicy:
		m, err = eng.SetRowPolicy(instance, st.Table, table.PolicyDrop, table.RowPolicy{})
		res.Done = "dropped row deletion policy"
	case SetSeparator:
		m, err = eng.SetInterleaveSeparator(instance, st.Table, []byte(st.Separator))
		res.Done = fmt.Sprintf("set interleave separator %q", st.Separator)
	case DropSeparator:
		m, err = eng.SetInterleaveSeparator(instance, st.Table, nil)
		res.Done = "dropped interleave separator"
	case CreateTable:
		var fams []table.FamilySpec
		for _, f := range st.Families {
			fams = append(fams, table.FamilySpec{Name: f})
		}
		if m, err = eng.CreateTable(instance, st.Table, table.TableSpec{Families: fams}); err != nil {
			return Result{}, err
		}
		res.Done = "created table"
		if st.HasPolicy {
			m, err = eng.SetRowPolicy(instance, st.Table, table.PolicyAdd, st.Policy.Table())
			res.Done += " with row deletion policy " + st.Policy.Expression()
		}
	default:
		return Result{}, fmt.Errorf("%w: DDL: unknown action %d", table.ErrInvalid, st.Action)
	}
	if err != nil {
		return Result{}, err
	}
	if m.RowPolicy != nil {
		res.Expression = FromTable(*m.RowPolicy).Expression()
	}
	return res, nil
}
