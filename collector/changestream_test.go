package collector

import (
	"context"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollectionIsRecordedAndRetentionTrims(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "t", map[string]string{"age": "maxage=1h", "ver": "maxversions=1"})
	if _, err := e.eng.SetChangeStream(inst, "t", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	now := e.now()
	muts := []table.Mutation{
		{Kind: table.SetCell, Family: "age", Qualifier: []byte("a"), Timestamp: now - 2*3600e6, Value: []byte("old")},
		{Kind: table.SetCell, Family: "ver", Qualifier: []byte("v"), Timestamp: now - 2000, Value: []byte("v1")},
		{Kind: table.SetCell, Family: "ver", Qualifier: []byte("v"), Timestamp: now - 1000, Value: []byte("v2")},
		{Kind: table.SetCell, Family: "ver", Qualifier: []byte("t"), Timestamp: now, Value: []byte("x"), TTLMicros: 60e6},
	}
	if err := e.eng.MutateRow(inst, "t", []byte("r"), muts); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	if _, err := e.col.RunPass(context.Background(), Selector{}); err != nil {
		t.Fatal(err)
	}
	m, _ := e.eng.Table(inst, "t")
	b, err := e.eng.ReadChanges(m, changestream.TableStart(m.ID), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]changestream.Record{}
	for _, r := range b.Records[1:] {
		if r.Type != changestream.GarbageCollection || !r.IsSystem || r.TransactionTag != changestream.TagGarbageCollection || string(r.RowKey) != "r" {
			t.Errorf("gc record %+v", r)
		}
		got[r.Reason] = r
	}
	if b.Records[0].Reason != changestream.ReasonUser || len(b.Records) != 4 {
		t.Fatalf("records: %+v", b.Records)
	}
	for reason, qual := range map[string]string{changestream.ReasonGCAge: "a", changestream.ReasonGCVersions: "v", changestream.ReasonCellTTL: "t"} {
		r, ok := got[reason]
		if !ok || len(r.Mods) != 1 || string(r.Mods[0].Qualifier) != qual || r.Mods[0].Kind != changestream.DeleteFromColumn {
			t.Errorf("%s: %+v", reason, r)
		}
	}
	if v := got[changestream.ReasonGCVersions].Mods[0]; v.StartTS != now-2000 || v.EndTS != now-1000 || v.Family != "ver" {
		t.Errorf("versions record covers [%d,%d) of %q, want the deleted cell's millisecond", v.StartTS, v.EndTS, v.Family)
	}

	// A day later every record is past retention and the next pass drops them.
	e.clock.Advance(25 * time.Hour)
	if _, err := e.col.RunPass(context.Background(), Selector{}); err != nil {
		t.Fatal(err)
	}
	b, err = e.eng.ReadChanges(m, changestream.TableStart(m.ID), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Records) != 0 {
		t.Errorf("%d records outlived retention", len(b.Records))
	}
	if n := testutil.ToFloat64(e.col.m.recordsExpired.WithLabelValues(inst, "t")); n != 4 {
		t.Errorf("records expired metric = %v, want 4", n)
	}
}

func TestDroppedFamilyCollectionIsRecordedWithItsName(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "t", map[string]string{"gone": "never", "kept": "never"})
	if _, err := e.eng.SetChangeStream(inst, "t", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.MutateRow(inst, "t", []byte("r"), []table.Mutation{
		{Kind: table.SetCell, Family: "gone", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("x")},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "gone", Drop: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.col.RunPass(context.Background(), Selector{}); err != nil {
		t.Fatal(err)
	}
	m, _ := e.eng.Table(inst, "t")
	if len(m.DroppedNames) != 0 || len(m.DroppedFamilies) != 0 {
		t.Errorf("dropped family not forgotten: %v %v", m.DroppedFamilies, m.DroppedNames)
	}
	b, err := e.eng.ReadChanges(m, changestream.TableStart(m.ID), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Records) != 2 {
		t.Fatalf("records %+v", b.Records)
	}
	r := b.Records[1]
	if r.Reason != changestream.ReasonDropped || r.Mods[0].Family != "gone" || string(r.Mods[0].Qualifier) != "q" {
		t.Errorf("dropped-family record %+v", r)
	}
}
