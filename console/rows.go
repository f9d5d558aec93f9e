package console

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// The row browser: rows by prefix, each cell with its native expiry, and
// optionally the cells readers no longer see but the collector has not yet
// removed, marked with why they are hidden.

const (
	defaultRowLimit = 20
	maxRowLimit     = 500
	valueShown      = 120 // bytes of a value shown
)

type cellView struct {
	Column    string
	Timestamp time.Time
	Value     string
	ValueLen  int
	Expires   time.Time
	// Hidden is why readers no longer see the cell ("" when they do).
	Hidden string
	// Eligible is why the collector will remove a cell readers still see
	// (the until-collected visibility).
	Eligible string
}

type rowView struct {
	Key   string
	Cells []cellView
}

type rowsData struct {
	Prefix, After string
	Limit         int
	Hidden        bool
	Rows          []rowView
	// Next is the key to continue after, when the page was full.
	Next     string
	Now      time.Time
	Families []string
}

var errEnough = errors.New("enough rows")

func (c *Console) rowsPage(w http.ResponseWriter, r *http.Request) {
	m, ref, ok := c.lookup(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	d := rowsData{Prefix: q.Get("prefix"), After: q.Get("after"), Limit: defaultRowLimit, Hidden: q.Get("hidden") != "",
		Now: c.opts.Clock.Now().UTC()}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			c.fail(w, http.StatusBadRequest, ref, errors.New("limit must be a positive number"))
			return
		}
		d.Limit = min(n, maxRowLimit)
	}
	for _, f := range m.Families {
		d.Families = append(d.Families, f.Name)
	}
	rng := prefixRange([]byte(d.Prefix), []byte(d.After))
	var err error
	if d.Hidden {
		d.Rows, d.Next, err = c.rawRows(r, m, rng, d.Limit)
	} else {
		d.Rows, d.Next, err = c.visibleRows(r, m, rng, d.Limit)
	}
	if err != nil {
		c.fail(w, http.StatusInternalServerError, ref, err)
		return
	}
	c.render(w, http.StatusOK, "rows", page{Title: m.Name + ": rows", Table: ref, Tab: "rows", Data: d})
}

// prefixRange is the rows starting with prefix, after key after (if set).
func prefixRange(prefix, after []byte) table.RowRange {
	rr := table.RowRange{Start: prefix, End: prefixEnd(prefix)}
	if len(after) > 0 && bytes.Compare(after, prefix) >= 0 {
		rr.Start, rr.StartOpen = after, true
	}
	if len(rr.Start) == 0 {
		rr.Start = nil
	}
	return rr
}

// prefixEnd is the first key past every key starting with prefix (nil: none).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func viewCell(c cell.Cell) cellView {
	v := cellView{Column: c.Family + ":" + printable(c.Qualifier), Timestamp: time.UnixMicro(c.Timestamp).UTC(),
		Value: printableMax(c.Value, valueShown), ValueLen: len(c.Value)}
	if c.ExpireAt != 0 {
		v.Expires = time.UnixMicro(c.ExpireAt).UTC()
	}
	return v
}

// visibleRows reads rows as a client would.
func (c *Console) visibleRows(r *http.Request, m *table.Meta, rng table.RowRange, limit int) ([]rowView, string, error) {
	var rows []rowView
	next := ""
	err := c.opts.Engine.ReadRows(r.Context(), m.Instance, m.Name, table.ReadRequest{Ranges: []table.RowRange{rng}, Limit: int64(limit) + 1},
		func(row cell.Row) error {
			if len(rows) == limit {
				next = string(rows[len(rows)-1].Key)
				return errEnough
			}
			rv := rowView{Key: printable(row.Key)}
			for _, cl := range row.Cells {
				rv.Cells = append(rv.Cells, viewCell(cl))
			}
			rows = append(rows, rv)
			return nil
		})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return rows, next, err
}

// rawRows reads every stored cell of the rows, then marks the ones a read
// of the same rows does not return, with the reason.
func (c *Console) rawRows(r *http.Request, m *table.Meta, rng table.RowRange, limit int) ([]rowView, string, error) {
	type rawRow struct {
		key   []byte
		cells []cell.Cell
	}
	var raws []rawRow
	next := ""
	start := rng.Start
	err := c.opts.Engine.RawCells(m, start, rng.End, func(rc table.RawCell) error {
		if rng.StartOpen && bytes.Equal(rc.Row, rng.Start) {
			return nil
		}
		if len(raws) == 0 || !bytes.Equal(raws[len(raws)-1].key, rc.Row) {
			if len(raws) == limit {
				next = string(raws[len(raws)-1].key)
				return errEnough
			}
			raws = append(raws, rawRow{key: rc.Row})
		}
		last := &raws[len(raws)-1]
		last.cells = append(last.cells, cell.Cell{Family: rc.Family, Qualifier: rc.Qualifier, Timestamp: rc.Timestamp, Value: rc.Value, ExpireAt: rc.ExpireAt})
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	if err != nil || len(raws) == 0 {
		return nil, next, err
	}
	keys := make([][]byte, len(raws))
	for i, rr := range raws {
		keys[i] = rr.key
	}
	seen := map[string]bool{}
	visibleRow := map[string]bool{}
	err = c.opts.Engine.ReadRows(r.Context(), m.Instance, m.Name, table.ReadRequest{Keys: keys}, func(row cell.Row) error {
		visibleRow[string(row.Key)] = true
		for _, cl := range row.Cells {
			seen[cellID(row.Key, cl)] = true
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	now := clock.Micros(c.opts.Clock.Now())
	var rows []rowView
	for _, rr := range raws {
		rv := rowView{Key: printable(rr.key)}
		why := hiddenReasons(m, rr.cells, now)
		for i, cl := range rr.cells {
			v := viewCell(cl)
			if seen[cellID(rr.key, cl)] {
				v.Eligible = why[i]
			} else {
				switch {
				case why[i] != "":
					v.Hidden = why[i]
				case !visibleRow[string(rr.key)] && m.RowPolicy != nil:
					v.Hidden = "row deletion policy"
				default:
					v.Hidden = "hidden"
				}
			}
			rv.Cells = append(rv.Cells, v)
		}
		rows = append(rows, rv)
	}
	return rows, next, nil
}

func cellID(row []byte, c cell.Cell) string {
	return string(row) + "\x00" + c.Family + "\x00" + string(c.Qualifier) + "\x00" + strconv.FormatInt(c.Timestamp, 10)
}

// hiddenReasons judges each stored cell as the collector would now: the
// family's rule (age, versions) or the cell's own expiry.
func hiddenReasons(m *table.Meta, cells []cell.Cell, now int64) []string {
	out := make([]string, len(cells))
	var reasons []table.Reason
	i := 0
	cell.Columns(cells, func(col []cell.Cell) {
		f, ok := m.Family(col[0].Family)
		ts, exp := make([]int64, len(col)), make([]int64, len(col))
		for j, cl := range col {
			ts[j], exp[j] = cl.Timestamp, cl.ExpireAt
		}
		if ok {
			reasons = table.ColumnEligibility(f.GC, ts, exp, now, reasons)
			for j, r := range reasons {
				if r != table.Keep {
					out[i+j] = "GC: " + r.String()
				}
			}
		}
		i += len(col)
	})
	return out
}
