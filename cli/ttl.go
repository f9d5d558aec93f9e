package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/spf13/cobra"
)

// newDDLCmd is `ebbtable ddl 'STATEMENT'`: one schema statement for row
// deletion policies, in GoogleSQL or PostgreSQL.
func newDDLCmd() *cobra.Command {
	var (
		cf     connFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ddl 'STATEMENT'",
		Short: "Run a DDL statement: row deletion policies (TTL), interleave separators",
		Long: `Run one DDL statement on the server. Quote it for the shell. Accepted:

GoogleSQL (parsed by memefish; a column is family:qualifier in backquotes):
  ALTER TABLE t ADD ROW DELETION POLICY (OLDER_THAN(` + "`meta:created_at`" + `, INTERVAL 30 DAY))
  ALTER TABLE t REPLACE ROW DELETION POLICY (OLDER_THAN(` + "`meta:created_at`" + `, INTERVAL 7 DAY))
  ALTER TABLE t DROP ROW DELETION POLICY
  CREATE TABLE t (` + "`meta:created_at`" + ` TIMESTAMP, …) PRIMARY KEY (…),
    ROW DELETION POLICY (OLDER_THAN(` + "`meta:created_at`" + `, INTERVAL 30 DAY))
      (creates a table whose families are those of its columns)

PostgreSQL (the column double-quoted):
  ALTER TABLE t ADD TTL INTERVAL '30 days' ON "meta:created_at"
  ALTER TABLE t ALTER TTL INTERVAL '7 days' ON "meta:created_at"
  ALTER TABLE t DROP TTL
  The interval must come to whole days: '3 DAYS', '4 DAYS 2 MINUTES - 2 MINUTES'.

ebbtable (interleaved children are deleted with their parent):
  ALTER TABLE t SET INTERLEAVE SEPARATOR '#'
  ALTER TABLE t DROP INTERLEAVE SEPARATOR

A table has at most one policy: a second ADD, and REPLACE/ALTER/DROP of a
policy that is not there, fail with FailedPrecondition.`,
		Example: `  ebbtable ddl 'ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(` + "`meta:created_at`" + `, INTERVAL 30 DAY))'
  ebbtable ddl "ALTER TABLE events ALTER TTL INTERVAL '7 days' ON \"meta:created_at\""`,
		Args: exactArgs(1, "one DDL statement"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Parse here too, so a bad statement is a usage error found
			// before any connection.
			if _, err := rowttl.Parse(args[0]); err != nil {
				return usageError{err}
			}
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			resp, err := callEbbAdmin(ctx, &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.DdlResponse, error) {
				return c.Ddl(ctx, &ebbadminpb.DdlRequest{Project: cf.project, Instance: cf.instance, Statement: args[0]})
			})
			if err != nil {
				return fmt.Errorf("ddl: %w", err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", resp.GetTable(), resp.GetDone())
			return err
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	return cmd
}

// newTTLCmd is `ebbtable ttl`: run, plan and status of the row deletion job.
func newTTLCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "ttl",
		Short: "Row deletion policies: run the job, plan a policy, show status",
		Long: `Talk to the row deletion job of a running server.

  ttl run      run the job now and print what it deleted
  ttl plan     count the rows a policy would delete now, changing nothing
  ttl status   show each table's policy, watermark and undeletable rows`,
		Args: exactArgs(0, "a subcommand: run, plan or status"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd)
	cmd.AddCommand(newTTLRunCmd(&cf), newTTLPlanCmd(&cf), newTTLStatusCmd(&cf), newTTLResumeCmd(&cf))
	return cmd
}

func newTTLRunCmd(cf *connFlags) *cobra.Command {
	var (
		tbl    string
		wait   bool
		asJSON bool
		pf     progressFlags
	)
	cmd := &cobra.Command{
		Use:   "run [--table TABLE] [--wait]",
		Short: "Run the row deletion job now and print what it did",
		Long: `Run the row deletion job now over every table of the instance that has a
policy (or only --table) and print one line: tables, rows scanned, rows
deleted (interleaved children included), undeletable rows, batches and how
long it took. It returns when the run is done (--wait is the only mode);
runs never overlap.`,
		Args: exactArgs(0, "no arguments (the table goes in --table)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("table") && tbl == "" {
				return usagef("--table must not be empty (leave it out to run over every table)")
			}
			if !wait {
				return usagef("--wait=false is not supported: ttl run always returns when the run is done")
			}
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			var resp *ebbadminpb.TtlRunResponse
			err := pf.track(ctx, cmd, cf, "ttl run", func(ctx context.Context) (err error) {
				resp, err = callEbbAdmin(ctx, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.TtlRunResponse, error) {
					return c.TtlRun(ctx, &ebbadminpb.TtlRunRequest{Project: cf.project, Instance: cf.instance, Table: tbl})
				})
				return err
			})
			if err != nil {
				return fmt.Errorf("ttl run: %w", err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			r := resp
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: scanned %s, deleted %s (%d interleaved), %d undeletable, %d batches in %s\n",
				plural(r.GetTables(), "table"), plural(r.GetScanned(), "row"), plural(r.GetDeleted(), "row"),
				r.GetChildren(), r.GetUndeletable(), r.GetBatches(), humanDuration(seconds(r.GetDurationSeconds())))
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tbl, "table", "", "run over this table only")
	fl.BoolVar(&wait, "wait", true, "return when the run is done (the only mode)")
	fl.BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	pf.register(cmd)
	return cmd
}

func newTTLPlanCmd(cf *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "plan TABLE 'POLICY'",
		Short: "Count the rows a policy would delete now, changing nothing",
		Long: `Count the rows of TABLE that POLICY would delete if it were the table's
policy now, changing nothing: the expired rows, the interleaved children that
would go with them, rows with no value in the column (never deleted) and rows
whose value is not a timestamp (undeletable). POLICY is either dialect:

  OLDER_THAN(` + "`meta:created_at`" + `, INTERVAL 30 DAY)
  INTERVAL '30 days' ON "meta:created_at"`,
		Example: `  ebbtable ttl plan events 'OLDER_THAN(` + "`meta:created_at`" + `, INTERVAL 30 DAY)'`,
		Args:    exactArgs(2, "a table and a policy"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := rowttl.ParsePolicy(args[1]); err != nil {
				return usageError{err}
			}
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			resp, err := callEbbAdmin(ctx, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.TtlPlanResponse, error) {
				return c.TtlPlan(ctx, &ebbadminpb.TtlPlanRequest{Project: cf.project, Instance: cf.instance, Table: args[0], Policy: args[1]})
			})
			if err != nil {
				return fmt.Errorf("ttl plan %s: %w", args[0], err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			r := resp
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "table\t%s\n", args[0])
			fmt.Fprintf(tw, "policy\t%s\n", r.GetExpression())
			fmt.Fprintf(tw, "would delete\t%s\n", plural(r.GetRows(), "row"))
			fmt.Fprintf(tw, "interleaved children with them\t%s\n", plural(r.GetChildren(), "row"))
			fmt.Fprintf(tw, "no timestamp (kept)\t%s\n", plural(r.GetNull(), "row"))
			fmt.Fprintf(tw, "undeletable\t%s\n", plural(r.GetUndeletable(), "row"))
			fmt.Fprintf(tw, "scanned\t%s\n", plural(r.GetScanned(), "row"))
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	return cmd
}

func newTTLResumeCmd(cf *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "resume TABLE",
		Short: "Resume a row deletion policy a restore left paused",
		Long: `Resume the row deletion policy of TABLE, restored from a backup with
--retention pause: from now on expired rows are hidden and the job deletes
them. "ebbtable ttl plan TABLE 'POLICY'" tells beforehand how many rows that is.`,
		Args: exactArgs(1, "TABLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			resp, err := callEbbAdmin(ctx, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.TtlResumeResponse, error) {
				return c.TtlResume(ctx, &ebbadminpb.TtlResumeRequest{Project: cf.project, Instance: cf.instance, Table: args[0]})
			})
			if err != nil {
				return fmt.Errorf("ttl resume: %w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "resumed %s: %s\n", resp.GetTable(), resp.GetExpression())
			return err
		},
	}
}

func newTTLStatusCmd(cf *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each table's row deletion policy and the job's progress",
		Long: `Show the job's interval and the visibility mode, then for each table with a
policy: the policy expression (as Spanner's
INFORMATION_SCHEMA.TABLES.ROW_DELETION_POLICY_EXPRESSION shows it), its
interleave separator, the processed watermark (every row expired by then has
been deleted) and its age, the rows the last run deleted, the undeletable
rows and the smallest undeletable timestamp. "-" marks what is not known yet.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return adminReport(cmd, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.TtlStatusResponse, error) {
				return c.TtlStatus(ctx, &ebbadminpb.TtlStatusRequest{Project: cf.project, Instance: cf.instance})
			}, "ttl status", asJSON, printTTLStatus)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	return cmd
}

func printTTLStatus(w io.Writer, r *ebbadminpb.TtlStatusResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "interval\t%s\n", seconds(r.GetIntervalSeconds()))
	fmt.Fprintf(tw, "visibility\t%s\n", r.GetVisibility())
	if err := tw.Flush(); err != nil {
		return err
	}
	tables := slices.Clone(r.GetTables())
	if len(tables) == 0 {
		_, err := fmt.Fprintln(w, "\nno table has a row deletion policy")
		return err
	}
	slices.SortFunc(tables, func(a, b *ebbadminpb.TtlTableStatus) int { return cmp.Compare(a.GetTable(), b.GetTable()) })
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tPOLICY\tSEPARATOR\tWATERMARK\tWATERMARK AGE\tDELETED\tUNDELETABLE\tSMALLEST UNDELETABLE")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, t := range tables {
		wm, age, deleted, undel := "-", "-", "-", "-"
		if s := t.GetWatermark(); s != "" {
			wm, age = formatPassTime(s), humanDuration(seconds(t.GetWatermarkAgeSeconds()))
			deleted, undel = fmt.Sprint(t.GetDeleted()), fmt.Sprint(t.GetUndeletable())
		}
		sep := t.GetSeparator()
		if sep != "" {
			sep = fmt.Sprintf("%q", sep)
		}
		smallest := t.GetSmallestUndeletable()
		if smallest != "" {
			smallest = formatPassTime(smallest)
		}
		expr := t.GetExpression()
		if t.GetPaused() {
			expr += " (paused)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.GetTable(), expr, dash(sep), wm, age, deleted, undel, dash(smallest))
	}
	return tw.Flush()
}
