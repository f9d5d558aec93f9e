package server

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/changestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestReplicateShipsLocalUserRecords: the Replicate stream, which peers will
// pull from, carries this cluster's user writes in the binary record
// encoding with resumable tokens, and no system records.
func TestReplicateShipsLocalUserRecords(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.streamedTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	for _, row := range []string{"a", "b"} {
		m := bigtable.NewMutation()
		m.Set("f", "c", 1000, []byte("v-"+row))
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	until := env.endTime().AsTime().Format(time.RFC3339Nano)

	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, _ := structpb.NewStruct(map[string]any{"project": testProject, "instance": testInstance, "table": "t", "since": "oldest", "until": until})
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, MethodReplicate)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(req); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for {
		msg := new(structpb.Struct)
		err := st.RecvMsg(msg)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		f := msg.GetFields()
		b, err := base64.StdEncoding.DecodeString(f["record"].GetStringValue())
		if err != nil {
			t.Fatal(err)
		}
		rec, err := changestream.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := changestream.ParseToken(f["token"].GetStringValue()); err != nil {
			t.Errorf("token %q: %v", f["token"].GetStringValue(), err)
		}
		if f["origin"].GetStringValue() != "ebbtable" || rec.Type != changestream.User || len(rec.Mods) != 1 {
			t.Errorf("record %+v origin %q", rec, f["origin"].GetStringValue())
		}
		rows = append(rows, string(rec.RowKey))
	}
	if len(rows) != 2 || rows[0] != "a" || rows[1] != "b" {
		t.Fatalf("replicated rows %q", rows)
	}
}
