package sqlquery

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The format elements of FORMAT_DATE, FORMAT_TIMESTAMP, PARSE_DATE and
// PARSE_TIMESTAMP (a subset of GoogleSQL's, listed in docs/sql.md).

var (
	monthNames = []string{"January", "February", "March", "April", "May", "June", "July",
		"August", "September", "October", "November", "December"}
	dayNames = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
)

// dateOnly are the elements a DATE has; the others are refused on dates.
const dateOnly = "YCymdejFDbBhaAuwjUWGVgxn t%"

// expandElem returns the elements a composite element stands for.
func expandElem(c byte) string {
	switch c {
	case 'F':
		return "%Y-%m-%d"
	case 'T', 'X':
		return "%H:%M:%S"
	case 'D', 'x':
		return "%m/%d/%y"
	case 'R':
		return "%H:%M"
	case 'c':
		return "%a %b %e %H:%M:%S %Y"
	}
	return ""
}

// strftime formats t (already in its zone, named zone) by layout.
func strftime(layout string, t time.Time, zone string, date bool) (Value, error) {
	var b strings.Builder
	if err := strftimeTo(&b, layout, t, zone, date); err != nil {
		return nil, err
	}
	return b.String(), nil
}

func strftimeTo(b *strings.Builder, layout string, t time.Time, zone string, date bool) error {
	for i := 0; i < len(layout); i++ {
		if layout[i] != '%' {
			b.WriteByte(layout[i])
			continue
		}
		i++
		if i >= len(layout) {
			return invalidf("format %q ends with a lone %%", layout)
		}
		c := layout[i]
		if c == 'E' || c == 'O' {
			i++
			if i >= len(layout) {
				return invalidf("format %q ends inside an element", layout)
			}
			switch {
			case c == 'E' && layout[i] == 'z':
				if date {
					return invalidf("format element %%Ez does not apply to a DATE")
				}
				b.WriteString(t.Format("-07:00"))
				continue
			case c == 'E' && (layout[i] == '*' || layout[i] >= '0' && layout[i] <= '9') && i+1 < len(layout) && layout[i+1] == 'S':
				digits := 6
				if layout[i] != '*' {
					digits = int(layout[i] - '0')
				}
				i++
				if date {
					return invalidf("format element %%E#S does not apply to a DATE")
				}
				fmt.Fprintf(b, "%02d", t.Second())
				if digits > 0 {
					frac := fmt.Sprintf("%09d", t.Nanosecond())
					b.WriteString("." + frac[:min(digits, 9)])
				}
				continue
			case c == 'E' && layout[i] == 'Y':
				c = 'Y'
			case c == 'O' && strings.IndexByte("dHImMSuUVwWy", layout[i]) >= 0:
				c = layout[i]
			default:
				return invalidf("unsupported format element %%%c%c", c, layout[i])
			}
		}
		if x := expandElem(c); x != "" {
			if date && c != 'F' && c != 'D' && c != 'x' {
				return invalidf("format element %%%c does not apply to a DATE", c)
			}
			if err := strftimeTo(b, x, t, zone, date); err != nil {
				return err
			}
			continue
		}
		if date && strings.IndexByte(dateOnly, c) < 0 {
			return invalidf("format element %%%c does not apply to a DATE", c)
		}
		yday := t.YearDay() - 1
		switch c {
		case 'Y':
			fmt.Fprintf(b, "%04d", t.Year())
		case 'C':
			fmt.Fprintf(b, "%02d", t.Year()/100)
		case 'y':
			fmt.Fprintf(b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(b, "%2d", t.Day())
		case 'j':
			fmt.Fprintf(b, "%03d", yday+1)
		case 'H':
			fmt.Fprintf(b, "%02d", t.Hour())
		case 'k':
			fmt.Fprintf(b, "%2d", t.Hour())
		case 'I':
			fmt.Fprintf(b, "%02d", (t.Hour()+11)%12+1)
		case 'l':
			fmt.Fprintf(b, "%2d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(b, "%02d", t.Second())
		case 'p':
			b.WriteString(map[bool]string{true: "PM", false: "AM"}[t.Hour() >= 12])
		case 'P':
			b.WriteString(map[bool]string{true: "pm", false: "am"}[t.Hour() >= 12])
		case 'B':
			b.WriteString(monthNames[t.Month()-1])
		case 'b', 'h':
			b.WriteString(monthNames[t.Month()-1][:3])
		case 'A':
			b.WriteString(dayNames[t.Weekday()])
		case 'a':
			b.WriteString(dayNames[t.Weekday()][:3])
		case 'u':
			fmt.Fprintf(b, "%d", (int(t.Weekday())+6)%7+1)
		case 'w':
			fmt.Fprintf(b, "%d", int(t.Weekday()))
		case 'U':
			fmt.Fprintf(b, "%02d", (yday+7-int(t.Weekday()))/7)
		case 'W':
			fmt.Fprintf(b, "%02d", (yday+7-(int(t.Weekday())+6)%7)/7)
		case 'G':
			y, _ := t.ISOWeek()
			fmt.Fprintf(b, "%04d", y)
		case 'g':
			y, _ := t.ISOWeek()
			fmt.Fprintf(b, "%02d", y%100)
		case 'V':
			_, w := t.ISOWeek()
			fmt.Fprintf(b, "%02d", w)
		case 's':
			fmt.Fprintf(b, "%d", t.Unix())
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			b.WriteString(zone)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			return invalidf("unsupported format element %%%c", c)
		}
	}
	return nil
}

// parseErr is why an input does not match its format.
type parseErr string

func (e parseErr) Error() string { return string(e) }

// parseState collects the fields a PARSE_ reads; unset ones default to
// 1970-01-01 00:00:00.
type parseState struct {
	year, month, day, hour, min, sec, nsec int
	yday                                   int
	pm, hour12                             int // pm: 0 unset, 1 AM, 2 PM
	loc                                    *time.Location
	unix                                   *int64
}

// strptime parses s by layout. Whitespace in the layout matches any run
// of whitespace (or none); leading and trailing whitespace in s is
// allowed. A date takes only the date elements.
func strptime(layout, s string, loc *time.Location, date bool) (time.Time, error) {
	st := &parseState{year: 1970, month: 1, day: 1, hour12: -1, loc: loc}
	rest, err := st.parse(layout, strings.TrimLeft(s, " \t\n\r\v\f"), date)
	if why, ok := err.(parseErr); ok {
		return time.Time{}, invalidf("failed to parse %q with format %q: %s", s, layout, string(why))
	}
	if err != nil {
		return time.Time{}, err
	}
	if strings.TrimSpace(rest) != "" {
		return time.Time{}, invalidf("failed to parse %q with format %q: illegal non-space trailing data %q", s, layout, rest)
	}
	if st.unix != nil {
		return time.Unix(*st.unix, 0).UTC(), nil
	}
	if st.hour12 >= 0 {
		st.hour = st.hour12 % 12
		if st.pm == 2 {
			st.hour += 12
		}
	} else if st.pm == 2 && st.hour < 12 {
		st.hour += 12
	}
	if st.yday > 0 {
		st.month, st.day = 1, st.yday
	}
	t := time.Date(st.year, time.Month(st.month), st.day, st.hour, st.min, st.sec, st.nsec, st.loc)
	if st.yday == 0 && (t.Day() != st.day || int(t.Month()) != st.month) || st.year < 1 || st.year > 9999 {
		return time.Time{}, invalidf("failed to parse %q with format %q: out-of-range date", s, layout)
	}
	return t, nil
}

func (st *parseState) parse(layout, s string, date bool) (string, error) {
	fail := func(why string) (string, error) { return "", parseErr(why) }
	for i := 0; i < len(layout); i++ {
		c := layout[i]
		if isSpace(c) {
			s = strings.TrimLeft(s, " \t\n\r\v\f")
			continue
		}
		if c != '%' {
			if s == "" || s[0] != c {
				return fail(fmt.Sprintf("mismatch at format character %q", c))
			}
			s = s[1:]
			continue
		}
		i++
		if i >= len(layout) {
			return fail("the format ends with a lone %")
		}
		c = layout[i]
		frac := -1
		if c == 'E' {
			i++
			if i >= len(layout) {
				return fail("the format ends inside an element")
			}
			switch {
			case layout[i] == 'z':
				c = 'z'
			case layout[i] == 'Y':
				c = 'Y'
			case (layout[i] == '*' || layout[i] >= '0' && layout[i] <= '9') && i+1 < len(layout) && layout[i+1] == 'S':
				frac = 9
				if layout[i] != '*' {
					frac = int(layout[i] - '0')
				}
				i++
				c = 'S'
			default:
				return "", invalidf("unsupported format element %%E%c", layout[i])
			}
		}
		if x := expandElem(c); x != "" {
			if date && c != 'F' && c != 'D' && c != 'x' {
				return "", invalidf("format element %%%c does not apply to a DATE", c)
			}
			var err error
			if s, err = st.parse(x, s, date); err != nil {
				return "", err
			}
			continue
		}
		if date && (strings.IndexByte(dateOnly, c) < 0 || frac >= 0) {
			return "", invalidf("format element %%%c does not apply to a DATE", c)
		}
		var n int
		var ok bool
		switch c {
		case 'Y':
			if n, s, ok = digits(s, 1, 4, true); !ok {
				return fail("expected a year")
			}
			st.year = n
		case 'C':
			if n, s, ok = digits(s, 1, 2, false); !ok {
				return fail("expected a century")
			}
			st.year = n*100 + st.year%100
		case 'y':
			if n, s, ok = digits(s, 1, 2, false); !ok {
				return fail("expected a two-digit year")
			}
			if n < 69 {
				st.year = 2000 + n
			} else {
				st.year = 1900 + n
			}
		case 'm':
			if n, s, ok = digits(s, 1, 2, false); !ok || n < 1 || n > 12 {
				return fail("expected a month")
			}
			st.month = n
		case 'd', 'e':
			s = strings.TrimLeft(s, " ")
			if n, s, ok = digits(s, 1, 2, false); !ok || n < 1 || n > 31 {
				return fail("expected a day")
			}
			st.day = n
		case 'j':
			if n, s, ok = digits(s, 1, 3, false); !ok || n < 1 || n > 366 {
				return fail("expected a day of the year")
			}
			st.yday = n
		case 'H', 'k':
			s = strings.TrimLeft(s, " ")
			if n, s, ok = digits(s, 1, 2, false); !ok || n > 23 {
				return fail("expected an hour")
			}
			st.hour = n
		case 'I', 'l':
			s = strings.TrimLeft(s, " ")
			if n, s, ok = digits(s, 1, 2, false); !ok || n < 1 || n > 12 {
				return fail("expected an hour 1-12")
			}
			st.hour12 = n
		case 'M':
			if n, s, ok = digits(s, 1, 2, false); !ok || n > 59 {
				return fail("expected minutes")
			}
			st.min = n
		case 'S':
			if n, s, ok = digits(s, 1, 2, false); !ok || n > 60 {
				return fail("expected seconds")
			}
			st.sec = n
			if frac != 0 && strings.HasPrefix(s, ".") {
				j := 1
				for j < len(s) && s[j] >= '0' && s[j] <= '9' && (frac < 0 || j <= frac) {
					j++
				}
				if j == 1 {
					return fail("expected fractional seconds")
				}
				f := (s[1:j] + "000000000")[:9]
				st.nsec, _ = strconv.Atoi(f)
				s = s[j:]
			}
		case 'p', 'P':
			switch {
			case len(s) >= 2 && strings.EqualFold(s[:2], "AM"):
				st.pm = 1
			case len(s) >= 2 && strings.EqualFold(s[:2], "PM"):
				st.pm = 2
			default:
				return fail("expected AM or PM")
			}
			s = s[2:]
		case 'B', 'b', 'h':
			m, rest, ok := readName(s, monthNames)
			if !ok {
				return fail("expected a month name")
			}
			st.month, s = m+1, rest
		case 'A', 'a':
			_, rest, ok := readName(s, dayNames)
			if !ok {
				return fail("expected a weekday name")
			}
			s = rest
		case 'u', 'w':
			if _, s, ok = digits(s, 1, 1, false); !ok {
				return fail("expected a weekday number")
			}
		case 's':
			j := 0
			if j < len(s) && s[j] == '-' {
				j++
			}
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			u, err := strconv.ParseInt(s[:j], 10, 64)
			if err != nil || u < -62135596800 || u > 253402300799 {
				return fail("expected seconds since the epoch")
			}
			st.unix, s = &u, s[j:]
		case 'z':
			if strings.HasPrefix(s, "Z") {
				st.loc, s = time.UTC, s[1:]
				break
			}
			if s == "" {
				return fail("expected a UTC offset such as +0530")
			}
			j := 1
			for j < len(s) && j < 6 && (s[j] >= '0' && s[j] <= '9' || s[j] == ':') {
				j++
			}
			loc, ok := offsetZone(s[:j])
			if !ok {
				return fail("expected a UTC offset such as +0530")
			}
			st.loc, s = loc, s[j:]
		case 'Z':
			j := 0
			for j < len(s) && !isSpace(s[j]) {
				j++
			}
			loc, ok := offsetZone(s[:j])
			if !ok {
				var err error
				if loc, err = time.LoadLocation(s[:j]); err != nil || j == 0 {
					return fail("expected a time zone name")
				}
			}
			st.loc, s = loc, s[j:]
		case 'n', 't':
			s = strings.TrimLeft(s, " \t\n\r\v\f")
		case '%':
			if !strings.HasPrefix(s, "%") {
				return fail("expected %")
			}
			s = s[1:]
		default:
			return "", invalidf("unsupported format element %%%c", c)
		}
	}
	return s, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// digits reads between lo and hi decimal digits (and a sign if signed).
func digits(s string, lo, hi int, signed bool) (int, string, bool) {
	neg := false
	if signed && strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	j := 0
	for j < len(s) && j < hi && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j < lo {
		return 0, s, false
	}
	n, _ := strconv.Atoi(s[:j])
	if neg {
		n = -n
	}
	return n, s[j:], true
}

// readName reads a full or three-letter name from names, ignoring case.
func readName(s string, names []string) (int, string, bool) {
	for i, n := range names {
		if len(s) >= len(n) && strings.EqualFold(s[:len(n)], n) {
			return i, s[len(n):], true
		}
	}
	for i, n := range names {
		if len(s) >= 3 && strings.EqualFold(s[:3], n[:3]) {
			return i, s[3:], true
		}
	}
	return 0, s, false
}
