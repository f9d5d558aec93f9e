package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/table"
)

// splitInstance takes "projects/P/instances/I" apart.
func splitInstance(name string) (project, instance string, ok bool) {
	p := strings.Split(name, "/")
	if len(p) != 4 || p[0] != "projects" || p[2] != "instances" {
		return "", "", false
	}
	return p[1], p[3], true
}

type tableRow struct {
	Ref       *tableRef
	Families  int
	Logical   int64
	Disk      uint64
	DebtCells int64
	LastPass  time.Time
	RowPolicy string
	Stream    time.Duration
}

type instanceRow struct {
	Name          string
	Tables        []tableRow
	Logical       int64
	Disk          uint64
	Project, Inst string
}

type overviewData struct {
	Instances   []instanceRow
	Visibility  string
	GCInterval  time.Duration
	LastPass    collector.PassStats
	NextPass    time.Time
	TTLInterval time.Duration
	NextRun     time.Time
	Samples     int
	SampleEvery time.Duration
	Window      time.Duration
	Started     time.Time
	Replication ReplicationState
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	sts, last := c.opts.Collector.Status("")
	byID := map[string]collector.TableStatus{}
	for _, st := range sts {
		byID[st.Instance+"\x00"+st.Table] = st
	}
	insts := map[string]*instanceRow{}
	for _, m := range c.opts.Engine.Tables("") {
		ir := insts[m.Instance]
		if ir == nil {
			p, i, _ := splitInstance(m.Instance)
			ir = &instanceRow{Name: m.Instance, Project: p, Inst: i}
			insts[m.Instance] = ir
		}
		ref := refOf(m)
		st := byID[m.Instance+"\x00"+m.Name]
		disk, _ := c.opts.Engine.DiskUsage(m)
		row := tableRow{Ref: ref, Families: len(m.Families), Logical: st.LogicalBytes, Disk: disk,
			DebtCells: st.DebtCells, LastPass: st.LastPass}
		if m.RowPolicy != nil {
			row.RowPolicy = rowttl.FromTable(*m.RowPolicy).Expression()
		}
		if m.ChangeStream != nil {
			row.Stream = m.ChangeStream.Retention
		}
		ir.Tables = append(ir.Tables, row)
		ir.Logical += row.Logical
		ir.Disk += row.Disk
	}
	d := overviewData{Visibility: c.opts.Engine.Visibility().String(), GCInterval: c.opts.Collector.Interval(), LastPass: last,
		NextPass: c.opts.Collector.NextPass(), TTLInterval: c.opts.RowTTL.Interval(), NextRun: c.opts.RowTTL.NextRun(),
		Samples: c.hist.Len(), SampleEvery: c.hist.Interval(), Window: c.hist.Window(), Started: c.started,
		Replication: c.opts.Replication(nil)}
	for _, ir := range insts {
		d.Instances = append(d.Instances, *ir)
	}
	sort.Slice(d.Instances, func(i, j int) bool { return d.Instances[i].Name < d.Instances[j].Name })
	c.render(w, http.StatusOK, "overview", page{Title: "Tables", Data: d})
}

func refOf(m *table.Meta) *tableRef {
	p, i, _ := splitInstance(m.Instance)
	return &tableRef{Project: p, Instance: i, Name: m.Name}
}

// lookup finds the table a request's path names, or renders a 404.
func (c *Console) lookup(w http.ResponseWriter, r *http.Request) (*table.Meta, *tableRef, bool) {
	ref := &tableRef{Project: r.PathValue("project"), Instance: r.PathValue("instance"), Name: r.PathValue("table")}
	m, err := c.opts.Engine.Table(ref.InstanceName(), ref.Name)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, table.ErrTableNotFound) {
			status = http.StatusNotFound
		}
		c.fail(w, status, nil, err)
		return nil, nil, false
	}
	return m, ref, true
}

type familyRow struct {
	Name             string
	Rule             string
	Aggregate        string
	ExpiryTimestamps bool
	AgeCutoff        time.Time
}

type tableData struct {
	Meta        *table.Meta
	Created     time.Time
	Families    []familyRow
	GC          collector.TableStatus
	Disk        uint64
	NextPass    time.Time
	GCInterval  time.Duration
	RowPolicy   string
	TTL         *rowttl.TableStatus
	NextRun     time.Time
	Stream      *table.ChangeStream
	StreamSince time.Time
	Backups     []*backup.Manifest
	Replication ReplicationState
	Done        string
}

