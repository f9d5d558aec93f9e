//go:build linux

package storage

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// BenchmarkMemtableSortedBatches asks whether a batch whose keys ascend is
// cheaper for Pebble's memtable to insert than the same keys in random
// order (the memtable's inserter keeps its splice from one key of a batch
// to the next). One database without a WAL and with one full-size memtable
// is filled with 250,000 cells shaped like the bulk-write workload's
// (random 17-byte rows, one column, 100-byte values); then batches of 100
// new random cells are committed (at -benchtime 1000x the memtable ends
// near 350,000 entries, still one memtable: checked), alternately sorted
// (the sort counted, and reported alone too) and as they came, so both
// arms meet the same fill. It reports each arm's CPU time per key (this
// thread's: Pebble applies a batch to the memtable on the committing
// goroutine).
func BenchmarkMemtableSortedBatches(b *testing.B) {
	const (
		fill     = 250_000
		batchLen = 100
		valueLen = 101
	)
	dir := b.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{
		FS:           vfs.Default,
		Comparer:     Comparer,
		DisableWAL:   true,
		MemTableSize: memTableSize,
		Logger:       quietLogger{},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := skipMemtableRamp(db, vfs.Default, dir, memTableSize); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, valueLen)
	var row []byte
	key := func(dst []byte) []byte {
		row = append(row[:0], 'r')
		row = binary.BigEndian.AppendUint64(row, rng.Uint64())
		row = binary.BigEndian.AppendUint64(row, rng.Uint64())
		return AppendCellKey(dst, 1, row, 1, []byte("c"), 1_700_000_000_000_000)
	}
	// One memtable, so the fill and the measured batches meet one skiplist.
	for i := 0; i < fill; i += 1000 {
		bt := db.NewBatch()
		var k []byte
		for j := 0; j < 1000; j++ {
			k = key(k[:0])
			bt.Set(k, val, nil)
		}
		if err := bt.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		bt.Close()
	}
	flushes := db.Metrics().Flush.Count
	// Pinned to its thread, the thread's CPU clock counts the insert and
	// nothing another process ran meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	keys := make([][]byte, batchLen)
	var took [2]time.Duration
	var sorting time.Duration
	var n [2]int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range keys {
			keys[j] = key(keys[j][:0])
		}
		arm := i % 2
		t0 := threadCPU()
		if arm == 1 {
			slices.SortFunc(keys, bytes.Compare)
			sorting += threadCPU() - t0
		}
		bt := db.NewBatch()
		for _, k := range keys {
			bt.Set(k, val, nil)
		}
		if err := bt.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		took[arm] += threadCPU() - t0
		n[arm] += batchLen
		bt.Close()
	}
	b.StopTimer()
	if m := db.Metrics(); m.Flush.Count != flushes || m.MemTable.Count != 1 {
		b.Fatalf("%d flushes while measuring, %d memtables: the batches did not all meet one memtable", m.Flush.Count-flushes, m.MemTable.Count)
	}
	if n[0] > 0 && n[1] > 0 {
		b.ReportMetric(float64(took[0].Nanoseconds())/float64(n[0]), "unsorted-ns/key")
		b.ReportMetric(float64(took[1].Nanoseconds())/float64(n[1]), "sorted-ns/key")
		b.ReportMetric(float64(sorting.Nanoseconds())/float64(n[1]), "sort-ns/key")
		b.ReportMetric(float64(took[1])/float64(took[0])*float64(n[0])/float64(n[1]), "sorted/unsorted")
	}
}

// quietLogger drops Pebble's informational lines.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic("pebble: fatal")
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}
