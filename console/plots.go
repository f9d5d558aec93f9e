package console

import (
	"encoding/json"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/table"
)

// A plot draws one or more lines of the history for one table. The plots
// are "expiry at work": how much the collector owes (debt), what it
// collected, how long its passes take and when the next one comes, how far
// its age sweeps reached, and the row deletion job's lag and deletions.
type plotDef struct {
	ID, Title string
	// Unit: "cells", "bytes", "seconds", "rows" (the axis formats it).
	Unit string
	Help string
	// TTL plots only appear for tables with a row deletion policy.
	TTL bool
	// Lines: one entry per metric drawn.
	Lines []lineDef
}

type lineDef struct {
	Metric string
	// Label names the line; By, when set, splits it into one line per
	// value of that label (the label's value becomes the line's name).
	Label string
	By    string
	// Global: the metric has no instance or table label.
	Global bool
	// Transform: "" as is; "until" value − sample time (a timestamp in
	// the future, as seconds to go); "ago" sample time − value.
	Transform string
}

var plotDefs = []plotDef{
	{ID: "debt-cells", Title: "Expiry debt: cells", Unit: "cells",
		Help:  "Cells eligible for collection and not yet collected, as each pass (or gc status) measured them.",
		Lines: []lineDef{{Metric: "ebbtable_gc_expiry_debt_cells", Label: "debt"}}},
	{ID: "debt-bytes", Title: "Expiry debt: bytes", Unit: "bytes",
		Help:  "Logical bytes of the cells in debt.",
		Lines: []lineDef{{Metric: "ebbtable_gc_expiry_debt_bytes", Label: "debt"}}},
	{ID: "debt-oldest", Title: "Expiry debt: oldest", Unit: "seconds",
		Help:  "How long the longest-waiting eligible cell had been eligible.",
		Lines: []lineDef{{Metric: "ebbtable_gc_expiry_debt_oldest_seconds", Label: "oldest"}}},
	{ID: "collected-cells", Title: "Cells collected (since start)", Unit: "cells",
		Help:  "Cells the collector deleted, by reason: a step is a pass at work.",
		Lines: []lineDef{{Metric: "ebbtable_gc_cells_collected_total", By: "reason"}}},
	{ID: "collected-bytes", Title: "Bytes collected (since start)", Unit: "bytes",
		Help:  "Logical bytes the collector deleted, by reason.",
		Lines: []lineDef{{Metric: "ebbtable_gc_bytes_collected_total", By: "reason"}}},
	{ID: "pass-duration", Title: "GC pass duration", Unit: "seconds",
		Help:  "How long the last pass over this table took.",
		Lines: []lineDef{{Metric: "ebbtable_gc_table_pass_duration_seconds", Label: "pass"}}},
	{ID: "next-pass", Title: "Next GC pass in", Unit: "seconds",
		Help:  "Time left until the collector's next scheduled pass.",
		Lines: []lineDef{{Metric: "ebbtable_gc_next_pass_timestamp_seconds", Label: "next pass", Global: true, Transform: "until"}}},
	{ID: "age-cutoff", Title: "Age cutoffs (collected older than)", Unit: "seconds",
		Help:  "Per family with an age rule: cells older than this much have been collected by age on this cluster.",
		Lines: []lineDef{{Metric: "ebbtable_gc_age_cutoff_timestamp_seconds", By: "family", Transform: "ago"}}},
	{ID: "size", Title: "Table size", Unit: "bytes",
		Help:  "Logical bytes of live cells (as of the last full scan) and estimated bytes on disk (SSTables only: the memtable counts once flushed).",
		Lines: []lineDef{{Metric: "ebbtable_table_logical_bytes", Label: "logical"}, {Metric: "ebbtable_table_disk_bytes", Label: "disk"}}},
	{ID: "ttl-watermark", Title: "Row deletion: processed watermark lag", Unit: "seconds", TTL: true,
		Help:  "Now minus the time as of which every row the policy had expired has been deleted.",
		Lines: []lineDef{{Metric: "ebbtable_ttl_processed_watermark_age_seconds", Label: "lag"}}},
	{ID: "ttl-deleted", Title: "Row deletion: rows deleted (since start)", Unit: "rows", TTL: true,
		Help:  "Rows the row deletion job deleted (interleaved children included).",
		Lines: []lineDef{{Metric: "ebbtable_ttl_deleted_rows_total", Label: "deleted"}}},
	{ID: "ttl-next", Title: "Next row deletion run in", Unit: "seconds", TTL: true,
		Help:  "Time left until the row deletion job's next scheduled run.",
		Lines: []lineDef{{Metric: "ebbtable_ttl_next_run_timestamp_seconds", Label: "next run", Global: true, Transform: "until"}}},
}

// plotData is one plot as the page's script draws it with uPlot: X is
// sample times in Unix seconds; each line's values line up with X (null:
// no value then).
type plotData struct {
	ID    string     `json:"id"`
	Title string     `json:"title"`
	Unit  string     `json:"unit"`
	Help  string     `json:"help"`
	X     []float64  `json:"x"`
	Lines []lineData `json:"lines"`
}

type lineData struct {
	Label  string     `json:"label"`
	Values []*float64 `json:"values"`
}

// plotsFor builds the plots of table m from the history.
func plotsFor(h *History, m *table.Meta) []plotData {
	var out []plotData
	for _, def := range plotDefs {
		if def.TTL && m.RowPolicy == nil {
			continue
		}
		pd := plotData{ID: def.ID, Title: def.Title, Unit: def.Unit, Help: def.Help, Lines: []lineData{}}
		for _, ld := range def.Lines {
			match := map[string]string{"instance": m.Instance, "table": m.Name}
			if ld.Global {
				match = nil
			}
			times, series := h.Select(ld.Metric, match)
			if pd.X == nil {
				pd.X = make([]float64, len(times))
				for i, t := range times {
					pd.X[i] = float64(t.UnixMilli()) / 1000
				}
			}
			pd.Lines = append(pd.Lines, linesOf(ld, times, series)...)
		}
		out = append(out, pd)
	}
	return out
}

// linesOf sums series into lines (one, or one per value of ld.By) and
// applies the line's transform.
func linesOf(ld lineDef, times []time.Time, series []Series) []lineData {
	sums := map[string][]float64{}
	for _, s := range series {
		name := ld.Label
		if ld.By != "" {
			name = s.Labels[ld.By]
		}
		acc, ok := sums[name]
		if !ok {
			acc = make([]float64, len(times))
			for i := range acc {
				acc[i] = math.NaN()
			}
			sums[name] = acc
		}
		for i, v := range s.Values {
			switch {
			case math.IsNaN(v):
			case math.IsNaN(acc[i]):
				acc[i] = v
			default:
				acc[i] += v
			}
		}
	}
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []lineData
	for _, n := range names {
		vals := make([]*float64, len(times))
		for i, v := range sums[n] {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			at := float64(times[i].UnixMilli()) / 1000
			switch ld.Transform {
			case "until":
				v = max(v-at, 0)
			case "ago":
				v = max(at-v, 0)
			}
			vals[i] = &v
		}
		out = append(out, lineData{Label: strings.TrimSpace(n), Values: vals})
	}
	return out
}

// plotsJSON encodes plots for the page.
func plotsJSON(ps []plotData) (string, error) {
	b, err := json.Marshal(ps)
	return string(b), err
}
