package cli

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/table"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/metadata"
)

func newReadCmd() *cobra.Command {
	var (
		cf         connFlags
		prefix     string
		limit      int64
		showExpiry bool
	)
	cmd := &cobra.Command{
		Use:   "read TABLE [prefix=P] [start=K] [end=K] [count=N] [cells-per-column=N] [regex=RE] [columns=LIST] [keys-only=true] [reversed=true] [app-profile=ID]",
		Short: "Print rows of a table, as cbt read does",
		Long: `Print rows of a table in key order, byte for byte as cbt read prints them: a
line of dashes, the row key, then for each cell its column and timestamp (local
time, microseconds) and, indented below, its value quoted, and a blank line
after each row. A key or column with unprintable bytes is Go-quoted (as newer
cbt releases do) instead of sent raw to the terminal. With --show-expiry, a
cell that has a native expiry (a cell TTL) shows it after the timestamp.

cbt's KEY=VALUE arguments work too: prefix=, start=, end=, count=,
cells-per-column=, regex= (of row keys), columns= (FAMILY:QUALIFIER regular
expressions, comma-separated), keys-only=, reversed=, app-profile=.`,
		Example: `  ebbtable read users --prefix user#12 --limit 10
  ebbtable read events --show-expiry`,
		Args: minArgs(1, "a table name and optional cbt-style arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usagef("--limit %d is negative", limit)
			}
			kv, err := cbtArgs("read", args[1:], "prefix", "start", "end", "count", "cells-per-column", "regex", "columns", "keys-only", "reversed", "app-profile")
			if err != nil {
				return err
			}
			spec := readSpec{prefix: prefix, count: limit}
			if _, ok := kv["count"]; ok && limit > 0 {
				return usagef("read: give --limit or count=, not both")
			}
			if err := spec.merge("read", kv); err != nil {
				return err
			}
			return cf.withData(cmd, spec, func(ctx context.Context, client *bigtable.Client) error {
				if showExpiry {
					ctx = metadata.AppendToOutgoingContext(ctx, server.MetaShowExpiry, "true")
				}
				w := bufio.NewWriter(cmd.OutOrStdout())
				err := client.Open(args[0]).ReadRows(ctx, spec.rows(), func(r bigtable.Row) bool {
					printRow(w, r)
					return true
				}, spec.options()...)
				if ferr := w.Flush(); err == nil {
					err = ferr
				}
				if err != nil {
					return fmt.Errorf("read %q: %w", args[0], err)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "read only rows whose key starts with this")
	cmd.Flags().Int64Var(&limit, "limit", 0, "read at most this many rows (0: no limit)")
	cmd.Flags().BoolVar(&showExpiry, "show-expiry", false, "print each cell's native expiry (cell TTL), if it has one")
	cf.register(cmd)
	return cmd
}

// expiryOf returns the expiry a --show-expiry read labelled a cell with
// (RFC 3339, UTC, milliseconds), or "" if it has none.
func expiryOf(labels []string) string {
	for _, l := range labels {
		if exp, ok := strings.CutPrefix(l, server.ExpiryLabelPrefix); ok {
			return exp
		}
	}
	return ""
}

// printable returns s as is when it is printable UTF-8, else Go-quoted.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func newSetCmd() *cobra.Command {
	var (
		cf       connFlags
		ttl      string
		expireAt string
	)
	cmd := &cobra.Command{
		Use:   "set TABLE ROW FAMILY:QUALIFIER=VALUE...",
		Short: "Write cells to one row at server time",
		Long: `Write cells to one row in a single atomic mutation. Each cell is
FAMILY:QUALIFIER=VALUE: the first ':' ends the family and the first '=' after
it ends the qualifier, so the qualifier may contain ':' and the value anything;
both may be empty. Cells get the server's current time as their timestamp.

--ttl or --expire-at gives every cell of the write a native expiry (sent as
the x-ebbtable-cell-ttl or x-ebbtable-cell-expire-at request metadata): once
it passes, readers no longer see the cell and the collector deletes it. The
cell keeps its real write time as its timestamp. A TTL is a duration of at
least 1ms (90s, 36h, 1h30m) or a whole number of days (2d).`,
		Example: `  ebbtable set users user#1 profile:name=Ada profile:lang=en
  ebbtable set events user#1 clicks:home=1 --ttl 2d
  ebbtable set events user#1 clicks:home=1 --expire-at 2026-05-01T09:00:00Z`,
		Args: minArgs(3, "a table, a row key and at least one FAMILY:QUALIFIER=VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tbl, row := args[0], args[1]
			md, err := expiryMetadata(cmd, ttl, expireAt)
			if err != nil {
				return err
			}
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
			if len(md) > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, md...)
			}
			if err := client.Open(tbl).Apply(ctx, row, mut); err != nil {
				return fmt.Errorf("set %q row %q: %w", tbl, row, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", "give each cell a native time to live: 90s, 36h, 1h30m, 2d (at least 1ms)")
	cmd.Flags().StringVar(&expireAt, "expire-at", "", "give each cell a native expiry time: RFC 3339 (2026-05-01T09:00:00Z) or microseconds since the epoch")
	cf.register(cmd)
	return cmd
}

// expiryMetadata checks set's --ttl and --expire-at and returns the request
// metadata (key, value pairs) that carries them; none when neither is given.
// The server checks them again, and what depends on its clock (an expiry
// past year 9999) only there.
func expiryMetadata(cmd *cobra.Command, ttl, expireAt string) ([]string, error) {
	hasTTL, hasAt := cmd.Flags().Changed("ttl"), cmd.Flags().Changed("expire-at")
	switch {
	case hasTTL && hasAt:
		return nil, usagef("give --ttl or --expire-at, not both")
	case hasTTL:
		us, err := server.ParseTTL(ttl)
		if err != nil {
			return nil, usagef("--ttl %q: %s", ttl, strings.TrimPrefix(err.Error(), table.ErrInvalid.Error()+": "))
		}
		if us < table.MinTTLMicros {
			return nil, usagef("--ttl %q: a TTL must be at least 1ms (zero and negative TTLs are refused)", ttl)
		}
		return []string{server.MetaCellTTL, strings.TrimSpace(ttl)}, nil
	case hasAt:
		s := strings.TrimSpace(expireAt)
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return nil, usagef("--expire-at %q: want RFC 3339 (2026-05-01T09:00:00Z) or microseconds since the epoch", expireAt)
			}
		}
		return []string{server.MetaCellExpireAt, s}, nil
	}
	return nil, nil
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
