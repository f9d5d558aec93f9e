package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/server"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/metadata"
)

// This file holds the commands that overlap cbt's (read, lookup, count,
// ls TABLE) and print what cbt prints, byte for byte: the layout is cbt's
// (cbt.go, printRowAtTimezone and doLS, in
// github.com/googleapis/cloud-bigtable-cbt-cli), and TestCbtSameOutput
// compares the two on one server.

// cbtTimestampLayout is how cbt prints a cell's timestamp, in local time.
const cbtTimestampLayout = "2006/01/02-15:04:05.000000"

// rowDashes opens every row cbt prints.
var rowDashes = strings.Repeat("-", 40)

// printRow writes one row as cbt read and lookup do: dashes, the key, then
// for each family in name order and each cell in column order (versions
// newest first) the column and timestamp, and the quoted value indented
// below; then the blank line cbt's Println adds. Keys and columns with
// unprintable bytes are Go-quoted, as cbt does since its release of July
// 2026, instead of sent raw to the terminal; printable ones are as cbt
// 1.23 prints them. A cell the server labelled with a native expiry
// (--show-expiry) shows it after the timestamp.
func printRow(w io.Writer, r bigtable.Row) {
	fmt.Fprintln(w, rowDashes)
	fmt.Fprintln(w, printable(r.Key()))
	fams := make([]string, 0, len(r))
	for fam := range r {
		fams = append(fams, fam)
	}
	slices.Sort(fams)
	for _, fam := range fams {
		items := r[fam]
		// sort.Sort, not a stable sort: cbt sorts so, and versions of one
		// column must come out in the order cbt leaves them.
		sort.Sort(byColumn(items))
		for _, it := range items {
			ts := time.UnixMicro(int64(it.Timestamp)).In(time.Local).Format(cbtTimestampLayout)
			if exp := expiryOf(it.Labels); exp != "" {
				fmt.Fprintf(w, "  %-40s @ %s  expires %s\n", printable(it.Column), ts, exp)
			} else {
				fmt.Fprintf(w, "  %-40s @ %s\n", printable(it.Column), ts)
			}
			fmt.Fprintf(w, "    %q\n", it.Value)
		}
	}
	fmt.Fprintln(w)
}

type byColumn []bigtable.ReadItem

func (b byColumn) Len() int           { return len(b) }
func (b byColumn) Swap(i, j int)      { b[i], b[j] = b[j], b[i] }
func (b byColumn) Less(i, j int) bool { return b[i].Column < b[j].Column }

// cbtArgs parses cbt's KEY=VALUE arguments, allowing only the keys named.
func cbtArgs(cmd string, args []string, allowed ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !slices.Contains(allowed, k) {
			return nil, usagef("%s: argument %q: want one of %s", cmd, a, strings.Join(allowed, "=, ")+"=")
		}
		out[k] = v
	}
	return out, nil
}

// readSpec is what a read, lookup or count asks for, from flags and cbt's
// KEY=VALUE arguments.
type readSpec struct {
	prefix, start, end string
	count              int64
	cellsPerColumn     int
	regex              string // of row keys
	keysOnly, reversed bool
	appProfile         string
	columns            bigtable.Filter // nil: every column
}

