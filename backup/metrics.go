package backup

import "github.com/prometheus/client_golang/prometheus"

// metrics are the backup manager's Prometheus series, registered on the
// registerer the caller passes (never a global one).
type metrics struct {
	ops     *prometheus.CounterVec
	expired prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, m *Manager) *metrics {
	x := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_backup_operations_total",
			Help: "Backup operations finished, by kind (create, copy, restore) and result (ok, error).",
		}, []string{"op", "result"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_backups_expired_total",
			Help: "Backups deleted because their expire time had passed.",
		}),
	}
	count := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ebbtable_backups",
		Help: "Backups that are ready, in every instance and cluster.",
	}, func() float64 { n, _ := m.reportedTotals(); return float64(n) })
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ebbtable_backup_bytes",
		Help: "Total size of the ready backups' SSTables.",
	}, func() float64 { _, b := m.reportedTotals(); return float64(b) })
	reg.MustRegister(x.ops, x.expired, count, size)
	return x
}

// done counts a finished operation.
func (x *metrics) done(op string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	x.ops.WithLabelValues(op, result).Inc()
}

// totals counts the ready backups and their bytes.
func (m *Manager) totals() (n int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mf := range m.backups {
		n++
		bytes += mf.SizeBytes
	}
	return n, bytes
}

// Totals is what the ebbtable_backups and ebbtable_backup_bytes gauges
// report: ready backups and their bytes.
type Totals func() (n int, bytes int64)

// ReportTotals makes the gauges report t instead of the backups this
// manager keeps on its disk (a cluster node reports its share of the
// cluster's backups, server/clusterbackupmetrics.go); nil goes back.
func (m *Manager) ReportTotals(t Totals) { m.report.Store(&t) }

func (m *Manager) reportedTotals() (int, int64) {
	if t := m.report.Load(); t != nil && *t != nil {
		return (*t)()
	}
	return m.totals()
}

// CountOp counts an operation another part of the server ran (a cluster's
// backups, copies and restores) in ebbtable_backup_operations_total.
func (m *Manager) CountOp(op string, err error) { m.m.done(op, err) }

// CountExpired counts a backup deleted at its expiry by another part of
// the server (a cluster's sweep) in ebbtable_backups_expired_total.
func (m *Manager) CountExpired() { m.m.expired.Inc() }
