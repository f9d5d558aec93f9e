package cli

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/spf13/cobra"
)

// newVerifyCmd is `ebbtable verify`: an offline check of a data directory.
func newVerifyCmd(stdout io.Writer) *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "verify --data DIR",
		Short: "Check a stopped server's data directory for damaged files",
		Long: `Read every file of a data directory and check it, without changing anything:

  SSTables   every block checksum, then every key in order
  WAL        every record's framing and checksum, and that it decodes as a batch
  MANIFEST   its records' framing and checksums; Pebble decodes every version
             edit, and each SSTable it references must exist with its size
  OPTIONS    it parses and names ebbtable's key order
  backups    each MANIFEST.json decodes; each SSTable it lists exists with
             the listed size, passes every checksum and holds the listed cells

verify prints one line per damaged file (DAMAGED PATH: what is wrong), notes
about harmless findings (note PATH: ...), and a summary. A torn tail at the end
of the newest WAL is a note: it is the write a crash or power loss cut short,
never acknowledged, and the server ignores it on start-up.

The server must be stopped: verify refuses a directory whose lock a running
server holds.

Exit status: 0 if nothing is damaged, 1 if anything is, 2 on a usage error or
a directory that cannot be verified (in use, not a data directory).

  ebbtable verify --data ./ebbtable-data
  ebbtable verify --data /var/lib/ebbtable || echo "damaged: restore from a backup"`,
		Args: exactArgs(0, "no arguments (the directory is --data)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return usagef("--data is required")
			}
			rep, err := storage.Verify(dataDir)
			if errors.Is(err, storage.ErrInUse) || errors.Is(err, storage.ErrNotDataDir) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			brep, err := backup.Verify(dataDir)
			if err != nil {
				return fmt.Errorf("verify backups in %s: %w", dataDir, err)
			}
			rep.Merge(brep)
			for _, f := range rep.Findings {
				fmt.Fprintln(stdout, f)
			}
			damaged := len(rep.DamagedFiles())
			fmt.Fprintf(stdout, "checked %s: %d damaged\n", checkedSummary(rep.Checked), damaged)
			if damaged > 0 {
				return fmt.Errorf("%d damaged file(s) in %s", damaged, dataDir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data", "", "the data directory to check (required; the server must be stopped)")
	return cmd
}

// checkedSummary reads "3 sstable, 1 wal, ..." in a fixed order.
func checkedSummary(checked map[string]int) string {
	order := []string{storage.KindSSTable, storage.KindWAL, storage.KindManifest, storage.KindOptions, backup.KindManifest, backup.KindSSTable}
	seen := map[string]bool{}
	var parts []string
	for _, k := range order {
		seen[k] = true
		parts = append(parts, fmt.Sprintf("%d %s", checked[k], k))
	}
	var rest []string
	for k := range checked {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		parts = append(parts, fmt.Sprintf("%d %s", checked[k], k))
	}
	return strings.Join(parts, ", ")
}
