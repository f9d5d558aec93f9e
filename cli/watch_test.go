package cli

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// fakeStreams is a server with two partitions, ["", "m") and ["m", ""),
// that merge into one while read; the second breaks once with
// Unavailable and must be resumed from its last token.
type fakeStreams struct {
	btpb.UnimplementedBigtableServer
	ebbadminpb.UnimplementedEbbAdminServer
	mu    sync.Mutex
	calls []string // partition and how it started, per Watch call
	broke bool
}

func (f *fakeStreams) GenerateInitialChangeStreamPartitions(_ *btpb.GenerateInitialChangeStreamPartitionsRequest, st btpb.Bigtable_GenerateInitialChangeStreamPartitionsServer) error {
	for _, r := range [][2]string{{"", "m"}, {"m", ""}} {
		rr := &btpb.RowRange{StartKey: &btpb.RowRange_StartKeyClosed{StartKeyClosed: []byte(r[0])}}
		if r[1] != "" {
			rr.EndKey = &btpb.RowRange_EndKeyOpen{EndKeyOpen: []byte(r[1])}
		}
		if err := st.Send(&btpb.GenerateInitialChangeStreamPartitionsResponse{Partition: &btpb.StreamPartition{RowRange: rr}}); err != nil {
			return err
		}
	}
	return nil
}

func wp(start, end string) *ebbadminpb.WatchPartition {
	return &ebbadminpb.WatchPartition{StartKey: []byte(start), EndKey: []byte(end)}
}

func (f *fakeStreams) Watch(in *ebbadminpb.WatchRequest, st grpc.ServerStreamingServer[ebbadminpb.WatchResponse]) error {
	p := string(in.GetPartition().GetStartKey()) + "-" + string(in.GetPartition().GetEndKey())
	var from []string
	for _, t := range in.GetTokens() {
		from = append(from, string(t.GetPartition().GetStartKey())+"-"+string(t.GetPartition().GetEndKey())+"@"+t.GetToken())
	}
	f.mu.Lock()
	f.calls = append(f.calls, p+" "+strings.Join(from, ","))
	broke := f.broke
	if p == "m-" {
		f.broke = true
	}
	f.mu.Unlock()
	line := func(c int64, row string) error {
		tok := fmt.Sprintf("v1.%d.0.0", c)
		return st.Send(&ebbadminpb.WatchResponse{Line: fmt.Sprintf(`{"token":%q,"row_key":%q}`, tok, row), Token: tok, ReadTo: tok})
	}
	beat := func(c int64) error {
		tok := fmt.Sprintf("v1.%d.0.0", c)
		return st.Send(&ebbadminpb.WatchResponse{Heartbeat: true, Token: tok, ReadTo: tok})
	}
	closeTo := func(tok string, r *ebbadminpb.WatchPartition) error {
		return st.Send(&ebbadminpb.WatchResponse{Close: &ebbadminpb.WatchClose{
			NewPartitions: []*ebbadminpb.WatchPartition{wp("", "")},
			Tokens:        []*ebbadminpb.WatchToken{{Partition: r, Token: tok}}}})
	}
	var err error
	switch {
	case p == "-m":
		for _, e := range []error{line(10, "a"), line(30, "b"), beat(40), closeTo("v1.40.0.0", wp("", "m"))} {
			err = errorsJoin(err, e)
		}
	case p == "m-" && !broke:
		if err := line(20, "n"); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "node going away")
	case p == "m-":
		if len(in.GetTokens()) != 1 || in.GetTokens()[0].GetToken() != "v1.20.0.0" {
			return status.Errorf(codes.InvalidArgument, "resumed with %v", in.GetTokens())
		}
		for _, e := range []error{line(35, "o"), beat(50), closeTo("v1.50.0.0", wp("m", ""))} {
			err = errorsJoin(err, e)
		}
	case p == "-":
		for _, e := range []error{line(55, "c"), line(55, "c"), line(60, "z"), st.Send(&ebbadminpb.WatchResponse{Close: &ebbadminpb.WatchClose{}})} {
			err = errorsJoin(err, e)
		}
	default:
		return status.Errorf(codes.InvalidArgument, "no partition %q", p)
	}
	return err
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestRunWatchMergesPartitions drives the watch client against scripted
// partitions: records come out once each in commit order, a broken stream
// resumes from its token, and the merged partition starts only when both
// parents' tokens cover it, from both of them.
func TestRunWatchMergesPartitions(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeStreams{}
	srv := grpc.NewServer()
	btpb.RegisterBigtableServer(srv, f)
	ebbadminpb.RegisterEbbAdminServer(srv, f)
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got []string
	err = runWatch(context.Background(), conn, watchArgs{project: "p", instance: "i", table: "t", until: "2030-01-01T00:00:00Z"}, func(line string) error {
		got = append(got, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range got {
		rows = append(rows, l[strings.Index(l, `"row_key":`)+11:len(l)-2])
	}
	if want := "a n b o c z"; strings.Join(rows, " ") != want {
		t.Errorf("printed rows %q, want %q", strings.Join(rows, " "), want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	merged := f.calls[len(f.calls)-1]
	if merged != "- -m@v1.40.0.0,m-@v1.50.0.0" && merged != "- m-@v1.50.0.0,-m@v1.40.0.0" {
		t.Errorf("the merged partition started as %q; calls %q", merged, f.calls)
	}
}
