package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestHTTPPortTakesTokens: with tokens on, the HTTP port (metrics, health,
// and whatever else its mux serves) asks for them, over TLS; /healthz and
// /readyz stay open, and --metrics-open opens /metrics alone.
func TestHTTPPortTakesTokens(t *testing.T) {
	t.Parallel()
	certs := newCerts(t, "h")
	tokens, _ := securityFiles(t)
	for _, metricsOpen := range []bool{false, true} {
		srv := startSecure(t, SecurityOptions{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TokenFile: tokens, MetricsOpen: metricsOpen},
			func(o *Options) { o.HTTPAddr = "127.0.0.1:0" })
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: caPool(t, certs.CA)}}, Timeout: 10 * time.Second}
		get := func(method, path string, auth func(*http.Request)) int {
			t.Helper()
			req, err := http.NewRequest(method, "https://"+srv.HTTPAddr()+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if auth != nil {
				auth(req)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s: 401 without WWW-Authenticate", method, path)
			}
			return resp.StatusCode
		}
		bearer := func(tok string) func(*http.Request) {
			return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
		}
		basic := func(tok string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth("me", tok) } }
		metricsAnon := http.StatusUnauthorized
		if metricsOpen {
			metricsAnon = http.StatusOK
		}
		for _, c := range []struct {
			method, path string
			auth         func(*http.Request)
			want         int
		}{
			{"GET", "/healthz", nil, 200},
			{"GET", "/readyz", nil, 200},
			{"GET", "/metrics", nil, metricsAnon},
			{"GET", "/metrics", bearer("unknown-token-0123456789"), metricsAnonOr(metricsOpen, 401)},
			{"GET", "/metrics", bearer(tokViewer), 200},
			{"GET", "/metrics", basic(tokViewer), 200},
			{"GET", "/metrics", bearer(tokOther), metricsAnonOr(metricsOpen, 403)},
			{"GET", "/", nil, 401},
			{"GET", "/", bearer(tokViewer), 403},
			{"GET", "/", bearer(tokReader), passed},
			{"POST", "/", bearer(tokUser), 403},
			{"POST", "/", basic(tokAdmin), passed},
		} {
			got := get(c.method, c.path, c.auth)
			if c.want == passed && got != http.StatusUnauthorized && got != http.StatusForbidden {
				continue // past the check: whatever the mux serves there
			}
			if got != c.want {
				t.Errorf("metrics-open=%v %s %s: %d, want %d", metricsOpen, c.method, c.path, got, c.want)
			}
		}
	}
}

// passed stands for any answer but 401 and 403: the request got past the
// check to the mux (which may or may not serve a page there).
const passed = -1

func metricsAnonOr(open bool, code int) int {
	if open {
		return 200
	}
	return code
}

// TestInflightBytesBound: a request that would pass the bound on request
// bytes in flight fails with RESOURCE_EXHAUSTED; concurrent requests either
// fit or are refused so, and the bytes held return to zero. The bound is
// 640 KiB, the big request 768 KiB and the concurrent ones 256 KiB (two fit
// at once): the same crossings as 5 MiB, 6 MiB and 2 MiB with an eighth of
// the bytes copied under the race runtime.
func TestInflightBytesBound(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, func(o *Options) { o.Security.MaxInflightBytes = 640 << 10 })
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	ctx := context.Background()
	set := func(row string, n int) error {
		m := bigtable.NewMutation()
		m.Set("f", "c", 1000, bytes.Repeat([]byte("x"), n))
		return tbl.Apply(ctx, row, m)
	}
	if err := set("big", 768<<10); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-inflight-bytes") {
		t.Fatalf("768 KiB request with a 640 KiB bound: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = set(fmt.Sprint("r", i), 256<<10) }()
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			ok++
		case codes.ResourceExhausted:
		default:
			t.Errorf("request %d: %v", i, err)
		}
	}
	if ok == 0 {
		t.Error("no request fit")
	}
	if n := env.srv.sec.inflight.Load(); n != 0 {
		t.Errorf("%d bytes still counted in flight", n)
	}
}

