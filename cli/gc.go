package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/server"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/structpb"
)

// newGCCmd is `ebbtable gc`: run, plan and status, each one call to the
// server's ebbtable admin service.
func newGCCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Garbage collection: run a pass, plan a rule, show status",
		Long: `Talk to the garbage collector of a running server.

  gc run      run a pass now and print what it collected
  gc plan     count what a GC rule would make eligible, changing nothing
  gc status   show each table's rules, last pass, expiry debt and size
  gc raise    set a family's rule; --coordinated raises a max age on every cluster in step`,
		Args: exactArgs(0, "a subcommand: run, plan or status"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd)
	cmd.AddCommand(newGCRunCmd(&cf), newGCPlanCmd(&cf), newGCStatusCmd(&cf), newGCRaiseCmd(&cf))
	return cmd
}

func newGCRunCmd(cf *connFlags) *cobra.Command {
	var (
		tbl    string
		wait   bool
		asJSON bool
		pf     progressFlags
	)
	cmd := &cobra.Command{
		Use:   "run [--table TABLE] [--wait]",
		Short: "Run a garbage-collection pass now and print what it did",
		Long: `Run a garbage-collection pass now over every table of the instance, or only
--table, and print one line: the tables passed over, the cells examined, the
cells and bytes collected and how long it took. When it collected anything, a
second line splits that time into the sweep (examining and deleting, with its
throughput) and the reclaim (compacting what was deleted so the disk space
comes back, with the space it freed).

The command returns when the pass is done — its deletions durable, its
reclaim finished: --wait is the only mode (it is
accepted so scripts can say so). Passes never overlap, so if the background
collector is in a pass this one starts after it. Interrupting the command
stops the pass between two batches; what was collected stays collected.`,
		Example: `  ebbtable gc run
  ebbtable gc run --table events --wait`,
		Args: exactArgs(0, "no arguments (the table goes in --table)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			tableSet := cmd.Flags().Changed("table")
			if tableSet && tbl == "" {
				return usagef("--table must not be empty (leave it out to collect every table)")
			}
			if !wait {
				return usagef("--wait=false is not supported: gc run always returns when the pass is done")
			}
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			req := map[string]any{}
			if tableSet {
				req["table"] = tbl
			}
			var resp *structpb.Struct
			err := pf.track(ctx, cmd, cf, "gc run", func(ctx context.Context) (err error) {
				resp, err = cf.callEbbAdmin(ctx, server.MethodGCRun, req)
				return err
			})
			if err != nil {
				return fmt.Errorf("gc run: %w", err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			r := fields(resp.GetFields())
			out := cmd.OutOrStdout()
			if _, err := fmt.Fprintf(out, "%s: examined %s, collected %s (%s) in %s\n",
				plural(r.int("tables"), "table"), plural(r.int("examined"), "cell"),
				plural(r.int("collected"), "cell"), humanBytes(r.int("collected_bytes")),
				humanDuration(r.seconds("duration_seconds"))); err != nil {
				return err
			}
			if r.int("collected") == 0 {
				return nil
			}
			sweep := r.seconds("sweep_seconds")
			line := fmt.Sprintf("sweep %s (%s examined/s, %s collected/s)", humanDuration(sweep),
				perSecond(r.int("examined"), sweep.Seconds()), perSecond(r.int("collected"), sweep.Seconds()))
			if d := r.seconds("reclaim_seconds"); d > 0 || r.int("reclaimed_bytes") > 0 {
				line += fmt.Sprintf("; reclaim %s, %s of disk freed", humanDuration(d), humanBytes(r.int("reclaimed_bytes")))
			}
			if n := r.int("reclaim_left_tables"); n > 0 {
				line += fmt.Sprintf("; %s pending in %s (deletions too few or too sparse to compact for): Pebble's compactions free that space",
					humanBytes(r.int("reclaim_pending_bytes")), plural(n, "table"))
			}
			if n := r.int("incremental_tables"); n > 0 {
				line += fmt.Sprintf("; %s incremental, %s visited", plural(n, "table"), plural(r.int("visited_rows"), "row"))
			}
			_, err = fmt.Fprintln(out, line)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tbl, "table", "", "collect only this table (default: every table of the instance)")
	fl.BoolVar(&wait, "wait", true, "return when the pass is done (the only mode)")
	fl.BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	pf.register(cmd)
	return cmd
}

func newGCPlanCmd(cf *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "plan TABLE FAMILY RULE",
		Short: "Count what a GC rule would make eligible now, changing nothing",
		Long: `Count the cells and bytes of one column family that RULE would make eligible
for collection if it were the family's rule now, and those the family's
current rule makes eligible now, without changing anything. It prints RULE as
the official clients print GC policies.

RULE is in cbt's syntax (quote it for the shell):

  maxage=30d                      units ms, s, m, h, d
  maxversions=2
  maxage=30d || maxversions=2     a union ("or" works too)
  maxage=30d && maxversions=1     an intersection ("and" works too)
  never                           no garbage collection

In the default --gc-visibility hidden mode, readers stop seeing eligible cells
as soon as a rule makes them so: the first count is what a reader would stop
seeing if the rule were set now.`,
		Example: `  ebbtable gc plan events cf 'maxage=30d || maxversions=2'`,
		Args:    exactArgs(3, "a table, a column family and a GC rule"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tbl, family, rule := args[0], args[1], args[2]
			if tbl == "" || family == "" {
				return usagef("the table and family must not be empty")
			}
			// The server parses the rule too; parsing here makes a bad
			// rule a usage error, found before any connection.
			if _, err := gcrule.Parse(rule); err != nil {
				return usageError{err}
			}
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			resp, err := cf.callEbbAdmin(ctx, server.MethodGCPlan, map[string]any{"table": tbl, "family": family, "rule": rule})
			if err != nil {
				return fmt.Errorf("gc plan %s %s: %w", tbl, family, err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			r := fields(resp.GetFields())
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "table\t%s\n", tbl)
			fmt.Fprintf(tw, "family\t%s\n", family)
			fmt.Fprintf(tw, "rule\t%s\n", r.str("rule"))
			fmt.Fprintf(tw, "eligible under rule\t%s (%s)\n", plural(r.int("cells"), "cell"), humanBytes(r.int("bytes")))
			fmt.Fprintf(tw, "eligible under current rule\t%s (%s)\n", plural(r.int("currently_cells"), "cell"), humanBytes(r.int("currently_bytes")))
			fmt.Fprintf(tw, "examined\t%s\n", plural(r.int("examined"), "cell"))
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	return cmd
}

func newGCStatusCmd(cf *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the garbage collector's state, table by table",
		Long: `Show the collector's interval, the server's --gc-visibility mode and the
last background pass over all tables (gc run does not count). Then, for each
table of the instance: its column families and their GC rules (as the
official clients print them); when the collector last passed over it and what
that pass examined and collected; its expiry debt (cells that were eligible
but not yet collected when that pass reached them, their bytes, and how long
the oldest had been eligible); its logical bytes (keys and values of live
cells as of the last full scan, 0 until a pass had to read the whole table)
and estimated disk bytes; what became of the space the pass collected (freed
by its compaction, or pending: left to Pebble's compactions); how the pass
went over the table (whole, or incremental with the rows it visited); the
rows waiting on the GC agenda (due now: the next pass visits them; later:
native expiries ahead); and the hidden (versions-eligible) cells the pass
found. "-" marks figures a table does not have yet.

--json prints the server's answer unchanged, as JSON.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cf.adminReport(cmd, server.MethodGCStatus, nil, "gc status", asJSON, printGCStatus)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	return cmd
}

// ageCutoffOf is a family's age cutoff as status prints it: the cell time
// below which this cluster's age collection has gone ("-": none yet).
func ageCutoffOf(f fields) string {
	if c := f.str("age_cutoff"); c != "" {
		return c
	}
	return "-"
}

// printGCStatus lays out a GcStatus answer: a header, then one line per
// column family, the table's figures on its first line.
func printGCStatus(w io.Writer, r fields) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "interval\t%s\n", r.seconds("interval_seconds"))
	fmt.Fprintf(tw, "visibility\t%s\n", r.str("visibility"))
	last := "none yet"
	if started := r.str("last_pass_started"); started != "" {
		last = fmt.Sprintf("%s (took %s)", formatPassTime(started), humanDuration(r.seconds("last_pass_seconds")))
	}
	fmt.Fprintf(tw, "last background pass\t%s\n", last)
	fmt.Fprintf(tw, "piles waiting\t%d\n", r.int("piles_waiting"))
	if err := tw.Flush(); err != nil {
		return err
	}

	tables := r.list("tables")
	if len(tables) == 0 {
		_, err := fmt.Fprintln(w, "\nno tables")
		return err
	}
	slices.SortFunc(tables, func(a, b fields) int { return cmp.Compare(a.str("table"), b.str("table")) })
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tFAMILY\tRULE\tAGE CUTOFF\tLAST PASS\tEXAMINED\tCOLLECTED\tCOLLECTED BYTES\tDEBT CELLS\tDEBT BYTES\tDEBT OLDEST\tLOGICAL BYTES\tDISK BYTES\tRECLAIM\tPASS\tWAITING\tHIDDEN VERSIONS")
	for _, t := range tables {
		fams := t.list("families")
		slices.SortFunc(fams, func(a, b fields) int { return cmp.Compare(a.str("name"), b.str("name")) })
		name, rule, cut := "-", "-", "-"
		if len(fams) > 0 {
			name, rule, cut = fams[0].str("name"), fams[0].str("rule"), ageCutoffOf(fams[0])
		}
		figures := "-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-"
		if lp := t.str("last_pass"); lp != "" {
			oldest := "-"
			if t.int("debt_cells") > 0 {
				oldest = humanDuration(t.seconds("debt_oldest_seconds"))
			}
			// A large table's live debt is counted over its first cells
			// only: a floor.
			floor := ""
			if t["debt_partial"].GetBoolValue() {
				floor = "≥"
			}
			figures = fmt.Sprintf("%s\t%d\t%d\t%s\t%s%d\t%s%s\t%s\t%s\t%s\t%s",
				formatPassTime(lp), t.int("examined"), t.int("collected"), humanBytes(t.int("collected_bytes")),
				floor, t.int("debt_cells"), floor, humanBytes(t.int("debt_bytes")), oldest,
				humanBytes(t.int("logical_bytes")), humanBytes(t.int("disk_bytes")), reclaimOf(t))
			figures += fmt.Sprintf("\t%s\t%d now, %d later\t%d", passKind(t), t.int("agenda_due"), t.int("agenda_later"), t.int("hidden_versions"))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.str("table"), name, rule, cut, figures)
		for _, f := range fams[min(1, len(fams)):] {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\n", f.str("name"), f.str("rule"), ageCutoffOf(f))
		}
	}
	return tw.Flush()
}

// passKind says how the last pass went over a table: swept whole, or
// incremental with the rows it visited.
func passKind(t fields) string {
	if b, ok := t["incremental"]; ok && b.GetBoolValue() {
		return "incremental, " + plural(t.int("visited_rows"), "row")
	}
	return "whole"
}

// formatPassTime shortens the server's RFC 3339 time to milliseconds, UTC.
func formatPassTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// perSecond prints n per seconds as a short rate.
func perSecond(n int64, seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	r := float64(n) / seconds
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.1fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

// reclaimOf says what became of the space the table's last pass collected:
// freed by its compaction, pending (left to Pebble's compactions), or "-".
func reclaimOf(t fields) string {
	switch {
	case t.int("reclaim_pending_bytes") > 0:
		return humanBytes(t.int("reclaim_pending_bytes")) + " pending"
	case t.int("reclaimed_bytes") > 0:
		return humanBytes(t.int("reclaimed_bytes")) + " freed"
	}
	return "-"
}
