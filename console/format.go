package console

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"bytes":    humanBytes,
	"time":     fmtTime,
	"ago":      ago,
	"dur":      fmtDuration,
	"printkey": printable,
	"num":      func(n int64) string { return groupDigits(n) },
}

// humanBytes prints a size in binary units.
func humanBytes(n any) string {
	var v float64
	switch x := n.(type) {
	case int64:
		v = float64(x)
	case uint64:
		v = float64(x)
	case int:
		v = float64(x)
	default:
		return fmt.Sprint(n)
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtTime prints a time in UTC to the millisecond; "—" for the zero time.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// fmtDuration rounds a duration for reading.
func fmtDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Millisecond:
		return d.String()
	case d < time.Second:
		return d.Round(time.Microsecond * 100).String()
	case d < time.Minute:
		return d.Round(time.Millisecond * 10).String()
	case d < 48*time.Hour:
		return d.Round(time.Second).String()
	default:
		return fmt.Sprintf("%.1fd", d.Hours()/24)
	}
}

// ago says how far t is from now: "5s ago" or "in 5s".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d >= 0 {
		return fmtDuration(d) + " ago"
	}
	return "in " + fmtDuration(-d)
}

// printable shows bytes as text, escaping what is not printable UTF-8
// (\xNN), and cuts them at max bytes (0: no limit).
func printable(b []byte) string { return printableMax(b, 0) }

func printableMax(b []byte, max int) string {
	cut := false
	if max > 0 && len(b) > max {
		b, cut = b[:max], true
	}
	var s strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&s, `\x%02x`, b[0])
		case r == '\\':
			s.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&s, `\x%02x`, r)
		default:
			s.WriteRune(r)
		}
		b = b[n:]
	}
	if cut {
		s.WriteString("…")
	}
	return s.String()
}
