package cli

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"
)

func newReadCmd() *cobra.Command {
	var (
		cf     connFlags
		prefix string
		limit  int64
	)
	cmd := &cobra.Command{
		Use:   "read TABLE",
		Short: "Print rows of a table",
		Long: `Print rows of a table in key order, in the layout cbt uses: a line of dashes,
the row key, then for each cell its column and timestamp (RFC 3339, UTC, with
milliseconds) and, indented below, its value quoted.`,
		Example: `  ebbtable read users --prefix user#12 --limit 10`,
		Args:    exactArgs(1, "a table name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usagef("--limit %d is negative", limit)
			}
			rr := bigtable.InfiniteRange("")
			if prefix != "" {
				rr = bigtable.PrefixRange(prefix)
			}
			var opts []bigtable.ReadOption
			if limit > 0 {
				opts = append(opts, bigtable.LimitRows(limit))
			}
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			client, err := cf.dataClient(ctx)
			if err != nil {
				return err
			}
			defer client.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			err = client.Open(args[0]).ReadRows(ctx, rr, func(r bigtable.Row) bool {
				printRow(w, r)
				return true
			}, opts...)
			if ferr := w.Flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return fmt.Errorf("read %q: %w", args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "read only rows whose key starts with this")
	cmd.Flags().Int64Var(&limit, "limit", 0, "read at most this many rows (0: no limit)")
	cf.register(cmd)
	return cmd
}

// timestampLayout is RFC 3339 with milliseconds.
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// printRow writes one row: dashes, the key, then each cell's column and
// timestamp with its quoted value indented below. Families are sorted;
// within a family cells keep the server's order (column, newest first).
func printRow(w io.Writer, r bigtable.Row) {
	fmt.Fprintln(w, strings.Repeat("-", 40))
	fmt.Fprintln(w, printable(r.Key()))
	fams := make([]string, 0, len(r))
	for fam := range r {
		fams = append(fams, fam)
	}
	slices.Sort(fams)
	for _, fam := range fams {
		for _, it := range r[fam] {
			ts := it.Timestamp.Time().UTC().Format(timestampLayout)
			fmt.Fprintf(w, "  %-40s @ %s\n", printable(it.Column), ts)
			fmt.Fprintf(w, "    %q\n", it.Value)
		}
	}
}

// printable returns s as is when it is printable UTF-8, else Go-quoted.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func newSetCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "set TABLE ROW FAMILY:QUALIFIER=VALUE...",
		Short: "Write cells to one row at server time",
		Long: `Write cells to one row in a single atomic mutation. Each cell is
FAMILY:QUALIFIER=VALUE: the first ':' ends the family and the first '=' after
it ends the qualifier, so the qualifier may contain ':' and the value anything;
both may be empty. Cells get the server's current time as their timestamp.`,
		Example: `  ebbtable set users user#1 profile:name=Ada profile:lang=en`,
		Args:    minArgs(3, "a table, a row key and at least one FAMILY:QUALIFIER=VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tbl, row := args[0], args[1]
			mut := bigtable.NewMutation()
			for _, a := range args[2:] {
				fam, qual, val, err := parseCell(a)
				if err != nil {
					return err
				}
				mut.Set(fam, qual, bigtable.ServerTime, []byte(val))
			}
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			client, err := cf.dataClient(ctx)
			if err != nil {
				return err
			}
			defer client.Close()
			if err := client.Open(tbl).Apply(ctx, row, mut); err != nil {
				return fmt.Errorf("set %q row %q: %w", tbl, row, err)
			}
			return nil
		},
	}
	cf.register(cmd)
	return cmd
}

// parseCell splits FAMILY:QUALIFIER=VALUE.
func parseCell(s string) (family, qualifier, value string, err error) {
	family, rest, ok := strings.Cut(s, ":")
	if !ok || family == "" {
		return "", "", "", usagef("cell %q: want FAMILY:QUALIFIER=VALUE", s)
	}
	qualifier, value, ok = strings.Cut(rest, "=")
	if !ok {
		return "", "", "", usagef("cell %q: want FAMILY:QUALIFIER=VALUE (no '=')", s)
	}
	return family, qualifier, value, nil
}
