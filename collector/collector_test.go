package collector

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const inst = "projects/p/instances/i"

type env struct {
	eng   *table.Engine
	col   *Collector
	clock *clock.Fake
	reg   *prometheus.Registry
}

func newEnv(t *testing.T, vis table.Visibility, opts Options) *env {
	t.Helper()
	eng, fake := enginetest.Open(t, table.Options{Visibility: vis})
	reg := prometheus.NewRegistry()
	opts.Clock, opts.Registerer = fake, reg
	col, err := New(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	eng.SetSchemaHook(col.BeforeRuleChange)
	eng.SetSchemaGate(col.RuleChangeGate)
	t.Cleanup(func() {
		col.Stop()
		eng.Close()
	})
	return &env{eng: eng, col: col, clock: fake, reg: reg}
}

func (e *env) now() int64 { return clock.MillisTruncated(e.clock.Now()) }

func (e *env) create(t *testing.T, name string, fams map[string]string) {
	t.Helper()
	var spec table.TableSpec
	for f, r := range fams {
		spec.Families = append(spec.Families, table.FamilySpec{Name: f, GC: gcrule.MustParse(r)})
	}
	if _, err := e.eng.CreateTable(inst, name, spec); err != nil {
		t.Fatal(err)
	}
}

func (e *env) set(t *testing.T, tbl, row, fam, qual string, ts int64, exp int64) {
	t.Helper()
	err := e.eng.MutateRow(inst, tbl, []byte(row), []table.Mutation{{Kind: table.SetCell, Family: fam, Qualifier: []byte(qual), Timestamp: ts, Value: []byte("value-" + row), ExpireAt: exp}})
	if err != nil {
		t.Fatal(err)
	}
}

// stored counts the cells physically in storage for a table, ignoring
// visibility: what the collector has not removed.
func (e *env) stored(t *testing.T, tbl string) int {
	t.Helper()
	m, err := e.eng.Table(inst, tbl)
	if err != nil {
		t.Fatal(err)
	}
	it, err := e.eng.RawIter(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

func (e *env) visible(t *testing.T, tbl string) []string {
	t.Helper()
	var out []string
	err := e.eng.ReadRows(context.Background(), inst, tbl, table.ReadRequest{}, func(r cell.Row) error {
		for _, c := range r.Cells {
			out = append(out, fmt.Sprintf("%s/%s:%s@%d", r.Key, c.Family, c.Qualifier, c.Timestamp/1000))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) pass(t *testing.T) PassStats {
	t.Helper()
	st, err := e.col.RunPass(context.Background(), Selector{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSeedExamples runs the GC overview's examples through a real pass.
func TestSeedExamples(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	day := int64(24 * time.Hour / time.Microsecond)
	e.create(t, "t", map[string]string{
		"profile": "maxversions=5",               // keep the newest five profile versions
		"keep1":   "maxage=30d && maxversions=1", // older than 30 days, but always keep one
		"views":   "maxversions=2 || maxage=30d", // at most two page views, only within 30 days
	})
	now := e.now()
	for i := int64(0); i < 8; i++ {
		e.set(t, "t", "r", "profile", "p", now-i*1000, 0)
	}
	for _, age := range []int64{40, 35, 31} {
		e.set(t, "t", "r", "keep1", "k", now-age*day, 0)
	}
	e.set(t, "t", "r", "keep1", "young", now-day, 0)
	e.set(t, "t", "r", "keep1", "young", now-40*day, 0)
	for _, age := range []int64{1, 2, 3} {
		e.set(t, "t", "r", "views", "v", now-age*day, 0)
	}
	e.set(t, "t", "r", "views", "old", now-31*day, 0)

	st := e.pass(t)
	want := 3 + 2 + 1 + 1 + 1 // profile 3, keep1:k 2, keep1:young 1, views:v 1, views:old 1
	if st.Collected != int64(want) {
		t.Fatalf("collected %d, want %d", st.Collected, want)
	}
	if got := e.stored(t, "t"); got != 17-want {
		t.Fatalf("stored %d cells, want %d", got, 17-want)
	}
	got := e.visible(t, "t")
	if len(got) != 17-want {
		t.Fatalf("visible %v", got)
	}
	if v := testutil.ToFloat64(e.col.m.cellsCollected.WithLabelValues(inst, "t", "profile", "versions")); v != 3 {
		t.Fatalf("versions metric for profile = %v", v)
	}
	if v := testutil.ToFloat64(e.col.m.cellsCollected.WithLabelValues(inst, "t", "views", "age")); v != 1 {
		t.Fatalf("age metric for views = %v", v)
	}
}

// TestHiddenBeforeCollected: by default an eligible cell is never returned,
// even before the collector runs; in until-collected mode it is, until then.
func TestHiddenBeforeCollected(t *testing.T) {
	for _, vis := range []table.Visibility{table.HideEligible, table.UntilCollected} {
		t.Run(vis.String(), func(t *testing.T) {
			e := newEnv(t, vis, Options{})
			e.create(t, "t", map[string]string{"cf": "maxage=1h"})
			e.set(t, "t", "r", "cf", "q", e.now(), 0)
			e.clock.Advance(2 * time.Hour)
			n := len(e.visible(t, "t"))
			if vis == table.HideEligible && n != 0 {
				t.Fatalf("eligible cell visible in hidden mode")
			}
			if vis == table.UntilCollected && n != 1 {
				t.Fatalf("eligible cell not visible before collection in until-collected mode")
			}
			e.pass(t)
			if n := len(e.visible(t, "t")); n != 0 || e.stored(t, "t") != 0 {
				t.Fatalf("after pass: visible %d stored %d", n, e.stored(t, "t"))
			}
		})
	}
}

// TestRetroactiveAndLoosening: a stricter rule collects old data on the next
// pass; loosening never brings back a cell that was hidden.
func TestRetroactiveAndLoosening(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "t", map[string]string{"cf": "never"})
	now := e.now()
	for i := int64(0); i < 5; i++ {
		e.set(t, "t", "r", "cf", "q", now-i*1000, 0)
	}
	if _, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "cf", Update: true, GC: gcrule.MaxVersions(2)}}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.visible(t, "t")); n != 2 {
		t.Fatalf("visible after stricter rule: %d", n)
	}
	// Loosen before any pass ran: the three hidden versions stay gone.
	if _, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "cf", Update: true, GC: gcrule.MaxVersions(10)}}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.visible(t, "t")); n != 2 {
		t.Fatalf("loosening brought cells back: %d visible", n)
	}
	if e.stored(t, "t") != 2 {
		t.Fatalf("stored %d", e.stored(t, "t"))
	}
}

// TestNativeTTLAndDroppedFamilies: expired cells and cells of dropped
// families are swept; a cell rewritten without expiry survives.
func TestNativeTTLAndDroppedFamilies(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "t", map[string]string{"cf": "never", "gone": "never"})
	now := e.now()
	e.set(t, "t", "a", "cf", "q", now, now+60_000_000)
	e.set(t, "t", "b", "cf", "q", now, 0)
	e.set(t, "t", "c", "gone", "q", now, 0)
	if _, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "gone", Drop: true}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	if got := e.visible(t, "t"); len(got) != 1 {
		t.Fatalf("visible %v", got)
	}
	st := e.pass(t)
	if st.Collected != 2 || e.stored(t, "t") != 1 {
		t.Fatalf("collected %d, stored %d", st.Collected, e.stored(t, "t"))
	}
	m, _ := e.eng.Table(inst, "t")
	if len(m.DroppedFamilies) != 0 {
		t.Fatalf("dropped families not forgotten: %v", m.DroppedFamilies)
	}
}

