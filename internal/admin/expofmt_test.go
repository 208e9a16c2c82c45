package admin_test

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A strict parser of the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), written
// for the tests instead of adding a dependency on prometheus/common. It
// rejects what Prometheus would reject and a few things it tolerates but
// the format forbids:
//
//   - lines end with \n, the last one too; no empty lines in the middle
//   - "# HELP name text" and "# TYPE name type" at most once per name, the
//     TYPE before the family's first sample; types counter, gauge,
//     histogram, summary, untyped
//   - names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
//     [a-zA-Z_][a-zA-Z0-9_]* without a leading __, no label twice
//   - label values escape only \\, \" and \n
//   - values are Go floats or +Inf, -Inf, NaN; an optional integer timestamp
//   - a family's samples are one contiguous group; no series twice
//   - counters are not negative
//   - histograms: only _bucket (with le), _sum and _count samples; per
//     label set, le strictly increasing and ending in +Inf, buckets
//     cumulative (non-decreasing), and _count equal to the +Inf bucket

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type family struct {
	name    string
	typ     string
	help    string
	samples []sample
}

var (
	metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNameRE  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// parseExposition returns the families by name, or the first violation.
func parseExposition(text string) (map[string]*family, error) {
	if text == "" {
		return map[string]*family{}, nil
	}
	if !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("the last line does not end with a newline")
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	fams := map[string]*family{}
	helpSeen := map[string]bool{}
	var order []string
	var current string // the family of the previous sample
	closed := map[string]bool{}
	series := map[string]bool{}
	get := func(name string) *family {
		f := fams[name]
		if f == nil {
			f = &family{name: name, typ: "untyped"}
			fams[name] = f
			order = append(order, name)
		}
		return f
	}
	for i, line := range lines {
		n := i + 1
		if line == "" {
			return nil, fmt.Errorf("line %d: empty line", n)
		}
		if strings.HasPrefix(line, "#") {
			fields := strings.SplitN(line, " ", 4)
			if len(fields) < 3 || fields[0] != "#" || (fields[1] != "HELP" && fields[1] != "TYPE") {
				continue // a comment
			}
			name := fields[2]
			if !metricNameRE.MatchString(name) {
				return nil, fmt.Errorf("line %d: invalid metric name %q", n, name)
			}
			rest := ""
			if len(fields) == 4 {
				rest = fields[3]
			}
			f := get(name)
			switch fields[1] {
			case "HELP":
				if helpSeen[name] {
					return nil, fmt.Errorf("line %d: second HELP for %s", n, name)
				}
				helpSeen[name] = true
				if err := checkEscapes(rest, false); err != nil {
					return nil, fmt.Errorf("line %d: HELP of %s: %v", n, name, err)
				}
				f.help = rest
			case "TYPE":
				if f.typ != "untyped" || len(f.samples) > 0 {
					return nil, fmt.Errorf("line %d: TYPE of %s after its samples or a second TYPE", n, name)
				}
				switch rest {
				case "counter", "gauge", "histogram", "summary", "untyped":
				default:
					return nil, fmt.Errorf("line %d: unknown type %q", n, rest)
				}
				f.typ = rest
			}
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		famName := s.name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base := strings.TrimSuffix(s.name, suffix)
			if base != s.name && fams[base] != nil && (fams[base].typ == "histogram" || fams[base].typ == "summary") {
				famName = base
			}
		}
		if famName != current {
			if closed[famName] {
				return nil, fmt.Errorf("line %d: samples of %s are not one contiguous group", n, famName)
			}
			if current != "" {
				closed[current] = true
			}
			current = famName
		}
		f := get(famName)
		if f.typ == "histogram" && famName == s.name {
			return nil, fmt.Errorf("line %d: histogram %s has a sample without _bucket, _sum or _count", n, famName)
		}
		key := seriesKey(s)
		if series[key] {
			return nil, fmt.Errorf("line %d: series %s twice", n, key)
		}
		series[key] = true
		if f.typ == "counter" && s.value < 0 {
			return nil, fmt.Errorf("line %d: negative counter %s", n, s.name)
		}
		f.samples = append(f.samples, s)
	}
	for _, f := range fams {
		if f.typ == "histogram" {
			if err := checkHistogram(f); err != nil {
				return nil, err
			}
		}
	}
	return fams, nil
}

func seriesKey(s sample) string {
	keys := make([]string, 0, len(s.labels))
	for k := range s.labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(s.name)
	for _, k := range keys {
		fmt.Fprintf(&b, ",%s=%q", k, s.labels[k])
	}
	return b.String()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' {
		i++
	}
	s.name = line[:i]
	if !metricNameRE.MatchString(s.name) {
		return s, fmt.Errorf("invalid metric name %q", s.name)
	}
	if i < len(line) && line[i] == '{' {
		i++
		for {
			if i < len(line) && line[i] == '}' {
				i++
				break
			}
			j := i
			for j < len(line) && line[j] != '=' {
				j++
			}
			name := line[i:j]
			if !labelNameRE.MatchString(name) || strings.HasPrefix(name, "__") {
				return s, fmt.Errorf("invalid label name %q", name)
			}
			if j+1 >= len(line) || line[j+1] != '"' {
				return s, fmt.Errorf("label %s: value not quoted", name)
			}
			j += 2
			var val strings.Builder
			for {
				if j >= len(line) {
					return s, fmt.Errorf("label %s: unterminated value", name)
				}
				c := line[j]
				if c == '"' {
					j++
					break
				}
				if c == '\\' {
					if j+1 >= len(line) {
						return s, fmt.Errorf("label %s: dangling escape", name)
					}
					switch line[j+1] {
					case '\\':
						val.WriteByte('\\')
					case '"':
						val.WriteByte('"')
					case 'n':
						val.WriteByte('\n')
					default:
						return s, fmt.Errorf("label %s: invalid escape \\%c", name, line[j+1])
					}
					j += 2
					continue
				}
				val.WriteByte(c)
				j++
			}
			if _, dup := s.labels[name]; dup {
				return s, fmt.Errorf("label %s twice", name)
			}
			s.labels[name] = val.String()
			i = j
			if i < len(line) && line[i] == ',' {
				i++
				continue
			}
			if i < len(line) && line[i] == '}' {
				i++
				break
			}
			return s, fmt.Errorf("expected ',' or '}' after label %s", name)
		}
	}
	if i >= len(line) || line[i] != ' ' {
		return s, fmt.Errorf("no space before the value")
	}
	fields := strings.Split(line[i+1:], " ")
	if len(fields) < 1 || len(fields) > 2 {
		return s, fmt.Errorf("want a value and an optional timestamp, got %q", line[i+1:])
	}
	v, err := parseValue(fields[0])
	if err != nil {
		return s, err
	}
	s.value = v
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return s, fmt.Errorf("invalid timestamp %q", fields[1])
		}
	}
	return s, nil
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
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || strings.ContainsAny(s, "_xX") {
		return 0, fmt.Errorf("invalid value %q", s)
	}
	return v, nil
}

