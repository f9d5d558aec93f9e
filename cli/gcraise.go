package cli

import (
	"fmt"

	"github.com/ebbtable/ebbtable/server"
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
			resp, err := cf.callEbbAdmin(cmd.Context(), server.MethodGCRaise, map[string]any{
				"table": args[0], "family": args[1], "rule": args[2], "coordinated": coordinated})
			if err != nil {
				return err
			}
			f := fields(resp.GetFields())
			how := "set"
			if coordinated {
				how = fmt.Sprintf("set on %d clusters in step", f.int("clusters"))
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s (%s)\n", f.str("table"), f.str("family"), f.str("rule"), how)
			return err
		},
	}
	cmd.Flags().BoolVar(&coordinated, "coordinated", false, "hold age sweeps on every cluster while the rule changes, so none diverges")
	return cmd
}