func (c *Console) tablePage(w http.ResponseWriter, r *http.Request) {
	m, ref, ok := c.lookup(w, r)
	if !ok {
		return
	}
	d := tableData{Meta: m, Created: time.UnixMicro(m.CreatedMicros).UTC(), NextPass: c.opts.Collector.NextPass(),
		GCInterval: c.opts.Collector.Interval(), NextRun: c.opts.RowTTL.NextRun(), Stream: m.ChangeStream,
		Replication: c.opts.Replication(m), Done: r.URL.Query().Get("done")}
	cuts := map[string]time.Time{}
	if cs, err := c.opts.Collector.AgeCutoffs(m.Instance); err == nil {
		for _, a := range cs {
			if a.Table == m.Name {
				cuts[a.Family] = time.UnixMicro(a.Cutoff).UTC()
			}
		}
	}
	for _, f := range m.Families {
		d.Families = append(d.Families, familyRow{Name: f.Name, Rule: f.GC.String(), Aggregate: string(f.Aggregate),
			ExpiryTimestamps: f.ExpiryTimestamps, AgeCutoff: cuts[f.Name]})
	}
	sts, _ := c.opts.Collector.Status(m.Instance)
	for _, st := range sts {
		if st.Table == m.Name {
			d.GC = st
		}
	}
	d.Disk, _ = c.opts.Engine.DiskUsage(m)
	if m.RowPolicy != nil {
		d.RowPolicy = rowttl.FromTable(*m.RowPolicy).Expression()
		for _, st := range c.opts.RowTTL.Status(m.Instance) {
			if st.Table == m.Name {
				d.TTL = &st
			}
		}
	}
	if m.ChangeStream != nil {
		d.StreamSince = time.UnixMicro(m.ChangeStream.EnabledMicros).UTC()
	}
	for _, b := range c.opts.Backups.List(m.Instance, "") {
		if b.SourceTable == m.Instance+"/tables/"+m.Name {
			d.Backups = append(d.Backups, b)
		}
	}
	c.render(w, http.StatusOK, "table", page{Title: m.Name, Table: ref, Tab: "table", Data: d})
}

type gcData struct {
	Plots       []plotData
	SampleEvery time.Duration
	Samples     int
	Window      time.Duration
	HasPolicy   bool
}

func (c *Console) gcPage(w http.ResponseWriter, r *http.Request) {
	m, ref, ok := c.lookup(w, r)
	if !ok {
		return
	}
	c.render(w, http.StatusOK, "gc", page{Title: m.Name + ": GC and TTL", Table: ref, Tab: "gc",
		Data: gcData{Plots: plotsFor(c.hist, m), SampleEvery: c.hist.Interval(), Samples: c.hist.Len(), Window: c.hist.Window(), HasPolicy: m.RowPolicy != nil}})
}

func (c *Console) plotsJSON(w http.ResponseWriter, r *http.Request) {
	m, _, ok := c.lookup(w, r)
	if !ok {
		return
	}
	js, err := plotsJSON(plotsFor(c.hist, m))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(js))
}

// sameOrigin refuses a POST sent from another site's page (a cross-site
// form), which a browser marks with its Origin or Sec-Fetch-Site.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		return strings.TrimPrefix(strings.TrimPrefix(o, "http://"), "https://") == r.Host
	}
	return true
}

// action runs a data-changing action if writes are enabled, then sends the
// browser back to the table page with what it did.
func (c *Console) action(w http.ResponseWriter, r *http.Request, run func(ctx context.Context, m *table.Meta) (string, error)) {
	m, ref, ok := c.lookup(w, r)
	if !ok {
		return
	}
	if !c.opts.Writes {
		c.fail(w, http.StatusForbidden, ref, errors.New("the console is read-only: start the server with --console-writes to enable actions"))
		return
	}
	if !sameOrigin(r) {
		c.fail(w, http.StatusForbidden, ref, errors.New("cross-site request refused"))
		return
	}
	msg, err := run(r.Context(), m)
	if err != nil {
		c.fail(w, http.StatusInternalServerError, ref, err)
		return
	}
	c.hist.Sample() // the plots show the action's effect at once
	http.Redirect(w, r, ref.Path()+"?done="+url.QueryEscape(msg), http.StatusSeeOther)
}

func (c *Console) gcRun(w http.ResponseWriter, r *http.Request) {
	c.action(w, r, func(ctx context.Context, m *table.Meta) (string, error) {
		st, err := c.opts.Collector.RunPass(ctx, collector.Selector{Instance: m.Instance, Table: m.Name})
		if err != nil {
			return "", err
		}
		return "GC pass: examined " + groupDigits(st.Examined) + " cells, collected " + groupDigits(st.Collected) +
			" (" + humanBytes(st.CollectedBytes) + ") in " + fmtDuration(st.Sweep+st.Compaction), nil
	})
}

func (c *Console) ttlRun(w http.ResponseWriter, r *http.Request) {
	c.action(w, r, func(ctx context.Context, m *table.Meta) (string, error) {
		st, err := c.opts.RowTTL.Run(ctx, rowttl.Selector{Instance: m.Instance, Table: m.Name})
		if err != nil {
			return "", err
		}
		return "Row deletion run: scanned " + groupDigits(st.Scanned) + " rows, deleted " + groupDigits(st.Deleted), nil
	})
}
