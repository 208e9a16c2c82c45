package testenv

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ParseScrape parses body, a scrape in the Prometheus text format, with
// prometheus/common/expfmt (the parser Prometheus itself uses) and
// returns its families by name; families announced by HELP or TYPE with
// no sample are left out, as Prometheus leaves them out. It fails t on
// anything the parser rejects, on a metric or label name that a
// Prometheus without UTF-8 names would reject, and on what the parser
// tolerates but a correct exposition never has: a series twice, a
// negative counter, a histogram whose buckets are not cumulative or
// whose count is not its +Inf bucket.
func ParseScrape(t testing.TB, body string) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := parseScrape(body)
	if err != nil {
		t.Fatalf("the scrape does not parse: %v\n%s", err, body)
	}
	return fams
}

func parseScrape(body string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for name, f := range fams {
		seen := map[string]bool{}
		for _, m := range f.GetMetric() {
			key := seriesKey(m.GetLabel())
			if seen[key] {
				return nil, fmt.Errorf("%s%s: the series twice", name, key)
			}
			seen[key] = true
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				if v := m.GetCounter().GetValue(); v < 0 || math.IsNaN(v) {
					return nil, fmt.Errorf("%s%s: counter %v", name, key, v)
				}
			case dto.MetricType_HISTOGRAM:
				if err := checkHistogram(m.GetHistogram()); err != nil {
					return nil, fmt.Errorf("%s%s: %v", name, key, err)
				}
			}
		}
	}
	return fams, nil
}

func checkHistogram(h *dto.Histogram) error {
	bs := h.GetBucket()
	for i := 1; i < len(bs); i++ {
		if !(bs[i].GetUpperBound() > bs[i-1].GetUpperBound()) {
			return fmt.Errorf("le %v after %v", bs[i].GetUpperBound(), bs[i-1].GetUpperBound())
		}
		if bs[i].GetCumulativeCount() < bs[i-1].GetCumulativeCount() {
			return fmt.Errorf("buckets not cumulative at le %v", bs[i].GetUpperBound())
		}
	}
	if len(bs) > 0 && math.IsInf(bs[len(bs)-1].GetUpperBound(), 1) && bs[len(bs)-1].GetCumulativeCount() != h.GetSampleCount() {
		return fmt.Errorf("count %d, +Inf bucket %d", h.GetSampleCount(), bs[len(bs)-1].GetCumulativeCount())
	}
	if len(bs) > 0 && bs[len(bs)-1].GetCumulativeCount() > h.GetSampleCount() {
		return fmt.Errorf("count %d below the last bucket's %d", h.GetSampleCount(), bs[len(bs)-1].GetCumulativeCount())
	}
	return nil
}

func seriesKey(labels []*dto.LabelPair) string {
	pairs := make([]string, 0, len(labels))
	for _, l := range labels {
		pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}

// ScrapeValue is the value of one series of fams, named as the text
// format writes it: `name` or `name{label="value",...}` with every label
// of the series, in any order. A histogram's series are its
// `_count`, `_sum` and `_bucket` (with `le`) samples; a summary's its
// `_count` and `_sum`. ok is false when fams has no such series.
//
//	n, ok := testenv.ScrapeValue(fams, `protctl_lag{subscription="projector"}`)
func ScrapeValue(fams map[string]*dto.MetricFamily, series string) (v float64, ok bool) {
	// The series is itself a sample of the text format: let the parser
	// read its name and labels.
	p := expfmt.NewTextParser(model.LegacyValidation)
	one, err := p.TextToMetricFamilies(strings.NewReader(series + " 0\n"))
	if err != nil || len(one) != 1 {
		return 0, false
	}
	var name string
	var want []*dto.LabelPair
	for n, f := range one {
		name, want = n, f.GetMetric()[0].GetLabel()
	}
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			if seriesKey(m.GetLabel()) == seriesKey(want) {
				return plainValue(f.GetType(), m)
			}
		}
		return 0, false
	}
	for _, suffix := range []string{"_count", "_sum", "_bucket"} {
		base, cut := strings.CutSuffix(name, suffix)
		f := fams[base]
		if !cut || f == nil {
			continue
		}
		le := math.NaN()
		labels := want
		if suffix == "_bucket" {
			i := slices.IndexFunc(want, func(l *dto.LabelPair) bool { return l.GetName() == model.BucketLabel })
			if i < 0 {
				return 0, false
			}
			if le, err = strconv.ParseFloat(want[i].GetValue(), 64); err != nil { // "+Inf" too
				return 0, false
			}
			labels = slices.Delete(slices.Clone(want), i, i+1)
		}
		for _, m := range f.GetMetric() {
			if seriesKey(m.GetLabel()) != seriesKey(labels) {
				continue
			}
			return partValue(f.GetType(), m, suffix, le)
		}
	}
	return 0, false
}

func plainValue(typ dto.MetricType, m *dto.Metric) (float64, bool) {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), true
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), true
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

func partValue(typ dto.MetricType, m *dto.Metric, suffix string, le float64) (float64, bool) {
	switch {
	case typ == dto.MetricType_HISTOGRAM && suffix == "_count":
		return float64(m.GetHistogram().GetSampleCount()), true
	case typ == dto.MetricType_HISTOGRAM && suffix == "_sum":
		return m.GetHistogram().GetSampleSum(), true
	case typ == dto.MetricType_HISTOGRAM && suffix == "_bucket":
		for _, b := range m.GetHistogram().GetBucket() {
			if b.GetUpperBound() == le {
				return float64(b.GetCumulativeCount()), true
			}
		}
		if math.IsInf(le, 1) {
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	case typ == dto.MetricType_SUMMARY && suffix == "_count":
		return float64(m.GetSummary().GetSampleCount()), true
	case typ == dto.MetricType_SUMMARY && suffix == "_sum":
		return m.GetSummary().GetSampleSum(), true
	}
	return 0, false
}
