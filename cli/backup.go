package cli

import (
	"cloud.google.com/go/bigtable"
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/table"
	"github.com/spf13/cobra"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/metadata"
)

// defaultCluster is the cluster backups go to when --cluster is not given:
// the server's default --cluster-id. Any cluster id is accepted for now.
const defaultCluster = "ebbtable"

// newBackupCmd is `ebbtable backup`: create, list, update, delete.
func newBackupCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up tables: create, list, update, delete backups",
		Long: `Manage backups through the server's Table Admin API (the calls the official
clients make). A backup is a consistent image of one table at one version
time, kept under the server's data directory until its expire time; restore
it into a new table with 'ebbtable restore'.

  backup create TABLE BACKUP --expire 7d
  backup list
  backup update BACKUP --expire 30d
  backup delete BACKUP`,
		Args: exactArgs(0, "a subcommand: create, list, update or delete"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd)
	cmd.AddCommand(newBackupCreateCmd(&cf), newBackupListCmd(&cf), newBackupUpdateCmd(&cf), newBackupDeleteCmd(&cf))
	return cmd
}

// parseExpire reads --expire: a time from now (7d, 36h, 90m) or an RFC 3339
// time.
func parseExpire(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, usagef("--expire is required (6h to 90d from now, e.g. --expire 7d)")
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 {
			return time.Time{}, usagef("--expire %q: days must be a whole positive number", s)
		}
		return now.Add(time.Duration(days) * 24 * time.Hour), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usagef("--expire %q must be in the future", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("--expire %q: want a time from now (7d, 36h) or an RFC 3339 time", s)
	}
	return t, nil
}

