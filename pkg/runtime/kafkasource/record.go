package kafkasource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// AggregateFrom says where a record's aggregate (the unit of ordering: one
// record at a time per aggregate) is. The zero value means the record key.
// Set at most one field.
type AggregateFrom struct {
	// Header names a record header whose value is the aggregate.
	Header string
	// JSONPath is a dotted path of object keys into the record value, e.g.
	// "metadata.headers.aggregate". The value there must be a string or a
	// number (taken as written).
	JSONPath string
}

// ParseAggregateFrom reads the config form: "" or "key" for the record
// key, "header:NAME", or "json:PATH".
func ParseAggregateFrom(spec string) (AggregateFrom, error) {
	var a AggregateFrom
	switch {
	case spec == "" || spec == "key":
	case strings.HasPrefix(spec, "header:"):
		if a.Header = strings.TrimPrefix(spec, "header:"); a.Header == "" {
			return a, invalidf("aggregate %q: empty header name", spec)
		}
	case strings.HasPrefix(spec, "json:"):
		if a.JSONPath = strings.TrimPrefix(spec, "json:"); a.JSONPath == "" {
			return a, invalidf("aggregate %q: empty JSON path", spec)
		}
	default:
		return a, invalidf("aggregate %q: want key, header:NAME or json:PATH", spec)
	}
	return a, a.Validate()
}

// String is the config form ParseAggregateFrom reads.
func (a AggregateFrom) String() string {
	switch {
	case a.Header != "":
		return "header:" + a.Header
	case a.JSONPath != "":
		return "json:" + a.JSONPath
	}
	return "key"
}

// Validate reports a spec with both fields set or a malformed path.
func (a AggregateFrom) Validate() error {
	if a.Header != "" && a.JSONPath != "" {
		return invalidf("aggregate: set a header or a JSON path, not both")
	}
	if a.JSONPath != "" {
		if _, err := splitPath(a.JSONPath); err != nil {
			return err
		}
	}
	return nil
}

// Aggregate returns the record's aggregate, or an error wrapping
// ErrNoAggregate when the record does not carry one where a says.
func (a AggregateFrom) Aggregate(r *kgo.Record) (string, error) {
	switch {
	case a.Header != "":
		if v, ok := header(r, a.Header); ok && v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: no %q header (offset %d)", ErrNoAggregate, a.Header, r.Offset)
	case a.JSONPath != "":
		path, err := splitPath(a.JSONPath)
		if err != nil {
			return "", err
		}
		v, ok, err := newJSONDoc(r.Value).scalar(path)
		if err != nil || !ok || v == "" {
			if err == nil {
				err = fmt.Errorf("nothing at %q", a.JSONPath)
			}
			return "", fmt.Errorf("%w: %v (offset %d)", ErrNoAggregate, err, r.Offset)
		}
		return v, nil
	}
	if len(r.Key) == 0 {
		return "", fmt.Errorf("%w: empty key (offset %d)", ErrNoAggregate, r.Offset)
	}
	return string(r.Key), nil
}

// Identity is what a subscription deduplicates on: the message id, plus
// the aggregate version when the record carries one. Two deliveries of the
// same record (a replay after a handover) have equal identities.
type Identity struct {
	ID      string
	Version string // as written (a JSON number keeps its text); "" if none
}

// Key is one string for a dedup set: ID, or ID@Version.
func (i Identity) Key() string {
	if i.Version == "" {
		return i.ID
	}
	return i.ID + "@" + i.Version
}

// IdentityFrom says where a record's identity is. Its zero value is the
// default DefaultIdentity describes.
type IdentityFrom struct {
	IDHeader      string   // default "id"
	VersionHeader string   // default "version"
	IDPath        string   // default "metadata.headers.id"
	VersionPaths  []string // default ["metadata.domain.version"]; the first present wins
}

// DefaultIdentity is where RecordIdentity looks. Headers first: they cost
// nothing to read, while the envelope means parsing the value. A producer
// that sets an id header is expected to set it to the envelope's id.
var DefaultIdentity = IdentityFrom{
	IDHeader:      "id",
	VersionHeader: "version",
	IDPath:        "metadata.headers.id",
	VersionPaths:  []string{"metadata.domain.version"},
}

func (f IdentityFrom) withDefaults() IdentityFrom {
	if f.IDHeader == "" {
		f.IDHeader = DefaultIdentity.IDHeader
	}
	if f.VersionHeader == "" {
		f.VersionHeader = DefaultIdentity.VersionHeader
	}
	if f.IDPath == "" {
		f.IDPath = DefaultIdentity.IDPath
	}
	if len(f.VersionPaths) == 0 {
		f.VersionPaths = DefaultIdentity.VersionPaths
	}
	return f
}

// RecordIdentity is DefaultIdentity.Identity(r).
func RecordIdentity(r *kgo.Record) (Identity, error) { return DefaultIdentity.Identity(r) }

