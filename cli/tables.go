package cli

import (
	"bufio"
	"context"
	"fmt"
	"slices"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"
)

func newLsCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "ls [TABLE]",
		Short: "List tables, or a table's families, as cbt ls does",
		Long: `With no argument, list the tables, one name per line in name order. With a
table, list its column families with their GC rules and value types, in cbt's
layout.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				if len(args) == 1 {
					ti, err := admin.TableInfo(ctx, args[0])
					if err != nil {
						return fmt.Errorf("table %q: %w", args[0], err)
					}
					return printFamilies(cmd.OutOrStdout(), ti)
				}
				names, err := admin.Tables(ctx)
				if err != nil {
					return fmt.Errorf("list tables on %s: %w", cf.endpoint(), err)
				}
				slices.Sort(names)
				w := bufio.NewWriter(cmd.OutOrStdout())
				for _, n := range names {
					fmt.Fprintln(w, n)
				}
				return w.Flush()
			})
		},
	}
	cf.register(cmd)
	return cmd
}

func newCreateTableCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:     "createtable TABLE [FAMILY...]",
		Short:   "Create a table with column families that have no GC rule",
		Example: `  ebbtable createtable users profile events`,
		Args:    minArgs(1, "a table name and optional family names"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, families := args[0], args[1:]
			conf := &bigtable.TableConf{TableID: name, ColumnFamilies: map[string]bigtable.Family{}}
			for _, fam := range families {
				if fam == "" {
					return usagef("empty family name")
				}
				if _, dup := conf.ColumnFamilies[fam]; dup {
					return usagef("family %q given twice", fam)
				}
				conf.ColumnFamilies[fam] = bigtable.Family{}
			}
			return cf.withAdmin(cmd, func(ctx context.Context, admin *bigtable.AdminClient) error {
				if err := admin.CreateTableFromConf(ctx, conf); err != nil {
					return fmt.Errorf("create table %q: %w", name, err)
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	return cmd
}
