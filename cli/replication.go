package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ebbtable/ebbtable/server"
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
  replication resume PEER    pull from PEER again`,
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
			return cf.adminReport(cmd, server.MethodStatus, nil, "replication status", asJSON, printReplicationStatus)
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print the server's answer as JSON")
	link := func(use, short string, paused bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " PEER",
			Short: short,
			Args:  exactArgs(1, "the peer's cluster id"),
			RunE: func(cmd *cobra.Command, args []string) error {
				resp, err := cf.callEbbAdmin(cmd.Context(), server.MethodLink, map[string]any{"peer": args[0], "paused": paused})
				if err != nil {
					return err
				}
				state := "resumed"
				if resp.GetFields()["paused"].GetBoolValue() {
					state = "paused"
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "link from %s %s\n", args[0], state)
				return err
			},
		}
	}
	cmd.AddCommand(status, link("pause", "Stop pulling a peer's writes", true), link("resume", "Pull a peer's writes again", false))
	return cmd
}

func printReplicationStatus(w io.Writer, r fields) error {
	fmt.Fprintf(w, "cluster %s\n", r.str("cluster"))
	peers := r.list("peers")
	if len(peers) == 0 {
		_, err := fmt.Fprintln(w, "no peers: this cluster replicates with nobody")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tADDRESS\tREADY\tHEALTHY\tPAUSED\tMAX DELAY")
	for _, p := range peers {
		delay := "-"
		if v, ok := p["max_delay_seconds"]; ok {
			delay = humanDuration(time.Duration(v.GetNumberValue() * float64(time.Second)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%v\t%s\n", p.str("id"), p.str("addr"), p["ready"].GetBoolValue(), p["healthy"].GetBoolValue(), p["paused"].GetBoolValue(), delay)
	}
	return tw.Flush()
}
