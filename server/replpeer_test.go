package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestPullEncodingRoundTrip: a pull request and its answer come through
// the EbbAdmin Struct encoding (and the wire) as they went in.
func TestPullEncodingRoundTrip(t *testing.T) {
	pos := changestream.Position{Commit: 1_700_000_000_000_001, Tiebreaker: 3, Index: 2}
	req := replication.PullRequest{Cluster: "b", Addr: "127.0.0.1:9", Wait: 250 * time.Millisecond, Limit: 2000,
		Positions: map[string]changestream.Position{replication.TableKey("inst", "t"): pos}}
	st, err := structpb.NewStruct(encodePullRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodePullRequest(wire(t, st))
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("request: %+v %v, want %+v", got, err, req)
	}
	bad, _ := structpb.NewStruct(map[string]any{"cluster": "b", "positions": map[string]any{"k": "nonsense"}})
	if _, err := decodePullRequest(bad); codeOf(err).String() != "InvalidArgument" {
		t.Fatalf("a bad position: %v", err)
	}

	rec := changestream.Record{Position: pos, Type: changestream.User, RowKey: []byte("r\x00\xff"),
		Mods: []changestream.Mod{{Kind: changestream.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte{0, 1, 2, 255}}}}
	resp := &replication.PullResponse{
		Cluster: "a", Closed: 1_700_000_000_000_009,
		Tables: []replication.PulledTable{{Instance: "inst", Table: "t", Records: []changestream.Record{rec}, Through: pos, Full: true}},
		Catalog: []replication.TableSchema{{Instance: "inst", Name: "t", Stamp: storage.Stamp{Commit: 5, Cluster: "a"},
			Families: []replication.FamilySchema{{Name: "f", GC: gcrule.Union(gcrule.MaxVersions(2), gcrule.MaxAge(time.Hour))}}}},
		Dropped:      []table.DroppedTable{{Instance: "inst", Name: "old", Stamp: storage.Stamp{Commit: 7, Cluster: "b"}}},
		Peers:        []replication.PeerInfo{{ID: "a", Addr: "x:1", Ready: true}, {ID: "c", Addr: "x:3"}},
		InstanceMeta: []replication.MetaEntry{{Kind: kindAppProfile, Instance: "inst", Name: "p", Value: "{}"}},
		AgeCutoffs:   map[replication.FamilyKey]int64{{Instance: "inst", Table: "t", Family: "f"}: 123},
		Shipped:      1,
	}
	out, err := encodePullResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodePullResponse(wire(t, out))
	if err != nil {
		t.Fatal(err)
	}
	// Schemas compare by their rendering (rules decode to equal values,
	// not identical pointers).
	if back.Catalog[0].Families[0].GC.String() != resp.Catalog[0].Families[0].GC.String() {
		t.Fatalf("rule: %v", back.Catalog[0].Families[0].GC)
	}
	back.Catalog[0].Families[0].GC, resp.Catalog[0].Families[0].GC = gcrule.Rule{}, gcrule.Rule{}
	if !reflect.DeepEqual(back, resp) {
		t.Fatalf("answer:\n got %+v\nwant %+v", back, resp)
	}
}

// wire sends a Struct through its binary encoding, as gRPC does.
func wire(t *testing.T, st *structpb.Struct) *structpb.Struct {
	t.Helper()
	b, err := proto.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	out := new(structpb.Struct)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}
