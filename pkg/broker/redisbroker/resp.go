package redisbroker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/protctl/protctl/pkg/broker"
)

// The fenced transaction (fencedtx.go) reads XREADGROUP's reply as raw
// RESP (go-redis RawCmd) and decodes it here, straight into messages
// whose Data are slices of the reply's one buffer: one allocation per
// entry (its id string) where go-redis's generic decoding boxes every
// id, field name and value into an interface (about 12 allocations per
// entry) and its XReadGroup builds a map per entry.

// replyError is an error reply found in a raw reply. It implements
// redis.Error, so mapErr treats it as the server's reply it is.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// errNilReply is a null reply (RESP2 *-1 or $-1, RESP3 _).
var errNilReply = errors.New("nil reply")

// respReader walks a raw RESP2 or RESP3 reply.
type respReader struct {
	b []byte
	i int
}

// header reads a type byte and the rest of its line.
func (r *respReader) header() (byte, []byte, error) {
	if r.i >= len(r.b) {
		return 0, nil, errors.New("short reply")
	}
	end := bytes.IndexByte(r.b[r.i:], '\r')
	if end < 1 || r.i+end+1 >= len(r.b) || r.b[r.i+end+1] != '\n' {
		return 0, nil, errors.New("unterminated reply line")
	}
	t, line := r.b[r.i], r.b[r.i+1:r.i+end]
	r.i += end + 2
	return t, line, nil
}

// length parses the decimal length of an aggregate or a string header
// (-1 for a null), without the allocation strconv would need for a
// string conversion.
func length(line []byte) (int, error) {
	if len(line) == 2 && line[0] == '-' && line[1] == '1' {
		return -1, nil
	}
	if len(line) == 0 || len(line) > 10 {
		return 0, fmt.Errorf("bad length %q", line)
	}
	n := 0
	for _, c := range line {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad length %q", line)
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

// aggregate reads the header of an array (or, when mapOK, a map of n
// pairs) and returns its length; errNilReply for a null.
func (r *respReader) aggregate(mapOK bool) (n int, isMap bool, err error) {
	t, line, err := r.header()
	if err != nil {
		return 0, false, err
	}
	switch t {
	case '*', '~':
	case '%':
		if !mapOK {
			return 0, false, fmt.Errorf("unexpected map")
		}
		isMap = true
	case '_':
		return 0, false, errNilReply
	case '-', '!':
		return 0, false, replyError(line)
	default:
		return 0, false, fmt.Errorf("unexpected reply type %q", t)
	}
	n, err = length(line)
	if err != nil {
		return 0, false, err
	}
	if n < 0 {
		return 0, false, errNilReply
	}
	return n, isMap, nil
}

// bulk reads a bulk (or simple) string and returns it as a slice of the
// reply.
func (r *respReader) bulk() ([]byte, error) {
	t, line, err := r.header()
	if err != nil {
		return nil, err
	}
	switch t {
	case '+':
		return line, nil
	case '$':
	case '_':
		return nil, errNilReply
	default:
		return nil, fmt.Errorf("unexpected reply type %q for a string", t)
	}
	n, err := length(line)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, errNilReply
	}
	if r.i+n+2 > len(r.b) {
		return nil, errors.New("short string")
	}
	s := r.b[r.i : r.i+n : r.i+n]
	r.i += n + 2
	return s, nil
}

// parseRawReadGroup decodes the raw reply of XREADGROUP ... STREAMS
// stream id (one stream) into messages, as read_lane (readlib.lua) and
// parseEntries together do for the scripts: Data is the data field's
// value, Missing marks a pending entry whose body was deleted, and an
// entry without a data field hands its fields over as a JSON object. An
// error reply comes back as a replyError. A null reply (nothing new)
// returns no messages.
func parseRawReadGroup(stream string, raw []byte) ([]broker.Message, error) {
	r := &respReader{b: raw}
	n, isMap, err := r.aggregate(true)
	if errors.Is(err, errNilReply) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	if n != 1 {
		return nil, fmt.Errorf("reply of %d streams, want 1", n)
	}
	if !isMap {
		// RESP2: [[stream, entries]]
		if m, _, err := r.aggregate(false); err != nil || m != 2 {
			return nil, fmt.Errorf("unexpected stream reply (%d items): %v", m, err)
		}
	}
	if _, err := r.bulk(); err != nil { // the stream's name
		return nil, err
	}
	count, _, err := r.aggregate(false)
	if errors.Is(err, errNilReply) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if count == 0 {
		return nil, nil
	}
	msgs := make([]broker.Message, count)
	for i := range msgs {
		m := &msgs[i]
		m.Stream = stream
		if k, _, err := r.aggregate(false); err != nil || k != 2 {
			return nil, fmt.Errorf("unexpected entry (%d items): %v", k, err)
		}
		id, err := r.bulk()
		if err != nil {
			return nil, err
		}
		m.ID = string(id)
		nf, _, err := r.aggregate(false)
		if errors.Is(err, errNilReply) {
			m.Missing = true
			continue
		}
		if err != nil {
			return nil, err
		}
		if nf%2 != 0 {
			return nil, fmt.Errorf("entry %s has %d field items", m.ID, nf)
		}
		var fields [][]byte
		found := false
		for j := 0; j < nf; j += 2 {
			f, err := r.bulk()
			if err != nil {
				return nil, err
			}
			v, err := r.bulk()
			if err != nil {
				return nil, err
			}
			switch {
			case found:
			case string(f) == broker.DataField:
				m.Data, found = v, true
			default:
				fields = append(fields, f, v)
			}
		}
		if !found {
			// An entry written by another tool, without a data field:
			// its fields as a JSON object, as parseEntries does.
			obj := make(map[string]string, len(fields)/2)
			for j := 0; j+1 < len(fields); j += 2 {
				obj[string(fields[j])] = string(fields[j+1])
			}
			data, err := json.Marshal(obj)
			if err != nil {
				return nil, err
			}
			m.Data = data
		}
	}
	return msgs, nil
}
