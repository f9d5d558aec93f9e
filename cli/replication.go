package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/spf13/cobra"
)

func newReplicationCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "replication",
		Short: "Replication between clusters: status, pause and resume a link",
		Long: `Talk to the replication of a running server (one cluster of an instance).

  replication status         this cluster's peers, their health and how far behind each it is
  replication pause PEER     stop pulling from PEER (writes there wait, delay grows)
  replication resume PEER    pull from PEER again
  replication diff TABLE     compare this cluster's copy of TABLE with each peer's`,
		Args: exactArgs(0, "a subcommand: status, pause or resume"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd)
	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show this cluster's peers and how far behind each it is",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return adminReport(cmd, &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.ReplicationStatusResponse, error) {
				return c.ReplicationStatus(ctx, &ebbadminpb.ReplicationStatusRequest{Project: cf.project, Instance: cf.instance})
			}, "replication status", asJSON, printReplicationStatus)
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	link := func(use, short string, paused bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " PEER",
			Short: short,
			Args:  exactArgs(1, "the peer's cluster id"),
			RunE: func(cmd *cobra.Command, args []string) error {
				resp, err := callEbbAdmin(cmd.Context(), &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.ReplicationLinkResponse, error) {
					return c.ReplicationLink(ctx, &ebbadminpb.ReplicationLinkRequest{Project: cf.project, Instance: cf.instance, Peer: args[0], Paused: paused})
				})
				if err != nil {
					return err
				}
				state := "resumed"
				if resp.GetPaused() {
					state = "paused"
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "link from %s %s\n", args[0], state)
				return err
			},
		}
	}
	cmd.AddCommand(status, link("pause", "Stop pulling a peer's writes", true), link("resume", "Pull a peer's writes again", false), newReplicationDiffCmd(&cf))
	return cmd
}

func newReplicationDiffCmd(cf *connFlags) *cobra.Command {
	var (
		peer   string
		repair bool
		asJSON bool
		pf     progressFlags
	)
	cmd := &cobra.Command{
		Use:   "diff TABLE [--peer CLUSTER] [--repair]",
		Short: "Compare a table between this cluster and its peers, cell by cell where chunks differ",
		Long: `Compare this cluster's copy of TABLE with each peer's (or --peer's): the
table is split into chunks of about 500 rows, each digested on both sides,
and the cells of differing chunks are compared. Each cell one side has and
the other lacks (or holds with another value) is listed with the cluster
that has it and a class:

  expected     its family's age rule has collected it on the other cluster
               and not yet here (inside a raise window: the clusters' age
               cutoffs differ)
  in flight    the other cluster has not yet applied the writes that far
  unexpected   anything else

--repair settles them: expected cells are deleted where they remain,
unexpected ones are copied (with their replication stamp) to where they
are missing or older; cells in flight are left to replication.`,
		Args: exactArgs(1, "TABLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			var resp *ebbadminpb.ReplicationDiffResponse
			err := pf.track(ctx, cmd, cf, "replication diff", func(ctx context.Context) (err error) {
				resp, err = callEbbAdmin(ctx, cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.ReplicationDiffResponse, error) {
					return c.ReplicationDiff(ctx, &ebbadminpb.ReplicationDiffRequest{Project: cf.project, Instance: cf.instance, Table: args[0], Peer: peer, Repair: repair})
				})
				return err
			})
			if err != nil {
				return fmt.Errorf("replication diff: %w", err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return printDiff(cmd.OutOrStdout(), resp)
		},
	}
	pf.register(cmd)
	cmd.Flags().StringVar(&peer, "peer", "", "compare with this cluster only")
	cmd.Flags().BoolVar(&repair, "repair", false, "settle the differences found")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	return cmd
}

func printDiff(w io.Writer, r *ebbadminpb.ReplicationDiffResponse) error {
	for _, p := range r.GetPeers() {
		cells := p.GetCells()
		fmt.Fprintf(w, "%s vs %s: %d chunks, %d differ, %d one-sided cells", r.GetCluster(), p.GetPeer(), p.GetChunks(), p.GetDifferingChunks(), len(cells))
		if p.Repaired != nil {
			fmt.Fprintf(w, ", %d repaired", p.GetRepaired())
		}
		fmt.Fprintln(w)
		if len(cells) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ROW\tCOLUMN\tTIMESTAMP\tON\tMISSING ON\tCLASS")
		for _, c := range cells {
			fmt.Fprintf(tw, "%s\t%s:%s\t%s\t%s\t%s\t%s\n", c.GetRow(), c.GetFamily(), c.GetQualifier(), formatMicros(c.GetTimestamp()), c.GetOn(), c.GetLacking(), c.GetClass())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// formatMicros prints a microsecond timestamp as RFC 3339.
func formatMicros(us int64) string {
	return time.UnixMicro(us).UTC().Format(time.RFC3339Nano)
}

func printReplicationStatus(w io.Writer, r *ebbadminpb.ReplicationStatusResponse) error {
	fmt.Fprintf(w, "cluster %s\n", r.GetCluster())
	peers := r.GetPeers()
	if len(peers) == 0 {
		_, err := fmt.Fprintln(w, "no peers: this cluster replicates with nobody")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tADDRESS\tREADY\tHEALTHY\tPAUSED\tMAX DELAY")
	for _, p := range peers {
		delay := "-"
		if p.MaxDelaySeconds != nil {
			delay = humanDuration(seconds(p.GetMaxDelaySeconds()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%v\t%s\n", p.GetId(), p.GetAddr(), p.GetReady(), p.GetHealthy(), p.GetPaused(), delay)
	}
	return tw.Flush()
}
