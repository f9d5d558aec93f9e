package collector

import "github.com/prometheus/client_golang/prometheus"

// metrics are the collector's Prometheus series, registered on the
// registerer the caller passes (never a global one).
type metrics struct {
	cellsCollected *prometheus.CounterVec
	bytesCollected *prometheus.CounterVec
	cellsExamined  prometheus.Counter
	batches        prometheus.Counter
	failures       prometheus.Counter
	passDuration   prometheus.Histogram
	lastPass       prometheus.Gauge
	debtCells      *prometheus.GaugeVec
	debtBytes      *prometheus.GaugeVec
	debtOldest     *prometheus.GaugeVec
	logicalBytes   *prometheus.GaugeVec
	diskBytes      *prometheus.GaugeVec
	reclaimPending *prometheus.GaugeVec
	reclaimed      *prometheus.CounterVec
	recordsExpired *prometheus.CounterVec
	tablePass      *prometheus.GaugeVec
	tablePasses    *prometheus.CounterVec
	rowsVisited    *prometheus.CounterVec
	agendaRows     *prometheus.GaugeVec
	hiddenVersions *prometheus.GaugeVec
	rangeDeleted   prometheus.Counter
	pilesWaiting   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		cellsCollected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_gc_cells_collected_total",
			Help: "Cells deleted by the garbage collector, by table, family and reason (age, versions, cell-ttl, dropped).",
		}, []string{"instance", "table", "family", "reason"}),
		bytesCollected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_gc_bytes_collected_total",
			Help: "Logical bytes (key and value) deleted by the garbage collector, by table, family and reason.",
		}, []string{"instance", "table", "family", "reason"}),
		cellsExamined: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_gc_cells_examined_total",
			Help: "Cells the garbage collector has looked at.",
		}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_gc_batches_total",
			Help: "Deletion batches the garbage collector has committed.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_gc_pass_failures_total",
			Help: "Passes that stopped on an error (retried with back-off).",
		}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ebbtable_gc_pass_duration_seconds",
			Help:    "How long a full garbage-collection pass took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}),
		lastPass: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ebbtable_gc_last_pass_completed_timestamp_seconds",
			Help: "Unix time at which the last full pass completed.",
		}),
		debtCells: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_gc_expiry_debt_cells",
			Help: "Cells eligible for collection but not yet collected: measured by each pass as it reaches a table, and live by gc status.",
		}, []string{"instance", "table"}),
		debtBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_gc_expiry_debt_bytes",
			Help: "Logical bytes eligible for collection but not yet collected (as the cells gauge).",
		}, []string{"instance", "table"}),
		debtOldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_gc_expiry_debt_oldest_seconds",
			Help: "How long the oldest uncollected eligible cell has been eligible (as the cells gauge; 0 when unknown, as for version-count eligibility).",
		}, []string{"instance", "table"}),
		logicalBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_table_logical_bytes",
			Help: "Logical bytes (keys and values) of the live cells of a table, as of its last full scan.",
		}, []string{"instance", "table"}),
		diskBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_table_disk_bytes",
			Help: "Estimated on-disk bytes of a table, after its last pass.",
		}, []string{"instance", "table"}),
		reclaimPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_gc_reclaim_pending_bytes",
			Help: "Bytes a table's last pass collected without compacting for them (too few): Pebble's own compactions free that space as they rewrite the files.",
		}, []string{"instance", "table"}),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_gc_reclaimed_bytes_total",
			Help: "Disk bytes freed by the compactions that follow GC passes (the data directory before less after, once Pebble deleted the files they made obsolete).",
		}, []string{"instance", "table"}),
		recordsExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_changestream_records_expired_total",
			Help: "Change-stream records dropped because they were older than the table's retention.",
		}, []string{"instance", "table"}),
		tablePass: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_gc_table_pass_duration_seconds",
			Help: "How long the last pass took over a table (sweep and reclaim), on the server's clock.",
		}, []string{"instance", "table"}),
		tablePasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_gc_table_passes_total",
			Help: "Table passes by kind: whole (the table swept) or incremental (only the rows the GC agenda and the timestamp block property named).",
		}, []string{"kind"}),
		rowsVisited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_gc_rows_visited_total",
			Help: "Rows incremental passes judged, by source: agenda (a write or an expiry put them there) or age (a cell aged past a max age).",
		}, []string{"source"}),
		agendaRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_gc_agenda_entries",
			Help: "GC agenda entries of a table after its last pass: due (waiting for the next pass) or later (native expiries still ahead). Counted up to 100,000 each pass.",
		}, []string{"instance", "table", "due"}),
		hiddenVersions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ebbtable_gc_hidden_versions_debt_cells",
			Help: "Versions-eligible (hidden) cells a table's last pass found: collected, or left for the GC leader.",
		}, []string{"instance", "table"}),
		rangeDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ebbtable_gc_cells_range_deleted_total",
			Help: "Collected cells deleted by one range deletion of their whole row.",
		}),
		pilesWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ebbtable_gc_pile_rows_waiting",
			Help: "Rows reads found piling up hidden versions, waiting for the collector's early visit.",
		}),
	}
	reg.MustRegister(m.tablePass, m.pilesWaiting, m.tablePasses, m.rowsVisited, m.agendaRows, m.hiddenVersions, m.rangeDeleted, m.recordsExpired, m.cellsCollected, m.bytesCollected, m.cellsExamined, m.batches, m.failures,
		m.passDuration, m.lastPass, m.debtCells, m.debtBytes, m.debtOldest, m.logicalBytes, m.diskBytes,
		m.reclaimPending, m.reclaimed)
	return m
}
