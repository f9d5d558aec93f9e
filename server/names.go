package server

import (
	"fmt"
	"strings"
)

// tableRef is a parsed table resource name.
type tableRef struct {
	instance string // projects/P/instances/I
	table    string
}

func (r tableRef) name() string { return r.instance + "/tables/" + r.table }

// parseInstance checks "projects/P/instances/I".
func parseInstance(name string) (string, error) {
	// Without strings.Split: every data request checks its table's name,
	// and the split's slice was one more allocation per request.
	rest, okP := strings.CutPrefix(name, "projects/")
	proj, inst, okI := strings.Cut(rest, "/instances/")
	if !okP || !okI || proj == "" || inst == "" || strings.Contains(proj, "/") || strings.Contains(inst, "/") {
		return "", fmt.Errorf("%w: %q is not an instance name (projects/PROJECT/instances/INSTANCE)", errInvalid, name)
	}
	return name, nil
}

// parseTable checks "projects/P/instances/I/tables/T".
func parseTable(name string) (tableRef, error) {
	i := strings.Index(name, "/tables/")
	if i < 0 {
		return tableRef{}, fmt.Errorf("%w: %q is not a table name (projects/PROJECT/instances/INSTANCE/tables/TABLE)", errInvalid, name)
	}
	inst, err := parseInstance(name[:i])
	if err != nil {
		return tableRef{}, err
	}
	t := name[i+len("/tables/"):]
	if t == "" || strings.Contains(t, "/") {
		return tableRef{}, fmt.Errorf("%w: %q is not a table name", errInvalid, name)
	}
	return tableRef{instance: inst, table: t}, nil
}

// tableOf reads the table of a data request, which may name it directly or
// through an authorized view.
func tableOf(tableName, viewName string) (tableRef, error) {
	if tableName == "" && viewName != "" {
		i := strings.Index(viewName, "/authorizedViews/")
		if i < 0 {
			return tableRef{}, fmt.Errorf("%w: %q is not an authorized view name", errInvalid, viewName)
		}
		tableName = viewName[:i]
	}
	if tableName == "" {
		return tableRef{}, fmt.Errorf("%w: table_name is required", errInvalid)
	}
	return parseTable(tableName)
}
