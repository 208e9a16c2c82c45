package testenv

import "testing"

// ParseScrape rejects what the format forbids, and what expfmt tolerates
// but a correct exposition never has, so that a passing parse means
// something.
func TestParseScrapeRejects(t *testing.T) {
	bad := map[string]string{
		"no final newline":     "a 1",
		"bad name":             "1a 1\n",
		"bad label escape":     "a{x=\"\\t\"} 1\n",
		"unquoted label":       "a{x=1} 1\n",
		"bad value":            "a 1x\n",
		"type after samples":   "a 1\n# TYPE a gauge\n",
		"unknown type":         "# TYPE a meter\n",
		"duplicate series":     "a{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 2\n",
		"negative counter":     "# TYPE a_total counter\na_total -1\n",
		"histogram count":      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
		"histogram decreasing": "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
		"utf-8 name":           "{\"a.b\"} 1\n",
	}
	for name, text := range bad {
		if _, err := parseScrape(text); err == nil {
			t.Errorf("%s: accepted %q", name, text)
		}
	}
}

// ScrapeValue finds a series whatever order its labels are written in,
// a histogram's parts, and nothing for a series with a label more or
// less.
func TestScrapeValue(t *testing.T) {
	fams := ParseScrape(t, "# HELP a A \\\\ help\\n.\n# TYPE a gauge\n"+
		"a{x=\"q\\\"\\n\\\\\",y=\"1\"} 1.5\na{x=\"y\"} +Inf\n"+
		"# TYPE h histogram\nh_bucket{op=\"r\",le=\"0.5\"} 1\nh_bucket{op=\"r\",le=\"+Inf\"} 2\nh_sum{op=\"r\"} 3\nh_count{op=\"r\"} 2\n")
	for series, want := range map[string]float64{
		`a{y="1",x="q\"\n\\"}`:       1.5,
		`h_count{op="r"}`:            2,
		`h_sum{op="r"}`:              3,
		`h_bucket{le="0.5",op="r"}`:  1,
		`h_bucket{op="r",le="+Inf"}`: 2,
	} {
		if v, ok := ScrapeValue(fams, series); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	for _, series := range []string{`a{x="q\"\n\\"}`, `a{x="y",z="1"}`, `a`, `h_count`, `h_bucket{op="r",le="1"}`, `b`} {
		if v, ok := ScrapeValue(fams, series); ok {
			t.Errorf("%s = %v, want absent", series, v)
		}
	}
}
