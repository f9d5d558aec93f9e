// Package cell owns the small data model every layer shares: a cell, a row of
// cells in Bigtable order, and timestamp units. It depends on nothing.
package cell

import "bytes"

// Cell is one version of one column of one row.
//
// Timestamp is microseconds since the Unix epoch (Bigtable's unit), always a
// multiple of 1000 once stored. ExpireAt, when non-zero, is the native per-cell
// expiry in the same unit: the cell is gone once the clock reaches it.
type Cell struct {
	Family    string
	Qualifier []byte
	Timestamp int64
	Value     []byte
	Labels    []string
	ExpireAt  int64
}

// Row is a row key and its cells in Bigtable order: families in the table's
// family order, qualifiers ascending bytewise, timestamps descending.
type Row struct {
	Key   []byte
	Cells []Cell
}

// SameColumn reports whether a and b belong to the same family and qualifier.
func SameColumn(a, b *Cell) bool {
	return a.Family == b.Family && bytes.Equal(a.Qualifier, b.Qualifier)
}

// Columns calls fn once per column of cells (a run of cells that share family
// and qualifier), in order. The slice passed to fn aliases cells.
func Columns(cells []Cell, fn func(col []Cell)) {
	for i := 0; i < len(cells); {
		j := i + 1
		for j < len(cells) && SameColumn(&cells[i], &cells[j]) {
			j++
		}
		fn(cells[i:j])
		i = j
	}
}

// MicrosPerMilli is the granularity Bigtable stores timestamps at.
const MicrosPerMilli = 1000

// MaxTimestamp is the largest timestamp accepted (year 9999, in microseconds).
const MaxTimestamp int64 = 253402300799999000
