package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/protctl/protctl/internal/inspect"
)

// appendPartitionJSON appends p as one item of a streamed partition list:
// indented under prefix by indent (-o json) or compact (-o jsonl, with
// indent ""), byte for byte what encoding/json (HTML escaping off) and
// appendIndent write for it (TestPartitionJSONMatchesEncodingJSON, which
// also fails when Partition gains a field this does not write). Listing
// 100,000 partitions spent about a fifth of its client CPU encoding them
// by reflection and re-reading the bytes to indent them; this writes
// each field once.
func appendPartitionJSON(dst []byte, p *inspect.Partition, prefix, indent string) []byte {
	o := jsonOut{b: dst, prefix: prefix, indent: indent, pretty: indent != ""}
	o.open('{')
	o.str("category", p.Category)
	o.str("key", p.Key)
	o.str("stream", p.Stream)
	o.knownInt("length", p.Length, p.LengthKnown())
	o.strPtr("lastEntryId", p.LastEntryID)
	o.intPtr("idleMs", p.IdleMs)
	o.key("lanes")
	appendArray(&o, p.Lanes, appendLane)
	o.key("groups")
	appendArray(&o, p.Groups, appendGroup)
	if p.Error != "" {
		o.str("error", p.Error)
	}
	o.close('}')
	return o.b
}

func appendLane(o *jsonOut, l *inspect.Lane) {
	o.open('{')
	o.str("name", l.Name)
	o.str("stream", l.Stream)
	o.bool("exists", l.Exists)
	o.knownInt("length", l.Length, l.LengthKnown())
	o.strPtr("lastEntryId", l.LastEntryID)
	if len(l.Groups) > 0 {
		o.key("groups")
		appendArray(o, l.Groups, appendLaneGroup)
	}
	if l.Error != "" {
		o.str("error", l.Error)
	}
	o.close('}')
}

func appendLaneGroup(o *jsonOut, g *inspect.LaneGroup) {
	o.open('{')
	o.str("name", g.Name)
	o.str("lastDeliveredId", g.LastDeliveredID)
	o.int("pending", g.Pending)
	o.intPtr("lag", g.Lag)
	o.close('}')
}

// appendArray writes items with each (null for a nil slice, as
// encoding/json does).
func appendArray[T any](o *jsonOut, items []T, each func(*jsonOut, *T)) {
	if items == nil {
		o.null()
		return
	}
	o.open('[')
	for i := range items {
		o.elem()
		each(o, &items[i])
	}
	o.close(']')
}

func appendGroup(o *jsonOut, g *inspect.Group) {
	o.open('{')
	o.str("name", g.Name)
	o.int("pending", g.Pending)
	o.intPtr("lag", g.Lag)
	o.strPtr("lastDeliveredId", g.LastDeliveredID)
	o.intPtr("generation", g.Generation)
	o.key("lease")
	if l := g.Lease; l == nil {
		o.null()
	} else {
		o.open('{')
		o.str("owner", l.Owner)
		o.int("generation", l.Generation)
		o.intPtr("ttlMs", l.TTLMs)
		o.str("token", l.Token)
		o.close('}')
	}
	if g.LeaseState == inspect.LeaseUnknown {
		o.key("leaseState")
		o.null()
	} else {
		o.str("leaseState", string(g.LeaseState))
	}
	o.key("parked")
	if g.Parked == nil {
		o.null()
	} else {
		o.b = strconv.AppendBool(o.b, *g.Parked)
	}
	o.bool("registered", g.Registered)
	o.bool("created", g.Created)
	if p := g.Paused; p != nil {
		// As encoding/json writes pause.Entry (omitempty by, reason).
		o.key("paused")
		o.open('{')
		o.str("selector", string(p.Selector))
		if p.By != "" {
			o.str("by", p.By)
		}
		o.str("at", p.At.Format(time.RFC3339Nano))
		if p.Reason != "" {
			o.str("reason", p.Reason)
		}
		o.close('}')
	}
	if g.Health != nil {
		o.key("health")
		appendHealth(o, g.Health)
	}
	o.close('}')
}

