package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The schedule as the console and Prometheus see it: when the next pass
// starts, and how far each family's age sweeps have reached.

func (c *Collector) setNextPass(t time.Time) { c.nextPass.Store(t.UnixNano()) }

// NextPass is when the background loop starts its next pass (zero time
// when the loop is not running).
func (c *Collector) NextPass() time.Time {
	n := c.nextPass.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

var (
	nextPassDesc = prometheus.NewDesc("ebbtable_gc_next_pass_timestamp_seconds",
		"Unix time at which the garbage collector's next scheduled pass starts.", nil, nil)
	ageCutoffDesc = prometheus.NewDesc("ebbtable_gc_age_cutoff_timestamp_seconds",
		"A family's age cutoff: cells older than this have been collected by age on this cluster (families with an age rule, once swept).",
		[]string{"instance", "table", "family"}, nil)
)

// scheduleMetrics computes the next pass and the age cutoffs at scrape time.
type scheduleMetrics struct{ c *Collector }

func (s scheduleMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- nextPassDesc
	ch <- ageCutoffDesc
}

func (s scheduleMetrics) Collect(ch chan<- prometheus.Metric) {
	if n := s.c.nextPass.Load(); n != 0 {
		ch <- prometheus.MustNewConstMetric(nextPassDesc, prometheus.GaugeValue, float64(n)/1e9)
	}
	cuts, err := s.c.AgeCutoffs("")
	if err != nil {
		ch <- prometheus.NewInvalidMetric(ageCutoffDesc, err)
		return
	}
	for _, a := range cuts {
		ch <- prometheus.MustNewConstMetric(ageCutoffDesc, prometheus.GaugeValue, float64(a.Cutoff)/1e6, a.Instance, a.Table, a.Family)
	}
}

func registerScheduleMetrics(reg prometheus.Registerer, c *Collector) {
	reg.MustRegister(scheduleMetrics{c})
}
