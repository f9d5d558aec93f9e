package collector

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// TestPassReclaimsDiskSpace: after a pass collects most of a table, its
// on-disk size drops, and the status and gauge say so.
func TestPassReclaimsDiskSpace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, table.HideEligible, Options{})
	e.create(t, "t", map[string]string{"cf": "never"})
	now := e.now()
	val := bytes.Repeat([]byte("x"), 1024)
	var entries []table.RowMutation
	for r := 0; r < 2000; r++ {
		var muts []table.Mutation
		for v := int64(0); v < 4; v++ {
			muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: now - v*1000, Value: val})
		}
		entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%05d", r)), Mutations: muts})
	}
	if _, err := e.eng.MutateRows(inst, "t", entries); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Flush(); err != nil {
		t.Fatal(err)
	}
	m, _ := e.eng.Table(inst, "t")
	disk := func() uint64 {
		n, err := e.eng.EstimateDiskUsage(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
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

// TestExpiredCellsInSSTablesAreCollected: a cell past its native expiry is
// collected after it was flushed into an SSTable too, in a table whose rules
// would let a pass skip blocks (age only). Pebble's columnar SSTables hand
// block-property collectors no values, so a block property of expiries
// (which live in the value header) would be empty and skip everything.
func TestExpiredCellsInSSTablesAreCollected(t *testing.T) {
	for _, rule := range []string{"never", "maxage=30d"} {
		t.Run(rule, func(t *testing.T) {
			e := newEnv(t, table.HideEligible, Options{})
			e.create(t, "t", map[string]string{"cf": rule})
			now := e.now()
			exp := now + time.Hour.Microseconds()
			for r := 0; r < 50; r++ {
				if err := e.eng.MutateRow(inst, "t", []byte(fmt.Sprintf("row%02d", r)), []table.Mutation{
					{Kind: table.SetCell, Family: "cf", Qualifier: []byte("ttl"), Timestamp: now, Value: []byte("v"), ExpireAt: exp},
					{Kind: table.SetCell, Family: "cf", Qualifier: []byte("keep"), Timestamp: now, Value: []byte("v")},
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.eng.Flush(); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(2 * time.Hour)
			st := e.pass(t)
			m, _ := e.eng.Table(inst, "t")
			left := 0
			if err := e.eng.RawCells(m, nil, nil, func(table.RawCell) error { left++; return nil }); err != nil {
				t.Fatal(err)
			}
			if st.Collected != 50 || left != 50 {
				t.Fatalf("pass collected %d cells, %d stored; want 50 expired collected and 50 kept", st.Collected, left)
			}
		})
	}
}

// TestSparseDeletionsAreLeftPending: a pass that deletes one version in
// five, spread evenly over a flushed table, compacts nothing: the deletions
// are too sparse to be worth rewriting the files for, and their bytes are
// reported pending (left to Pebble's compactions). TestPassReclaimsDiskSpace
// is the dense case.
func TestSparseDeletionsAreLeftPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, table.HideEligible, Options{Pause: -1})
	e.create(t, "t", map[string]string{"cf": "never"})
	now := e.now()
	rng := rand.NewChaCha8([32]byte{1, 2})
	var entries []table.RowMutation
	for r := 0; r < 2000; r++ {
		var muts []table.Mutation
		for v := int64(0); v < 5; v++ {
			val := make([]byte, 1024)
			rng.Read(val) // incompressible: disk size follows logical size
			muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: now - v*1000, Value: val})
		}
		entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%05d", r)), Mutations: muts})
	}
	if _, err := e.eng.MutateRows(inst, "t", entries); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "cf", Update: true, GC: gcrule.MaxVersions(4)}}); err != nil {
		t.Fatal(err)
	}
	st := e.pass(t)
	if st.Collected != 2000 || st.Compaction != 0 || st.ReclaimLeft != 1 || st.ReclaimPendingBytes < 2000*1024 {
		t.Fatalf("pass %+v; want 2,000 cells collected, no compaction, their bytes pending", st)
	}
	sts, _ := e.col.Status(inst)
	if sts[0].ReclaimPendingBytes != st.ReclaimPendingBytes || sts[0].ReclaimedBytes != 0 {
		t.Fatalf("status %+v", sts[0])
	}
}