func checkEscapes(s string, quotes bool) error {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if i+1 >= len(s) {
			return fmt.Errorf("dangling escape")
		}
		switch s[i+1] {
		case '\\', 'n':
		case '"':
			if !quotes {
				return fmt.Errorf("invalid escape \\\"")
			}
		default:
			return fmt.Errorf("invalid escape \\%c", s[i+1])
		}
		i++
	}
	return nil
}

func checkHistogram(f *family) error {
	type group struct {
		les     []float64
		buckets []float64
		count   *float64
		sum     bool
	}
	groups := map[string]*group{}
	keyOf := func(s sample) string {
		l := map[string]string{}
		for k, v := range s.labels {
			if k != "le" {
				l[k] = v
			}
		}
		return seriesKey(sample{labels: l})
	}
	get := func(k string) *group {
		if groups[k] == nil {
			groups[k] = &group{}
		}
		return groups[k]
	}
	for _, s := range f.samples {
		g := get(keyOf(s))
		switch s.name {
		case f.name + "_bucket":
			le, ok := s.labels["le"]
			if !ok {
				return fmt.Errorf("%s: bucket without le", f.name)
			}
			v, err := parseValue(le)
			if err != nil {
				return fmt.Errorf("%s: le %q: %v", f.name, le, err)
			}
			g.les = append(g.les, v)
			g.buckets = append(g.buckets, s.value)
		case f.name + "_count":
			v := s.value
			g.count = &v
		case f.name + "_sum":
			g.sum = true
		default:
			return fmt.Errorf("%s: unexpected sample %s", f.name, s.name)
		}
	}
	for k, g := range groups {
		if len(g.les) == 0 || !math.IsInf(g.les[len(g.les)-1], 1) {
			return fmt.Errorf("%s%s: no +Inf bucket last", f.name, k)
		}
		for i := 1; i < len(g.les); i++ {
			if !(g.les[i] > g.les[i-1]) {
				return fmt.Errorf("%s%s: le not increasing", f.name, k)
			}
			if g.buckets[i] < g.buckets[i-1] {
				return fmt.Errorf("%s%s: buckets not cumulative", f.name, k)
			}
		}
		if g.count == nil || !g.sum {
			return fmt.Errorf("%s%s: _count or _sum missing", f.name, k)
		}
		if *g.count != g.buckets[len(g.buckets)-1] {
			return fmt.Errorf("%s%s: _count %v != +Inf bucket %v", f.name, k, *g.count, g.buckets[len(g.buckets)-1])
		}
	}
	return nil
}
