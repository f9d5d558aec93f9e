package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestCompactPaced: a paced compaction reclaims like Compact, and its
// output writes wait for the rate (a lower bound on its duration, which
// sleeping guarantees); an unpaced one is not slowed by the pacer.
func TestCompactPaced(t *testing.T) {
	t.Parallel()
	db, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Incompressible values, so the output is about 2 MB.
	val := make([]byte, 200)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range val {
		val[i] = byte(rng.Uint32())
	}
	write := func(del bool) {
		b := db.NewBatch()
		defer b.Close()
		for i := 0; i < 20_000; i++ {
			k := CellKey(1, []byte(fmt.Sprintf("row%06d", i)), 1, []byte("q"), 1000)
			if del && i%2 == 0 {
				b.Delete(k, nil)
			} else if !del {
				val[0], val[1] = byte(i), byte(i>>8)
				b.Set(k, val, nil)
			}
		}
		if err := b.Commit(nil); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	write(false)
	start, end := TablePrefix(1), TableEnd(1)
	if err := db.CompactPaced(context.Background(), start, end, 0); err != nil {
		t.Fatal(err)
	}
	if n := db.pacer.paced.Load(); n != 0 {
		t.Fatalf("unpaced compaction went through the pacer: %d bytes", n)
	}
	before, err := db.EstimateDiskUsage(start, end)
	if err != nil {
		t.Fatal(err)
	}
	write(true)
	const rate = 4 << 20
	t0 := time.Now()
	if err := db.CompactPaced(context.Background(), start, end, rate); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	paced := db.pacer.paced.Load()
	t.Logf("paced %d bytes in %v", paced, took)
	if paced == 0 {
		t.Fatal("the paced compaction's output was not paced")
	}
	// The first millisecond of debt is never slept, and the window restarts
	// each second: allow a generous margin below the exact figure.
	if want := time.Duration(float64(paced) / rate * float64(time.Second) / 2); took < want {
		t.Errorf("wrote %d bytes at %d B/s in %v; want at least %v", paced, rate, took, want)
	}
	after, err := db.EstimateDiskUsage(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if after >= before*3/4 {
		t.Errorf("disk usage %d → %d: half the cells deleted, space not reclaimed", before, after)
	}
	if db.pacer.rate.Load() != 0 {
		t.Error("pacing still on after the compaction")
	}
}

// TestCompactPacedGivesWayToWrites: once foreground writes back up in L0,
// a paced compaction stops pacing, whatever its rate.
func TestCompactPacedGivesWayToWrites(t *testing.T) {
	t.Parallel()
	db, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.backlogged = func() bool { return true }
	val := make([]byte, 200)
	rng := rand.NewChaCha8([32]byte{3, 4})
	b := db.NewBatch()
	for i := 0; i < 20_000; i++ {
		rng.Read(val)
		b.Set(CellKey(1, []byte(fmt.Sprintf("row%06d", i)), 1, []byte("q"), 1000), val, nil)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	// About 4 MB of output at 1 KiB/s would take an hour paced.
	t0 := time.Now()
	if err := db.CompactPaced(context.Background(), TablePrefix(1), TableEnd(1), 1<<10); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 30*time.Second {
		t.Fatalf("compaction took %v: pacing was not dropped", took)
	}
	if db.pacer.rate.Load() != 0 {
		t.Error("pacing still on after the compaction")
	}
}
