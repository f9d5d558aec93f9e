package cli

import (
	"bufio"
	"cloud.google.com/go/bigtable"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func newWatchCmd() *cobra.Command {
	var (
		cf            connFlags
		since, until  string
		token         string
		excludeSystem bool
	)
	cmd := &cobra.Command{
		Use:   "watch TABLE",
		Short: "Print a table's change stream, one JSON object a line",
		Long: `Print a table's change stream, one JSON object a line, in commit order:
commit_timestamp, commit_micros, tiebreaker, index, token, row_key, type (USER
or GARBAGE_COLLECTION), reason (user, drop-row-range, gc-age, gc-versions,
cell-ttl, dropped, row-deletion-policy), transaction_tag, is_system_transaction,
source_cluster_id and mods. Byte strings that are not UTF-8 are printed in
base64 with row_key_base64 / qualifier_base64 / value_base64 set.

Without --until it follows the stream until interrupted.

In a cluster, any node will do: watch reads every change-stream partition
(one per tablet) on its tablet's owner, follows the new partitions when a
tablet splits, merges or moves, and prints the whole table's records once
each, in commit order, so --token with any printed token resumes right
after it (docs/change-streams.md, "ebbtable watch in a cluster").`,
		Example: `  ebbtable watch events                       # from now on
  ebbtable watch events --since 1h --exclude-system
  ebbtable watch events --since oldest --until 2026-01-02T00:00:00Z
  ebbtable watch events --token v1.1767225600000000.0.3   # resume after a record`,
		Args: exactArgs(1, "a table name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if until != "" {
				if _, err := time.Parse(time.RFC3339Nano, until); err != nil {
					return usagef("--until %q is not an RFC 3339 time", until)
				}
			}
			if token != "" && since != "" {
				return usagef("--since and --token exclude each other")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := cf.context(ctx)
			defer cancel()
			conn, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			err = runWatch(ctx, conn, watchArgs{
				project: cf.project, instance: cf.instance, table: args[0],
				since: since, until: until, token: token, excludeSystem: excludeSystem,
			}, func(line string) error {
				fmt.Fprintln(w, line)
				return w.Flush()
			})
			if err != nil {
				if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
					return nil // interrupted
				}
				var ue usageError
				if errors.As(err, &ue) {
					return err
				}
				return fmt.Errorf("watch %s: %w", args[0], err)
			}
			return nil
		},
	}
	cf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "start at an RFC 3339 time, a duration ago (15m), or 'oldest' (default: now)")
	fl.StringVar(&until, "until", "", "stop after this RFC 3339 time (default: follow until interrupted)")
	fl.StringVar(&token, "token", "", "resume after the record with this token")
	fl.BoolVar(&excludeSystem, "exclude-system", false, "leave out system transactions (garbage collection, row deletion policy)")
	return cmd
}

func newChangeStreamCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "changestream",
		Short: "Turn a table's change stream on or off",
	}
	var cf connFlags
	var retention time.Duration
	enable := &cobra.Command{
		Use:     "enable TABLE",
		Short:   "Turn a table's change stream on, or change its retention",
		Example: `  ebbtable changestream enable events --retention 72h`,
		Args:    exactArgs(1, "a table name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if retention < 24*time.Hour || retention > 7*24*time.Hour {
				return usagef("--retention %v must be between 24h and 168h (1 to 7 days)", retention)
			}
			return cf.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				if err := admin.UpdateTableWithChangeStream(ctx, args[0], retention); err != nil {
					return fmt.Errorf("enable change stream of %s: %w", args[0], err)
				}
				return nil
			})
		},
	}
	enable.Flags().DurationVar(&retention, "retention", 24*time.Hour, "how long records are kept (1 to 7 days)")
	var cf2 connFlags
	disable := &cobra.Command{
		Use:   "disable TABLE",
		Short: "Turn a table's change stream off and delete its records",
		Args:  exactArgs(1, "a table name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf2.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				if err := admin.UpdateTableDisableChangeStream(ctx, args[0]); err != nil {
					return fmt.Errorf("disable change stream of %s: %w", args[0], err)
				}
				return nil
			})
		},
	}
	cf.register(enable)
	cf2.register(disable)
	cmd.AddCommand(enable, disable)
	return cmd
}
