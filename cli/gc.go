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
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/spf13/cobra"
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
comes back, with the space it freed: how much the data directory shrank,
measured once Pebble deleted the WAL and SSTable files the compaction made
obsolete; files still held by open reads are reported apart, freed when those
reads end).

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
			var resp *ebbadminpb.GcRunResponse
			err := pf.track(ctx, cmd, cf, "gc run", func(ctx context.Context) (err error) {
				resp, err = callEbbAdmin(ctx, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.GcRunResponse, error) {
					return c.GcRun(ctx, &ebbadminpb.GcRunRequest{Project: cf.project, Instance: cf.instance, Table: tbl})
				})
				return err
			})
			if err != nil {
				return fmt.Errorf("gc run: %w", err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			r := resp
			out := cmd.OutOrStdout()
			if _, err := fmt.Fprintf(out, "%s: examined %s, collected %s (%s) in %s\n",
				plural(r.GetTables(), "table"), plural(r.GetExamined(), "cell"),
				plural(r.GetCollected(), "cell"), humanBytes(r.GetCollectedBytes()),
				humanDuration(seconds(r.GetDurationSeconds()))); err != nil {
				return err
			}
			if r.GetCollected() == 0 {
				return nil
			}
			sweep := seconds(r.GetSweepSeconds())
			line := fmt.Sprintf("sweep %s (%s examined/s, %s collected/s)", humanDuration(sweep),
				perSecond(r.GetExamined(), sweep.Seconds()), perSecond(r.GetCollected(), sweep.Seconds()))
			if d := seconds(r.GetReclaimSeconds()); d > 0 || r.GetReclaimedBytes() > 0 {
				line += fmt.Sprintf("; reclaim %s, %s of disk freed", humanDuration(d), humanBytes(r.GetReclaimedBytes()))
			}
			if b := r.GetReclaimDeletingBytes(); b > 0 {
				line += fmt.Sprintf("; %s more freed when the reads still holding its old files end", humanBytes(b))
			}
			if n := r.GetReclaimLeftTables(); n > 0 {
				line += fmt.Sprintf("; %s pending in %s (deletions too few or too sparse to compact for): Pebble's compactions free that space",
					humanBytes(r.GetReclaimPendingBytes()), plural(n, "table"))
			}
			if n := r.GetIncrementalTables(); n > 0 {
				line += fmt.Sprintf("; %s incremental, %s visited", plural(n, "table"), plural(r.GetVisitedRows(), "row"))
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
			resp, err := callEbbAdmin(ctx, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.GcPlanResponse, error) {
				return c.GcPlan(ctx, &ebbadminpb.GcPlanRequest{Project: cf.project, Instance: cf.instance, Table: tbl, Family: family, Rule: rule})
			})
			if err != nil {
				return fmt.Errorf("gc plan %s %s: %w", tbl, family, err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			r := resp
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "table\t%s\n", tbl)
			fmt.Fprintf(tw, "family\t%s\n", family)
			fmt.Fprintf(tw, "rule\t%s\n", r.GetRule())
			fmt.Fprintf(tw, "eligible under rule\t%s (%s)\n", plural(r.GetCells(), "cell"), humanBytes(r.GetBytes()))
			fmt.Fprintf(tw, "eligible under current rule\t%s (%s)\n", plural(r.GetCurrentlyCells(), "cell"), humanBytes(r.GetCurrentlyBytes()))
			fmt.Fprintf(tw, "examined\t%s\n", plural(r.GetExamined(), "cell"))
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
by its compaction, measured on the data directory once Pebble deleted the
files the compaction made obsolete, and what was still to be deleted when
reads holding old files end; or pending: left to Pebble's compactions); how the pass
went over the table (whole, or incremental with the rows it visited); the
rows waiting on the GC agenda (due now: the next pass visits them; later:
native expiries ahead); and the hidden (versions-eligible) cells the pass
found. "-" marks figures a table does not have yet.

--json prints the server's answer unchanged, as JSON.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return adminReport(cmd, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.GcStatusResponse, error) {
				return c.GcStatus(ctx, &ebbadminpb.GcStatusRequest{Project: cf.project, Instance: cf.instance})
			}, "gc status", asJSON, printGCStatus)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	return cmd
}

// ageCutoffOf is a family's age cutoff as status prints it: the cell time
// below which this cluster's age collection has gone ("-": none yet).
func ageCutoffOf(f *ebbadminpb.GcFamilyStatus) string {
	if c := f.GetAgeCutoff(); c != "" {
		return c
	}
	return "-"
}

