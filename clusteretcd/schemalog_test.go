package clusteretcd

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A schema snapshot larger than etcd's request limit (1.5 MiB by default,
// as the embedded etcd has it) is stored in chunks and read back whole;
// a later trim deletes the chunks no header names, leftovers of a crash
// included.
func TestSnapshotLargerThanARequest(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	m := join(t, ep, "a")
	ctx := context.Background()
	if err := m.PublishProgress(ctx, 100); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	big := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.UintN(256))
		}
		return b
	}
	chunks := func() int {
		resp, err := m.cli.Get(ctx, m.snapshotDataPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.Count)
	}
	check := func(seq uint64, want []byte) {
		t.Helper()
		s, ok, err := m.ReadSnapshot(ctx)
		if err != nil || !ok || s.Seq != seq || !bytes.Equal(s.Data, want) {
			t.Fatalf("snapshot: seq %d, %d bytes, %v %v; want seq %d, %d bytes", s.Seq, len(s.Data), ok, err, seq, len(want))
		}
	}
	d1 := big(3<<20 + 12345)
	if upto, err := m.Trim(ctx, 5, d1); err != nil || upto != 5 {
		t.Fatalf("trim with a 3 MiB snapshot: %d %v", upto, err)
	}
	check(5, d1)
	if got := chunks(); got != 7 {
		t.Errorf("%d chunks, want 7", got)
	}
	// A chunk a crashed trim left, then a small snapshot: no chunk stays.
	if _, err := m.cli.Put(ctx, m.snapshotChunkKey("0-crashed", 0), "x"); err != nil {
		t.Fatal(err)
	}
	d2 := []byte(`{"tables":[]}`)
	if upto, err := m.Trim(ctx, 8, d2); err != nil || upto != 8 {
		t.Fatalf("trim with a small snapshot: %d %v", upto, err)
	}
	check(8, d2)
	if got := chunks(); got != 0 {
		t.Errorf("%d chunks left after a small snapshot", got)
	}
	// A large one again, then a trim keeping it (no newer snapshot here):
	// its chunks stay, read whole.
	d3 := big(2 << 20)
	if _, err := m.cli.Put(ctx, m.snapshotChunkKey("0-crashed", 0), "x"); err != nil {
		t.Fatal(err)
	}
	if upto, err := m.Trim(ctx, 9, d3); err != nil || upto != 9 {
		t.Fatalf("trim: %d %v", upto, err)
	}
	if got := chunks(); got != 4 {
		t.Errorf("%d chunks, want 4 (the crashed one deleted)", got)
	}
	if err := m.PublishProgress(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Trim(ctx, 9, nil); err != nil {
		t.Fatal(err)
	}
	check(9, d3)
}