// merge adds cbt-style arguments to s; a flag and an argument for the same
// thing must not both be given.
func (s *readSpec) merge(cmd string, kv map[string]string) error {
	var err error
	set := func(dst *string, k string) {
		if v, ok := kv[k]; ok {
			*dst = v
		}
	}
	if kv["prefix"] != "" && s.prefix != "" {
		return usagef("%s: give --prefix or prefix=, not both", cmd)
	}
	set(&s.prefix, "prefix")
	set(&s.start, "start")
	set(&s.end, "end")
	set(&s.regex, "regex")
	set(&s.appProfile, "app-profile")
	if v, ok := kv["columns"]; ok && v != "" {
		if s.columns, err = columnsFilter(v); err != nil {
			return usagef("%s: %v", cmd, err)
		}
	}
	if v, ok := kv["count"]; ok {
		if s.count, err = strconv.ParseInt(v, 0, 64); err != nil || s.count < 0 {
			return usagef("%s: bad count %q", cmd, v)
		}
	}
	if v, ok := kv["cells-per-column"]; ok {
		if s.cellsPerColumn, err = strconv.Atoi(v); err != nil || s.cellsPerColumn <= 0 {
			return usagef("%s: bad number of cells per column %q", cmd, v)
		}
	}
	if v, ok := kv["keys-only"]; ok {
		if s.keysOnly, err = strconv.ParseBool(v); err != nil {
			return usagef("%s: bad keys-only %q", cmd, v)
		}
	}
	if v, ok := kv["reversed"]; ok {
		if s.reversed, err = strconv.ParseBool(v); err != nil {
			return usagef("%s: bad reversed %q", cmd, v)
		}
	}
	if (s.start != "" || s.end != "") && s.prefix != "" {
		return usagef(`%s: "start"/"end" may not be mixed with "prefix"`, cmd)
	}
	return nil
}

// columnsFilter reads cbt's columns= list: comma-separated entries, each
// QUALIFIER, FAMILY:, :QUALIFIER or FAMILY:QUALIFIER (regular expressions);
// a cell matching any entry is kept.
func columnsFilter(list string) (bigtable.Filter, error) {
	var fs []bigtable.Filter
	for _, col := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' }) {
		parts := strings.Split(col, ":")
		switch {
		case len(parts) == 1:
			fs = append(fs, bigtable.ColumnFilter(col))
		case len(parts) != 2:
			return nil, fmt.Errorf("bad format for column %q", col)
		case parts[1] == "":
			fs = append(fs, bigtable.FamilyFilter(parts[0]))
		case parts[0] == "":
			fs = append(fs, bigtable.ColumnFilter(parts[1]))
		default:
			fs = append(fs, bigtable.ChainFilters(bigtable.FamilyFilter(parts[0]), bigtable.ColumnFilter(parts[1])))
		}
	}
	if len(fs) == 1 {
		return fs[0], nil
	}
	return bigtable.InterleaveFilters(fs...), nil
}

// rows is the row range to read.
func (s *readSpec) rows() bigtable.RowSet {
	switch {
	case s.prefix != "":
		return bigtable.PrefixRange(s.prefix)
	case s.end != "":
		return bigtable.NewRange(s.start, s.end)
	}
	return bigtable.InfiniteRange(s.start)
}

// options are the read options: the row limit and the filters, chained
// in cbt's order.
func (s *readSpec) options() []bigtable.ReadOption {
	var opts []bigtable.ReadOption
	if s.count > 0 {
		opts = append(opts, bigtable.LimitRows(s.count))
	}
	if s.reversed {
		opts = append(opts, bigtable.ReverseScan())
	}
	var filters []bigtable.Filter
	if s.cellsPerColumn > 0 {
		filters = append(filters, bigtable.LatestNFilter(s.cellsPerColumn))
	}
	if s.regex != "" {
		filters = append(filters, bigtable.RowKeyFilter(s.regex))
	}
	if s.columns != nil {
		filters = append(filters, s.columns)
	}
	if s.keysOnly {
		filters = append(filters, bigtable.StripValueFilter())
	}
	switch len(filters) {
	case 0:
	case 1:
		opts = append(opts, bigtable.RowFilter(filters[0]))
	default:
		opts = append(opts, bigtable.RowFilter(bigtable.ChainFilters(filters...)))
	}
	return opts
}

