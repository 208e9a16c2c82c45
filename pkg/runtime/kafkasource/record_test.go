package kafkasource_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

func rec(key string, value string, headers ...string) *kgo.Record {
	r := &kgo.Record{Value: []byte(value)}
	if key != "" {
		r.Key = []byte(key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

const envelope = `{"data": {"total": 3}, "metadata": {"headers": {"id": "evt-1", "type": "Placed",
 "aggregate": "order-9", "n": 42}, "domain": {"version": 7, "fqn": "shop.Order"}}}`

func TestAggregate(t *testing.T) {
	tests := []struct {
		name    string
		from    kafkasource.AggregateFrom
		record  *kgo.Record
		want    string
		wantErr bool
	}{
		{"key", kafkasource.AggregateFrom{}, rec("order-1", "x"), "order-1", false},
		{"empty_key", kafkasource.AggregateFrom{}, rec("", "x"), "", true},
		{"header", kafkasource.AggregateFrom{Header: "agg"}, rec("k", "x", "agg", "order-2"), "order-2", false},
		{"header_last_wins", kafkasource.AggregateFrom{Header: "agg"}, rec("k", "x", "agg", "old", "agg", "new"), "new", false},
		{"header_missing", kafkasource.AggregateFrom{Header: "agg"}, rec("k", "x", "other", "v"), "", true},
		{"header_empty", kafkasource.AggregateFrom{Header: "agg"}, rec("k", "x", "agg", ""), "", true},
		{"json_string", kafkasource.AggregateFrom{JSONPath: "metadata.headers.aggregate"}, rec("k", envelope), "order-9", false},
		{"json_number_as_written", kafkasource.AggregateFrom{JSONPath: "metadata.headers.n"}, rec("k", envelope), "42", false},
		{"json_top_level", kafkasource.AggregateFrom{JSONPath: "id"}, rec("k", `{"id":"a-1"}`), "a-1", false},
		{"json_missing", kafkasource.AggregateFrom{JSONPath: "metadata.headers.nope"}, rec("k", envelope), "", true},
		{"json_object_is_not_scalar", kafkasource.AggregateFrom{JSONPath: "metadata.headers"}, rec("k", envelope), "", true},
		{"json_null", kafkasource.AggregateFrom{JSONPath: "a"}, rec("k", `{"a":null}`), "", true},
		{"json_through_a_scalar", kafkasource.AggregateFrom{JSONPath: "a.b"}, rec("k", `{"a":"x"}`), "", true},
		{"value_not_json", kafkasource.AggregateFrom{JSONPath: "a"}, rec("k", `{not json`), "", true},
		{"value_not_object", kafkasource.AggregateFrom{JSONPath: "a"}, rec("k", `[1,2]`), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.from.Aggregate(tt.record)
			if tt.wantErr {
				if !errors.Is(err, kafkasource.ErrNoAggregate) {
					t.Fatalf("Aggregate = %q, %v; want ErrNoAggregate", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Aggregate = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestParseAggregateFrom(t *testing.T) {
	tests := []struct {
		spec    string
		want    kafkasource.AggregateFrom
		wantErr bool
	}{
		{"", kafkasource.AggregateFrom{}, false},
		{"key", kafkasource.AggregateFrom{}, false},
		{"header:aggregate", kafkasource.AggregateFrom{Header: "aggregate"}, false},
		{"json:metadata.headers.aggregate", kafkasource.AggregateFrom{JSONPath: "metadata.headers.aggregate"}, false},
		{"json:a..b", kafkasource.AggregateFrom{}, true},
		{"json:", kafkasource.AggregateFrom{}, true},
		{"value", kafkasource.AggregateFrom{}, true},
	}
	for _, tt := range tests {
		got, err := kafkasource.ParseAggregateFrom(tt.spec)
		if tt.wantErr {
			if !errors.Is(err, kafkasource.ErrInvalidArgument) {
				t.Errorf("ParseAggregateFrom(%q) = %+v, %v; want ErrInvalidArgument", tt.spec, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseAggregateFrom(%q): %v", tt.spec, err)
		} else if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseAggregateFrom(%q) (-want +got):\n%s", tt.spec, diff)
		}
		if round, _ := kafkasource.ParseAggregateFrom(got.String()); round != got {
			t.Errorf("String() of %+v does not parse back: %q", got, got.String())
		}
	}
	if err := (kafkasource.AggregateFrom{Header: "a", JSONPath: "b"}).Validate(); !errors.Is(err, kafkasource.ErrInvalidArgument) {
		t.Errorf("both header and path set: Validate = %v, want ErrInvalidArgument", err)
	}
}

func TestRecordIdentity(t *testing.T) {
	tests := []struct {
		name    string
		record  *kgo.Record
		want    kafkasource.Identity
		wantKey string
		wantErr bool
	}{
		{"id_header", rec("k", "not json", "id", "m-1"), kafkasource.Identity{ID: "m-1"}, "m-1", false},
		{"id_and_version_headers", rec("k", "", "id", "m-1", "version", "3"), kafkasource.Identity{ID: "m-1", Version: "3"}, "m-1@3", false},
		{"envelope_with_version", rec("k", envelope), kafkasource.Identity{ID: "evt-1", Version: "7"}, "evt-1@7", false},
		{"envelope_without_domain", rec("k", `{"metadata":{"headers":{"id":"e-2"}}}`), kafkasource.Identity{ID: "e-2"}, "e-2", false},
		{"header_wins_over_envelope", rec("k", envelope, "id", "h-1"), kafkasource.Identity{ID: "h-1"}, "h-1", false},
		{"empty_id_header_falls_back", rec("k", envelope, "id", ""), kafkasource.Identity{ID: "evt-1", Version: "7"}, "evt-1@7", false},
		{"nothing", rec("k", `{"data":{}}`), kafkasource.Identity{}, "", true},
		{"not_json", rec("k", `plain text`), kafkasource.Identity{}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kafkasource.RecordIdentity(tt.record)
			if tt.wantErr {
				if !errors.Is(err, kafkasource.ErrNoIdentity) {
					t.Fatalf("RecordIdentity = %+v, %v; want ErrNoIdentity", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("RecordIdentity: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("RecordIdentity (-want +got):\n%s", diff)
			}
			if got.Key() != tt.wantKey {
				t.Fatalf("RecordIdentity key %q, want %q", got.Key(), tt.wantKey)
			}
		})
	}
}

func TestIdentityFromCustomPaths(t *testing.T) {
	from := kafkasource.IdentityFrom{
		IDHeader:     "message-id",
		IDPath:       "meta.uuid",
		VersionPaths: []string{"meta.seq", "meta.version"},
	}
	got, err := from.Identity(rec("k", `{"meta":{"uuid":"u-1","version":"v2"}}`))
	if err != nil || got != (kafkasource.Identity{ID: "u-1", Version: "v2"}) {
		t.Fatalf("Identity = %+v, %v; want u-1 with the second version path", got, err)
	}
	got, err = from.Identity(rec("k", `{"meta":{"uuid":"u-1","seq":5,"version":"v2"}}`))
	if err != nil || got.Version != "5" {
		t.Fatalf("Identity = %+v, %v; want version 5 from the first path present", got, err)
	}
	got, err = from.Identity(rec("k", "", "message-id", "h-9"))
	if err != nil || got.ID != "h-9" {
		t.Fatalf("Identity = %+v, %v; want h-9 from the custom header", got, err)
	}
}

func BenchmarkRecordIdentity(b *testing.B) {
	withHeader := rec("order-1", envelope, "id", "evt-1")
	envelopeOnly := rec("order-1", envelope)
	b.Run("header", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := kafkasource.RecordIdentity(withHeader); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("envelope", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := kafkasource.RecordIdentity(envelopeOnly); err != nil {
				b.Fatal(err)
			}
		}
	})
}
