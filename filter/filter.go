// Package filter owns RowFilter evaluation: a model of every Bigtable
// RowFilter kind (Filter), its validation and compilation into a reusable
// Program (Compile), and the pure evaluation of a Program over one row
// (Program.Apply). It knows nothing of gRPC or protos; the server's convert
// package translates the wire RowFilter into a Filter.
//
// Semantics follow the Bigtable RowFilter documentation:
//
//   - Regular expressions are RE2 in raw-byte (Latin-1) mode and must match
//     the whole key, family, qualifier or value. Each byte is one character;
//     `.` does not match '\n' unless the (?s) flag is set; `\C` matches any
//     byte.
//   - Chain feeds each sub-filter's output to the next; Interleave runs every
//     sub-filter on a copy of its input and pools the results in row order,
//     keeping duplicates; Condition runs True (or False) on its input
//     depending on whether Predicate output any cell; a missing branch
//     outputs nothing.
//   - Sink copies the cells that reach it straight to the final output and
//     passes nothing to its parent. It may not appear inside a Condition.
//   - A cell carries at most one label: ApplyLabel replaces any label the
//     cell already has (the last label applied wins, as in the reference
//     emulator).
package filter

import "errors"

// ErrInvalid is wrapped by every error Compile returns for a filter Bigtable
// would reject.
var ErrInvalid = errors.New("filter: invalid row filter")

// Kind says which RowFilter a Filter node is. The zero Kind is PassAll.
type Kind uint8

// The RowFilter kinds, one per case of the Bigtable RowFilter oneof.
const (
	KindPassAll Kind = iota
	KindBlockAll
	KindChain
	KindInterleave
	KindCondition
	KindSink
	KindRowKeyRegex
	KindRowSample
	KindFamilyNameRegex
	KindColumnQualifierRegex
	KindColumnRange
	KindTimestampRange
	KindValueRegex
	KindValueRange
	KindCellsPerRowOffset
	KindCellsPerRowLimit
	KindCellsPerColumnLimit
	KindStripValue
	KindApplyLabel
	KindValueBitmask
	numKinds
)

var kindNames = [numKinds]string{
	KindPassAll:              "pass_all_filter",
	KindBlockAll:             "block_all_filter",
	KindChain:                "chain",
	KindInterleave:           "interleave",
	KindCondition:            "condition",
	KindSink:                 "sink",
	KindRowKeyRegex:          "row_key_regex_filter",
	KindRowSample:            "row_sample_filter",
	KindFamilyNameRegex:      "family_name_regex_filter",
	KindColumnQualifierRegex: "column_qualifier_regex_filter",
	KindColumnRange:          "column_range_filter",
	KindTimestampRange:       "timestamp_range_filter",
	KindValueRegex:           "value_regex_filter",
	KindValueRange:           "value_range_filter",
	KindCellsPerRowOffset:    "cells_per_row_offset_filter",
	KindCellsPerRowLimit:     "cells_per_row_limit_filter",
	KindCellsPerColumnLimit:  "cells_per_column_limit_filter",
	KindStripValue:           "strip_value_transformer",
	KindApplyLabel:           "apply_label_transformer",
	KindValueBitmask:         "value_bitmask_filter",
}

// String returns the name of the RowFilter proto field for k.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "unknown filter kind"
}

// Filter is one node of a RowFilter tree. Only the fields of its Kind are
// read. A nil *Filter passes every cell, wherever it appears, except as the
// True or False branch of a Condition, where nil outputs no cells (as the
// proto's absent branch does).
type Filter struct {
	Kind Kind

	// Filters are the sub-filters of a Chain or an Interleave, in order.
	Filters []*Filter

	// Predicate, True and False are the parts of a Condition.
	Predicate, True, False *Filter

	// Regex is the RE2 pattern, as raw bytes, of RowKeyRegex,
	// FamilyNameRegex, ColumnQualifierRegex and ValueRegex.
	Regex string

	// Family is the column family of a ColumnRange.
	Family string

	// Start and End bound the qualifiers of a ColumnRange or the values of a
	// ValueRange. An unbounded Start is the empty string, inclusive; an
	// unbounded End is infinite.
	Start, End Bound

	// StartMicros (inclusive) and EndMicros (exclusive) bound the
	// timestamps of a TimestampRange; EndMicros 0 means no upper bound.
	StartMicros, EndMicros int64

	// Probability is the chance in (0, 1) that RowSample keeps a row.
	Probability float64

	// N is the count of CellsPerRowOffset, CellsPerRowLimit and
	// CellsPerColumnLimit.
	N int64

	// Label is the label of ApplyLabel: 1 to 15 characters of [a-z0-9-].
	Label string

	// Mask is the bitmask of ValueBitmask: a value matches when it has the
	// same length and (value & Mask) == Mask.
	Mask []byte
}

