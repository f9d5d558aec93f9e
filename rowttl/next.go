package rowttl

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func (j *Job) setNextRun(t time.Time) { j.nextRun.Store(t.UnixNano()) }

// NextRun is when the background loop starts its next run (zero time when
// the loop is not running).
func (j *Job) NextRun() time.Time {
	n := j.nextRun.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

var nextRunDesc = prometheus.NewDesc("ebbtable_ttl_next_run_timestamp_seconds",
	"Unix time at which the row deletion job's next scheduled run starts.", nil, nil)

// nextRun reports NextRun at scrape time.
type nextRun struct{ j *Job }

func nextRunMetric(j *Job) prometheus.Collector { return nextRun{j} }

func (n nextRun) Describe(ch chan<- *prometheus.Desc) { ch <- nextRunDesc }

func (n nextRun) Collect(ch chan<- prometheus.Metric) {
	if v := n.j.nextRun.Load(); v != 0 {
		ch <- prometheus.MustNewConstMetric(nextRunDesc, prometheus.GaugeValue, float64(v)/1e9)
	}
}
