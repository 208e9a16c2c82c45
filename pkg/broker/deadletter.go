package broker

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Dead letters are the entries of a dead-letter stream: a partition's
// C:K:dlq (Layout.DLQStream, written by DeadLetterPartitionFenced) or a
// Protean category's C:dlq. They are written in Protean's format, so that
// Protean's own `protean dlq` tooling reads them:
//
//	XADD <dlq> * data <the original entry's JSON object, with "_dlq_metadata": {...} added>
//
// where _dlq_metadata holds Protean's fields (original_stream,
// original_id, consumer_group, consumer, failed_at, retry_count) and
// protctl's own (failure_reason; missing when the original body was gone).
// An original entry whose data is not a JSON object cannot carry the
// metadata inside it: its data is kept byte for byte, and the metadata is
// a stream field of its own, _dlq_metadata, beside data.
//
// ParseDeadLetter reads that format, and the one protctl wrote before it
// (the data field as it was, with the fields origin_stream, origin_id,
// group, reason and missing beside it), so dead letters already written
// stay readable.
const (
	// DLQMetadataKey names the metadata object inside the envelope (and
	// the stream field holding it beside a data field that is not a JSON
	// object).
	DLQMetadataKey = "_dlq_metadata"
	// ReplayedFromKey names the origin a replayed entry carries (inside
	// its JSON object, or as a stream field beside data that is not one):
	// the dead-letter stream and id it was replayed from.
	ReplayedFromKey = "_replayed_from"
)

// FailedAtLayout is how DeadLetterMetadata.FailedAt is written: ISO 8601
// in UTC with microseconds and an explicit offset, the form Python's
// datetime.isoformat gives and datetime.fromisoformat reads on every
// version Protean supports (a trailing "Z" needs Python 3.11).
const FailedAtLayout = "2006-01-02T15:04:05.000000+00:00"

// DeadLetterMetadata is the _dlq_metadata object. The first six fields
// are Protean's, with Protean's names and types; the rest are protctl's.
type DeadLetterMetadata struct {
	OriginalStream string `json:"original_stream"`
	OriginalID     string `json:"original_id"`
	ConsumerGroup  string `json:"consumer_group"`
	// Consumer is the consumer the entry was pending to ("" when it was
	// not pending).
	Consumer string `json:"consumer"`
	// FailedAt is when it was dead-lettered, in FailedAtLayout.
	FailedAt string `json:"failed_at"`
	// RetryCount is how many times it had been delivered.
	RetryCount int64 `json:"retry_count"`
	// FailureReason is why (an operator's --reason, a handler's error).
	FailureReason string `json:"failure_reason,omitempty"`
	// Missing is set when the original entry's body had been deleted: the
	// dead letter then carries nothing but the metadata.
	Missing bool `json:"missing,omitempty"`
}

// DeadLetterFormat says how a dead letter was written.
type DeadLetterFormat string

// Formats ParseDeadLetter recognizes. The names are API (dlq ls -o json).
const (
	// FormatProtean: a JSON object in data with _dlq_metadata inside it
	// (Protean's own dead letters, and protctl's since this format).
	FormatProtean DeadLetterFormat = "protean"
	// FormatProtctlRaw: data that is not a JSON object, kept as it was,
	// with _dlq_metadata as a stream field beside it.
	FormatProtctlRaw DeadLetterFormat = "protctl-raw"
	// FormatProtctlFields: protctl's earlier format, data as it was with
	// origin_stream, origin_id, group, reason (and missing=1) fields.
	FormatProtctlFields DeadLetterFormat = "protctl-fields"
	// FormatUnknown: none of the above; only the data is known.
	FormatUnknown DeadLetterFormat = "unknown"
)

// Fields of protctl's earlier dead-letter format.
const (
	legacyOriginStream = "origin_stream"
	legacyOriginID     = "origin_id"
	legacyGroup        = "group"
	legacyReason       = "reason"
	legacyMissing      = "missing"
)

