package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DataField is the one field of a partition stream entry; its value is the
// JSON envelope.
const DataField = "data"

// Message is one entry read from a partition stream.
type Message struct {
	Stream string // the stream it was read from (main or backfill lane)
	ID     string // the entry id, "ms-seq"
	// Data is the entry's data field: normally a JSON Envelope, but
	// protctl never assumes so (decode it with DecodeEnvelope).
	Data []byte
	// Missing is set for a pending entry whose body was deleted (XDEL or
	// a trim by another tool). Such an entry carries no Data; the caller
	// must report it (and usually ack it) rather than skip it silently.
	Missing bool
}

// Envelope is the JSON document Protean stores in an entry's data field:
//
//	{"data": {...}, "metadata": {"headers": {"id", "type", "time", "stream", ...}, "domain": {...}}}
type Envelope struct {
	Data     json.RawMessage `json:"data"`
	Metadata Metadata        `json:"metadata"`
}

// Metadata is an envelope's metadata; Domain is kept raw.
type Metadata struct {
	Headers Headers         `json:"headers"`
	Domain  json.RawMessage `json:"domain,omitempty"`
}

// Headers are an envelope's standard headers. Extra holds every header
// protctl does not know, so an envelope round-trips unchanged.
type Headers struct {
	ID     string                     `json:"id,omitempty"`
	Type   string                     `json:"type,omitempty"`
	Time   string                     `json:"time,omitempty"`
	Stream string                     `json:"stream,omitempty"`
	Extra  map[string]json.RawMessage `json:"-"`
}

var knownHeaders = map[string]bool{"id": true, "type": true, "time": true, "stream": true}

// UnmarshalJSON keeps unknown headers in Extra.
func (h *Headers) UnmarshalJSON(b []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	type plain Headers
	var p plain
	for name, raw := range all {
		var dst *string
		switch name {
		case "id":
			dst = &p.ID
		case "type":
			dst = &p.Type
		case "time":
			dst = &p.Time
		case "stream":
			dst = &p.Stream
		}
		if dst != nil {
			if err := json.Unmarshal(raw, dst); err == nil {
				continue
			}
		}
		if p.Extra == nil {
			p.Extra = make(map[string]json.RawMessage)
		}
		p.Extra[name] = raw
	}
	*h = Headers(p)
	return nil
}

// MarshalJSON writes the standard headers and Extra side by side.
func (h Headers) MarshalJSON() ([]byte, error) {
	all := make(map[string]any, len(h.Extra)+4)
	for k, v := range h.Extra {
		if !knownHeaders[k] {
			all[k] = v
		}
	}
	for k, v := range map[string]string{"id": h.ID, "type": h.Type, "time": h.Time, "stream": h.Stream} {
		if v != "" {
			all[k] = v
		}
	}
	return json.Marshal(all)
}

// DecodeEnvelope parses an entry's data field. It fails, without panicking,
// on anything that is not a JSON object with "data" or "metadata"; callers
// then show the raw bytes.
func DecodeEnvelope(raw []byte) (Envelope, error) {
	var env Envelope
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Envelope{}, fmt.Errorf("broker: envelope is not a JSON object")
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &probe); err != nil {
		return Envelope{}, fmt.Errorf("broker: envelope: %w", err)
	}
	if _, ok := probe["data"]; !ok {
		if _, ok := probe["metadata"]; !ok {
			return Envelope{}, fmt.Errorf("broker: envelope has neither data nor metadata")
		}
	}
	if err := json.Unmarshal(trimmed, &env); err != nil {
		return Envelope{}, fmt.Errorf("broker: envelope: %w", err)
	}
	return env, nil
}
