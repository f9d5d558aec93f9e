//go:build unix

package table

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/storage"
)

// BenchmarkReadPartitionPebble reads one tablet's rows out of a table's
// change log of N tablets' records, round-robin (as a node's log of its
// tablets' writes), flushed to sstables: "old" decodes every record and
// drops the other tablets' (the partition reader before
// changestream.ReadRows), "new" is ReadRows. An op is one record sent;
// cpu-ns/rec is the process's CPU (user + system, GC included) per record
// sent, steadier than ns/op on a loaded machine.
func BenchmarkReadPartitionPebble(b *testing.B) {
	const per = 2000
	for _, tablets := range []int{1, 10, 30} {
		db, err := storage.Open(storage.Options{Dir: b.TempDir(), FullMemtable: true})
		if err != nil {
			b.Fatal(err)
		}
		batch := db.NewBatch()
		for i := 0; i < tablets*per; i++ {
			r := changestream.Record{Type: changestream.User, Reason: changestream.ReasonUser,
				RowKey: []byte(fmt.Sprintf("t%02d/%08d", i%tablets, i)), Mods: []changestream.Mod{
					{Kind: changestream.SetCell, Family: "cf", Qualifier: []byte("field0"), Timestamp: int64(i), Value: bytes.Repeat([]byte{'v'}, 100)}}}
			if err := batch.Set(changestream.Key(1, changestream.Position{Commit: int64(1000 + i), Tiebreaker: 1}), r.Encode(), nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(pebble.Sync); err != nil {
			b.Fatal(err)
		}
		batch.Close()
		if err := db.Flush(); err != nil {
			b.Fatal(err)
		}
		st := changeStore{db}
		start, end := []byte("t00/"), []byte("t00/\xff")
		b.Run(fmt.Sprintf("tablets=%d/old", tablets), func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b, rusageCPU())
			for i := 0; i < b.N; {
				lower := changestream.TableStart(1)
				for i < b.N {
					recs, err := changestream.Read(st, 1, lower, 1<<40, 512)
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range recs {
						lower = changestream.After(1, r.Position)
						if bytes.Compare(r.RowKey, start) >= 0 && bytes.Compare(r.RowKey, end) < 0 {
							i++
						}
					}
					if len(recs) < 512 {
						break
					}
				}
			}
		})
		b.Run(fmt.Sprintf("tablets=%d/new", tablets), func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b, rusageCPU())
			for i := 0; i < b.N; {
				lower := changestream.TableStart(1)
				for i < b.N {
					bt, err := changestream.ReadRows(st, 1, lower, 1<<40, 512, 16*512, changestream.RowsIn(start, end))
					if err != nil {
						b.Fatal(err)
					}
					i += len(bt.Records)
					if bt.Examined > 0 {
						lower = changestream.After(1, bt.Last)
					}
					if !bt.Full {
						break
					}
				}
			}
		})
		db.Close()
	}
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(rusageCPU()-start)/float64(b.N), "cpu-ns/rec")
}

func rusageCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
