package collector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

// dirBytes is the size of the files in dir, the ballast aside.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || fi.Name() == storage.BallastName {
			return err
		}
		n += fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// reclaimEnv writes 2,000 rows of four 1 KiB versions (half flushed to an
// SSTable, half in the memtable and WAL) under rule never, then sets
// maxversions=1: a pass collects three quarters of the table.
func reclaimEnv(t *testing.T) (*env, string) {
	dir := t.TempDir()
	eng, fake := enginetest.Open(t, table.Options{Dir: dir, Visibility: table.HideEligible})
	col, err := New(eng, Options{Clock: fake, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.Stop)
	e := &env{eng: eng, col: col, clock: fake}
	e.create(t, "t", map[string]string{"cf": "never"})
	now := e.now()
	rng := rand.NewChaCha8([32]byte{3, 4})
	write := func(from, to int) {
		var entries []table.RowMutation
		for r := from; r < to; r++ {
			var muts []table.Mutation
			for v := int64(0); v < 4; v++ {
				val := make([]byte, 1024)
				rng.Read(val) // incompressible (a byte at a time costs 0.7 s of CPU under -race)
				muts = append(muts, table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: now - v*1000, Value: val})
			}
			entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("row%05d", r)), Mutations: muts})
		}
		if _, err := eng.MutateRows(inst, "t", entries); err != nil {
			t.Fatal(err)
		}
	}
	write(0, 1000)
	if err := eng.Flush(); err != nil {
		t.Fatal(err)
	}
	write(1000, 2000)
	if _, err := eng.ModifyFamilies(inst, "t", []table.FamilyMod{{Name: "cf", Update: true, GC: gcrule.MaxVersions(1)}}); err != nil {
		t.Fatal(err)
	}
	return e, dir
}

// TestReclaimReportsWhatCameBack (issue 16): the space a pass reports freed
// is what the data directory gave back by the time the pass returned — the
// flushed WAL and the compacted SSTables deleted, which Pebble does in the
// background after its compaction returns — not an estimate taken while
// they were still on disk (or already out of Pebble's accounts but not
// deleted). Half the table is in an SSTable, half in the memtable and WAL.
func TestReclaimReportsWhatCameBack(t *testing.T) {
	t.Parallel()
	e, dir := reclaimEnv(t)
	eng := e.eng
	e.clock.Advance(time.Second)
	// The directory before the pass, once the flush's WAL is gone.
	if _, err := eng.Settle(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	before := dirBytes(t, dir)
	st := e.pass(t)
	after := dirBytes(t, dir)
	t.Logf("directory %d → %d bytes (%d freed); the pass reports %d freed, %d still being deleted", before, after, before-after, st.ReclaimedBytes, st.ReclaimDeletingBytes)
	if st.Collected != 6000 || st.Compaction == 0 {
		t.Fatalf("pass %+v; want 6,000 cells collected and a compaction", st)
	}
	if after*2 > before {
		t.Fatalf("the directory holds %d of %d bytes after collecting three quarters of it", after, before)
	}
	// Within a tenth: the pass measures from after its sweep, whose
	// deletions grew the WAL by about 3% of what came back.
	fell := before - after
	if diff := st.ReclaimedBytes - fell; diff < -fell/10 || diff > fell/10 || st.ReclaimDeletingBytes != 0 {
		t.Fatalf("the pass reports %d bytes freed (%d being deleted); the directory fell by %d", st.ReclaimedBytes, st.ReclaimDeletingBytes, before-after)
	}
}

// TestReclaimReportsFilesReadsHold: SSTables the reclaim compacted away while
// a read still had them open stay on disk until the read ends; the pass
// reports them as still being deleted, not as freed, and they go once the
// read is closed.
func TestReclaimReportsFilesReadsHold(t *testing.T) {
	t.Parallel()
	e, dir := reclaimEnv(t)
	if err := e.eng.Flush(); err != nil { // all of it in SSTables
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	it, err := e.eng.RawIter(nil, nil) // holds the SSTables as they are
	if err != nil {
		t.Fatal(err)
	}
	st := e.pass(t)
	t.Logf("the pass reports %d freed, %d still being deleted; directory %d bytes", st.ReclaimedBytes, st.ReclaimDeletingBytes, dirBytes(t, dir))
	if st.ReclaimDeletingBytes < 4<<20 {
		t.Fatalf("pass %+v: want the SSTables the open read holds (about 8 MiB) reported as still being deleted", st)
	}
	held := dirBytes(t, dir)
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := e.eng.Settle(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.Zombie != 0 || s.Deleting != 0 || int64(s.DirBytes) > held-st.ReclaimDeletingBytes*9/10 {
		t.Fatalf("after the read ended: %+v, the directory held %d bytes with it open", s, held)
	}
}
