package redisbroker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

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
	end := bytes.Index(r.b[r.i:], crlf)
	if end < 1 {
		return 0, nil, errors.New("unterminated reply line")
	}
	t, line := r.b[r.i], r.b[r.i+1:r.i+end]
	r.i += end + 2
	return t, line, nil
}

var crlf = []byte("\r\n")

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
	n, err = strconv.Atoi(string(line))
	if err != nil {
		return 0, false, fmt.Errorf("bad aggregate length %q", line)
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
	n, err := strconv.Atoi(string(line))
	if err != nil {
		return nil, fmt.Errorf("bad string length %q", line)
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
