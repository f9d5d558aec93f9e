package cli

import (
	"context"
	"fmt"

	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/spf13/cobra"
)

func newGCRaiseCmd(cf *connFlags) *cobra.Command {
	var coordinated bool
	cmd := &cobra.Command{
		Use:   "raise TABLE FAMILY RULE [--coordinated]",
		Short: "Change a family's GC rule, optionally raising its max age on every cluster in step",
		Long: `Set a column family's GC rule (cbt syntax, as 'gc plan' takes it). On a
replicated table a max age may be raised by at most 90 days.

Without --coordinated this is the same as cbt setgcpolicy: the rule reaches
the other clusters within seconds, and a cluster that had not yet collected
a cell the old rule expired keeps it until the new rule expires it — the
clusters diverge for a while (ebbtable_replication_gc_divergence_seconds,
ebbtable replication diff).

With --coordinated the server this command talks to first holds the
family's age sweeps on every cluster, has every cluster collect the family
under the old rule as of one common instant, changes the rule, waits until
every cluster has it and releases the holds: no cluster diverges. Every
cluster must be reachable.`,
		Args: exactArgs(3, "TABLE FAMILY RULE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := callEbbAdmin(cmd.Context(), cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.GcRaiseResponse, error) {
				return c.GcRaise(ctx, &ebbadminpb.GcRaiseRequest{Project: cf.project, Instance: cf.instance,
					Table: args[0], Family: args[1], Rule: args[2], Coordinated: coordinated})
			})
			if err != nil {
				return err
			}
			how := "set"
			if coordinated {
				how = fmt.Sprintf("set on %d clusters in step", resp.GetClusters())
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s (%s)\n", resp.GetTable(), resp.GetFamily(), resp.GetRule(), how)
			return err
		},
	}
	cmd.Flags().BoolVar(&coordinated, "coordinated", false, "hold age sweeps on every cluster while the rule changes, so none diverges")
	return cmd
}