// printGCStatus lays out a GcStatus answer: a header, then one line per
// column family, the table's figures on its first line.
func printGCStatus(w io.Writer, r *ebbadminpb.GcStatusResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "interval\t%s\n", seconds(r.GetIntervalSeconds()))
	fmt.Fprintf(tw, "visibility\t%s\n", r.GetVisibility())
	last := "none yet"
	if started := r.GetLastPassStarted(); started != "" {
		last = fmt.Sprintf("%s (took %s)", formatPassTime(started), humanDuration(seconds(r.GetLastPassSeconds())))
	}
	fmt.Fprintf(tw, "last background pass\t%s\n", last)
	fmt.Fprintf(tw, "piles waiting\t%d\n", r.GetPilesWaiting())
	if err := tw.Flush(); err != nil {
		return err
	}

	tables := slices.Clone(r.GetTables())
	if len(tables) == 0 {
		_, err := fmt.Fprintln(w, "\nno tables")
		return err
	}
	slices.SortFunc(tables, func(a, b *ebbadminpb.GcTableStatus) int { return cmp.Compare(a.GetTable(), b.GetTable()) })
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tFAMILY\tRULE\tAGE CUTOFF\tLAST PASS\tEXAMINED\tCOLLECTED\tCOLLECTED BYTES\tDEBT CELLS\tDEBT BYTES\tDEBT OLDEST\tLOGICAL BYTES\tDISK BYTES\tRECLAIM\tPASS\tWAITING\tHIDDEN VERSIONS")
	for _, t := range tables {
		fams := slices.Clone(t.GetFamilies())
		slices.SortFunc(fams, func(a, b *ebbadminpb.GcFamilyStatus) int { return cmp.Compare(a.GetName(), b.GetName()) })
		name, rule, cut := "-", "-", "-"
		if len(fams) > 0 {
			name, rule, cut = fams[0].GetName(), fams[0].GetRule(), ageCutoffOf(fams[0])
		}
		figures := "-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-"
		if lp := t.GetLastPass(); lp != "" {
			oldest := "-"
			if t.GetDebtCells() > 0 {
				oldest = humanDuration(seconds(t.GetDebtOldestSeconds()))
			}
			// A large table's live debt is counted over its first cells
			// only: a floor.
			floor := ""
			if t.GetDebtPartial() {
				floor = "≥"
			}
			figures = fmt.Sprintf("%s\t%d\t%d\t%s\t%s%d\t%s%s\t%s\t%s\t%s\t%s",
				formatPassTime(lp), t.GetExamined(), t.GetCollected(), humanBytes(t.GetCollectedBytes()),
				floor, t.GetDebtCells(), floor, humanBytes(t.GetDebtBytes()), oldest,
				humanBytes(t.GetLogicalBytes()), humanBytes(t.GetDiskBytes()), reclaimOf(t))
			figures += fmt.Sprintf("\t%s\t%d now, %d later\t%d", passKind(t), t.GetAgendaDue(), t.GetAgendaLater(), t.GetHiddenVersions())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.GetTable(), name, rule, cut, figures)
		for _, f := range fams[min(1, len(fams)):] {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\n", f.GetName(), f.GetRule(), ageCutoffOf(f))
		}
	}
	return tw.Flush()
}

// passKind says how the last pass went over a table: swept whole, or
// incremental with the rows it visited.
func passKind(t *ebbadminpb.GcTableStatus) string {
	if t.GetIncremental() {
		return "incremental, " + plural(t.GetVisitedRows(), "row")
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
// freed by its compaction, pending (left to Pebble's compactions), or "-";
// with what its compaction freed, what is still to be deleted once the
// reads holding the old files end.
func reclaimOf(t *ebbadminpb.GcTableStatus) string {
	switch {
	case t.GetReclaimDeletingBytes() > 0:
		return fmt.Sprintf("%s freed, %s when reads end", humanBytes(t.GetReclaimedBytes()), humanBytes(t.GetReclaimDeletingBytes()))
	case t.GetReclaimPendingBytes() > 0:
		return humanBytes(t.GetReclaimPendingBytes()) + " pending"
	case t.GetReclaimedBytes() > 0:
		return humanBytes(t.GetReclaimedBytes()) + " freed"
	}
	return "-"
}
