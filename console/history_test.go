package console

import (
	"math"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/prometheus/client_golang/prometheus"
)

// TestHistoryBounded: the history keeps its last Points samples, aligns
// series that come and go (NaN where absent), forgets series that left
// the window, and keeps only ebbtable_* series.
func TestHistoryBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ebbtable_test_gauge", Help: "h"}, []string{"table"})
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "other_gauge", Help: "h"})
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ebbtable_test_seconds", Help: "h"})
	reg.MustRegister(g, other, hist)
	fake := clock.NewFake(time.Unix(1000, 0))
	h := NewHistory(reg, HistoryOptions{Points: 3, Clock: fake})
	for i := range 5 {
		g.WithLabelValues("a").Set(float64(i))
		if i == 3 {
			g.WithLabelValues("b").Set(30)
		}
		if i == 4 {
			g.DeleteLabelValues("b")
		}
		hist.Observe(float64(i))
		h.Sample()
		fake.Advance(10 * time.Second)
	}
	if h.Len() != 3 {
		t.Fatalf("%d samples kept, want 3", h.Len())
	}
	times, ss := h.Select("ebbtable_test_gauge", map[string]string{"table": "a"})
	if len(times) != 3 || times[0] != time.Unix(1020, 0) || times[2] != time.Unix(1040, 0) {
		t.Fatalf("times %v", times)
	}
	if len(ss) != 1 || ss[0].Values[0] != 2 || ss[0].Values[2] != 4 {
		t.Fatalf("series a: %+v", ss)
	}
	_, ss = h.Select("ebbtable_test_gauge", map[string]string{"table": "b"})
	if len(ss) != 1 || !math.IsNaN(ss[0].Values[0]) || ss[0].Values[1] != 30 || !math.IsNaN(ss[0].Values[2]) {
		t.Fatalf("series b: %+v", ss)
	}
	if _, ss = h.Select("other_gauge", nil); len(ss) != 0 {
		t.Fatal("a series outside ebbtable_ was kept")
	}
	if _, ss = h.Select("ebbtable_test_seconds_count", nil); len(ss) != 1 || ss[0].Values[2] != 5 {
		t.Fatalf("histogram count: %+v", ss)
	}
	// Series b leaves the window after three more samples.
	g.DeleteLabelValues("b")
	for range 3 {
		h.Sample()
	}
	if _, ss = h.Select("ebbtable_test_gauge", map[string]string{"table": "b"}); len(ss) != 0 {
		t.Fatalf("series b outlived the window: %+v", ss)
	}
}

// TestHistoryStartStop: the loop samples on the injected clock and stops.
func TestHistoryStartStop(t *testing.T) {
	reg := prometheus.NewRegistry()
	fake := clock.NewFake(time.Unix(0, 0))
	h := NewHistory(reg, HistoryOptions{Interval: time.Second, Clock: fake})
	h.Start()
	testkit.Eventually(t, "the loop's first sample", 5*time.Second, func() (bool, string) {
		return fake.Waiters() > 0 && h.Len() >= 1, ""
	})
	fake.Advance(time.Second)
	testkit.Eventually(t, "a sample after an interval", 5*time.Second, func() (bool, string) { return h.Len() >= 2, "" })
	h.Stop()
}

// TestLinesTransforms: "until" and "ago" turn timestamps into seconds
// relative to each sample, and By splits and sums series.
func TestLinesTransforms(t *testing.T) {
	times := []time.Time{time.Unix(100, 0), time.Unix(110, 0)}
	ss := []Series{
		{Labels: map[string]string{"reason": "age", "family": "f"}, Values: []float64{1, 2}},
		{Labels: map[string]string{"reason": "age", "family": "g"}, Values: []float64{10, math.NaN()}},
		{Labels: map[string]string{"reason": "versions", "family": "f"}, Values: []float64{math.NaN(), 5}},
	}
	ls := linesOf(lineDef{By: "reason"}, times, ss)
	if len(ls) != 2 || ls[0].Label != "age" || *ls[0].Values[0] != 11 || *ls[0].Values[1] != 2 || ls[1].Values[0] != nil || *ls[1].Values[1] != 5 {
		t.Fatalf("by reason: %+v", ls)
	}
	next := []Series{{Labels: map[string]string{}, Values: []float64{160, 160}}}
	ls = linesOf(lineDef{Label: "next", Transform: "until"}, times, next)
	if *ls[0].Values[0] != 60 || *ls[0].Values[1] != 50 {
		t.Fatalf("until: %v %v", *ls[0].Values[0], *ls[0].Values[1])
	}
	ls = linesOf(lineDef{Label: "cut", Transform: "ago"}, times, []Series{{Values: []float64{40, 40}}})
	if *ls[0].Values[0] != 60 || *ls[0].Values[1] != 70 {
		t.Fatalf("ago: %v %v", *ls[0].Values[0], *ls[0].Values[1])
	}
}
