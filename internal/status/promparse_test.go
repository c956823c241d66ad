package status_test

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A strict parser for the Prometheus text exposition format (version
// 0.0.4), stricter than Prometheus itself: it rejects anything this
// project never means to write (blank lines, timestamps, untyped samples,
// a family split in two, duplicate series), so a test fails on the first
// sloppy byte.

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// exposition is a parsed scrape: series key (name{a="x",b="y"}, labels
// sorted) -> value, and each family's type.
type exposition struct {
	values map[string]float64
	types  map[string]string
}

// get returns a series' value, or NaN if it is absent.
func (e exposition) get(name string, labels ...string) float64 {
	v, ok := e.values[seriesKey(name, labels)]
	if !ok {
		return math.NaN()
	}
	return v
}

func seriesKey(name string, labels []string) string {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+"="+strconv.Quote(labels[i+1]))
	}
	slices.Sort(pairs)
	if len(pairs) == 0 {
		return name
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func parseExposition(text string) (exposition, error) {
	e := exposition{values: map[string]float64{}, types: map[string]string{}}
	if text == "" || !strings.HasSuffix(text, "\n") {
		return e, fmt.Errorf("exposition empty or not ending in a newline")
	}
	help := map[string]bool{}
	done := map[string]bool{} // families whose samples are over
	cur := ""                 // the family whose samples come now
	type hist struct {
		family string
		rest   []string // labels but le
		les    []float64
		counts []float64
	}
	hists := map[string]*hist{} // family + labels without le -> buckets
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		bad := func(format string, a ...any) error {
			return fmt.Errorf("line %d %q: %s", i+1, line, fmt.Sprintf(format, a...))
		}
		if line == "" {
			return e, bad("blank line")
		}
		if strings.HasPrefix(line, "#") {
			f := strings.SplitN(line, " ", 4)
			if len(f) < 4 || (f[1] != "HELP" && f[1] != "TYPE") {
				return e, bad("a comment that is neither HELP nor TYPE")
			}
			name := f[2]
			if !metricName.MatchString(name) {
				return e, bad("bad metric name")
			}
			if done[name] || name == cur {
				return e, bad("HELP/TYPE after the family's samples")
			}
			switch f[1] {
			case "HELP":
				if help[name] {
					return e, bad("second HELP")
				}
				help[name] = true
			case "TYPE":
				if _, ok := e.types[name]; ok {
					return e, bad("second TYPE")
				}
				switch f[3] {
				case "counter", "gauge", "histogram":
				default:
					return e, bad("type %q", f[3])
				}
				e.types[name] = f[3]
			}
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return e, bad("%v", err)
		}
		family, suffix := name, ""
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, s); ok && e.types[base] == "histogram" {
				family, suffix = base, s
			}
		}
		typ, ok := e.types[family]
		if !ok {
			return e, bad("sample without a TYPE for %s", family)
		}
		if family != cur {
			if done[family] {
				return e, bad("family %s split in two", family)
			}
			if cur != "" {
				done[cur] = true
			}
			cur = family
		}
		if !help[family] {
			return e, bad("no HELP for %s", family)
		}
		key := seriesKey(name, labels)
		if _, dup := e.values[key]; dup {
			return e, bad("duplicate series %s", key)
		}
		e.values[key] = value
		if typ == "counter" && (value < 0 || math.IsNaN(value)) {
			return e, bad("counter value %v", value)
		}
		if typ == "counter" && !strings.HasSuffix(name, "_total") {
			return e, bad("counter %s does not end in _total", name)
		}
		if typ == "histogram" {
			if suffix == "" {
				return e, bad("histogram sample without _bucket, _sum or _count")
			}
			var rest []string
			le := ""
			for j := 0; j < len(labels); j += 2 {
				if labels[j] == "le" {
					le = labels[j+1]
				} else {
					rest = append(rest, labels[j], labels[j+1])
				}
			}
			hk := seriesKey(family, rest)
			h := hists[hk]
			if h == nil {
				h = &hist{family: family, rest: rest}
				hists[hk] = h
			}
			switch suffix {
			case "_bucket":
				if le == "" {
					return e, bad("bucket without le")
				}
				b, err := parseValue(le)
				if err != nil {
					return e, bad("le %q: %v", le, err)
				}
				if n := len(h.les); n > 0 && (b <= h.les[n-1] || value < h.counts[n-1]) {
					return e, bad("buckets not increasing in le and cumulative in count")
				}
				h.les, h.counts = append(h.les, b), append(h.counts, value)
			case "_count":
				if n := len(h.les); n == 0 || !math.IsInf(h.les[n-1], 1) || h.counts[n-1] != value {
					return e, bad("_count %v does not match a final +Inf bucket", value)
				}
			}
		}
	}
	for k, h := range hists {
		if n := len(h.les); n == 0 || !math.IsInf(h.les[n-1], 1) {
			return e, fmt.Errorf("histogram %s has no +Inf bucket", k)
		}
		for _, s := range []string{"_sum", "_count"} {
			if _, ok := e.values[seriesKey(h.family+s, h.rest)]; !ok {
				return e, fmt.Errorf("histogram %s has no %s", k, s)
			}
		}
	}
	return e, nil
}

// parseSample reads `name{l="v",...} value` (no timestamp).
func parseSample(line string) (name string, labels []string, value float64, err error) {
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return "", nil, 0, fmt.Errorf("no value")
	}
	name, rest := line[:i], line[i:]
	if !metricName.MatchString(name) {
		return "", nil, 0, fmt.Errorf("bad metric name %q", name)
	}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		seen := map[string]bool{}
		for {
			eq := strings.Index(rest, `="`)
			if eq <= 0 {
				return "", nil, 0, fmt.Errorf("bad label list")
			}
			ln := rest[:eq]
			if !labelName.MatchString(ln) || strings.HasPrefix(ln, "__") || seen[ln] {
				return "", nil, 0, fmt.Errorf("bad or repeated label name %q", ln)
			}
			seen[ln] = true
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' {
					if j+1 >= len(rest) {
						return "", nil, 0, fmt.Errorf("dangling escape")
					}
					switch rest[j+1] {
					case '\\':
						v.WriteByte('\\')
					case '"':
						v.WriteByte('"')
					case 'n':
						v.WriteByte('\n')
					default:
						return "", nil, 0, fmt.Errorf("bad escape \\%c", rest[j+1])
					}
					j++
					continue
				}
				if c == '\n' {
					return "", nil, 0, fmt.Errorf("raw newline in a label value")
				}
				if c == '"' {
					rest = rest[j+1:]
					closed = true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, fmt.Errorf("unterminated label value")
			}
			labels = append(labels, ln, v.String())
			if strings.HasPrefix(rest, ",") {
				rest = rest[1:]
				continue
			}
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			return "", nil, 0, fmt.Errorf("bad label list")
		}
	}
	v, ok := strings.CutPrefix(rest, " ")
	if !ok || strings.Contains(v, " ") {
		return "", nil, 0, fmt.Errorf("want exactly one space and a value (no timestamp)")
	}
	value, err = parseValue(v)
	return name, labels, value, err
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}