func newBackupCreateCmd(cf *connFlags) *cobra.Command {
	var (
		cluster, expire string
		pf              progressFlags
	)
	cmd := &cobra.Command{
		Use:   "create TABLE BACKUP --expire DURATION",
		Short: "Back up a table and wait until the backup is ready",
		Long: `Take a consistent image of TABLE now (writes continue meanwhile) and store
it as BACKUP, in --cluster. The command waits until the backup is ready and
prints its size. --expire is required: a time from now (6h to 90d: 7d, 36h)
or an RFC 3339 time; the server deletes the backup once it has passed.`,
		Example: `  ebbtable backup create events events-monday --expire 7d`,
		Args:    exactArgs(2, "a table and a backup id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tbl, id := args[0], args[1]
			exp, err := parseExpire(expire, time.Now())
			if err != nil {
				return err
			}
			return cf.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				err := pf.track(ctx, cmd, cf, "backup create", func(ctx context.Context) error {
					return admin.CreateBackup(ctx, tbl, cluster, id, exp)
				})
				if err != nil {
					return fmt.Errorf("backup create %s %s: %w", tbl, id, err)
				}
				info, err := admin.BackupInfo(ctx, cluster, id)
				if err != nil {
					return fmt.Errorf("backup create %s %s: the backup is ready, but reading it back failed: %w", tbl, id, err)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "backup %s of table %s ready: %s, version time %s, expires %s\n",
					id, tbl, humanBytes(info.SizeBytes), formatTime(info.StartTime), formatTime(info.ExpireTime))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", defaultCluster, "cluster the backup belongs to")
	cmd.Flags().StringVar(&expire, "expire", "", "when the backup expires: 6h to 90d from now (7d, 36h) or an RFC 3339 time (required)")
	pf.register(cmd)
	return cmd
}

func newBackupListCmd(cf *connFlags) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List backups",
		Long: `List the backups of the instance, in every cluster ("-", the default) or
in --cluster: id, source table, state, size, version (start) time and
expire time.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cf.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "BACKUP\tTABLE\tSTATE\tSIZE\tSTARTED\tEXPIRES")
				it := admin.Backups(ctx, cluster)
				for {
					b, err := it.Next()
					if err == iterator.Done {
						break
					}
					if err != nil {
						return fmt.Errorf("backup list: %w", err)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, b.SourceTable, b.State, humanBytes(b.SizeBytes), formatTime(b.StartTime), formatTime(b.ExpireTime))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "-", `cluster to list ("-": all)`)
	return cmd
}

func newBackupUpdateCmd(cf *connFlags) *cobra.Command {
	var cluster, expire string
	cmd := &cobra.Command{
		Use:   "update BACKUP --expire DURATION",
		Short: "Change a backup's expire time",
		Long: `Change when BACKUP expires. The new time must lie 6 hours to 90 days after
the backup was taken, and in the future.`,
		Example: `  ebbtable backup update events-monday --expire 30d`,
		Args:    exactArgs(1, "a backup id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			exp, err := parseExpire(expire, time.Now())
			if err != nil {
				return err
			}
			return cf.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				if err := admin.UpdateBackup(ctx, cluster, args[0], exp); err != nil {
					return fmt.Errorf("backup update %s: %w", args[0], err)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "backup %s now expires %s\n", args[0], formatTime(exp))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", defaultCluster, "cluster the backup belongs to")
	cmd.Flags().StringVar(&expire, "expire", "", "new expire time: a time from now (30d, 36h) or an RFC 3339 time (required)")
	return cmd
}

func newBackupDeleteCmd(cf *connFlags) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "delete BACKUP",
		Short: "Delete a backup",
		Args:  exactArgs(1, "a backup id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				if err := admin.DeleteBackup(ctx, cluster, args[0]); err != nil {
					return fmt.Errorf("backup delete %s: %w", args[0], err)
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "backup %s deleted\n", args[0])
				return err
			})
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", defaultCluster, "cluster the backup belongs to")
	return cmd
}

// retentionNotes says, per mode, what happens to row deletion policies.
var retentionNotes = map[table.Retention]string{
	table.RetentionDrop:  "row deletion policies of the source are removed, so restored rows are not purged at once",
	table.RetentionPause: "row deletion policies of the source are kept, paused",
	table.RetentionApply: "row deletion policies of the source are kept and applied: rows already past them go at their next cycle",
}

func newRestoreCmd() *cobra.Command {
	var (
		cf        connFlags
		cluster   string
		retention string
		pf        progressFlags
	)
	cmd := &cobra.Command{
		Use:   "restore BACKUP NEWTABLE [--retention drop|pause|apply]",
		Short: "Restore a backup into a new table",
		Long: `Create NEWTABLE from BACKUP: the data as of the backup's version time, with
the source table's column families and GC rules. NEWTABLE must not exist;
if the restore fails, nothing is created. The command waits until the table
is complete and visible.

--retention says what the new table does with the source's row deletion
policies (the rows' TTL):

  drop    remove them, as Cloud Spanner does (the default): restored rows
          past their TTL are kept until you set a policy again
  pause   keep them, paused, to resume later
  apply   keep them running: rows already past them are deleted at once

The choice is recorded on the restored table. (Row deletion policies are
being built separately; until they land, the choice is recorded and has
nothing to act on.)`,
		Example: `  ebbtable restore events-monday events-restored
  ebbtable restore events-monday events-audit --retention pause`,
		Args: exactArgs(2, "a backup id and a new table name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, tbl := args[0], args[1]
			mode, err := table.ParseRetention(retention)
			if err != nil || retention == "" {
				return usagef("--retention %q: want drop, pause or apply", retention)
			}
			return cf.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				info, err := admin.BackupInfo(ctx, cluster, id)
				if err != nil {
					return fmt.Errorf("restore %s: %w", id, err)
				}
				rctx := metadata.AppendToOutgoingContext(ctx, server.MetaRestoreRetention, string(mode))
				err = pf.track(rctx, cmd, &cf, "restore", func(ctx context.Context) error {
					return admin.RestoreTable(ctx, tbl, cluster, id)
				})
				if err != nil {
					return fmt.Errorf("restore %s into %s: %w", id, tbl, err)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored backup %s (table %s as of %s, %s) into table %s\nretention %s: %s\n",
					id, info.SourceTable, formatTime(info.StartTime), humanBytes(info.SizeBytes), tbl, mode, retentionNotes[mode])
				return err
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&cluster, "cluster", defaultCluster, "cluster the backup belongs to")
	cmd.Flags().StringVar(&retention, "retention", string(table.RetentionDrop), "row deletion policies of the restored table: drop, pause or apply")
	pf.register(cmd)
	return cmd
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }
