package replication

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the replication metrics (docs/replication.md).
type metrics struct {
	r       *Replicator
	latency *prometheus.HistogramVec
	applied *prometheus.CounterVec
	// gcShipped and gcApplied count versions-GC deletions (cells) shipped
	// to peers and applied from them (docs/replication.md, "GC across clusters").
	gcShipped *prometheus.CounterVec
	gcApplied *prometheus.CounterVec
}

func newMetrics(r *Replicator) *metrics {
	return &metrics{r: r,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ebbtable_replication_latency_seconds",
			Help:    "Time from a write's commit on its origin cluster to its apply here, by source cluster.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"source"}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_replication_applied_records_total",
			Help: "Records pulled from a peer and applied here, by source cluster.",
		}, []string{"source"}),
		gcShipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_replication_gc_deletes_shipped_total",
			Help: "Cells deleted by this cluster's versions garbage collection (as GC leader) shipped to a peer, by table; counted each time a pull carries them.",
		}, []string{"table"}),
		gcApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebbtable_replication_gc_deletes_applied_total",
			Help: "Cell deletions of the GC leader's versions garbage collection applied here, by source cluster and table.",
		}, []string{"source", "table"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) {
	reg.MustRegister(m.latency, m.applied, m.gcShipped, m.gcApplied, m)
}

// GCShipped and GCApplied are the versions-GC deletion counters (for tests).
func (r *Replicator) GCShipped(table string) prometheus.Counter {
	return r.m.gcShipped.WithLabelValues(table)
}

// GCApplied is the counter of the leader's deletions applied from source.
func (r *Replicator) GCApplied(source, table string) prometheus.Counter {
	return r.m.gcApplied.WithLabelValues(source, table)
}

var divergenceDesc = prometheus.NewDesc("ebbtable_replication_gc_divergence_seconds",
	"Spread of the clusters' age cutoffs for a column family: how far apart in cell time the clusters' age collection stands (cells in that span may exist on some clusters and not others). 0 when they agree.",
	[]string{"table", "family"}, nil)

var maxDelayDesc = prometheus.NewDesc("ebbtable_replication_max_delay_seconds",
	"How far this cluster lags a source cluster: now minus the source's commit time through which every record is applied here.",
	[]string{"source"}, nil)

// Divergence returns, per table family with an age cutoff on at least two
// clusters, the spread max − min of the cutoffs.
func (r *Replicator) Divergence() map[FamilyKey]time.Duration {
	all := map[FamilyKey][]int64{}
	if r.o.AgeCutoffs != nil {
		for _, m := range r.o.Engine.Tables("") {
			for fam, c := range r.o.AgeCutoffs(m) {
				k := FamilyKey{m.Instance, m.Name, fam}
				all[k] = append(all[k], c)
			}
		}
	}
	r.mu.Lock()
	for _, cuts := range r.peerCutoffs {
		for k, c := range cuts {
			all[k] = append(all[k], c)
		}
	}
	r.mu.Unlock()
	out := map[FamilyKey]time.Duration{}
	for k, cs := range all {
		if len(cs) < 2 {
			continue
		}
		lo, hi := cs[0], cs[0]
		for _, c := range cs[1:] {
			lo, hi = min(lo, c), max(hi, c)
		}
		out[k] = time.Duration(hi-lo) * time.Microsecond
	}
	return out
}

// Describe and Collect export the max delay per source, computed when
// scraped so that a stalled link shows a growing delay, and the divergence.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- maxDelayDesc
	ch <- divergenceDesc
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	r := m.r
	peers := r.o.Peers.List()
	for _, p := range peers {
		if d, ok := r.MaxDelay(p.ID); ok {
			ch <- prometheus.MustNewConstMetric(maxDelayDesc, prometheus.GaugeValue, d.Seconds(), p.ID)
		}
	}
	if len(peers) == 0 {
		return
	}
	// Labelled by table and family; the same names in two instances show
	// the larger spread.
	byName := map[[2]string]time.Duration{}
	for k, d := range r.Divergence() {
		n := [2]string{k.Table, k.Family}
		byName[n] = max(byName[n], d)
	}
	for n, d := range byName {
		ch <- prometheus.MustNewConstMetric(divergenceDesc, prometheus.GaugeValue, d.Seconds(), n[0], n[1])
	}
}
