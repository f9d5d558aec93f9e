package collector

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// TestPassReclaimsDiskSpace: after a pass collects most of a table, its
// on-disk size drops, and the status and gauge say so.
func TestPassReclaimsDiskSpace(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "t", map[string]string{"cf": "never"})
	now := e.now()
	val := bytes.Repeat([]byte("x"), 1024)
	var entries []table.RowMutation
	for r := 0; r < 4000; r++ {
		var muts []table.Mutation
		for v := int64(0); v < 4; v++ {
			muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: now - v*1000, Value: val})
		}
		entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%05d", r)), Mutations: muts})
	}
	if _, err := e.eng.MutateRows(inst, "t", entries); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Store().Flush(); err != nil {
		t.Fatal(err)
	}
	m, _ := e.eng.Table(inst, "t")
	disk := func() uint64 {
		n, err := e.eng.Store().EstimateDiskUsage(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := disk()
	if _, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "cf", Update: true, GC: gcrule.MaxVersions(1)}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	e.pass(t)
	after := disk()
	if after*2 > before {
		t.Fatalf("disk usage %d → %d after collecting three quarters of the table", before, after)
	}
	sts, _ := e.col.Status(inst)
	if len(sts) != 1 || sts[0].DiskBytes != int64(after) || sts[0].LogicalBytes == 0 {
		t.Fatalf("status %+v, disk now %d", sts, after)
	}
	t.Logf("disk usage %d → %d bytes", before, after)
}
