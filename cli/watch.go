package cli

import (
	"context"
	"errors"
	"io"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/changestream/merge"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// `ebbtable watch` is a change-stream client like the official ones: it
// asks GenerateInitialChangeStreamPartitions for the table's partitions
// (one per tablet in a cluster, the whole table on one node), reads each
// with EbbAdmin/Watch (the Data API's ReadChangeStream with ebbtable's JSON
// lines, served by the tablet's owner whichever node is asked), and when a
// partition's stream closes because its tablet split, merged or moved it
// goes on with the new partitions from the close's continuation tokens.
// The merge in commit order is package changestream/merge (the web
// console's change tail uses it too); this file is its gRPC source.

// watchHeartbeat is how often an idle partition reports its position: the
// most a record waits for the other partitions before it is printed.
const watchHeartbeat = time.Second

// watchRetryFor is how long a partition's stream is retried on
// Unavailable (its node restarting, a tablet between owners) before the
// command gives up.
const watchRetryFor = 2 * time.Minute

type watchArgs struct {
	project, instance, table string
	since, until, token      string
	excludeSystem            bool
	ahead                    int // merge.DefaultAhead if 0 (tests set less)
}

// runWatch prints the table's change stream to emit until until passes
// (every partition ended) or ctx ends.
func runWatch(ctx context.Context, conn *grpc.ClientConn, a watchArgs, emit func(string) error) error {
	if a.token != "" {
		if _, err := changestream.ParseToken(a.token); err != nil {
			return usagef("--token %q: %v", a.token, err)
		}
	}
	src := &watchSource{a: a, data: btpb.NewBigtableClient(conn), admin: ebbadminpb.NewEbbAdminClient(conn)}
	return merge.Run(ctx, src, merge.Options{
		Since: a.since, Token: a.token, Ahead: a.ahead, RetryFor: watchRetryFor,
		Retry: func(err error) bool {
			c := status.Code(err)
			return c == codes.Unavailable || c == codes.Aborted
		},
	}, func(line string, _ changestream.Position) error { return emit(line) })
}

// watchSource serves the merge over gRPC: the Data API's partitions and
// EbbAdmin/Watch of each.
type watchSource struct {
	a     watchArgs
	data  btpb.BigtableClient
	admin ebbadminpb.EbbAdminClient
}

func (s *watchSource) Partitions(ctx context.Context) ([]merge.Range, error) {
	tableName := "projects/" + s.a.project + "/instances/" + s.a.instance + "/tables/" + s.a.table
	gen, err := s.data.GenerateInitialChangeStreamPartitions(ctx, &btpb.GenerateInitialChangeStreamPartitionsRequest{TableName: tableName})
	if err != nil {
		return nil, err
	}
	var out []merge.Range
	for {
		resp, err := gen.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		rr := resp.GetPartition().GetRowRange()
		out = append(out, merge.Range{Start: rr.GetStartKeyClosed(), End: rr.GetEndKeyOpen()})
	}
}

func (s *watchSource) Watch(ctx context.Context, part merge.Range, from merge.Start) (merge.Stream, error) {
	req := &ebbadminpb.WatchRequest{
		Project: s.a.project, Instance: s.a.instance, Table: s.a.table, Partition: server.WatchPartitionFor(part),
		Until: s.a.until, ExcludeSystem: s.a.excludeSystem, HeartbeatMillis: watchHeartbeat.Milliseconds(),
		Since: from.Since, Token: from.Token, Tokens: server.WatchTokensFor(from.Tokens),
	}
	st, err := s.admin.Watch(ctx, req)
	if err != nil {
		return nil, err
	}
	return watchStream{st}, nil
}

type watchStream struct {
	st grpc.ServerStreamingClient[ebbadminpb.WatchResponse]
}

func (w watchStream) Recv() (*merge.Response, error) {
	resp, err := w.st.Recv()
	if err != nil {
		return nil, err
	}
	return server.MergeResponse(resp), nil
}