// BoundKind says whether one end of a range is unbounded, inclusive or
// exclusive.
type BoundKind uint8

// The kinds of range bound.
const (
	Unbounded BoundKind = iota
	Closed
	Open
)

// Bound is one end of a qualifier or value range.
type Bound struct {
	Kind  BoundKind
	Value []byte
}

// ClosedBound returns an inclusive bound at v.
func ClosedBound(v []byte) Bound { return Bound{Kind: Closed, Value: v} }

// OpenBound returns an exclusive bound at v.
func OpenBound(v []byte) Bound { return Bound{Kind: Open, Value: v} }

// PassAll returns a filter that passes every cell.
func PassAll() *Filter { return &Filter{Kind: KindPassAll} }

// BlockAll returns a filter that passes no cell.
func BlockAll() *Filter { return &Filter{Kind: KindBlockAll} }

// Chain returns a filter that feeds each of fs the output of the previous one.
func Chain(fs ...*Filter) *Filter { return &Filter{Kind: KindChain, Filters: fs} }

// Interleave returns a filter that runs each of fs on its input and pools
// their outputs in row order, keeping duplicates.
func Interleave(fs ...*Filter) *Filter { return &Filter{Kind: KindInterleave, Filters: fs} }

// Condition returns a filter that runs t on its input if pred outputs any
// cell, and f otherwise. A nil t or f outputs nothing.
func Condition(pred, t, f *Filter) *Filter {
	return &Filter{Kind: KindCondition, Predicate: pred, True: t, False: f}
}

// Sink returns a filter that sends its input to the final output and nothing
// to its parent.
func Sink() *Filter { return &Filter{Kind: KindSink} }

// RowKeyRegex returns a filter that passes its input when the row key fully
// matches pattern, and nothing otherwise.
func RowKeyRegex(pattern string) *Filter { return &Filter{Kind: KindRowKeyRegex, Regex: pattern} }

// RowSample returns a filter that passes its input with probability p.
func RowSample(p float64) *Filter { return &Filter{Kind: KindRowSample, Probability: p} }

// FamilyNameRegex returns a filter that passes cells whose family fully
// matches pattern.
func FamilyNameRegex(pattern string) *Filter {
	return &Filter{Kind: KindFamilyNameRegex, Regex: pattern}
}

// ColumnQualifierRegex returns a filter that passes cells whose qualifier
// fully matches pattern.
func ColumnQualifierRegex(pattern string) *Filter {
	return &Filter{Kind: KindColumnQualifierRegex, Regex: pattern}
}

// ColumnRange returns a filter that passes cells of family whose qualifier
// lies between start and end.
func ColumnRange(family string, start, end Bound) *Filter {
	return &Filter{Kind: KindColumnRange, Family: family, Start: start, End: end}
}

// TimestampRange returns a filter that passes cells with a timestamp in
// [start, end); end 0 means no upper bound.
func TimestampRange(start, end int64) *Filter {
	return &Filter{Kind: KindTimestampRange, StartMicros: start, EndMicros: end}
}

// ValueRegex returns a filter that passes cells whose value fully matches
// pattern.
func ValueRegex(pattern string) *Filter { return &Filter{Kind: KindValueRegex, Regex: pattern} }

// ValueRange returns a filter that passes cells whose value lies between
// start and end.
func ValueRange(start, end Bound) *Filter {
	return &Filter{Kind: KindValueRange, Start: start, End: end}
}

// CellsPerRowOffset returns a filter that skips the first n cells of its input.
func CellsPerRowOffset(n int64) *Filter { return &Filter{Kind: KindCellsPerRowOffset, N: n} }

// CellsPerRowLimit returns a filter that passes the first n cells of its input.
func CellsPerRowLimit(n int64) *Filter { return &Filter{Kind: KindCellsPerRowLimit, N: n} }

// CellsPerColumnLimit returns a filter that passes the first n cells of each
// column of its input.
func CellsPerColumnLimit(n int64) *Filter { return &Filter{Kind: KindCellsPerColumnLimit, N: n} }

// StripValue returns a filter that replaces every value with the empty value.
func StripValue() *Filter { return &Filter{Kind: KindStripValue} }

// ApplyLabel returns a filter that sets the label of every cell to label.
func ApplyLabel(label string) *Filter { return &Filter{Kind: KindApplyLabel, Label: label} }

// ValueBitmask returns a filter that passes cells whose value has the length
// of mask and every bit of mask set.
func ValueBitmask(mask []byte) *Filter { return &Filter{Kind: KindValueBitmask, Mask: mask} }
