package broker

import (
	"strconv"
	"strings"
)

// StreamID is a Redis stream entry id, "<ms>-<seq>". The zero value is
// "0-0", which sorts before every entry.
type StreamID struct {
	Ms, Seq uint64
}

// ParseStreamID parses "ms-seq" or a bare "ms" (sequence 0).
func ParseStreamID(s string) (StreamID, error) {
	ms, seq, found := strings.Cut(s, "-")
	m, err := strconv.ParseUint(ms, 10, 64)
	if err != nil {
		return StreamID{}, invalid("parse stream id", "id", strconv.Quote(s), `want "<ms>-<seq>"`)
	}
	if !found {
		return StreamID{Ms: m}, nil
	}
	q, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return StreamID{}, invalid("parse stream id", "id", strconv.Quote(s), `want "<ms>-<seq>"`)
	}
	return StreamID{Ms: m, Seq: q}, nil
}

// String formats the id as Redis does.
func (id StreamID) String() string {
	return strconv.FormatUint(id.Ms, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// Compare returns -1, 0 or +1 as id sorts before, with or after other.
func (id StreamID) Compare(other StreamID) int {
	switch {
	case id.Ms < other.Ms:
		return -1
	case id.Ms > other.Ms:
		return 1
	case id.Seq < other.Seq:
		return -1
	case id.Seq > other.Seq:
		return 1
	}
	return 0
}

// Less reports whether id sorts before other.
func (id StreamID) Less(other StreamID) bool { return id.Compare(other) < 0 }

// IsZero reports whether id is 0-0.
func (id StreamID) IsZero() bool { return id == StreamID{} }
