package cli

import (
	"context"
	"fmt"

	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
)

// newFamilyCmd is `ebbtable family`: ebbtable's own per-family options, set
// through its admin service (the Bigtable Admin API has no field for them).
func newFamilyCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "family",
		Short: "Per-family options beyond Bigtable's (the expiry-timestamp guard)",
		Long: `Set ebbtable's own options of a column family.

  family guard   refuse server-time writes to a family of the one-second
                 expiration pattern`,
		Args: exactArgs(0, "a subcommand: guard"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd)
	cmd.AddCommand(newFamilyGuardCmd(&cf))
	return cmd
}

func newFamilyGuardCmd(cf *connFlags) *cobra.Command {
	var on bool
	cmd := &cobra.Command{
		Use:   "guard TABLE FAMILY --expiry-timestamps=true|false",
		Short: "Turn the expiry-timestamp guard of a family on or off",
		Long: `Turn the expiry-timestamp guard of a column family on or off.

A family used for the one-second expiration pattern (GC rule maxage=1s, each
cell's timestamp set to its expiry time) loses any cell written at server time
about a second later. With the guard on, the server refuses such writes
(server or client-generated timestamps) with FAILED_PRECONDITION instead of
accepting data it is about to drop. Writes that set the timestamp explicitly
are unaffected.`,
		Example: `  ebbtable family guard sessions exp --expiry-timestamps=true`,
		Args:    exactArgs(2, "a table and a family"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("expiry-timestamps") {
				return usagef("--expiry-timestamps=true or --expiry-timestamps=false is required")
			}
			tbl, fam := args[0], args[1]
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			if _, err := callEbbAdmin(ctx, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.SetFamilyOptionsResponse, error) {
				return c.SetFamilyOptions(ctx, &ebbadminpb.SetFamilyOptionsRequest{Project: cf.project, Instance: cf.instance,
					Table: tbl, Family: fam, ExpiryTimestamps: proto.Bool(on)})
			}); err != nil {
				return fmt.Errorf("family guard %s %s: %w", tbl, fam, err)
			}
			state := "off: writes at server time are accepted"
			if on {
				state = "on: writes at server time are refused"
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s:%s expiry-timestamp guard %s\n", tbl, fam, state)
			return err
		},
	}
	cmd.Flags().BoolVar(&on, "expiry-timestamps", false, "true: the family's timestamps are expiry times; refuse server-time writes")
	return cmd
}