// TestChangeStreamTailsBound: open tails past --max-change-streams are
// refused with RESOURCE_EXHAUSTED, and a closed tail frees its place.
func TestChangeStreamTailsBound(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, func(o *Options) { o.Security.MaxChangeStreams = 3 })
	ctx := context.Background()
	if err := env.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "cs", ColumnFamilies: map[string]bigtable.Family{"f": {}}, ChangeStreamRetention: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	raw := env.raw(t)
	open := func(ctx context.Context) error {
		st, err := raw.ReadChangeStream(ctx, &btpb.ReadChangeStreamRequest{TableName: tableName("cs")})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	var cancels []context.CancelFunc
	var wg sync.WaitGroup
	for range 3 {
		cctx, cancel := context.WithCancel(ctx)
		cancels = append(cancels, cancel)
		wg.Add(1)
		go func() { defer wg.Done(); open(cctx) }()
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	}()
	waitFor(t, "three tails open", func() bool { return env.srv.sec.streams.Load() == 3 })
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := open(short); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-change-streams") {
		t.Fatalf("fourth tail: %v", err)
	}
	cancels[0]()
	waitFor(t, "a tail closed", func() bool { return env.srv.sec.streams.Load() == 2 })
	cctx, cancel4 := context.WithCancel(ctx)
	cancels = append(cancels, cancel4)
	wg.Add(1)
	go func() { defer wg.Done(); open(cctx) }()
	waitFor(t, "a new tail in the freed place", func() bool { return env.srv.sec.streams.Load() == 3 })
}

// TestRowTooLargeOverGRPC: the official client gets FAILED_PRECONDITION
// for a row whose selected cells pass --max-row-bytes, and reads it in
// parts.
func TestRowTooLargeOverGRPC(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, func(o *Options) { o.Security.MaxRowBytes = 1 << 20 })
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	ctx := context.Background()
	for i := range 3 {
		m := bigtable.NewMutation()
		m.Set("f", fmt.Sprint("c", i), 1000, bytes.Repeat([]byte("x"), 400<<10))
		if err := tbl.Apply(ctx, "big", m); err != nil {
			t.Fatal(err)
		}
	}
	_, err := tbl.ReadRow(ctx, "big")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "read it in parts") {
		t.Fatalf("whole row: %v", err)
	}
	row, err := tbl.ReadRow(ctx, "big", bigtable.RowFilter(bigtable.ColumnFilter("c1")))
	if err != nil || len(row["f"]) != 1 {
		t.Fatalf("one column: %v, %v", len(row["f"]), err)
	}
}

// TestManyVersionsReadWithColumnLimit: a row of many versions read with
// CellsPerColumnLimit(1) returns one cell and steps on a few keys, not on
// every version.
func TestManyVersionsReadWithColumnLimit(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	ctx := context.Background()
	writeVersions(t, tbl, "many", 20000)
	row, err := tbl.ReadRow(ctx, "many", bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil || len(row["f"]) != 1 || row["f"][0].Timestamp != 20000*1000 {
		t.Fatalf("latest version: %v, %v", row, err)
	}
}

// writeVersions writes n versions of column f:c of one row, 10,000 a call.
func writeVersions(t testing.TB, tbl *bigtable.Table, row string, n int) {
	t.Helper()
	for done := 0; done < n; {
		m := bigtable.NewMutation()
		for k := 0; done < n && k < 10000; k, done = k+1, done+1 {
			m.Set("f", "c", bigtable.Timestamp(done+1)*1000, []byte("v"))
		}
		if err := tbl.Apply(context.Background(), row, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMaxConnections: past --max-connections a new connection waits until
// one closes.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	srv := startSecure(t, SecurityOptions{MaxConnections: 1})
	first := plainConn(t, srv.Addr())
	first.Connect()
	waitFor(t, "first connection ready", func() bool { return first.GetState() == connectivity.Ready })
	second, err := grpc.NewClient("passthrough:///"+srv.Addr(), grpc.WithTransportCredentials(grpcInsecure()))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	admin, err := bigtable.NewAdminClient(context.Background(), testProject, testInstance, option.WithGRPCConn(second))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := admin.Tables(short); !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("second connection past the bound: %v, want DeadlineExceeded", err)
	}
	first.Close()
	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := admin.Tables(ctx); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
}

// waitFor polls cond through eventually.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually(t, what, func() (bool, string) { return cond(), "" })
}

func grpcInsecure() credentials.TransportCredentials { return insecure.NewCredentials() }
