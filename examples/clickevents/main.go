// Command clickevents runs the "default expiration" example of the vendor page
// "Simulate cell-level TTL" against an in-process ebbtable, next to ebbtable's
// native cell TTL, with the official Go client, and prints what each keeps as
// the days pass.
//
// Ten customers' click events expire after the default two days, customer 01's
// after an hour and customer 02's after three days. Family "shifted" follows
// the page: GC rule maxage=2d, and timestamps shifted earlier (shorter TTL) or
// later (longer TTL). Family "native" has no GC rule; each write carries its
// TTL in the x-ebbtable-cell-ttl request metadata and keeps its real
// timestamp.
//
// The timeline spans three days, so by default (--clock fake) the server runs
// on a fake clock that the program moves forward.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

const (
	project, instance = "demo", "demo"
	tableName         = "clicks"
	defaultTTL        = 48 * time.Hour
	customers         = 10
	clicksPerCustomer = 3
)

// ttlOf is each customer's TTL: the page's example.
func ttlOf(customer int) time.Duration {
	switch customer {
	case 1:
		return time.Hour
	case 2:
		return 72 * time.Hour
	}
	return defaultTTL
}

// steps are the moments, after the last click, at which the program looks.
var steps = []time.Duration{0, 30 * time.Minute, time.Hour + time.Second, 48*time.Hour + time.Second, 72*time.Hour + time.Second}

// lastClick is when the fake clock says the last clicks happen (the page's
// April 30, 9:00).
var lastClick = time.Date(2026, 4, 30, 9, 0, 0, 0, time.UTC)

func main() {
	clockMode := flag.String("clock", "fake", "fake: a fake clock the program advances through three days; real: the wall clock (only the first step)")
	flag.Parse()
	if *clockMode != "fake" && *clockMode != "real" {
		fmt.Fprintf(os.Stderr, "clickevents: --clock %q: want fake or real\n", *clockMode)
		os.Exit(2)
	}
	if err := runWith(os.Stdout, *clockMode == "fake"); err != nil {
		fmt.Fprintln(os.Stderr, "clickevents:", err)
		os.Exit(1)
	}
}

// run is the example on the fake clock.
func run(w io.Writer) error { return runWith(w, true) }

