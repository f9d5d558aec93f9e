package sqlquery

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// LEFT and RIGHT, FORMAT, and the date and timestamp formatting and
// parsing functions with their format elements.

func init() {
	for name, def := range map[string]fnDef{
		"LEFT":  {min: 2, max: 2, typ: strOrBytes(KindInt64), eval: leftRight(true)},
		"RIGHT": {min: 2, max: 2, typ: strOrBytes(KindInt64), eval: leftRight(false)},
		"FORMAT": {min: 1, max: -1, typ: func(ts []*Type) (*Type, string) {
			if ts[0].Kind != KindString && ts[0].Kind != KindNull {
				return nil, "argument 1 must be STRING, not " + ts[0].String()
			}
			return TString, ""
		}, keepNull: true, eval: func(_ *execCtx, a []Value) (Value, error) {
			if a[0] == nil {
				return nil, nil
			}
			return formatSQL(a[0].(string), a[1:])
		}},
		"FORMAT_DATE": {min: 2, max: 2, typ: fixed(TString, KindString, KindDate), eval: func(_ *execCtx, a []Value) (Value, error) {
			return strftime(a[0].(string), a[1].(Date).time(), "UTC", true)
		}},
		"FORMAT_TIMESTAMP": {min: 2, max: 3, typ: fixed(TString, KindString, KindTimestamp, KindString), eval: func(_ *execCtx, a []Value) (Value, error) {
			loc, name, err := zoneArg(a, 2)
			if err != nil {
				return nil, err
			}
			return strftime(a[0].(string), a[1].(time.Time).In(loc), name, false)
		}},
		"PARSE_DATE": {min: 2, max: 2, typ: fixed(TDate, KindString, KindString), eval: func(_ *execCtx, a []Value) (Value, error) {
			t, err := strptime(a[0].(string), a[1].(string), time.UTC, true)
			if err != nil {
				return nil, err
			}
			return dateOf(t), nil
		}},
		"PARSE_TIMESTAMP": {min: 2, max: 3, typ: fixed(TTimestamp, KindString, KindString, KindString), eval: func(_ *execCtx, a []Value) (Value, error) {
			loc, _, err := zoneArg(a, 2)
			if err != nil {
				return nil, err
			}
			t, err := strptime(a[0].(string), a[1].(string), loc, false)
			if err != nil {
				return nil, err
			}
			return t.UTC().Truncate(time.Microsecond), nil
		}},
	} {
		functions[name] = def
	}
}

// leftRight returns the first (or last) n characters of a STRING or bytes
// of a BYTES value; n must not be negative.
func leftRight(left bool) func(*execCtx, []Value) (Value, error) {
	name := "RIGHT"
	if left {
		name = "LEFT"
	}
	return func(_ *execCtx, a []Value) (Value, error) {
		n := a[1].(int64)
		if n < 0 {
			return nil, invalidf("%s: length must not be negative, got %d", name, n)
		}
		if s, ok := a[0].(string); ok {
			r := []rune(s)
			k := int(min(n, int64(len(r))))
			if left {
				return string(r[:k]), nil
			}
			return string(r[len(r)-k:]), nil
		}
		b := a[0].([]byte)
		k := int(min(n, int64(len(b))))
		if left {
			return append([]byte{}, b[:k]...), nil
		}
		return append([]byte{}, b[len(b)-k:]...), nil
	}
}

// zoneArg reads an optional time zone argument (a name or an offset such
// as "+05:30"); UTC when absent.
func zoneArg(a []Value, i int) (*time.Location, string, error) {
	if len(a) <= i {
		return time.UTC, "UTC", nil
	}
	s := a[i].(string)
	if loc, ok := offsetZone(s); ok {
		return loc, s, nil
	}
	loc, err := time.LoadLocation(s)
	if err != nil || s == "" || s == "Local" {
		return nil, "", invalidf("invalid time zone %q", s)
	}
	return loc, s, nil
}

