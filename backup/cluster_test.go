package backup

import (
	"bytes"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

// A cluster backup's record round-trips through etcd's encoding, a flipped
// byte or a file name outside the backup is refused, and the manifest's
// version time is its earliest part's snapshot.
func TestClusterRecord(t *testing.T) {
	name := Name{Instance: inst, Cluster: "c1", ID: "b1"}
	schema := &table.Meta{ID: 7, Instance: inst, Name: "t", NextFamilyID: 1, Families: []table.Family{{ID: 1, Name: "f", GC: gcrule.None()}}}
	mf, err := NewClusterManifest(name, "t", schema, name.ObjectPrefix("a1"), t0, t0.Add(7*time.Hour), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewClusterManifest(name, "t", schema, "x.", t0, t0.Add(time.Hour), CreateOptions{}); err == nil {
		t.Error("an expiry an hour away was accepted")
	}
	done := mf.Complete([]Part{
		{Start: nil, End: []byte("g"), Files: []FileInfo{{Name: "p00001-000001.sst", Bytes: 100, Cells: 3}}, Node: "n1", VersionTime: t0.Add(2 * time.Second)},
		{Start: []byte("g"), Files: []FileInfo{{Name: "p00002-000001.sst", Bytes: 50, Cells: 2}}, Node: "n2", VersionTime: t0.Add(time.Second)},
	}, t0.Add(3*time.Second))
	if done.State != Ready || done.Cells != 5 || done.SizeBytes != 150 || !done.VersionTime.Equal(t0.Add(time.Second)) {
		t.Fatalf("completed: state %v cells %d size %d version %v", done.State, done.Cells, done.SizeBytes, done.VersionTime)
	}
	enc, err := EncodeRecord(done, "", "n2/tok")
	if err != nil {
		t.Fatal(err)
	}
	back, node, err := DecodeRecord(enc)
	if err != nil || node != "" || back.State != Ready || len(back.Parts) != 2 || back.BackupName() != name {
		t.Fatalf("decoded: %+v %q %v", back, node, err)
	}
	if r := RecordRestoring(enc); len(r) != 1 || r[0] != "n2/tok" {
		t.Errorf("restoring: %v", r)
	}
	if got := back.PartsIn([]RowSpan{{Start: []byte("h"), End: []byte("k")}}); len(got) != 1 || got[0].Name != "p00002-000001.sst" {
		t.Errorf("files of rows [h,k): %v", got)
	}
	for _, bad := range [][2]string{{`"cells":3`, `"cells":4`}, {`p00001-000001.sst`, `../../x.sst`}} {
		b := bytes.Replace(enc, []byte(bad[0]), []byte(bad[1]), 1)
		if _, _, err := DecodeRecord(b); err == nil {
			t.Errorf("record with %s accepted", bad[1])
		}
	}
	cp, err := done.CopyAs(Name{Instance: inst, Cluster: "c2", ID: "b2"}, "y.", t0, t0.Add(8*time.Hour))
	if err != nil || cp.SourceBackup != done.Name || cp.State != Creating || len(cp.Parts) != 2 {
		t.Fatalf("copy: %+v %v", cp, err)
	}
	if _, err := done.CopyAs(Name{Instance: inst, Cluster: "c2", ID: "b2"}, "y.", t0, t0.Add(40*24*time.Hour)); err == nil {
		t.Error("a copy kept 40 days was accepted")
	}
}