// jsonOut writes JSON with json.Indent's layout (or compact): a newline,
// the prefix and one indent per level before each member or element and
// before a non-empty container's closing bracket; "{}" and "[]" when
// empty; ": " after a key.
type jsonOut struct {
	b              []byte
	prefix, indent string
	pretty         bool
	depth          int
	empty          bool // nothing written yet in the innermost container
}

func (o *jsonOut) newline() {
	if !o.pretty {
		return
	}
	o.b = append(o.b, '\n')
	o.b = append(o.b, o.prefix...)
	for range o.depth {
		o.b = append(o.b, o.indent...)
	}
}

func (o *jsonOut) open(c byte) {
	o.b = append(o.b, c)
	o.depth++
	o.empty = true
}

func (o *jsonOut) close(c byte) {
	o.depth--
	if !o.empty {
		o.newline()
	}
	o.b = append(o.b, c)
	o.empty = false
}

// elem starts a member or an element.
func (o *jsonOut) elem() {
	if !o.empty {
		o.b = append(o.b, ',')
	}
	o.empty = false
	o.newline()
}

func (o *jsonOut) key(k string) {
	o.elem()
	o.b = appendJSONString(o.b, k)
	o.b = append(o.b, ':')
	if o.pretty {
		o.b = append(o.b, ' ')
	}
}

func (o *jsonOut) null() { o.b = append(o.b, "null"...) }

func (o *jsonOut) str(k, v string) {
	o.key(k)
	o.b = appendJSONString(o.b, v)
}

func (o *jsonOut) strPtr(k string, v *string) {
	o.key(k)
	if v == nil {
		o.null()
		return
	}
	o.b = appendJSONString(o.b, *v)
}

func (o *jsonOut) int(k string, v int64) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
}

func (o *jsonOut) intPtr(k string, v *int64) {
	o.key(k)
	if v == nil {
		o.null()
		return
	}
	o.b = strconv.AppendInt(o.b, *v, 10)
}

// knownInt writes v, or null when it is not known.
func (o *jsonOut) knownInt(k string, v int64, known bool) {
	o.key(k)
	if !known {
		o.null()
		return
	}
	o.b = strconv.AppendInt(o.b, v, 10)
}

func (o *jsonOut) bool(k string, v bool) {
	o.key(k)
	o.b = strconv.AppendBool(o.b, v)
}

// appendJSONString appends s quoted as encoding/json quotes it with HTML
// escaping off. Keys, ids and names are plain ASCII, copied as they are;
// anything else (control characters, quotes, backslashes, non-ASCII,
// which encoding/json may escape or replace) goes through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendHealth writes a group's health (inspect.Health, field order).
func appendHealth(o *jsonOut, h *inspect.Health) {
	o.open('{')
	o.str("status", string(h.Status))
	o.intPtr("lagEntries", h.LagEntries)
	o.floatPtr("lagSeconds", h.LagSeconds)
	o.strPtr("oldestUnhandledId", h.OldestUnhandledID)
	o.int("headDeliveries", h.HeadDeliveries)
	o.intPtr("headIdleMs", h.HeadIdleMs)
	o.int("consumers", h.Consumers)
	o.floatPtr("drainRate", h.DrainRate)
	o.floatPtr("etaSeconds", h.ETASeconds)
	o.close('}')
}

// floatPtr writes a float64 as encoding/json does ('f' format, 'e' with
// a short exponent below 1e-6 and from 1e21), or null.
func (o *jsonOut) floatPtr(k string, v *float64) {
	o.key(k)
	if v == nil {
		o.null()
		return
	}
	f := *v
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	o.b = strconv.AppendFloat(o.b, f, format, -1, 64)
	if format == 'e' {
		// e-09 -> e-9, as encoding/json writes it.
		if n := len(o.b); n >= 4 && o.b[n-4] == 'e' && o.b[n-3] == '-' && o.b[n-2] == '0' {
			o.b[n-2] = o.b[n-1]
			o.b = o.b[:n-1]
		}
	}
}