// Identity returns the record's identity: the id header with the version
// header when the record has an id header, otherwise the envelope's id
// with the first version path present. It returns an error wrapping
// ErrNoIdentity when neither has an id.
func (f IdentityFrom) Identity(r *kgo.Record) (Identity, error) {
	f = f.withDefaults()
	if id, ok := header(r, f.IDHeader); ok && id != "" {
		v, _ := header(r, f.VersionHeader)
		return Identity{ID: id, Version: v}, nil
	}
	doc := newJSONDoc(r.Value)
	idPath, err := splitPath(f.IDPath)
	if err != nil {
		return Identity{}, err
	}
	id, ok, err := doc.scalar(idPath)
	if err != nil || !ok || id == "" {
		return Identity{}, fmt.Errorf("%w: no %q header and no envelope %s (offset %d)", ErrNoIdentity, f.IDHeader, f.IDPath, r.Offset)
	}
	out := Identity{ID: id}
	for _, vp := range f.VersionPaths {
		path, err := splitPath(vp)
		if err != nil {
			return Identity{}, err
		}
		if v, ok, err := doc.scalar(path); err == nil && ok {
			out.Version = v
			break
		}
	}
	return out, nil
}

// header returns the last header named name: Kafka allows repeats, and the
// last one written is the producer's final word.
func header(r *kgo.Record, name string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == name {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

func splitPath(p string) ([]string, error) {
	parts := strings.Split(p, ".")
	for _, s := range parts {
		if s == "" {
			return nil, invalidf("JSON path %q has an empty segment", p)
		}
	}
	return parts, nil
}

// jsonDoc finds values at dotted paths in a JSON document without
// decoding it: identity and aggregate lookups run for every record, and a
// full encoding/json decode of an envelope costs microseconds and dozens
// of allocations, where walking to two fields costs a fraction of that.
// It checks the structure it walks through, not the whole document: a
// value it skips may be malformed without an error.
type jsonDoc struct{ raw []byte }

func newJSONDoc(raw []byte) jsonDoc { return jsonDoc{raw: raw} }

var errNotJSON = errors.New("value is not a JSON object")

// scalar returns the string or number at path, as written (strings
// unquoted). ok is false when the path is absent or null, or passes
// through a value that is not an object; err is set for a document that is
// not a JSON object, or an object or array at the end of the path.
func (d jsonDoc) scalar(path []string) (string, bool, error) {
	raw, ok, err := d.lookup(path)
	if err != nil || !ok {
		return "", false, err
	}
	switch raw[0] {
	case '"':
		// Fast path unless escapes or invalid UTF-8 need encoding/json's
		// handling (it turns bad bytes into U+FFFD, and so must we, to
		// name the aggregate as every other reader of the envelope does).
		if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
			return string(inner), true, nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, fmt.Errorf("%s: %w", strings.Join(path, "."), err)
		}
		return s, true, nil
	case '{', '[':
		return "", false, fmt.Errorf("%s is an object or array, not a scalar", strings.Join(path, "."))
	case 'n':
		return "", false, nil // null
	}
	return string(raw), true, nil // number or boolean, as written
}

// lookup returns the raw value at path. Like encoding/json, the last of
// duplicate keys wins, so each object on the path is walked to its end.
func (d jsonDoc) lookup(path []string) ([]byte, bool, error) {
	b := d.raw
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false, errNotJSON
	}
	var val []byte
	for _, key := range path {
		if i >= len(b) || b[i] != '{' {
			return nil, false, nil // the path goes through a scalar or array
		}
		val = nil
		i = skipWS(b, i+1)
		for !(i < len(b) && b[i] == '}') {
			kEnd, err := skipString(b, i)
			if err != nil {
				return nil, false, err
			}
			match := keyEquals(b[i:kEnd], key)
			i = skipWS(b, kEnd)
			if i >= len(b) || b[i] != ':' {
				return nil, false, errNotJSON
			}
			i = skipWS(b, i+1)
			end, err := skipValue(b, i)
			if err != nil {
				return nil, false, err
			}
			if match {
				val = b[i:end]
			}
			i = skipWS(b, end)
			switch {
			case i < len(b) && b[i] == ',':
				i = skipWS(b, i+1)
			case i < len(b) && b[i] == '}':
			default:
				return nil, false, errNotJSON
			}
		}
		if val == nil {
			return nil, false, nil
		}
		b, i = val, 0
	}
	return val, val != nil, nil
}

// keyEquals compares a quoted JSON key with name, unquoting only keys
// with escapes.
func keyEquals(quoted []byte, name string) bool {
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) == name
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && k == name
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i].
func skipString(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, errNotJSON
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++ // the escaped byte; \uXXXX's hex digits need no care
		case '"':
			return i + 1, nil
		}
	}
	return 0, errNotJSON
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errNotJSON
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, errNotJSON
	}
	start := i // a number, true, false or null: up to a delimiter
	for i < len(b) && !isDelim(b[i]) {
		i++
	}
	if i == start {
		return 0, errNotJSON
	}
	return i, nil
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}
