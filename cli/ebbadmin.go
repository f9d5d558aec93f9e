package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// callEbbAdmin invokes method (one of the server.Method* names of ebbtable's
// own admin service) with fields plus --project and --instance, and returns
// the response. RPC failures come back as *rpcError.
func (f *connFlags) callEbbAdmin(ctx context.Context, method string, fields map[string]any) (*structpb.Struct, error) {
	if err := f.resolve(); err != nil {
		return nil, err
	}
	all := map[string]any{"project": f.project, "instance": f.instance}
	for k, v := range fields {
		all[k] = v
	}
	req, err := structpb.NewStruct(all)
	if err != nil {
		return nil, fmt.Errorf("build %s request: %w", method, err)
	}
	conn, err := f.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp := new(structpb.Struct)
	if err := conn.Invoke(ctx, method, req, resp); err != nil {
		return nil, &rpcError{err}
	}
	return resp, nil
}

// rpcError shows a failed call as the server's status message and code,
// without gRPC's "rpc error: code = ... desc = ..." wrapping.
type rpcError struct{ err error }

func (e *rpcError) Error() string {
	st := status.Convert(e.err)
	return fmt.Sprintf("%s (%s)", strings.TrimPrefix(st.Message(), "ebbtable: "), st.Code())
}

func (e *rpcError) Unwrap() error { return e.err }

// fields reads an admin response: numbers, strings and lists by name, zero
// values for missing fields.
type fields map[string]*structpb.Value

func (f fields) int(k string) int64 { return int64(f[k].GetNumberValue()) }

func (f fields) str(k string) string { return f[k].GetStringValue() }

func (f fields) seconds(k string) time.Duration {
	return time.Duration(f[k].GetNumberValue() * float64(time.Second))
}

func (f fields) list(k string) []fields {
	var out []fields
	for _, v := range f[k].GetListValue().GetValues() {
		out = append(out, v.GetStructValue().GetFields())
	}
	return out
}

// printJSON writes s as indented JSON with sorted keys ("<never>" stays
// as written, not HTML-escaped).
func printJSON(w io.Writer, s *structpb.Struct) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(s.AsMap())
}

// humanBytes prints n bytes in binary units: "512 B", "1.5 KiB", "3.0 GiB".
func humanBytes(n int64) string {
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= 1024
		if v < 1024 && v > -1024 {
			return fmt.Sprintf("%.1f %s", v, unit)
		}
	}
	return fmt.Sprintf("%.1f PiB", v/1024)
}

// humanDuration rounds d for people: microseconds under a millisecond,
// milliseconds under a minute, seconds beyond.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// plural is "1 cell" or "n cells".
func plural(n int64, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// adminReport calls one of ebbtable's admin methods for cmd and prints the
// answer: unchanged as JSON with --json, else laid out by print. Errors
// are prefixed with what.
func (f *connFlags) adminReport(cmd *cobra.Command, method string, req map[string]any, what string, asJSON bool, print func(io.Writer, fields) error) error {
	ctx, cancel := f.context(cmd.Context())
	defer cancel()
	resp, err := f.callEbbAdmin(ctx, method, req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), resp)
	}
	return print(cmd.OutOrStdout(), fields(resp.GetFields()))
}
