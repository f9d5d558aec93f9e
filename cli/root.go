package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes returned by Main.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError marks an error as the caller's fault: Main exits with code 2 and
// points at --help.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef builds a usageError.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Main runs the ebbtable command line with args (without the program name),
// writing output to stdout and diagnostics to stderr, and returns the
// process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)

	// Cobra parses flags and validates positional arguments before it runs
	// the persistent pre-run hook, so an error returned before the hook ran
	// is a usage error.
	validated := false
	root.PersistentPreRun = func(*cobra.Command, []string) { validated = true }

	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "ebbtable: ") {
		msg = "ebbtable: " + msg
	}
	fmt.Fprintln(stderr, msg)
	var ue usageError
	if !validated || errors.As(err, &ue) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitError
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "ebbtable",
		Short: "ebbtable is a Bigtable-compatible wide-column database",
		Long: `ebbtable is a Bigtable-compatible wide-column database. It serves the Cloud
Bigtable Data and Table Admin gRPC APIs, so the official clients and cbt work
against it (set BIGTABLE_EMULATOR_HOST to its address).

Start a server with 'ebbtable serve'; the other commands are small clients
that talk to a running server.

` + configHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(context.Background())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddGroup(
		&cobra.Group{ID: "server", Title: "Server:"},
		&cobra.Group{ID: "client", Title: "Client commands (talk to a running server):"},
		&cobra.Group{ID: "offline", Title: "Offline (on a stopped server's data directory):"},
	)
	serve := newServeCmd(stdout, stderr)
	serve.GroupID = "server"
	root.AddCommand(serve)
	verify := newVerifyCmd(stdout)
	verify.GroupID = "offline"
	root.AddCommand(verify)
	for _, c := range []*cobra.Command{newLsCmd(), newCreateTableCmd(), newReadCmd(), newLookupCmd(), newCountCmd(), newSetCmd(), newGCCmd(), newFamilyCmd(), newWatchCmd(), newChangeStreamCmd(), newBackupCmd(), newRestoreCmd(), newDDLCmd(), newTTLCmd(), newReplicationCmd(), newDebugCmd()} {
		c.GroupID = "client"
		root.AddCommand(c)
	}
	addTableCompletion(root)
	root.AddCommand(withGroup(newSQLCmd(), "client")) // cli/sql.go
	for _, c := range []*cobra.Command{newNodesCmd(), newNodeCmd(), newTabletsCmd()} {
		root.AddCommand(withGroup(c, "client")) // cli/cluster.go
	}
	return root
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s (got %d arguments)", cmd.Name(), names, len(args))
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs with a message that names the arguments.
func minArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("%s takes %s (got %d arguments)", cmd.Name(), names, len(args))
		}
		return nil
	}
}