// DeadLetter is a dead-letter entry as ParseDeadLetter reads it. Fields
// the entry does not record are empty (RetryCount nil).
type DeadLetter struct {
	Format         DeadLetterFormat
	OriginalStream string
	OriginalID     string
	ConsumerGroup  string
	Consumer       string
	FailureReason  string
	// FailedAt is the time recorded, as written ("" when none).
	FailedAt   string
	RetryCount *int64
	// Missing: the original body was gone; there is nothing to replay.
	Missing bool
	// Payload is the original entry's data: for FormatProtean the JSON
	// object without _dlq_metadata (its members re-encoded in key order,
	// their values byte for byte), otherwise the data field as stored.
	Payload []byte
	// PayloadIsObject reports whether Payload is a JSON object.
	PayloadIsObject bool
	// ReplayedFrom is set when the entry had been replayed before (it
	// carries _replayed_from) and was dead-lettered again.
	ReplayedFrom *ReplayOrigin
}

// ReplayOrigin is what a replayed entry records of where it came from.
type ReplayOrigin struct {
	DLQStream      string `json:"dlq_stream"`
	DLQID          string `json:"dlq_id"`
	OriginalStream string `json:"original_stream,omitempty"`
	OriginalID     string `json:"original_id,omitempty"`
	// ReplayedAt is when, in FailedAtLayout.
	ReplayedAt string `json:"replayed_at,omitempty"`
}

// DeadLetterEntry builds the fields of a dead-letter entry in Protean's
// format from the original entry's data (nil when its body was gone) and
// meta: a data field, and a _dlq_metadata field only when data is not a
// JSON object. redisbroker's deadletter.lua builds the same entry in the
// store's atomic step; this is the in-memory broker's and the tests'
// copy.
func DeadLetterEntry(data []byte, missing bool, meta DeadLetterMetadata) (fields [][2]string) {
	meta.Missing = missing
	m, _ := json.Marshal(meta) // strings, an integer and a bool: cannot fail
	if missing {
		return [][2]string{{DataField, `{"` + DLQMetadataKey + `":` + string(m) + `}`}}
	}
	obj, empty, ok := jsonObject(data)
	if !ok {
		return [][2]string{{DataField, string(data)}, {DLQMetadataKey, string(m)}}
	}
	sep := ","
	if empty {
		sep = ""
	}
	// Append, as the script does, so that a reader keeping the last of
	// duplicate names (Python's json, Go's) reads this metadata.
	return [][2]string{{DataField, string(obj[:len(obj)-1]) + sep + `"` + DLQMetadataKey + `":` + string(m) + "}"}}
}

