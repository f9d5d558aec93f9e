package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/table"
)

// Request metadata keys for native cell TTL, usable from any unmodified
// Bigtable client that can attach gRPC metadata.
const (
	// MetaCellTTL gives every SetCell of the request a time to live
	// (a duration: 90s, 36h, 2d, 1h30m, 500ms).
	MetaCellTTL = "x-ebbtable-cell-ttl"
	// MetaCellExpireAt gives every SetCell of the request an absolute
	// expiry (RFC 3339, or microseconds since the epoch).
	MetaCellExpireAt = "x-ebbtable-cell-expire-at"
	// MetaShowExpiry ("true") makes ReadRows label each cell that has a
	// native expiry with ExpiryLabelPrefix followed by the expiry time in
	// RFC 3339 (UTC, milliseconds).
	MetaShowExpiry = "x-ebbtable-show-expiry"
	// ExpiryLabelPrefix starts the label that carries a cell's expiry.
	ExpiryLabelPrefix = "ebbtable-expires-at="
)

// ParseTTL reads a TTL in microseconds: a Go duration ("90s", "36h",
// "1h30m", "500ms"), or a whole number of days ("2d"), which may reach year
// 9999 (a time.Duration would overflow at 292 years).
func ParseTTL(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days < 0 {
			return 0, fmt.Errorf("%w: cell TTL %q: days must be a whole non-negative number", table.ErrInvalid, s)
		}
		if days > 3_000_000 {
			return 0, fmt.Errorf("%w: cell TTL %q puts the expiry past year 9999", table.ErrInvalid, s)
		}
		return days * 86_400_000_000, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: cell TTL %q is not a duration (90s, 36h, 2d): %v", table.ErrInvalid, s, err)
	}
	return d.Microseconds(), nil
}

// parseExpireAt reads an absolute expiry: microseconds since the epoch
// (positive), or RFC 3339 whose instant, in UTC, lies in years 1970..9999
// (a local year in range with an offset that crosses a bound does not).
// Expiries are kept to the millisecond; one in the first millisecond of
// 1970 becomes 1 ms — as far past as it was — because 0 means "no expiry".
func parseExpireAt(s string) (int64, error) {
	s = strings.TrimSpace(s)
	us, err := strconv.ParseInt(s, 10, 64)
	if err == nil && us <= 0 {
		return 0, fmt.Errorf("%w: cell expiry %d is outside year 1970..9999", table.ErrInvalid, us)
	}
	if err != nil {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, fmt.Errorf("%w: cell expiry %q is neither RFC 3339 nor microseconds: %v", table.ErrInvalid, s, err)
		}
		us = t.UnixMilli() * 1000 // years 0000..9999 with any offset fit
	}
	if us < 0 || us > cell.MaxTimestamp {
		return 0, fmt.Errorf("%w: cell expiry %q is outside year 1970..9999 (UTC)", table.ErrInvalid, s)
	}
	return max(us-us%cell.MicrosPerMilli, cell.MicrosPerMilli), nil
}

// expiry is the native cell expiry a request's metadata asks for: a TTL in
// microseconds or an absolute time (at most one is set).
type expiry struct {
	ttl int64
	at  int64
}

// cellExpiry reads the TTL metadata of a request once.
func cellExpiry(ctx context.Context) (expiry, error) {
	ttl, at, err := cellExpiryParts(ctx)
	return expiry{ttl: ttl, at: at}, err
}

func cellExpiryParts(ctx context.Context) (ttl int64, expireAt int64, err error) {
	ttls, exps := ebbHeader(ctx, MetaCellTTL), ebbHeader(ctx, MetaCellExpireAt)
	if len(ttls) > 0 && len(exps) > 0 {
		return 0, 0, fmt.Errorf("%w: give %s or %s, not both", table.ErrInvalid, MetaCellTTL, MetaCellExpireAt)
	}
	if len(ttls) > 0 {
		if ttl, err = ParseTTL(ttls[len(ttls)-1]); err != nil {
			return 0, 0, err
		}
		if ttl < table.MinTTLMicros {
			return 0, 0, fmt.Errorf("%w: cell TTL %q is below the 1ms minimum (zero and negative TTLs are refused)", table.ErrInvalid, ttls[len(ttls)-1])
		}
	}
	if len(exps) > 0 {
		if expireAt, err = parseExpireAt(exps[len(exps)-1]); err != nil {
			return 0, 0, err
		}
	}
	return ttl, expireAt, nil
}

func showExpiry(ctx context.Context) bool {
	v := ebbHeader(ctx, MetaShowExpiry)
	return len(v) > 0 && (v[len(v)-1] == "true" || v[len(v)-1] == "1")
}

// ExpiryLabel is the label ReadRows adds for a cell expiring at exp.
func ExpiryLabel(exp int64) string {
	return ExpiryLabelPrefix + time.UnixMicro(exp).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// labelExpiry adds the expiry label to the cells of a row that have one.
func labelExpiry(r cell.Row) cell.Row {
	for i := range r.Cells {
		if exp := r.Cells[i].ExpireAt; exp != 0 {
			r.Cells[i].Labels = append(append([]string(nil), r.Cells[i].Labels...), ExpiryLabel(exp))
		}
	}
	return r
}
