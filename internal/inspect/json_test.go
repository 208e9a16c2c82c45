package inspect_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/inspect"
)

// fill sets every exported field of v, recursively, to a value that is
// not its zero value, so that an omitempty field is written too.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Int64, reflect.Int:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(1, 0).UTC()))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

// Lane and Partition write their JSON through a mirror of their fields
// (to write an unknown length as null): with every field set and the
// length known, the mirror writes exactly what the fields' tags say, so
// a field added to either type without its mirror fails here. With a
// lane unread, both lengths are null.
func TestLaneAndPartitionJSONKeepEveryField(t *testing.T) {
	type plainLane inspect.Lane
	type plainPartition inspect.Partition
	var p inspect.Partition
	fill(reflect.ValueOf(&p).Elem())
	p.Lanes[0].Error = ""
	got, err := json.Marshal(p.Lanes[0])
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(plainLane(p.Lanes[0]))
	if string(got) != string(want) {
		t.Fatalf("lane:\n got %s\nwant %s", got, want)
	}
	if got, _ = json.Marshal(p); string(got) != string(mustMarshal(t, plainPartition(p))) {
		t.Fatalf("partition:\n got %s\nwant %s", got, mustMarshal(t, plainPartition(p)))
	}

	// Unread: the lane's error is written, the lengths are null, and
	// nothing else changes.
	p.Lanes[0].Error = "key k holds a hash, want a stream"
	var lane, plain map[string]any
	_ = json.Unmarshal(mustMarshal(t, p.Lanes[0]), &lane)
	_ = json.Unmarshal(mustMarshal(t, plainLane(p.Lanes[0])), &plain)
	if lane["length"] != nil || plain["length"] == nil {
		t.Fatalf("unread lane's length: %v", lane["length"])
	}
	delete(lane, "length")
	delete(plain, "length")
	if !reflect.DeepEqual(lane, plain) {
		t.Fatalf("unread lane:\n got %v\nwant %v", lane, plain)
	}
	var doc struct {
		Length *int64 `json:"length"`
		Lanes  []struct {
			Length *int64 `json:"length"`
			Error  string `json:"error"`
		} `json:"lanes"`
	}
	if err := json.Unmarshal(mustMarshal(t, p), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Length != nil || doc.Lanes[0].Length != nil || doc.Lanes[0].Error == "" {
		t.Fatalf("unread lane: %s", mustMarshal(t, p))
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