// jsonObject reports whether data is one JSON object (blanks around it
// allowed), returning it trimmed and whether it has no members.
func jsonObject(data []byte) (obj []byte, empty, ok bool) {
	t := bytes.TrimSpace(data)
	if len(t) < 2 || t[0] != '{' || !json.Valid(t) {
		return nil, false, false
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(t, &members); err != nil {
		return nil, false, false
	}
	return t, len(members) == 0, true
}

// ParseDeadLetter reads a dead-letter entry's fields in any of the
// formats above. It never fails: what it cannot read is left empty and
// the format says how much was understood.
func ParseDeadLetter(fields map[string]string) DeadLetter {
	data := fields[DataField]
	if raw, ok := fields[DLQMetadataKey]; ok {
		d := DeadLetter{Format: FormatProtctlRaw, Payload: []byte(data)}
		d.readMetadata([]byte(raw))
		d.readReplayed(fields[ReplayedFromKey])
		return d
	}
	if _, legacy := fields[legacyOriginID]; legacy {
		d := DeadLetter{
			Format:         FormatProtctlFields,
			OriginalStream: fields[legacyOriginStream],
			OriginalID:     fields[legacyOriginID],
			ConsumerGroup:  fields[legacyGroup],
			FailureReason:  fields[legacyReason],
			Missing:        fields[legacyMissing] == "1",
			Payload:        []byte(data),
		}
		d.readObject()
		return d
	}
	d := DeadLetter{Format: FormatUnknown, Payload: []byte(data)}
	if _, _, ok := jsonObject([]byte(data)); !ok {
		d.readReplayed(fields[ReplayedFromKey])
		return d
	}
	var members map[string]json.RawMessage
	_ = json.Unmarshal([]byte(data), &members)
	if meta, ok := members[DLQMetadataKey]; ok {
		d.Format = FormatProtean
		d.readMetadata(meta)
		delete(members, DLQMetadataKey)
		d.Payload = encodeMembers(members)
	}
	d.readObject()
	return d
}

// readObject sets PayloadIsObject and ReplayedFrom from a JSON object
// payload.
func (d *DeadLetter) readObject() {
	if _, _, ok := jsonObject(d.Payload); !ok {
		return
	}
	d.PayloadIsObject = true
	var members map[string]json.RawMessage
	if json.Unmarshal(d.Payload, &members) == nil {
		if r, ok := members[ReplayedFromKey]; ok {
			d.readReplayed(string(r))
		}
	}
}

func (d *DeadLetter) readReplayed(raw string) {
	if raw == "" {
		return
	}
	var o ReplayOrigin
	if json.Unmarshal([]byte(raw), &o) == nil && (o.DLQStream != "" || o.DLQID != "") {
		d.ReplayedFrom = &o
	}
}

// readMetadata reads a _dlq_metadata object leniently: Protean writes
// failed_at from the message's header time (possibly null) and a tool may
// write numbers as strings, so each member is read on its own and one of
// another type is left empty instead of failing the rest. The reason is
// failure_reason, or reason or error, whichever is there.
func (d *DeadLetter) readMetadata(raw []byte) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	str := func(names ...string) string {
		for _, n := range names {
			var s string
			if v, ok := m[n]; ok && json.Unmarshal(v, &s) == nil && s != "" {
				return s
			}
		}
		return ""
	}
	d.OriginalStream = str("original_stream")
	d.OriginalID = str("original_id")
	d.ConsumerGroup = str("consumer_group")
	d.Consumer = str("consumer")
	d.FailedAt = str("failed_at")
	d.FailureReason = str("failure_reason", "reason", "error")
	if v, ok := m["retry_count"]; ok {
		var n json.Number
		if json.Unmarshal(v, &n) == nil {
			if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
				d.RetryCount = &i
			}
		} else {
			var s string
			if json.Unmarshal(v, &s) == nil {
				if i, err := strconv.ParseInt(s, 10, 64); err == nil {
					d.RetryCount = &i
				}
			}
		}
	}
	var missing bool
	if v, ok := m["missing"]; ok && json.Unmarshal(v, &missing) == nil {
		d.Missing = missing
	}
}

// ParseFailedAt reads a recorded failed_at: ISO 8601 with or without an
// offset (a time without one is UTC, as Protean's header times are) and
// with any number of fractional digits. ok is false for anything else.
func ParseFailedAt(s string) (t time.Time, ok bool) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// ReplayEntry builds the fields of the entry that replays d, recording
// origin: a JSON object payload gets _replayed_from inside it (any earlier
// one replaced), other data is kept byte for byte with _replayed_from as a
// stream field beside it.
func ReplayEntry(d DeadLetter, origin ReplayOrigin) [][2]string {
	o, _ := json.Marshal(origin) // strings only: cannot fail
	if d.PayloadIsObject {
		var members map[string]json.RawMessage
		if json.Unmarshal(d.Payload, &members) == nil {
			delete(members, DLQMetadataKey)
			members[ReplayedFromKey] = o
			return [][2]string{{DataField, string(encodeMembers(members))}}
		}
	}
	return [][2]string{{DataField, string(d.Payload)}, {ReplayedFromKey, string(o)}}
}

// encodeMembers writes a JSON object of members in key order, each value
// as it was (no HTML escaping added).
func encodeMembers(members map[string]json.RawMessage) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(members) // valid raw values: cannot fail
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