func runWith(w io.Writer, fake bool) (err error) {
	dir, err := os.MkdirTemp("", "clickevents-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	opts := server.Options{
		Addr:     "127.0.0.1:0",
		HTTPAddr: "off",
		DataDir:  dir,
		Logger:   slog.New(slog.DiscardHandler),
	}
	// No background pass in the three days the example spans: the program
	// runs the passes itself, so the output does not depend on when the
	// background loop wakes (reads hide expired cells in any case).
	opts.GC.Interval = 1000 * time.Hour
	firstClick := lastClick.Add(-(clicksPerCustomer - 1) * time.Second)
	if fake {
		opts.Clock = clock.NewFake(firstClick)
	}
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		return err
	}
	defer func() {
		if cerr := srv.Close(); err == nil {
			err = cerr
		}
	}()
	// The engine's clock is the one the server reads and writes with.
	fakeClock, _ := srv.Engine().Clock().(*clock.Fake)
	if fake != (fakeClock != nil) {
		return fmt.Errorf("the server's clock is %T", srv.Engine().Clock())
	}

	ctx := context.Background()
	c, err := connect(ctx, srv.Addr())
	if err != nil {
		return err
	}
	defer c.close()

	// The page's approach: a family whose GC rule is the default TTL. Ours:
	// a family without a GC rule, for cells with a native TTL.
	if err := c.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: tableName, ColumnFamilies: map[string]bigtable.Family{
		"shifted": {GCPolicy: bigtable.MaxAgePolicy(defaultTTL)},
		"native":  {},
	}}); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	tbl := c.data.Open(tableName)

	// Each customer clicks three times, a second apart; each click is
	// written as it happens.
	for i := 0; i < clicksPerCustomer; i++ {
		clickedAt := firstClick.Add(time.Duration(i) * time.Second)
		if fakeClock != nil {
			fakeClock.Set(clickedAt)
		} else {
			clickedAt = time.Now()
		}
		if err := writeClicks(ctx, tbl, i, clickedAt); err != nil {
			return err
		}
	}
	start := lastClick
	if fakeClock == nil {
		start = time.Now()
	}

	fmt.Fprintf(w, "%d customers, %d click events each, the last at %s.\n", customers, clicksPerCustomer, stamp(start))
	fmt.Fprintf(w, "TTLs: customer 01 1h, customer 02 3d, the others the default 2d.\n\n")
	fmt.Fprintf(w, "family shifted: GC rule maxage=2d; timestamps shifted by TTL-2d (01: -47h, 02: +24h)\n")
	fmt.Fprintf(w, "family native:  no GC rule; x-ebbtable-cell-ttl 1h, 3d or 2d on each write, real timestamps\n\n")

	// What a reader sees of a click: the shifted family has lost the click
	// time; the native one keeps it and tells the expiry on request.
	fmt.Fprintln(w, "the last click of customers 01 and 02 as a reader sees it (read with x-ebbtable-show-expiry: true):")
	for _, cust := range []int{1, 2} {
		row, err := tbl.ReadRow(metadata.AppendToOutgoingContext(ctx, server.MetaShowExpiry, "true"), rowKey(cust, clicksPerCustomer-1))
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		for _, fam := range []string{"shifted", "native"} {
			for _, it := range row[fam] {
				line := fmt.Sprintf("  %s  %-12s @ %s", row.Key(), it.Column, stamp(it.Timestamp.Time()))
				for _, l := range it.Labels {
					if exp, ok := strings.CutPrefix(l, server.ExpiryLabelPrefix); ok {
						line += "  expires " + exp
					}
				}
				if shift := it.Timestamp.Time().Sub(start); fam == "shifted" && shift != 0 {
					line += fmt.Sprintf("  (not the click time: shifted %+v)", shift.Round(time.Hour))
				}
				fmt.Fprintln(w, line)
			}
		}
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "after\tclock\tshifted keeps\tnative keeps\tgc pass collected")
	for _, after := range steps {
		if fakeClock != nil {
			fakeClock.Set(start.Add(after))
		} else if after > 0 {
			break
		}
		kept, err := keptByFamily(ctx, tbl)
		if err != nil {
			return err
		}
		collected, err := c.gcRun(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%v\t%s\t%s\t%s\t%d cells\n", after, stamp(start.Add(after)), customerList(kept["shifted"]), customerList(kept["native"]), collected)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if fakeClock == nil {
		fmt.Fprintln(w, "\n(--clock real: the other steps are days away; run with --clock fake to see them)")
	}
	return nil
}

// writeClicks writes click i of every customer at clickedAt into both
// families: one MutateRows without metadata for the shifted family, and one
// per TTL with the x-ebbtable-cell-ttl metadata for the native family (the
// metadata applies to every SetCell of a request).
func writeClicks(ctx context.Context, tbl *bigtable.Table, i int, clickedAt time.Time) error {
	var keys []string
	var shifted []*bigtable.Mutation
	native := map[time.Duration][]*bigtable.Mutation{}
	nativeKeys := map[time.Duration][]string{}
	for cust := 1; cust <= customers; cust++ {
		key, ttl := rowKey(cust, i), ttlOf(cust)
		page := []byte(fmt.Sprintf("/page/%d", i))

		// The page's convention: expire sooner by stamping earlier, later
		// by stamping later.
		m := bigtable.NewMutation()
		m.Set("shifted", "page", bigtable.Time(clickedAt.Add(ttl-defaultTTL)), page)
		keys, shifted = append(keys, key), append(shifted, m)

		m = bigtable.NewMutation()
		m.Set("native", "page", bigtable.Time(clickedAt), page)
		nativeKeys[ttl], native[ttl] = append(nativeKeys[ttl], key), append(native[ttl], m)
	}
	if err := applyBulk(ctx, tbl, keys, shifted); err != nil {
		return fmt.Errorf("write shifted clicks: %w", err)
	}
	for ttl, muts := range native {
		mdCtx := metadata.AppendToOutgoingContext(ctx, server.MetaCellTTL, ttlString(ttl))
		if err := applyBulk(mdCtx, tbl, nativeKeys[ttl], muts); err != nil {
			return fmt.Errorf("write native clicks with TTL %s: %w", ttlString(ttl), err)
		}
	}
	return nil
}

