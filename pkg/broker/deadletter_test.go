package broker_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

func fieldsOf(pairs [][2]string) map[string]string {
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		m[p[0]] = p[1]
	}
	return m
}

func sameJSON(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%s is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func i64(n int64) *int64 { return &n }

func TestParseDeadLetter(t *testing.T) {
	meta := broker.DeadLetterMetadata{
		OriginalStream: "shop::order:o-1", OriginalID: "5-0", ConsumerGroup: "app.P", Consumer: "w:3",
		FailedAt: "2025-06-16T14:22:00.123456+00:00", RetryCount: 7, FailureReason: "poison",
	}
	for _, c := range []struct {
		name   string
		fields map[string]string
		want   broker.DeadLetter
	}{
		{"protean's own", map[string]string{"data": `{"data":{"n":1},"metadata":{"headers":{"time":"2025-06-16T14:22:00"}},` +
			`"_dlq_metadata":{"original_stream":"shop::order","original_id":"1-0","consumer_group":"app.P","consumer":"P-host-1-abc","failed_at":"2025-06-16T14:22:00","retry_count":3}}`},
			broker.DeadLetter{Format: broker.FormatProtean, OriginalStream: "shop::order", OriginalID: "1-0", ConsumerGroup: "app.P",
				Consumer: "P-host-1-abc", FailedAt: "2025-06-16T14:22:00", RetryCount: i64(3), PayloadIsObject: true,
				Payload: []byte(`{"data":{"n":1},"metadata":{"headers":{"time":"2025-06-16T14:22:00"}}}`)}},
		{"protctl's, an object", fieldsOf(broker.DeadLetterEntry([]byte(`{"data":{"n":1}}`), false, meta)),
			broker.DeadLetter{Format: broker.FormatProtean, OriginalStream: meta.OriginalStream, OriginalID: "5-0", ConsumerGroup: "app.P",
				Consumer: "w:3", FailedAt: meta.FailedAt, RetryCount: i64(7), FailureReason: "poison", PayloadIsObject: true,
				Payload: []byte(`{"data":{"n":1}}`)}},
		{"protctl's, not an object", fieldsOf(broker.DeadLetterEntry([]byte("\x00raw"), false, meta)),
			broker.DeadLetter{Format: broker.FormatProtctlRaw, OriginalStream: meta.OriginalStream, OriginalID: "5-0", ConsumerGroup: "app.P",
				Consumer: "w:3", FailedAt: meta.FailedAt, RetryCount: i64(7), FailureReason: "poison", Payload: []byte("\x00raw")}},
		{"protctl's, body gone", fieldsOf(broker.DeadLetterEntry(nil, true, meta)),
			broker.DeadLetter{Format: broker.FormatProtean, OriginalStream: meta.OriginalStream, OriginalID: "5-0", ConsumerGroup: "app.P",
				Consumer: "w:3", FailedAt: meta.FailedAt, RetryCount: i64(7), FailureReason: "poison", Missing: true,
				PayloadIsObject: true, Payload: []byte(`{}`)}},
		{"protctl's earlier fields", map[string]string{"data": `{"data":{"n":1}}`, "origin_stream": "s", "origin_id": "2-0", "group": "g", "reason": "bad"},
			broker.DeadLetter{Format: broker.FormatProtctlFields, OriginalStream: "s", OriginalID: "2-0", ConsumerGroup: "g",
				FailureReason: "bad", PayloadIsObject: true, Payload: []byte(`{"data":{"n":1}}`)}},
		{"protctl's earlier fields, body gone", map[string]string{"data": "", "missing": "1", "origin_stream": "s", "origin_id": "2-0", "group": "g", "reason": "bad"},
			broker.DeadLetter{Format: broker.FormatProtctlFields, OriginalStream: "s", OriginalID: "2-0", ConsumerGroup: "g",
				FailureReason: "bad", Missing: true, Payload: []byte{}}},
		{"lenient metadata", map[string]string{"data": `{"_dlq_metadata":{"retry_count":"4","failed_at":null,"error":"KeyError: 'isbn'"}}`},
			broker.DeadLetter{Format: broker.FormatProtean, RetryCount: i64(4), FailureReason: "KeyError: 'isbn'", PayloadIsObject: true, Payload: []byte(`{}`)}},
		{"no metadata at all", map[string]string{"data": `{"a":1}`},
			broker.DeadLetter{Format: broker.FormatUnknown, PayloadIsObject: true, Payload: []byte(`{"a":1}`)}},
		{"a replayed entry dead-lettered again", map[string]string{"data": `{"a":1,"_replayed_from":{"dlq_stream":"c:k:dlq","dlq_id":"9-0"},"_dlq_metadata":{"original_id":"10-0"}}`},
			broker.DeadLetter{Format: broker.FormatProtean, OriginalID: "10-0", PayloadIsObject: true,
				Payload: []byte(`{"_replayed_from":{"dlq_stream":"c:k:dlq","dlq_id":"9-0"},"a":1}`), ReplayedFrom: &broker.ReplayOrigin{DLQStream: "c:k:dlq", DLQID: "9-0"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := broker.ParseDeadLetter(c.fields)
			if c.want.Payload != nil && len(c.want.Payload) > 0 && c.want.PayloadIsObject {
				sameJSON(t, string(got.Payload), string(c.want.Payload))
				got.Payload, c.want.Payload = nil, nil
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// The metadata is spliced in, never decoded and encoded again: numbers
// beyond a double's precision, member order and an empty object survive.
func TestDeadLetterEntryKeepsTheOriginalBytes(t *testing.T) {
	meta := broker.DeadLetterMetadata{OriginalStream: "s", OriginalID: "1-0", ConsumerGroup: "g", FailedAt: "x", RetryCount: 2}
	for _, c := range []struct{ data, prefix string }{
		{`{"z":12345678901234567890,"a":0.10000000000000000555}`, `{"z":12345678901234567890,"a":0.10000000000000000555,"_dlq_metadata":{`},
		{` {} `, `{"_dlq_metadata":{`},
		{"{\"s\":\"}\"}\n", `{"s":"}","_dlq_metadata":{`},
	} {
		f := broker.DeadLetterEntry([]byte(c.data), false, meta)
		if len(f) != 1 || f[0][0] != "data" || len(f[0][1]) < len(c.prefix) || f[0][1][:len(c.prefix)] != c.prefix || !json.Valid([]byte(f[0][1])) {
			t.Fatalf("DeadLetterEntry(%q) = %q, want it to start %s", c.data, f, c.prefix)
		}
	}
	if f := broker.DeadLetterEntry([]byte(`[1,2]`), false, meta); len(f) != 2 || f[0][1] != `[1,2]` || f[1][0] != broker.DLQMetadataKey {
		t.Fatalf("an array is not an object: %q", f)
	}
}

func TestReplayEntry(t *testing.T) {
	origin := broker.ReplayOrigin{DLQStream: "c:k:dlq", DLQID: "9-0", OriginalStream: "c:k", OriginalID: "3-0", ReplayedAt: "t"}
	meta := broker.DeadLetterMetadata{OriginalStream: "c:k", OriginalID: "3-0", FailureReason: "x"}
	d := broker.ParseDeadLetter(fieldsOf(broker.DeadLetterEntry([]byte(`{"n":12345678901234567890,"_replayed_from":{"dlq_id":"1-0"}}`), false, meta)))
	f := broker.ReplayEntry(d, origin)
	if len(f) != 1 || f[0][0] != "data" {
		t.Fatalf("replay of an object = %q", f)
	}
	sameJSON(t, f[0][1], `{"n":12345678901234567890,"_replayed_from":{"dlq_stream":"c:k:dlq","dlq_id":"9-0","original_stream":"c:k","original_id":"3-0","replayed_at":"t"}}`)
	var probe map[string]json.RawMessage
	_ = json.Unmarshal([]byte(f[0][1]), &probe)
	if string(probe["n"]) != "12345678901234567890" {
		t.Fatalf("the payload's number changed: %s", probe["n"])
	}

	raw := broker.ParseDeadLetter(fieldsOf(broker.DeadLetterEntry([]byte("plain"), false, meta)))
	f = broker.ReplayEntry(raw, origin)
	if len(f) != 2 || f[0] != [2]string{"data", "plain"} || f[1][0] != broker.ReplayedFromKey {
		t.Fatalf("replay of raw data = %q", f)
	}
	if again := broker.ParseDeadLetter(fieldsOf(append(f, broker.DeadLetterEntry([]byte("plain"), false, meta)[1]))); again.ReplayedFrom == nil || again.ReplayedFrom.DLQID != "9-0" {
		t.Fatalf("a replayed raw entry dead-lettered again reads %+v", again)
	}
}

func TestParseFailedAt(t *testing.T) {
	want := time.Date(2025, 6, 16, 14, 22, 0, 123456000, time.UTC)
	for _, s := range []string{"2025-06-16T14:22:00.123456+00:00", "2025-06-16T14:22:00.123456Z", "2025-06-16T16:22:00.123456+02:00", "2025-06-16T14:22:00.123456", "2025-06-16 14:22:00.123456"} {
		if got, ok := broker.ParseFailedAt(s); !ok || !got.Equal(want) {
			t.Errorf("ParseFailedAt(%q) = %v, %v", s, got, ok)
		}
	}
	if _, ok := broker.ParseFailedAt("yesterday"); ok {
		t.Error("a word parsed as a time")
	}
}
