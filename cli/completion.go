package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// tableArgCommands are the commands whose first argument is an existing
// table: shell completion offers the server's table names there.
var tableArgCommands = []string{
	"ebbtable ls", "ebbtable read", "ebbtable lookup", "ebbtable count", "ebbtable set",
	"ebbtable watch", "ebbtable backup create", "ebbtable replication diff",
	"ebbtable changestream enable", "ebbtable changestream disable", "ebbtable family guard",
}

// completionTimeout bounds the server call behind a completion: a TAB must
// not hang when no server is running.
const completionTimeout = 2 * time.Second

// addTableCompletion makes shell completion offer table names as the first
// argument of tableArgCommands (`ebbtable completion bash|zsh|fish` are
// cobra's scripts; they ask the binary, which asks the server named by the
// flags, ~/.cbtrc or the environment typed so far).
func addTableCompletion(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if slices.Contains(tableArgCommands, c.CommandPath()) && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = completeTables
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeTables lists the tables whose names start with toComplete, for
// the first argument only; nothing if the server cannot be reached.
func completeTables(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var cf connFlags
	cf.addr, _ = cmd.Flags().GetString("addr")
	cf.project, _ = cmd.Flags().GetString("project")
	cf.instance, _ = cmd.Flags().GetString("instance")
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	admin, err := cf.adminClient(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer admin.Close()
	names, err := admin.Tables(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, toComplete) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, cobra.ShellCompDirectiveNoFileComp
}
