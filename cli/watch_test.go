package cli

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// fakeStreams is a server with two partitions, ["", "m") and ["m", ""),
// whose streams follow a script: by default they merge into one while
// read, and the second breaks once with Unavailable and must be resumed
// from its last token. With resplit, the merged tablet has split again at
// "x" by the time the second closes.
type fakeStreams struct {
	btpb.UnimplementedBigtableServer
	ebbadminpb.UnimplementedEbbAdminServer
	resplit bool
	mu      sync.Mutex
	calls   []string // partition and how it started, per Watch call
	broke   bool
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
	sort.Strings(from)
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
	closeTo := func(parts []*ebbadminpb.WatchPartition, toks ...*ebbadminpb.WatchToken) error {
		return st.Send(&ebbadminpb.WatchResponse{Close: &ebbadminpb.WatchClose{NewPartitions: parts, Tokens: toks}})
	}
	end := func() error { return closeTo(nil) }
	tok := func(r *ebbadminpb.WatchPartition, c int64) *ebbadminpb.WatchToken {
		return &ebbadminpb.WatchToken{Partition: r, Token: fmt.Sprintf("v1.%d.0.0", c)}
	}
	var steps []error
	switch {
	case p == "-m" && len(in.GetTokens()) == 0:
		steps = []error{line(10, "a"), line(30, "b"), beat(40), closeTo([]*ebbadminpb.WatchPartition{wp("", "")}, tok(wp("", "m"), 40))}
	case p == "m-" && !broke:
		if err := line(20, "n"); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "node going away")
	case p == "m-":
		if len(in.GetTokens()) != 1 || in.GetTokens()[0].GetToken() != "v1.20.0.0" {
			return status.Errorf(codes.InvalidArgument, "resumed with %v", in.GetTokens())
		}
		steps = []error{line(35, "o"), beat(50)}
		if f.resplit {
			steps = append(steps, closeTo([]*ebbadminpb.WatchPartition{wp("", "x"), wp("x", "")}, tok(wp("m", "x"), 50), tok(wp("x", ""), 50)))
		} else {
			steps = append(steps, closeTo([]*ebbadminpb.WatchPartition{wp("", "")}, tok(wp("m", ""), 50)))
		}
	case p == "-" && !f.resplit:
		steps = []error{line(55, "c"), line(55, "c"), line(60, "z"), end()}
	case p == "-m" || p == "m-x":
		steps = []error{line(map[string]int64{"-m": 57, "m-x": 55}[p], map[string]string{"-m": "c", "m-x": "p"}[p]), end()}
	case p == "x-" && f.resplit:
		steps = []error{line(60, "z"), end()}
	default:
		return status.Errorf(codes.InvalidArgument, "no partition %q", p)
	}
	for _, err := range steps {
		if err != nil {
			return err
		}
	}
	return nil
}

// runFake runs the watch client against f and returns the rows printed.
func runFake(t *testing.T, f *fakeStreams, ahead int) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
	var rows []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = runWatch(ctx, conn, watchArgs{project: "p", instance: "i", table: "t", until: "2030-01-01T00:00:00Z", ahead: ahead}, func(line string) error {
		rows = append(rows, line[strings.Index(line, `"row_key":`)+11:len(line)-2])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(rows, " ")
}

// TestRunWatchMergesPartitions drives the watch client against scripted
// partitions: records come out once each in commit order, a broken stream
// resumes from its token, and the merged partition starts only when both
// parents' tokens cover it, from both of them.
func TestRunWatchMergesPartitions(t *testing.T) {
	t.Parallel()
	f := &fakeStreams{}
	if got, want := runFake(t, f, 0), "a n b o c z"; got != want {
		t.Errorf("printed rows %q, want %q", got, want)
	}
	// Reading a partition no further than one record ahead of the others
	// holds nothing up.
	if got, want := runFake(t, &fakeStreams{}, 1), "a n b o c z"; got != want {
		t.Errorf("one record ahead at most: printed rows %q, want %q", got, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if merged := f.calls[len(f.calls)-1]; merged != "- -m@v1.40.0.0,m-@v1.50.0.0" {
		t.Errorf("the merged partition started as %q; calls %q", merged, f.calls)
	}
}

// TestRunWatchTabletsChangedAgain: the merged tablet split again before
// its second parent closed, so that parent's tokens name the new halves
// and no close ever covers the merged partition: the client reads each
// token's rows on their own instead of waiting for ever.
func TestRunWatchTabletsChangedAgain(t *testing.T) {
	t.Parallel()
	f := &fakeStreams{resplit: true}
	if got, want := runFake(t, f, 0), "a n b o p c z"; got != want {
		t.Errorf("printed rows %q, want %q", got, want)
	}
	if got, want := runFake(t, &fakeStreams{resplit: true}, 1), "a n b o p c z"; got != want {
		t.Errorf("one record ahead at most: printed rows %q, want %q", got, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	calls := strings.Join(f.calls, "; ")
	for _, want := range []string{"-m -m@v1.40.0.0", "m-x m-x@v1.50.0.0", "x- x-@v1.50.0.0"} {
		if !strings.Contains(calls, want) {
			t.Errorf("no call %q: %s", want, calls)
		}
	}
}