// offsetZone reads "+H", "+HH", "+HH:MM", "-HHMM" and "UTC+H" forms.
func offsetZone(s string) (*time.Location, bool) {
	t := strings.TrimPrefix(s, "UTC")
	if t == "" || t[0] != '+' && t[0] != '-' {
		return nil, false
	}
	sign := 1
	if t[0] == '-' {
		sign = -1
	}
	t = t[1:]
	hh, mm := t, ""
	if i := strings.IndexByte(t, ':'); i >= 0 {
		hh, mm = t[:i], t[i+1:]
	} else if len(t) > 2 {
		hh, mm = t[:len(t)-2], t[len(t)-2:]
	}
	h, err1 := strconv.Atoi(hh)
	m := 0
	var err2 error
	if mm != "" {
		m, err2 = strconv.Atoi(mm)
	}
	if err1 != nil || err2 != nil || len(hh) > 2 || h > 14 || m > 59 {
		return nil, false
	}
	return time.FixedZone(s, sign*(h*3600+m*60)), true
}

// formatSQL implements FORMAT: %d %i %s %f %F %e %E %g %G %x %X %o %t %T
// and %%, with the - + space # 0 and ' (grouping) flags, a width and a
// precision (either may be * to read an INT64 argument). A NULL argument
// makes the result NULL except under %t and %T, which print NULL.
func formatSQL(f string, args []Value) (Value, error) {
	var out strings.Builder
	next := 0
	arg := func() (Value, error) {
		if next >= len(args) {
			return nil, invalidf("FORMAT: too few arguments for format %q", f)
		}
		next++
		return args[next-1], nil
	}
	null := false
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			out.WriteByte(c)
			continue
		}
		i++
		flags := ""
		for i < len(f) && strings.IndexByte("-+ #0'", f[i]) >= 0 {
			flags += string(f[i])
			i++
		}
		width, prec := -1, -1
		readNum := func() (int, error) {
			if i < len(f) && f[i] == '*' {
				i++
				v, err := arg()
				if err != nil {
					return 0, err
				}
				n, ok := v.(int64)
				if !ok || n < 0 || n > 1<<16 {
					return 0, invalidf("FORMAT: * needs a non-negative INT64, not %s", Format(v))
				}
				return int(n), nil
			}
			n := 0
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				n = n*10 + int(f[i]-'0')
				if n > 1<<16 {
					return 0, invalidf("FORMAT: width or precision too large in %q", f)
				}
				i++
			}
			return n, nil
		}
		if i < len(f) && (f[i] == '*' || f[i] >= '1' && f[i] <= '9') {
			n, err := readNum()
			if err != nil {
				return nil, err
			}
			width = n
		}
		if i < len(f) && f[i] == '.' {
			i++
			n, err := readNum()
			if err != nil {
				return nil, err
			}
			prec = n
		}
		if i >= len(f) {
			return nil, invalidf("FORMAT: format %q ends inside a specifier", f)
		}
		verb := f[i]
		if verb == '%' {
			out.WriteByte('%')
			continue
		}
		if strings.IndexByte("dis fFeEgGxXotT", verb) < 0 || verb == ' ' {
			return nil, invalidf("FORMAT: unsupported specifier %%%c", verb)
		}
		v, err := arg()
		if err != nil {
			return nil, err
		}
		if v == nil && verb != 't' && verb != 'T' {
			null = true
			continue
		}
		s, err := formatOne(verb, flags, prec, v)
		if err != nil {
			return nil, err
		}
		out.WriteString(padTo(s, width, flags, verb))
	}
	if next < len(args) {
		return nil, invalidf("FORMAT: %d arguments but format %q uses %d", len(args), f, next)
	}
	if null {
		return nil, nil
	}
	return out.String(), nil
}

