package console

import (
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// History is a bounded in-memory record of the server's own metrics: every
// Interval it gathers the ebbtable_* series of a Prometheus gatherer and
// keeps the last Points samples, so the console plots work with no
// Prometheus. Counters and gauges are kept as they are; a histogram keeps
// its _sum and _count.
type History struct {
	gatherer  prometheus.Gatherer
	clock     clock.Clock
	interval  time.Duration
	points    int
	maxSeries int

	mu      sync.Mutex
	samples []sample // a ring: oldest at next once full
	next    int
	labels  map[string]map[string]string // series key → its labels, name under "__name__"
	seen    map[string]int               // series key → the last sample (count) holding it
	count   int                          // samples taken
	err     error                        // the last gather's error

	stop chan struct{}
	done chan struct{}
}

type sample struct {
	at   time.Time
	vals map[string]float64
}

// HistoryOptions bounds a History.
type HistoryOptions struct {
	// Interval between samples, on Clock. Default 10s.
	Interval time.Duration
	// Points kept. Default 360 (an hour at the default interval).
	Points int
	// MaxSeries kept per sample; further series are dropped. Default 5000.
	MaxSeries int
	Clock     clock.Clock
}

// NewHistory builds a history of gatherer's series. Start begins sampling.
func NewHistory(g prometheus.Gatherer, o HistoryOptions) *History {
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Points <= 0 {
		o.Points = 360
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = 5000
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return &History{gatherer: g, clock: o.Clock, interval: o.Interval, points: o.Points, maxSeries: o.MaxSeries,
		labels: map[string]map[string]string{}, seen: map[string]int{}}
}

// Start samples now and then every interval until Stop.
func (h *History) Start() {
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(h.done)
		for {
			h.Sample()
			select {
			case <-h.stop:
				return
			case <-h.clock.After(h.interval):
			}
		}
	}()
}

// Stop ends sampling and waits for the loop.
func (h *History) Stop() {
	if h.stop == nil {
		return
	}
	close(h.stop)
	<-h.done
	h.stop = nil
}

// Interval is the time between samples.
func (h *History) Interval() time.Duration { return h.interval }

// Window is the time the kept samples may span.
func (h *History) Window() time.Duration { return time.Duration(h.points) * h.interval }

// Sample gathers the metrics once and records them.
func (h *History) Sample() {
	at := h.clock.Now()
	fams, err := h.gatherer.Gather()
	vals := map[string]float64{}
	labels := map[string]map[string]string{}
	add := func(name string, m *dto.Metric, v float64) {
		if len(vals) >= h.maxSeries {
			return
		}
		k, ls := seriesKey(name, m.GetLabel())
		vals[k] = v
		labels[k] = ls
	}
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "ebbtable_") {
			continue
		}
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				add(name+"_sum", m, m.GetHistogram().GetSampleSum())
				add(name+"_count", m, float64(m.GetHistogram().GetSampleCount()))
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	s := sample{at: at, vals: vals}
	if len(h.samples) < h.points {
		h.samples = append(h.samples, s)
	} else {
		h.samples[h.next] = s
		h.next = (h.next + 1) % h.points
	}
	// Keep the labels of the series still in the window.
	h.count++
	for k, ls := range labels {
		h.labels[k] = ls
		h.seen[k] = h.count
	}
	for k, last := range h.seen {
		if last <= h.count-h.points {
			delete(h.seen, k)
			delete(h.labels, k)
		}
	}
}

func seriesKey(name string, lps []*dto.LabelPair) (string, map[string]string) {
	ls := map[string]string{"__name__": name}
	var b strings.Builder
	b.WriteString(name)
	for _, lp := range lps { // client_golang sorts label pairs by name
		ls[lp.GetName()] = lp.GetValue()
		b.WriteString("\xff")
		b.WriteString(lp.GetName())
		b.WriteString("=")
		b.WriteString(lp.GetValue())
	}
	return b.String(), ls
}

// Series is one labelled series over the history's times.
type Series struct {
	Labels map[string]string
	// Values line up with Times; NaN where the series had no value.
	Values []float64
}

// Select returns the times of the kept samples, oldest first, and every
// series named name whose labels include match, ordered by their labels.
func (h *History) Select(name string, match map[string]string) ([]time.Time, []Series) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ordered := make([]sample, 0, len(h.samples))
	ordered = append(ordered, h.samples[h.next:]...)
	ordered = append(ordered, h.samples[:h.next]...)
	times := make([]time.Time, len(ordered))
	for i, s := range ordered {
		times[i] = s.at
	}
	var keys []string
	for k, ls := range h.labels {
		if ls["__name__"] != name {
			continue
		}
		ok := true
		for mk, mv := range match {
			if ls[mk] != mv {
				ok = false
				break
			}
		}
		if ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]Series, 0, len(keys))
	for _, k := range keys {
		vals := make([]float64, len(ordered))
		for i, s := range ordered {
			v, ok := s.vals[k]
			if !ok {
				v = math.NaN()
			}
			vals[i] = v
		}
		out = append(out, Series{Labels: h.labels[k], Values: vals})
	}
	return times, out
}

// Len is the number of samples kept.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.samples)
}

// Err is the last gather's error, if any.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}
