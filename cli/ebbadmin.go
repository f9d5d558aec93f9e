package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// callEbbAdmin resolves --project and --instance, dials the server and
// makes fn's call to ebbtable's own admin service (its requests read
// f.project and f.instance). RPC failures come back as *rpcError.
func callEbbAdmin[R any](ctx context.Context, f *connFlags, fn func(context.Context, ebbadminpb.EbbAdminClient) (R, error)) (R, error) {
	var zero R
	if err := f.resolve(); err != nil {
		return zero, err
	}
	conn, err := f.dial(ctx)
	if err != nil {
		return zero, err
	}
	defer conn.Close()
	resp, err := fn(ctx, ebbadminpb.NewEbbAdminClient(conn))
	if err != nil {
		return zero, &rpcError{err}
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

// seconds is a *_seconds field of an answer as a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// printJSON writes an answer as indented JSON with sorted keys, fields by
// their proto names: every field but an unset optional one, numbers as
// JSON numbers, bytes in base64 ("<never>" stays as written, not
// HTML-escaped).
func printJSON(w io.Writer, m proto.Message) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(protoJSON(m.ProtoReflect()))
}

// protoJSON is m as encoding/json values.
func protoJSON(m protoreflect.Message) map[string]any {
	out := map[string]any{}
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.HasPresence() && !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			list := make([]any, 0, l.Len())
			for j := range l.Len() {
				list = append(list, protoJSONValue(fd, l.Get(j)))
			}
			out[string(fd.Name())] = list
		case fd.IsMap():
			mv := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				mv[k.String()] = protoJSONValue(fd.MapValue(), e)
				return true
			})
			out[string(fd.Name())] = mv
		default:
			out[string(fd.Name())] = protoJSONValue(fd, v)
		}
	}
	return out
}

func protoJSONValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return protoJSON(v.Message())
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int32(v.Enum())
	}
	return v.Interface() // bool, numbers, string
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

// adminReport makes one call of ebbtable's admin service for cmd and
// prints the answer: unchanged as JSON with --json, else laid out by print.
// Errors are prefixed with what.
func adminReport[R proto.Message](cmd *cobra.Command, f *connFlags, call func(context.Context, ebbadminpb.EbbAdminClient) (R, error), what string, asJSON bool, print func(io.Writer, R) error) error {
	ctx, cancel := f.context(cmd.Context())
	defer cancel()
	resp, err := callEbbAdmin(ctx, f, call)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), resp)
	}
	return print(cmd.OutOrStdout(), resp)
}
