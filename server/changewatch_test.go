package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestWatchPartitionOneNode: Watch of the one partition (the whole table)
// on a node alone sends each record's line with the partition's token and
// read_to, closes without new partitions at until, resumes from a
// continuation token, and refuses other partitions and mixed starts.
func TestWatchPartitionOneNode(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.streamedTable(t, "w", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	env.clock.Advance(time.Millisecond)
	for _, row := range []string{"r1", "r2"} {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, []byte(row))
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
		env.clock.Advance(time.Millisecond)
	}
	until := env.endTime().AsTime().UTC().Format(time.RFC3339Nano)
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := ebbadminpb.NewEbbAdminClient(conn)
	whole := &ebbadminpb.WatchPartition{}
	watch := func(req *ebbadminpb.WatchRequest) ([]*ebbadminpb.WatchResponse, error) {
		t.Helper()
		req.Project, req.Instance, req.Table, req.Until = testProject, testInstance, "w", until
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		st, err := c.Watch(ctx, req)
		if err != nil {
			return nil, err
		}
		var out []*ebbadminpb.WatchResponse
		for {
			resp, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return out, err
			}
			if !resp.GetHeartbeat() {
				out = append(out, resp)
			}
		}
	}
	got, err := watch(&ebbadminpb.WatchRequest{Partition: whole, Since: "oldest"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2].GetClose() == nil || len(got[2].GetClose().GetNewPartitions()) != 0 {
		t.Fatalf("watch of the whole table: %v, want two lines and a close without new partitions", got)
	}
	var first string
	for i, r := range got[:2] {
		var line struct {
			Token  string `json:"token"`
			RowKey string `json:"row_key"`
		}
		if err := json.Unmarshal([]byte(r.GetLine()), &line); err != nil {
			t.Fatal(err)
		}
		if want := []string{"r1", "r2"}[i]; line.RowKey != want || r.GetToken() != line.Token || r.GetReadTo() != line.Token {
			t.Errorf("response %d: %v, want row %s with token and read_to %s", i, r, want, line.Token)
		}
		if i == 0 {
			first = line.Token
		}
	}
	got, err = watch(&ebbadminpb.WatchRequest{Partition: whole, Tokens: []*ebbadminpb.WatchToken{{Partition: whole, Token: first}}})
	if err != nil || len(got) != 2 || !strings.Contains(got[0].GetLine(), `"row_key":"r2"`) {
		t.Errorf("resumed after r1: %v, %v; want r2's line and the close", got, err)
	}
	for _, tc := range []struct {
		what string
		req  *ebbadminpb.WatchRequest
		msg  string
	}{
		{"part of the table", &ebbadminpb.WatchRequest{Partition: &ebbadminpb.WatchPartition{StartKey: []byte("r")}}, "one partition"},
		{"since and tokens", &ebbadminpb.WatchRequest{Partition: whole, Since: "oldest", Tokens: []*ebbadminpb.WatchToken{{Partition: whole, Token: first}}}, "exclude each other"},
		{"negative heartbeat", &ebbadminpb.WatchRequest{Partition: whole, HeartbeatMillis: -1}, "heartbeat_millis"},
		{"bad token", &ebbadminpb.WatchRequest{Partition: whole, Tokens: []*ebbadminpb.WatchToken{{Partition: whole, Token: "v9"}}}, "token"},
	} {
		if _, err := watch(tc.req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want InvalidArgument mentioning %q", tc.what, err, tc.msg)
		}
	}
}