// withData runs fn with the command's context and a connected data client
// that sends spec's app profile.
func (f *connFlags) withData(cmd *cobra.Command, spec readSpec, fn func(ctx context.Context, c *bigtable.Client) error) error {
	f.appProfile = spec.appProfile
	ctx, cancel := f.context(cmd.Context())
	defer cancel()
	client, err := f.dataClient(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	return fn(ctx, client)
}

func newLookupCmd() *cobra.Command {
	var (
		cf         connFlags
		showExpiry bool
	)
	cmd := &cobra.Command{
		Use:   "lookup TABLE ROW [columns=LIST] [cells-per-column=N] [keys-only=true] [app-profile=ID]",
		Short: "Print one row, as cbt lookup does",
		Long: `Print one row in cbt's layout (see read). A row that does not exist prints
as cbt prints it: the dashes and an empty key.`,
		Example: `  ebbtable lookup users user#1
  ebbtable lookup users user#1 cells-per-column=1`,
		Args: minArgs(2, "a table, a row key and optional cbt-style arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			kv, err := cbtArgs("lookup", args[2:], "columns", "cells-per-column", "keys-only", "app-profile")
			if err != nil {
				return err
			}
			var spec readSpec
			if err := spec.merge("lookup", kv); err != nil {
				return err
			}
			return cf.withData(cmd, spec, func(ctx context.Context, c *bigtable.Client) error {
				if showExpiry {
					ctx = metadata.AppendToOutgoingContext(ctx, server.MetaShowExpiry, "true")
				}
				r, err := c.Open(args[0]).ReadRow(ctx, args[1], spec.options()...)
				if err != nil {
					return fmt.Errorf("lookup %q row %q: %w", args[0], args[1], err)
				}
				w := bufio.NewWriter(cmd.OutOrStdout())
				printRow(w, r)
				return w.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&showExpiry, "show-expiry", false, "print each cell's native expiry (cell TTL), if it has one")
	cf.register(cmd)
	return cmd
}

func newCountCmd() *cobra.Command {
	var (
		cf     connFlags
		prefix string
	)
	cmd := &cobra.Command{
		Use:     "count TABLE [prefix=PREFIX] [app-profile=ID]",
		Short:   "Print the number of rows, as cbt count does",
		Example: "  ebbtable count events\n  ebbtable count events prefix=user#1",
		Args:    minArgs(1, "a table and an optional prefix=PREFIX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			kv, err := cbtArgs("count", args[1:], "prefix", "app-profile")
			if err != nil {
				return err
			}
			spec := readSpec{prefix: prefix}
			if err := spec.merge("count", kv); err != nil {
				return err
			}
			return cf.withData(cmd, spec, func(ctx context.Context, c *bigtable.Client) error {
				n := 0
				// cbt's filter: one cell per row, no values.
				filter := bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
				err := c.Open(args[0]).ReadRows(ctx, spec.rows(), func(bigtable.Row) bool {
					n++
					return true
				}, bigtable.RowFilter(filter))
				if err != nil {
					return fmt.Errorf("count %q: %w", args[0], err)
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), n)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "count only rows whose key starts with this")
	cf.register(cmd)
	return cmd
}

// printFamilies writes a table's families as cbt ls TABLE does.
func printFamilies(out io.Writer, ti *bigtable.TableInfo) error {
	fams := slices.Clone(ti.FamilyInfos)
	slices.SortFunc(fams, func(a, b bigtable.FamilyInfo) int { return strings.Compare(a.Name, b.Name) })
	tw := tabwriter.NewWriter(out, 10, 8, 4, '\t', 0)
	fmt.Fprintf(tw, "Family Name\tGC Policy\tValue Type\n")
	fmt.Fprintf(tw, "-----------\t---------\t----------\n")
	for _, fam := range fams {
		vt := fam.ValueType
		if vt == nil {
			vt = bigtable.TypeUnspecified{}
		}
		js, err := bigtable.MarshalJSON(vt)
		if err != nil {
			return fmt.Errorf("family %s value type: %w", fam.Name, err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", fam.Name, fam.GCPolicy, js)
	}
	return tw.Flush()
}