func formatOne(verb byte, flags string, prec int, v Value) (string, error) {
	goFlags := strings.NewReplacer("'", "", "-", "", "0", "").Replace(flags)
	spec := "%" + goFlags
	if prec >= 0 {
		spec += "." + strconv.Itoa(prec)
	}
	switch verb {
	case 'd', 'i', 'x', 'X', 'o':
		n, ok := v.(int64)
		if !ok {
			return "", invalidf("FORMAT: %%%c needs an INT64, not %s", verb, Format(v))
		}
		gv := verb
		if gv == 'i' {
			gv = 'd'
		}
		s := fmt.Sprintf(spec+string(gv), n)
		if gv == 'd' && strings.Contains(flags, "'") {
			s = group(s)
		}
		return s, nil
	case 'f', 'F', 'e', 'E', 'g', 'G':
		x, ok := toFloat(v)
		if !ok {
			return "", invalidf("FORMAT: %%%c needs a number, not %s", verb, Format(v))
		}
		if math.IsInf(x, 0) || math.IsNaN(x) {
			s := "inf"
			if math.IsNaN(x) {
				s = "nan"
			} else if x < 0 {
				s = "-inf"
			} else if strings.Contains(flags, "+") {
				s = "+inf"
			}
			if verb == 'F' || verb == 'E' || verb == 'G' {
				s = strings.ToUpper(s)
			}
			return s, nil
		}
		if prec < 0 {
			spec += ".6"
		}
		gv := verb
		if gv == 'F' {
			gv = 'f'
		}
		s := fmt.Sprintf(spec+string(gv), x)
		if strings.Contains(flags, "'") && (gv == 'f') {
			s = group(s)
		}
		return s, nil
	case 's':
		s, ok := v.(string)
		if !ok {
			return "", invalidf("FORMAT: %%s needs a STRING, not %s", Format(v))
		}
		return fmt.Sprintf(spec+"s", s), nil
	case 't':
		return fmt.Sprintf(spec+"s", sqlText(v)), nil
	}
	return fmt.Sprintf(spec+"s", sqlLiteral(v)), nil
}

// group puts commas between the thousands of a number's integer digits.
func group(s string) string {
	start := strings.IndexAny(s, "0123456789")
	if start < 0 {
		return s
	}
	end := start
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	digits := s[start:end]
	var b strings.Builder
	for i, r := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return s[:start] + b.String() + s[end:]
}

// padTo applies a width: left-justified with '-', zero-filled after the sign
// with '0' for numbers, else right-justified with spaces.
func padTo(s string, width int, flags string, verb byte) string {
	n := utf8.RuneCountInString(s)
	if width <= n {
		return s
	}
	fill := strings.Repeat(" ", width-n)
	switch {
	case strings.Contains(flags, "-"):
		return s + fill
	case strings.Contains(flags, "0") && strings.IndexByte("dixXofFeEgG", verb) >= 0 && !strings.ContainsAny(s, "in"):
		zeros := strings.Repeat("0", width-n)
		signLen := 0
		if len(s) > 0 && strings.IndexByte("+- ", s[0]) >= 0 {
			signLen = 1
		}
		if strings.HasPrefix(s[signLen:], "0x") || strings.HasPrefix(s[signLen:], "0X") {
			signLen += 2
		}
		return s[:signLen] + zeros + s[signLen:]
	}
	return fill + s
}

// sqlText is a value's text as CAST(x AS STRING) gives it (%t).
func sqlText(v Value) string {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05.999999-07")
	case float64:
		return floatText(x, 64)
	case float32:
		return floatText(float64(x), 32)
	case Array:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = sqlText(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return Format(v)
}

func floatText(x float64, bits int) string {
	switch {
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	case math.IsNaN(x):
		return "nan"
	}
	return strconv.FormatFloat(x, 'g', -1, bits)
}

// sqlLiteral is a value as a SQL literal (%T).
func sqlLiteral(v Value) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case []byte:
		return "b" + strconv.Quote(string(x))
	case time.Time:
		return "TIMESTAMP " + strconv.Quote(sqlText(x))
	case Date:
		return "DATE " + strconv.Quote(x.String())
	case float64, float32:
		f, _ := toFloat(x)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return "CAST(" + strconv.Quote(floatText(f, 64)) + " AS FLOAT64)"
		}
		s := sqlText(x)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		return s
	case Array:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = sqlLiteral(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return Format(v)
}
