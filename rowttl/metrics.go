package rowttl

import "github.com/prometheus/client_golang/prometheus"

// metrics are the job's Prometheus series, registered on the registerer
// the caller passes.
type metrics struct {
	deleted       *prometheus.CounterVec
	undeletable   *prometheus.GaugeVec
	scanned       prometheus.Counter
	batches       prometheus.Counter
	batchFailures prometheus.Counter
	failures      prometheus.Counter
}

var watermarkDesc = prometheus.NewDesc("ebbtable_ttl_processed_watermark_age_seconds",
	"How far behind the row deletion job is: now minus the time as of which every row its policy had expired has been deleted (tables with a policy, after their first complete run).",
	[]string{"instance", "table"}, nil)

// watermarks computes the watermark age at scrape time.
type watermarks struct{ j *Job }

func (w watermarks) Describe(ch chan<- *prometheus.Desc) { ch <- watermarkDesc }

func (w watermarks) Collect(ch chan<- prometheus.Metric) {
	now := w.j.opts.Clock.Now()
	for _, st := range w.j.Status("") {
		if st.Watermark.IsZero() {
			continue
		}
		ch <- prometheus.MustNewConstMetric(watermarkDesc, prometheus.GaugeValue, max(now.Sub(st.Watermark), 0).Seconds(), st.Instance, st.Table)
	}
}

func newMetrics(reg prometheus.Registerer, j *Job) *metrics {
	m := &metrics{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_ttl_deleted_rows_total",
			Help: "Rows deleted by the row deletion job (expired rows and their interleaved children), by table.",
		}, []string{"instance", "table"}),
		undeletable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_ttl_undeletable_rows",
			Help: "Rows the last run could not delete (a value that is not a timestamp, or a deletion that failed even alone), by table.",
		}, []string{"instance", "table"}),
		scanned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_ttl_scanned_rows_total",
			Help: "Rows the row deletion job has read.",
		}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_ttl_batches_total",
			Help: "Deletion batches (atomic transactions) the row deletion job has committed.",
		}),
		batchFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_ttl_batch_failures_total",
			Help: "Deletion batches that failed and were retried as smaller batches.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_ttl_run_failures_total",
			Help: "Runs that stopped on an error (retried with back-off).",
		}),
	}
	reg.MustRegister(m.deleted, m.undeletable, m.scanned, m.batches, m.batchFailures, m.failures, watermarks{j}, nextRunMetric(j))
	return m
}
