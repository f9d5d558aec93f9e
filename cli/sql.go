package cli

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
)

func newSQLCmd() *cobra.Command {
	var (
		cf     connFlags
		asJSON bool
		params []string
	)
	cmd := &cobra.Command{
		Use:   "sql QUERY",
		Short: "Run a Bigtable SQL query and print its rows",
		Long: `Run a GoogleSQL query (Bigtable's SQL: SELECT over a table or view, see
docs/sql.md) through PrepareQuery and ExecuteQuery, and print the result as an
aligned table: a header of column names, a rule, one line per row. BYTES print
as text when printable, else as an escaped b"..." literal; maps as
{key: value}; arrays as [a, b]; structs as (a, b).

With --json, each row is one JSON object per line, keyed by column name
(anonymous columns are $1, $2, ... by position): BYTES become a string when
valid UTF-8 and {"base64": "..."} otherwise, maps objects keyed by their keys'
text, structs objects keyed by field name, timestamps RFC 3339 strings.

Parameters are --param NAME=TYPE:VALUE, TYPE one of STRING, BYTES, INT64,
FLOAT64, BOOL, TIMESTAMP (RFC 3339); refer to them as @NAME.`,
		Example: `  ebbtable sql 'SELECT _key, info FROM users LIMIT 10'
  ebbtable sql --json "SELECT _key, CAST(stats['visits'] AS INT64) AS visits FROM users WHERE _key = @k" --param k=STRING:alice`,
		Args: exactArgs(1, "a query"),
		RunE: func(cmd *cobra.Command, args []string) error {
			types := map[string]*btpb.Type{}
			values := map[string]*btpb.Value{}
			for _, p := range params {
				name, t, v, err := parseSQLParam(p)
				if err != nil {
					return usagef("--param %s: %v", p, err)
				}
				types[name], values[name] = t, v
			}
			ctx, cancel := cf.context(cmd.Context())
			defer cancel()
			conn, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			c := btpb.NewBigtableClient(conn)
			inst := "projects/" + cf.project + "/instances/" + cf.instance
			prep, err := c.PrepareQuery(ctx, &btpb.PrepareQueryRequest{InstanceName: inst, Query: args[0], ParamTypes: types,
				DataFormat: &btpb.PrepareQueryRequest_ProtoFormat{ProtoFormat: &btpb.ProtoFormat{}}})
			if err != nil {
				return err
			}
			var names []string
			var colTypes []*sqlquery.Type
			for i, col := range prep.GetMetadata().GetProtoSchema().GetColumns() {
				t, err := server.SQLColumn(col.GetType())
				if err != nil {
					return err
				}
				name := col.GetName()
				if name == "" {
					name = "$" + strconv.Itoa(i+1)
				}
				names, colTypes = append(names, name), append(colTypes, t)
			}
			stream, err := c.ExecuteQuery(ctx, &btpb.ExecuteQueryRequest{InstanceName: inst, PreparedQuery: prep.GetPreparedQuery(), Params: values})
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			var table [][]string
			var batch []byte
			var pending []*btpb.Value
			for {
				resp, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				prs := resp.GetResults()
				if prs.GetReset_() {
					batch = batch[:0]
				}
				batch = append(batch, prs.GetProtoRowsBatch().GetBatchData()...)
				if prs.BatchChecksum == nil {
					continue
				}
				rows := &btpb.ProtoRows{}
				if err := proto.Unmarshal(batch, rows); err != nil {
					return fmt.Errorf("decode rows: %w", err)
				}
				batch = batch[:0]
				pending = append(pending, rows.GetValues()...)
				for len(names) > 0 && len(pending) >= len(names) {
					row := make([]sqlquery.Value, len(names))
					for i := range names {
						if row[i], err = server.SQLValue(pending[i], colTypes[i]); err != nil {
							return err
						}
					}
					pending = pending[len(names):]
					if asJSON {
						// Columns keep their order (a map would sort them).
						w.WriteByte('{')
						for i, v := range row {
							k, _ := json.Marshal(names[i])
							b, err := json.Marshal(jsonValue(v, colTypes[i]))
							if err != nil {
								return err
							}
							if i > 0 {
								w.WriteByte(',')
							}
							w.Write(k)
							w.WriteByte(':')
							w.Write(b)
						}
						w.WriteString("}\n")
						continue
					}
					line := make([]string, len(row))
					for i, v := range row {
						line[i] = sqlquery.Format(v)
					}
					table = append(table, line)
				}
			}
			if !asJSON {
				printAligned(w, names, table)
			}
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per row")
	cmd.Flags().StringArrayVar(&params, "param", nil, "a query parameter NAME=TYPE:VALUE (repeatable)")
	return cmd
}

func parseSQLParam(s string) (string, *btpb.Type, *btpb.Value, error) {
	name, rest, ok := strings.Cut(s, "=")
	typ, val, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || name == "" {
		return "", nil, nil, fmt.Errorf("want NAME=TYPE:VALUE")
	}
	t, v, err := server.ParseSQLParam(typ, val) // the console's SQL page reads them the same way
	return strings.TrimPrefix(name, "@"), t, v, err
}

// jsonValue turns a result value into what encoding/json prints.
func jsonValue(v sqlquery.Value, t *sqlquery.Type) any {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return map[string]string{"base64": base64.StdEncoding.EncodeToString(x)}
	case float64, float32, int64, bool, string:
		return x
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case sqlquery.Date:
		return x.String()
	case sqlquery.Array:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e, t.Elem)
		}
		return out
	case sqlquery.Struct:
		out := map[string]any{}
		for i, e := range x {
			name := t.Fields[i].Name
			if name == "" {
				name = "$" + strconv.Itoa(i+1)
			}
			out[name] = jsonValue(e, t.Fields[i].Type)
		}
		return out
	case *sqlquery.Map:
		out := map[string]any{}
		for i, k := range x.Keys {
			out[sqlquery.Format(k)] = jsonValue(x.Vals[i], t.Val)
		}
		return out
	}
	return sqlquery.Format(v)
}

// printAligned prints a header, a rule and the rows in columns.
func printAligned(w io.Writer, names []string, rows [][]string) {
	widths := make([]int, len(names))
	for i, n := range names {
		widths[i] = utf8.RuneCountInString(n)
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(c)
			if i < len(cells)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)))
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(names)
	rule := make([]string, len(names))
	for i := range names {
		rule[i] = strings.Repeat("-", widths[i])
	}
	line(rule)
	for _, r := range rows {
		line(r)
	}
}

// withGroup sets a command's help group.
func withGroup(c *cobra.Command, group string) *cobra.Command {
	c.GroupID = group
	return c
}
