package kafkasource

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// referenceScalar is scalar written with encoding/json: decode each level
// fully. The fast walker must agree with it on every valid document.
func referenceScalar(doc []byte, path []string) (string, bool, bool) {
	var cur any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&cur); err != nil {
		return "", false, true
	}
	if _, ok := cur.(map[string]any); !ok {
		return "", false, true
	}
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, false
		}
		if cur, ok = m[k]; !ok {
			return "", false, false
		}
	}
	switch v := cur.(type) {
	case nil:
		return "", false, false
	case string:
		return v, true, false
	case json.Number:
		return v.String(), true, false
	case bool:
		if v {
			return "true", true, false
		}
		return "false", true, false
	}
	return "", false, true // object or array
}

func FuzzJSONScalar(f *testing.F) {
	seeds := []struct{ doc, path string }{
		{`{"metadata":{"headers":{"id":"e-1"},"domain":{"version":3}}}`, "metadata.headers.id"},
		{`{"metadata":{"headers":{"id":"e-1"},"domain":{"version":3}}}`, "metadata.domain.version"},
		{`{"a":{"b":[1,{"c":"}"}],"c":"x\"y"},"b":"\u0041"}`, "b"},
		{`{"a":{"b":[1,{"c":"}"}],"c":"x\"y"}}`, "a.c"},
		{`{"d\u0061ta":1}`, "data"},
		{` { "a" : { "b" : true } } `, "a.b"},
		{`{"a":null}`, "a"},
		{`{"a":"x"}`, "a.b"},
		{`{"a":{"b":{}}}`, "a.b"},
		{`{"a":-1.5e3,"b":2}`, "a"},
		{`{"x":[{"a":"not me"}],"a":"me"}`, "a"},
		{`[1]`, "a"},
		{`{}`, "a"},
		{`{"a":1,"a":2}`, "a"},
		{`{"a":{"b":1},"a":{"c":2}}`, "a.b"},
	}
	for _, s := range seeds {
		f.Add(s.doc, s.path)
	}
	f.Fuzz(func(t *testing.T, doc, path string) {
		if !json.Valid([]byte(doc)) || path == "" {
			return
		}
		segs := strings.Split(path, ".")
		for _, s := range segs {
			if s == "" {
				return
			}
		}
		got, ok, err := newJSONDoc([]byte(doc)).scalar(segs)
		want, wantOK, wantErr := referenceScalar([]byte(doc), segs)
		if (err != nil) != wantErr || ok != wantOK || got != want {
			t.Fatalf("scalar(%s, %q) = %q, %v, %v; encoding/json says %q, %v, err=%v", doc, path, got, ok, err, want, wantOK, wantErr)
		}
	})
}
