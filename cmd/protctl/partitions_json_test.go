package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/protctl/protctl/internal/inspect"
)

// appendPartitionJSON must write exactly what encoding/json (HTML escaping
// off) and json.Indent write, compact and indented, for partitions with
// every field set at random (nil, empty and full slices, null and set
// pointers, strings that need escaping or replacing). A field added to
// Partition or to a type in it gets random values too, so the test fails
// until appendPartitionJSON writes it.
func TestPartitionJSONMatchesEncodingJSON(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		var p inspect.Partition
		fillRandom(rnd, reflect.ValueOf(&p).Elem())

		var compact bytes.Buffer
		enc := json.NewEncoder(&compact)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(&p); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(compact.Bytes(), []byte("\n"))
		if got := appendPartitionJSON(nil, &p, "", ""); !bytes.Equal(got, want) {
			t.Fatalf("compact:\n got %s\nwant %s", got, want)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, want, "    ", "  "); err != nil {
			t.Fatal(err)
		}
		if got := appendPartitionJSON([]byte("x"), &p, "    ", "  "); !bytes.Equal(got[1:], indented.Bytes()) {
			t.Fatalf("indented:\n got %s\nwant %s", got[1:], indented.Bytes())
		}
	}
}

var trickyStrings = []string{"", "k", "shop::order", "1700000000000-3", `a"b`, `a\b`, "tab\tnl\n", "é", "\u2028\u2029",
	"\xff\xfe", "<&>", "ctl\x01\x1f", "\x7f", "emoji 🚀"}

func fillRandom(rnd *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(trickyStrings[rnd.IntN(len(trickyStrings))])
	case reflect.Int64:
		v.SetInt(rnd.Int64N(1<<40) - 1<<20)
	case reflect.Bool:
		v.SetBool(rnd.IntN(2) == 1)
	case reflect.Float64:
		// Seconds and rates: fractions, tiny and huge magnitudes (the
		// exponent forms encoding/json switches to).
		v.SetFloat([]float64{0, 1.5, 123.456, 1e-7, 2.5e21, -0.25}[rnd.IntN(6)])
	case reflect.Pointer:
		if rnd.IntN(3) == 0 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fillRandom(rnd, v.Elem())
	case reflect.Slice:
		switch rnd.IntN(4) {
		case 0:
			return // nil
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			n := 1 + rnd.IntN(3)
			v.Set(reflect.MakeSlice(v.Type(), n, n))
			for i := 0; i < n; i++ {
				fillRandom(rnd, v.Index(i))
			}
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if !v.Type().Field(i).IsExported() {
				continue // not encoded (Partition's err)
			}
			fillRandom(rnd, v.Field(i))
		}
	default:
		panic("fillRandom: add a case for " + v.Type().String())
	}
}
