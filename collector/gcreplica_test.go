package collector

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

// versionsFixture writes, in one row, three versions of a max-versions
// column, three of an intersection column whose older two are also past the
// age, and one cell past a plain max age.
func versionsFixture(t *testing.T, e *env) {
	t.Helper()
	e.create(t, "t", map[string]string{"ver": "maxversions=1", "both": "maxage=1h && maxversions=1", "age": "maxage=1h"})
	if _, err := e.eng.SetChangeStream(inst, "t", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	now := e.now()
	hour := int64(time.Hour / time.Microsecond)
	for i := int64(0); i < 3; i++ {
		e.set(t, "t", "r", "ver", "v", now-i*1000, 0)
		e.set(t, "t", "r", "both", "b", now-i*2*hour, 0)
	}
	e.set(t, "t", "r", "age", "a", now-2*hour, 0)
	e.clock.Advance(time.Minute)
}

// gcReasons lists the reasons of a table's local GC records.
func gcReasons(t *testing.T, e *env) []string {
	t.Helper()
	m, _ := e.eng.Table(inst, "t")
	b, err := e.eng.ReadChanges(m, changestream.TableStart(m.ID), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range b.Records {
		if r.Type == changestream.GarbageCollection {
			if r.SourceCluster != "" {
				t.Errorf("local GC record with source cluster %q", r.SourceCluster)
			}
			out = append(out, r.Reason)
		}
	}
	slices.Sort(out)
	return out
}

// TestNonLeaderLeavesVersionsCellsToTheLeader: a cluster that is not the GC
// leader collects by age only; cells a max-versions term made eligible
// (intersections included) stay stored, hidden from readers, until the
// leader's deletions arrive.
func TestNonLeaderLeavesVersionsCellsToTheLeader(t *testing.T) {
	var leader atomic.Bool
	e := newEnv(t, table.HideEligible, Options{DecidesVersions: leader.Load})
	versionsFixture(t, e)
	visible := e.visible(t, "t")

	st := e.pass(t)
	if st.Collected != 1 { // the age cell only
		t.Fatalf("non-leader collected %d cells, want 1", st.Collected)
	}
	if n := e.stored(t, "t"); n != 6 {
		t.Errorf("non-leader keeps %d cells stored, want 6 (3 ver, 3 both)", n)
	}
	if got := e.visible(t, "t"); !slices.Equal(got, visible) || len(got) != 2 {
		t.Errorf("readers see %v, want %v: versions-eligible cells stay hidden", got, visible)
	}
	if got := gcReasons(t, e); !slices.Equal(got, []string{changestream.ReasonGCAge}) {
		t.Errorf("non-leader GC records %v", got)
	}

	leader.Store(true)
	st = e.pass(t)
	if st.Collected != 4 { // 2 ver + 2 both
		t.Fatalf("leader collected %d cells, want 4", st.Collected)
	}
	if n := e.stored(t, "t"); n != 2 {
		t.Errorf("%d cells stored after the leader's pass, want 2", n)
	}
	// The intersection's deletions are versions deletions: they replicate.
	// (One record per row and reason.)
	want := []string{changestream.ReasonGCAge, changestream.ReasonGCVersions}
	if got := gcReasons(t, e); !slices.Equal(got, want) {
		t.Errorf("GC records %v, want %v", got, want)
	}
	m, _ := e.eng.Table(inst, "t")
	b, _ := e.eng.ReadChanges(m, changestream.TableStart(m.ID), 0)
	fams := map[string]int{}
	for _, r := range b.Records {
		if r.Reason == changestream.ReasonGCVersions {
			for _, mod := range r.Mods {
				fams[mod.Family]++
			}
		}
	}
	if fams["ver"] != 2 || fams["both"] != 2 {
		t.Errorf("versions deletions by family %v, want ver 2 and both 2", fams)
	}
}

// TestNoLeaderFuncCollectsEverything: without DecidesVersions (a single
// cluster) every eligible cell is collected.
func TestNoLeaderFuncCollectsEverything(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	versionsFixture(t, e)
	if st := e.pass(t); st.Collected != 5 {
		t.Fatalf("collected %d, want 5", st.Collected)
	}
}

func cutoffOf(t *testing.T, col *Collector, fam string) (int64, bool) {
	t.Helper()
	cuts, err := col.AgeCutoffs(inst)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cuts {
		if c.Table == "t" && c.Family == fam {
			return c.Cutoff, true
		}
	}
	return 0, false
}

// TestAgeCutoffIsMonotonicAcrossARaise: the cutoff is pass time minus the
// shortest max age, but never goes back when the age is raised; it
// survives a restart and is forgotten with its family.
func TestAgeCutoffIsMonotonicAcrossARaise(t *testing.T) {
	dir := t.TempDir()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	open := func() (*table.Engine, *Collector) {
		eng, err := table.Open(table.Options{Dir: dir, Clock: fake})
		if err != nil {
			t.Fatal(err)
		}
		col, err := New(eng, Options{Clock: fake})
		if err != nil {
			t.Fatal(err)
		}
		eng.SetSchemaHook(col.BeforeRuleChange)
		return eng, col
	}
	eng, col := open()
	spec := table.TableSpec{Families: []table.FamilySpec{
		{Name: "age", GC: gcrule.MustParse("maxage=1h || maxversions=3")},
		{Name: "ver", GC: gcrule.MustParse("maxversions=1")},
	}}
	if _, err := eng.CreateTable(inst, "t", spec); err != nil {
		t.Fatal(err)
	}
	if _, ok := cutoffOf(t, col, "age"); ok {
		t.Fatal("cutoff before any pass")
	}
	pass := func() {
		t.Helper()
		if _, err := col.RunPass(context.Background(), Selector{}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := fake.Now()
	pass()
	want := clock.Micros(t0) - time.Hour.Microseconds()
	if got, ok := cutoffOf(t, col, "age"); !ok || got != want {
		t.Fatalf("cutoff %d (%v), want %d", got, ok, want)
	}
	if _, ok := cutoffOf(t, col, "ver"); ok {
		t.Error("a family without an age term has a cutoff")
	}
	fake.Advance(30 * time.Minute)
	pass()
	want += (30 * time.Minute).Microseconds()
	if got, _ := cutoffOf(t, col, "age"); got != want {
		t.Fatalf("cutoff %d after 30m, want %d", got, want)
	}

	// Raise the age to 3h: passes in the next two hours leave the cutoff.
	if _, err := eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "age", Update: true, GC: gcrule.MustParse("maxage=3h")}}); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Hour)
	pass()
	if got, _ := cutoffOf(t, col, "age"); got != want {
		t.Fatalf("cutoff moved to %d after a raise, want it kept at %d", got, want)
	}

	// A restart keeps it.
	eng.Close()
	eng, col = open()
	if got, _ := cutoffOf(t, col, "age"); got != want {
		t.Fatalf("cutoff %d after a restart, want %d", got, want)
	}
	fake.Advance(2 * time.Hour) // 3h30 after t0: now − 3h passes the cutoff
	pass()
	want = clock.Micros(fake.Now()) - (3 * time.Hour).Microseconds()
	if got, _ := cutoffOf(t, col, "age"); got != want {
		t.Fatalf("cutoff %d, want %d", got, want)
	}

	// Dropping the family forgets it; a new family of that name starts over.
	if _, err := eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "age", Drop: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "age", Create: true, GC: gcrule.MustParse("maxage=1d")}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := cutoffOf(t, col, "age"); ok {
		t.Error("a recreated family inherited the dropped one's cutoff")
	}
	eng.Close()
}

// TestNonLeaderLooseningCollectsVersionsUnderTheOldRule: a rule loosened on
// a non-leader is swept under the old rule first, versions-eligible cells
// included (their gc-versions records then replicate), so readers there
// never see them come back.
func TestNonLeaderLooseningCollectsVersionsUnderTheOldRule(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{DecidesVersions: func() bool { return false }})
	versionsFixture(t, e)
	visible := e.visible(t, "t")
	if _, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "ver", Update: true, GC: gcrule.MustParse("maxversions=5")}}); err != nil {
		t.Fatal(err)
	}
	if got := e.visible(t, "t"); !slices.Equal(got, visible) {
		t.Errorf("after loosening, readers see %v, want %v", got, visible)
	}
	if got := gcReasons(t, e); !slices.Equal(got, []string{changestream.ReasonGCVersions}) {
		t.Errorf("GC records %v, want one gc-versions", got)
	}
}
