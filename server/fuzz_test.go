package server

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// FuzzConsistencyToken feeds arbitrary strings to the consistency-token
// decoder (CheckConsistency's only parse of client input). A token either
// fails with InvalidArgument or decodes to a non-empty set of marks that
// encode and decode again to the same marks.
func FuzzConsistencyToken(f *testing.F) {
	for _, marks := range []map[string]int64{
		{"ebbtable": 1767225600000000},
		{"a": 1, "b": -1, "c": 0},
		{"": 9223372036854775807, "\x00": -9223372036854775808},
	} {
		tok, err := encodeToken(marks)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok)
	}
	f.Add("ebb1.")
	f.Add("ebb1.bnVsbA")         // null
	f.Add("ebb1.e30")            // {}
	f.Add("ebb1.eyJhIjoxLjV9")   // {"a":1.5}
	f.Add("ebb1.eyJhIjoxZTMwfQ") // {"a":1e30}
	f.Add("ebb1.W10")            // []
	f.Add("ebb1.e30=")
	f.Fuzz(func(t *testing.T, tok string) {
		marks, err := decodeToken(tok)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("decodeToken(%q): %v is not InvalidArgument", tok, err)
			}
			return
		}
		if len(marks) == 0 {
			t.Fatalf("decodeToken(%q) accepted a token with no marks", tok)
		}
		again, err := encodeToken(marks)
		if err != nil {
			t.Fatalf("encodeToken(%v): %v", marks, err)
		}
		back, err := decodeToken(again)
		if err != nil || !maps.Equal(back, marks) {
			t.Fatalf("token %q → %v → %q → %v, %v", tok, marks, again, back, err)
		}
	})
}

// FuzzCellExpiryMetadata feeds arbitrary values of the request metadata
// x-ebbtable-cell-ttl and x-ebbtable-cell-expire-at to the parser every
// write RPC runs. A refusal wraps table.ErrInvalid (InvalidArgument); an
// accepted TTL is at least the 1 ms minimum and, if given in days, within
// the documented bound; an accepted expiry is a millisecond of years
// 1970..9999 (UTC) — never zero, which would mean "no expiry" — and an RFC
// 3339 expiry names the same instant, truncated to the millisecond (the
// first millisecond of 1970 at the earliest).
func FuzzCellExpiryMetadata(f *testing.F) {
	for _, s := range []string{"90s", "36h", "2d", "1h30m", "500ms", "0.5ms", "-1s", "0d", "3000000d", "3000001d", "+5d", " 7d ", "9223372036854775807ns", "106751d"} {
		f.Add(s, "", true, false)
	}
	for _, s := range []string{"2026-11-23T20:00:00Z", "2026-11-23T20:00:00.123456+05:30", "1767225600000000", "1", "999", "1000", "253402300799999000", "253402300799999999",
		"9999-12-31T23:59:59.999Z", "9999-12-31T23:00:00-05:00", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00.0005Z", "1970-01-01T00:30:00+01:00", "0001-01-01T00:00:00Z"} {
		f.Add("", s, false, true)
	}
	f.Add("1h", "1767225600000000", true, true)
	f.Fuzz(func(t *testing.T, ttlArg, expArg string, withTTL, withExp bool) {
		md := metadata.MD{}
		if withTTL {
			md.Append(MetaCellTTL, ttlArg)
		}
		if withExp {
			md.Append(MetaCellExpireAt, expArg)
		}
		ttl, at, err := cellExpiryParts(metadata.NewIncomingContext(context.Background(), md))
		if err != nil {
			if !errors.Is(err, table.ErrInvalid) {
				t.Fatalf("ttl %q, expire-at %q: error %v does not wrap table.ErrInvalid", ttlArg, expArg, err)
			}
			if code := status.Code(toStatus(err)); code != codes.InvalidArgument {
				t.Fatalf("ttl %q, expire-at %q: %v maps to %v", ttlArg, expArg, err, code)
			}
			return
		}
		if withTTL && withExp {
			t.Fatalf("ttl %q and expire-at %q both accepted", ttlArg, expArg)
		}
		if withTTL {
			if ttl < table.MinTTLMicros {
				t.Fatalf("ttl %q → %d µs, below the 1 ms minimum", ttlArg, ttl)
			}
			if strings.HasSuffix(strings.TrimSpace(ttlArg), "d") && ttl > 3_000_000*86_400_000_000 {
				t.Fatalf("ttl %q → %d µs, beyond the documented 3,000,000 days", ttlArg, ttl)
			}
		} else if ttl != 0 {
			t.Fatalf("no ttl given, got %d", ttl)
		}
		if !withExp {
			if at != 0 {
				t.Fatalf("no expiry given, got %d", at)
			}
			return
		}
		if at <= 0 || at > cell.MaxTimestamp || at%cell.MicrosPerMilli != 0 {
			t.Fatalf("expire-at %q → %d: not a millisecond of years 1970..9999 (0 would mean no expiry)", expArg, at)
		}
		if ts, perr := time.Parse(time.RFC3339Nano, strings.TrimSpace(expArg)); perr == nil {
			if want := max(ts.UnixMilli()*1000, cell.MicrosPerMilli); at != want {
				t.Fatalf("expire-at %q → %d, want %d", expArg, at, want)
			}
		}
	})
}