// TestBackgroundPromise: under steady writes with the loop on a fake clock,
// every cell that became eligible is physically gone within two intervals.
func TestBackgroundPromise(t *testing.T) {
	interval := time.Minute
	e := newEnv(t, table.HideEligible, Options{Interval: interval, BatchCells: 7, ScanCells: 13})
	e.create(t, "t", map[string]string{"cf": "maxage=5m"})
	e.col.Start()
	type written struct{ ts int64 }
	var cells []written
	step := 10 * time.Second
	for i := 0; i < 60; i++ {
		now := e.now()
		e.set(t, "t", fmt.Sprintf("row%03d", i%17), "cf", fmt.Sprintf("q%d", i), now, 0)
		cells = append(cells, written{now})
		waitParked(t, e.clock)
		e.clock.Advance(step)
		waitParked(t, e.clock)
		// Everything eligible for two intervals or more must be gone.
		deadline := e.now() - (5*time.Minute + 2*interval).Microseconds()
		want := 0
		for _, c := range cells {
			if c.ts >= deadline {
				want++
			}
		}
		if got := e.stored(t, "t"); got > want {
			t.Fatalf("at step %d: %d cells stored, at most %d may be", i, got, want)
		}
	}
	if e.stored(t, "t") == len(cells) {
		t.Fatal("nothing was ever collected")
	}
}

