package cli

import (
	"context"
	"fmt"

	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/spf13/cobra"
)

func newDebugCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "debug",
		Short: "Debugging controls of a server (off unless it was started for them)",
		Long: `Debugging controls of a running server.

  debug clock set TIME      move the server's clock forward to TIME (RFC 3339)
  debug clock advance DUR   move it forward by DUR (a Go duration: 24h, 90m)

The clock moves only on a server started with --debug-clock; anything that
depends on time (GC age rules, cell TTLs, row deletion policies, change
stream commit times) follows it. Timers keep the real pace.`,
		Args: exactArgs(0, "a subcommand: clock"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd)
	clockCmd := &cobra.Command{
		Use:   "clock set TIME | advance DURATION",
		Short: "Move a --debug-clock server's clock forward",
		Args:  exactArgs(2, "set TIME or advance DURATION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req ebbadminpb.DebugClockRequest
			switch args[0] {
			case "set":
				req.Set = args[1]
			case "advance":
				req.Advance = args[1]
			default:
				return usagef("debug clock takes set TIME or advance DURATION, not %q", args[0])
			}
			resp, err := callEbbAdmin(cmd.Context(), &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.DebugClockResponse, error) {
				return c.DebugClock(ctx, &req)
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), resp.GetNow())
			return err
		},
	}
	cmd.AddCommand(clockCmd)
	return cmd
}
