package admin

import (
	"bufio"
	"math"
	"strconv"
	"strings"
)

// ContentType is the Prometheus text exposition format, version 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// expo writes the Prometheus text exposition format: per family a HELP
// and a TYPE line, then its samples, all together. It is written by hand
// on purpose (no client library): the format is small and stable.
type expo struct {
	w *bufio.Writer
}

type label struct{ name, value string }

func (e *expo) family(name, typ, help string) {
	e.w.WriteString("# HELP ")
	e.w.WriteString(name)
	e.w.WriteByte(' ')
	e.w.WriteString(escapeHelp(help))
	e.w.WriteString("\n# TYPE ")
	e.w.WriteString(name)
	e.w.WriteByte(' ')
	e.w.WriteString(typ)
	e.w.WriteByte('\n')
}

func (e *expo) sample(name string, labels []label, v float64) {
	e.w.WriteString(name)
	if len(labels) > 0 {
		e.w.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				e.w.WriteByte(',')
			}
			e.w.WriteString(l.name)
			e.w.WriteString(`="`)
			e.w.WriteString(escapeLabel(l.value))
			e.w.WriteByte('"')
		}
		e.w.WriteByte('}')
	}
	e.w.WriteByte(' ')
	e.w.WriteString(formatValue(v))
	e.w.WriteByte('\n')
}

// histogram writes h's _bucket (cumulative, with le), _sum and _count
// samples. _count equals the +Inf bucket, as the format requires.
func (e *expo) histogram(name string, labels []label, h *histogram) {
	counts, sum := h.snapshot()
	var cum uint64
	with := func(le string) []label {
		return append(append(make([]label, 0, len(labels)+1), labels...), label{"le", le})
	}
	for i, b := range h.bounds {
		cum += counts[i]
		e.sample(name+"_bucket", with(formatValue(b)), float64(cum))
	}
	cum += counts[len(h.bounds)]
	e.sample(name+"_bucket", with("+Inf"), float64(cum))
	e.sample(name+"_sum", labels, sum)
	e.sample(name+"_count", labels, float64(cum))
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