// waitParked waits until the collector loop is waiting on the fake clock.
func waitParked(t *testing.T, c *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("collector loop never parked on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPlanIsADryRun(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "t", map[string]string{"cf": "never"})
	now := e.now()
	for i := int64(0); i < 4; i++ {
		e.set(t, "t", "r", "cf", "q", now-i*1000, 0)
	}
	pr, err := e.col.Plan(context.Background(), inst, "t", "cf", gcrule.MaxVersions(1))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Cells != 3 || pr.CurrentlyCells != 0 || pr.Bytes == 0 {
		t.Fatalf("plan %+v", pr)
	}
	if e.stored(t, "t") != 4 {
		t.Fatal("plan deleted something")
	}
	if _, err := e.col.Plan(context.Background(), inst, "t", "nope", gcrule.MaxVersions(1)); err == nil {
		t.Fatal("plan on a missing family succeeded")
	}
}

// TestLiveDebt: DebtOf counts what is eligible and not yet collected, with
// how long the oldest has waited, and drops to zero after a pass.
func TestLiveDebt(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "t", map[string]string{"cf": "maxage=1h"})
	now := e.now()
	e.set(t, "t", "a", "cf", "q", now, 0)
	e.set(t, "t", "b", "cf", "q", now-2*time.Hour.Microseconds(), 0) // eligible for an hour
	e.set(t, "t", "c", "cf", "q", now, now+time.Minute.Microseconds())
	e.clock.Advance(2 * time.Minute) // c expired a minute ago
	m, _ := e.eng.Table(inst, "t")
	d, err := e.col.DebtOf(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Cells != 2 || d.Bytes == 0 || d.Oldest != time.Hour+2*time.Minute {
		t.Fatalf("debt %+v", d)
	}
	e.pass(t)
	if d, _ := e.col.DebtOf(context.Background(), m); d.Cells != 0 || d.Oldest != 0 {
		t.Fatalf("debt after pass %+v", d)
	}
}

// TestLiveDebtBounded: DebtOf examines at most debtScanLimit cells, so gc
// status costs no whole sweep of a large table; past it the figures are a
// floor (Partial).
func TestLiveDebtBounded(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{ScanCells: 5})
	e.create(t, "t", map[string]string{"cf": "maxage=1h"})
	now := e.now()
	for i := range 40 {
		e.set(t, "t", fmt.Sprintf("r%02d", i), "cf", "q", now-2*time.Hour.Microseconds(), 0)
	}
	m, _ := e.eng.Table(inst, "t")
	d, err := e.col.DebtOf(context.Background(), m)
	if err != nil || d.Cells != 40 || d.Partial {
		t.Fatalf("debt %+v, %v; want 40 cells, whole", d, err)
	}
	defer func(n int64) { debtScanLimit = n }(debtScanLimit)
	debtScanLimit = 10
	d, err = e.col.DebtOf(context.Background(), m)
	if err != nil || !d.Partial || d.Cells < 10 || d.Cells >= 40 {
		t.Fatalf("bounded debt %+v, %v; want partial, at least 10 and fewer than 40 cells", d, err)
	}
}

// TestRuleChangeWaitsForPass: a rule loosened while a pass is under way
// lands only after the pass: a pass that went on judging by the old rule
// would collect a version the new one keeps visible. Here the pass is held
// between two batches of its whole sweep, after its first row and before
// row r; the rule goes from maxversions=1 to 2, then r gets a third version.
// Under the new rule r shows its two newest versions.
func TestRuleChangeWaitsForPass(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{ScanCells: 1})
	e.create(t, "t", map[string]string{"cf": "maxversions=1"})
	e.set(t, "t", "a", "cf", "q", 1000, 0)
	e.set(t, "t", "r", "cf", "q", 1000, 0)
	e.set(t, "t", "r", "cf", "q", 2000, 0)
	held, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	e.col.betweenBatches = func() {
		if first.CompareAndSwap(false, true) { // the pass; not the hook's sweep
			close(held)
			<-release
		}
	}
	passed := make(chan error, 1)
	go func() {
		_, err := e.col.RunPass(context.Background(), Selector{})
		passed <- err
	}()
	<-held
	changed := make(chan error, 1)
	go func() {
		_, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "cf", Update: true, GC: gcrule.MustParse("maxversions=2")}})
		changed <- err
	}()
	third := func() { e.set(t, "t", "r", "cf", "q", 3000, 0) }
	select {
	case err := <-changed: // the change landed beside the pass
		if err != nil {
			t.Fatal(err)
		}
		third()
		close(release)
	case <-time.After(200 * time.Millisecond):
		close(release)
		if err := <-changed; err != nil {
			t.Fatal(err)
		}
		third()
	}
	if err := <-passed; err != nil {
		t.Fatal(err)
	}
	got := e.visible(t, "t")
	want := []string{"a/cf:q@1", "r/cf:q@3", "r/cf:q@2"}
	if !slices.Equal(got, want) {
		t.Fatalf("visible %v, want %v", got, want)
	}
}
