package console

import (
	"net/http"
	"strings"

	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/rowttl"
)

// Dry runs: what a GC rule or a row deletion policy would delete now, were
// it applied, computed by the collector's and the row deletion job's own
// plans (the ones behind ebbtable gc plan and ttl plan). Nothing changes.

type dryRunData struct {
	Families []familyRow
	Family   string
	Rule     string
	// RuleText is the rule as cbt writes it, once parsed.
	RuleText string
	GC       *collector.PlanResult
	GCErr    string

	Policy     string
	Current    string
	TTL        *rowttl.PlanResult
	TTLErr     string
	PolicyHint string
}

func (c *Console) dryRunPage(w http.ResponseWriter, r *http.Request) {
	m, ref, ok := c.lookup(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	d := dryRunData{Family: q.Get("family"), Rule: q.Get("rule"), Policy: q.Get("policy")}
	for _, f := range m.Families {
		d.Families = append(d.Families, familyRow{Name: f.Name, Rule: f.GC.String()})
	}
	if d.Family == "" && len(m.Families) > 0 {
		d.Family = m.Families[0].Name
	}
	if m.RowPolicy != nil {
		d.Current = rowttl.FromTable(*m.RowPolicy).Expression()
	}
	d.PolicyHint = "OLDER_THAN(`cf:ts`, INTERVAL 30 DAY)"
	if len(m.Families) > 0 {
		d.PolicyHint = "OLDER_THAN(`" + m.Families[0].Name + ":ts`, INTERVAL 30 DAY)"
	}
	if strings.TrimSpace(d.Rule) != "" {
		rule, err := gcrule.Parse(d.Rule)
		if err == nil {
			d.RuleText = rule.String()
			var pr collector.PlanResult
			pr, err = c.opts.Collector.Plan(r.Context(), m.Instance, m.Name, d.Family, rule)
			if err == nil {
				d.GC = &pr
			}
		}
		if err != nil {
			d.GCErr = err.Error()
		}
	}
	if strings.TrimSpace(d.Policy) != "" {
		pol, err := rowttl.ParsePolicy(d.Policy)
		if err == nil {
			var pr rowttl.PlanResult
			pr, err = c.opts.RowTTL.Plan(r.Context(), m.Instance, m.Name, pol)
			if err == nil {
				d.TTL = &pr
			}
		}
		if err != nil {
			d.TTLErr = err.Error()
		}
	}
	c.render(w, http.StatusOK, "dryrun", page{Title: m.Name + ": dry run", Table: ref, Tab: "dryrun", Data: d})
}
