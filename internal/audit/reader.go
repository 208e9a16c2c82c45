package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// ListOptions selects entries for List. The zero value lists every entry.
type ListOptions struct {
	// Key is the stream; "" is Key.
	Key string
	// Limit is the most entries returned (the newest); 0 is no limit.
	Limit int64
	// Since drops entries the server stamped before it (stream ids are
	// the server's milliseconds); the zero time keeps all.
	Since time.Time
}

// List returns the audit entries, newest first. A missing stream is an
// empty log. An entry whose JSON does not decode (written by something
// else) is returned with what its flat fields say and Invalid set, rather
// than hidden or failing the whole list: an audit log must not drop what
// it cannot read. A key of another type fails with a *broker.WrongTypeError
// naming it, its type and "stream".
func List(ctx context.Context, c redis.UniversalClient, opts ListOptions) ([]Entry, error) {
	key := opts.Key
	if key == "" {
		key = Key
	}
	start := "-"
	if !opts.Since.IsZero() {
		ms := opts.Since.UnixMilli()
		if ms < 0 {
			ms = 0
		}
		start = strconv.FormatInt(ms, 10) + "-0"
	}
	var msgs []redis.XMessage
	var err error
	if opts.Limit > 0 {
		msgs, err = c.XRevRangeN(ctx, key, "+", start, opts.Limit).Result()
	} else {
		msgs, err = c.XRevRange(ctx, key, "+", start).Result()
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE") {
		wte := &broker.WrongTypeError{Op: "read the audit log", Key: key, Want: "stream"}
		if t, terr := c.Type(ctx, key).Result(); terr == nil {
			wte.Got = t
		}
		return nil, wte
	}
	if err != nil {
		return nil, fmt.Errorf("audit: reading %s: %w", key, err)
	}
	entries := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		entries = append(entries, decode(m))
	}
	return entries, nil
}

func decode(m redis.XMessage) Entry {
	str := func(k string) string {
		s, _ := m.Values[k].(string)
		return s
	}
	var e Entry
	raw, ok := m.Values["entry"].(string)
	if !ok {
		e.Invalid = "no entry field"
	} else if err := json.Unmarshal([]byte(raw), &e); err != nil {
		e = Entry{Invalid: "undecodable entry: " + err.Error()}
	}
	e.ID = m.ID
	if e.Invalid != "" {
		e.User, e.Host, e.Context, e.Outcome = str("user"), str("host"), str("context"), str("outcome")
		if t, err := time.Parse(time.RFC3339Nano, str("time")); err == nil {
			e.Time = t
		}
		if a := str("actions"); a != "" {
			e.Actions = strings.Split(a, ",")
		}
	}
	if e.Time.IsZero() {
		// The id is the server's milliseconds when the entry was added.
		if ms, _, ok := strings.Cut(m.ID, "-"); ok {
			if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
				e.Time = time.UnixMilli(n).UTC()
			}
		}
	}
	if e.Actions == nil {
		e.Actions = []string{}
	}
	return e
}