func applyBulk(ctx context.Context, tbl *bigtable.Table, keys []string, muts []*bigtable.Mutation) error {
	errs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

// ttlString is a TTL in the metadata's syntax: whole days as "2d".
func ttlString(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func rowKey(customer, click int) string { return fmt.Sprintf("customer%02d#%d", customer, click) }

// keptByFamily reads the whole table and returns, per family, the customers
// all of whose clicks a reader still sees there.
func keptByFamily(ctx context.Context, tbl *bigtable.Table) (map[string][]int, error) {
	clicks := map[string]map[int]int{}
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		var cust int
		fmt.Sscanf(r.Key(), "customer%02d#", &cust)
		for fam, items := range r {
			if clicks[fam] == nil {
				clicks[fam] = map[int]int{}
			}
			clicks[fam][cust] += len(items)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	kept := map[string][]int{}
	for fam, byCust := range clicks {
		for cust, n := range byCust {
			if n == clicksPerCustomer {
				kept[fam] = append(kept[fam], cust)
			} else {
				// The timeline never stops between two clicks of a customer.
				return nil, fmt.Errorf("customer %02d has %d of %d clicks in family %s", cust, n, clicksPerCustomer, fam)
			}
		}
		slices.Sort(kept[fam])
	}
	return kept, nil
}

// customerList prints sorted customer numbers, runs as ranges: "01-10",
// "02", "none".
func customerList(cs []int) string {
	if len(cs) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(cs); {
		j := i
		for j+1 < len(cs) && cs[j+1] == cs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprintf("%02d", cs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%02d-%02d", cs[i], cs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// clients are the official Data and Admin API clients and a connection for
// ebbtable's own admin service.
type clients struct {
	data  *bigtable.Client
	admin *bigtable.AdminClient
	ebb   *grpc.ClientConn
	conns []*grpc.ClientConn
}

// connect points the official clients at addr the way the emulator is
// reached: plaintext, no credentials (BIGTABLE_EMULATOR_HOST=addr does the
// same).
func connect(ctx context.Context, addr string) (*clients, error) {
	c := &clients{}
	dial := func() (*grpc.ClientConn, error) {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			c.conns = append(c.conns, conn)
		}
		return conn, err
	}
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	c.data, err = bigtable.NewClientWithConfig(ctx, project, instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true},
		option.WithGRPCConn(conn), option.WithoutAuthentication())
	if err != nil {
		c.close()
		return nil, err
	}
	if conn, err = dial(); err != nil {
		c.close()
		return nil, err
	}
	if c.admin, err = bigtable.NewAdminClient(ctx, project, instance, option.WithGRPCConn(conn), option.WithoutAuthentication()); err != nil {
		c.close()
		return nil, err
	}
	if c.ebb, err = dial(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *clients) close() {
	if c.data != nil {
		c.data.Close()
	}
	if c.admin != nil {
		c.admin.Close()
	}
	for _, conn := range c.conns {
		conn.Close()
	}
}

// gcRun runs a garbage-collection pass now through ebbtable's admin service
// and returns how many cells it deleted.
func (c *clients) gcRun(ctx context.Context) (int64, error) {
	resp, err := ebbadminpb.NewEbbAdminClient(c.ebb).GcRun(ctx, &ebbadminpb.GcRunRequest{Project: project, Instance: instance, Table: tableName})
	if err != nil {
		return 0, fmt.Errorf("gc run: %w", err)
	}
	return resp.GetCollected(), nil
}
